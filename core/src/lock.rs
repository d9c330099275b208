//! The lock: mutual exclusion by key, with an owner token and a required TTL.
//!
//! A lock is held by one owner (a token, random by default) until it is released by that owner, or
//! forced free, or its TTL ends on the store's clock. Every store runs the same four operations
//! ([`LockOp`]), each one atomic step: `acquire` (take it if nobody holds it), `release` (compare and
//! delete: only the owner frees it), `force_release` (free it whoever holds it) and `owner` (who holds
//! it now). A lock in another process is restored by building it with the same owner token.
//!
//! - Memory: [`MemoryLocks`], one mutex over a map, timed by the host clock (`now` in every call).
//! - Redis: one key (`{prefix}lck:{key}`, hash-tagged like every key), one script a call (`SET NX PX`
//!   for an acquire, `GET` = owner then `DEL` for a release), on the server's clock; one key, so
//!   Redis Cluster needs nothing more. Started by [`Redis::lock`](crate::call::Redis::lock).
//! - PostgreSQL: one statement a call on the table `{prefix}_locks`, timed by `clock_timestamp()`.
//! - SQLite: one statement a call on `{prefix}_locks` (a write statement holds SQLite's write lock
//!   from its start to its end, as `BEGIN IMMEDIATE` does), timed by the host clock.
//!
//! Waiting is decided here too: [`LockWait`] says, after each refused acquire, how long to sleep
//! before the next try, or to give up (the host raises its language's lock-timeout error). The host
//! only sleeps.
//!
//! Semantics follow the seed's `Lock` (`@mahiframework/cache`) with these differences, stated in the
//! bindings' docs: the TTL is refused (a typed error) when it is not a positive number of seconds,
//! instead of being floored at one second, and it is kept to the millisecond (`PX`, not `EX`);
//! `acquire` tries once and answers whether it took the lock, and `block(seconds, retry_ms)` waits (the
//! seed's one waiting `acquire`); `force_release` exists; a lock is not re-entrant (an owner's second
//! acquire while it holds the lock answers false, as the seed's `add` does).
//!
//! ```
//! use ratewindow_core::lock::{LockTtl, MemoryLocks};
//!
//! let locks = MemoryLocks::new();
//! let ttl = LockTtl::from_secs(10.0)?;
//! assert!(locks.acquire("import", "owner-a", ttl, 0));
//! assert!(!locks.acquire("import", "owner-b", ttl, 5_000));      // held by a
//! assert!(!locks.release("import", "owner-b", 5_000));           // not b's to release
//! assert_eq!(locks.owner("import", 5_000).as_deref(), Some("owner-a"));
//! assert!(locks.acquire("import", "owner-b", ttl, 10_000));      // a's TTL ended
//! # Ok::<(), ratewindow_core::lock::LockError>(())
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::limit::format_f64;
use crate::MAX_WINDOW_MS;

/// The longest TTL, in milliseconds (the longest window: 50,000 days).
pub const MAX_TTL_MS: u64 = MAX_WINDOW_MS;
/// The longest owner token, in bytes.
pub const MAX_OWNER_BYTES: usize = 256;
/// The longest pause between two tries of a waiting acquire, in milliseconds (what a JS timer holds).
pub const MAX_RETRY_MS: u64 = 2_147_483_647;
/// The pause between two tries when the host gives none, in milliseconds (the seed's `retryEvery`).
pub const DEFAULT_RETRY_MS: u64 = 250;

/// Which argument of a lock was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockField {
    /// The TTL, in seconds.
    Ttl,
    /// The owner token.
    Owner,
    /// How long a waiting acquire waits, in seconds.
    Seconds,
    /// The pause between two tries of a waiting acquire, in milliseconds.
    RetryMs,
}

impl LockField {
    /// The field's name in the Rust API, the vectors and Python (`retry_ms`); JavaScript spells
    /// [`LockField::RetryMs`] `retryMs`.
    pub const fn name(self) -> &'static str {
        match self {
            LockField::Ttl => "ttl",
            LockField::Owner => "owner",
            LockField::Seconds => "seconds",
            LockField::RetryMs => "retry_ms",
        }
    }

    /// The field's name in JavaScript.
    pub const fn js_name(self) -> &'static str {
        match self {
            LockField::RetryMs => "retryMs",
            other => other.name(),
        }
    }

    /// What is accepted, in words.
    pub const fn range(self) -> &'static str {
        match self {
            LockField::Ttl => {
                "a number of seconds above 0, at most 4320000000000 (it is kept in whole milliseconds, rounded up)"
            }
            LockField::Owner => "a non-empty string of at most 256 bytes",
            LockField::Seconds => "a number of seconds, 0 (one try) or more (Infinity: no limit)",
            LockField::RetryMs => "a number of milliseconds from 1 to 2147483647",
        }
    }
}

/// A lock argument that cannot be held: the field, the value as given (as text) and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {}: {value} (expected {})", field.name(), field.range())]
pub struct LockError {
    /// The refused field.
    pub field: LockField,
    /// The refused value, as text.
    pub value: String,
}

impl LockError {
    /// A refusal of `field` holding `value`.
    pub fn new(field: LockField, value: impl ToString) -> LockError {
        LockError {
            field,
            value: value.to_string(),
        }
    }

    /// The message with the field as JavaScript spells it.
    pub fn js_message(&self) -> String {
        format!(
            "invalid {}: {} (expected {})",
            self.field.js_name(),
            self.value,
            self.field.range()
        )
    }
}

/// A lock's TTL: whole milliseconds, 1 to [`MAX_TTL_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockTtl(u64);

impl LockTtl {
    /// A TTL of `ms` milliseconds.
    pub fn from_ms(ms: u64) -> Result<LockTtl, LockError> {
        if (1..=MAX_TTL_MS).contains(&ms) {
            Ok(LockTtl(ms))
        } else {
            Err(LockError::new(LockField::Ttl, format!("{ms} ms")))
        }
    }

    /// A TTL of `secs` seconds (the hosts' unit), rounded up to a whole millisecond. Not a number, not
    /// above 0, or above the longest TTL: refused.
    pub fn from_secs(secs: f64) -> Result<LockTtl, LockError> {
        if secs.is_nan() || secs <= 0.0 || !secs.is_finite() || secs * 1000.0 > MAX_TTL_MS as f64 {
            return Err(LockError::new(LockField::Ttl, format_f64(secs)));
        }
        Ok(LockTtl(
            ((secs * 1000.0).ceil() as u64).clamp(1, MAX_TTL_MS),
        ))
    }

    /// The TTL in milliseconds.
    pub const fn ms(self) -> u64 {
        self.0
    }
}

/// An owner token, checked: not empty, at most [`MAX_OWNER_BYTES`] bytes.
pub fn check_owner(owner: &str) -> Result<(), LockError> {
    if owner.is_empty() || owner.len() > MAX_OWNER_BYTES {
        // Its first 40 characters quoted by `format!`, not `{:?}`: Debug's escaping carries Unicode
        // tables into the component.
        let end = owner.char_indices().nth(40).map_or(owner.len(), |(i, _)| i);
        let shown = format!("\"{}\"", owner.get(..end).unwrap_or(owner));
        return Err(LockError::new(LockField::Owner, shown));
    }
    Ok(())
}

/// The schedule of a waiting acquire (`block(seconds, retry_ms)`): try at once; after each refusal,
/// sleep [`retry_ms`](Self::retry_ms) (cut short so the last try falls on the deadline) and try again;
/// a refusal at or after the deadline gives up. `seconds` 0 is one try; infinite waits without end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWait {
    /// When to give up (host ms), or `None`: never.
    deadline: Option<u64>,
    retry_ms: u64,
}

impl LockWait {
    /// A wait of `seconds` from `now` (host ms), trying every `retry_ms` ms (rounded up).
    pub fn new(seconds: f64, retry_ms: f64, now: u64) -> Result<LockWait, LockError> {
        if seconds.is_nan() || seconds < 0.0 {
            return Err(LockError::new(LockField::Seconds, format_f64(seconds)));
        }
        if retry_ms.is_nan() || retry_ms < 1.0 || retry_ms > MAX_RETRY_MS as f64 {
            return Err(LockError::new(LockField::RetryMs, format_f64(retry_ms)));
        }
        let deadline = if seconds.is_finite() && seconds * 1000.0 < 9.0e15 {
            Some(now.saturating_add((seconds * 1000.0).ceil() as u64))
        } else {
            None
        };
        Ok(LockWait {
            deadline,
            retry_ms: retry_ms.ceil() as u64,
        })
    }

    /// The pause between two tries, in ms.
    pub const fn retry_ms(&self) -> u64 {
        self.retry_ms
    }

    /// When the wait gives up (host ms), or `None`.
    pub const fn deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// After a refused try at `now`: `Some(ms)` to sleep before the next try, or `None`: give up.
    pub fn after_refusal(&self, now: u64) -> Option<u64> {
        match self.deadline {
            None => Some(self.retry_ms),
            Some(deadline) if now >= deadline => None,
            Some(deadline) => Some(self.retry_ms.min(deadline - now)),
        }
    }
}

/// One lock operation, the same on every store. Start it on a networked store's planner
/// ([`Redis::lock`](crate::call::Redis::lock), [`Postgres::lock`](crate::sql::Postgres::lock),
/// [`Sqlite::lock`](crate::sql::Sqlite::lock)) or run it on [`MemoryLocks::run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOp {
    /// Takes the lock for `owner` for `ttl` if nobody holds it → [`Outcome::Bool`](crate::call::Outcome::Bool):
    /// whether it was taken (false while anyone holds it, `owner` included).
    Acquire {
        /// The lock's key.
        key: String,
        /// The owner token.
        owner: String,
        /// How long it is held unless released.
        ttl: LockTtl,
    },
    /// Frees the lock if `owner` holds it (compare and delete, one step) → `Bool`: whether it did.
    Release {
        /// The lock's key.
        key: String,
        /// The owner token.
        owner: String,
    },
    /// Frees the lock whoever holds it → `Bool`: whether a held lock was freed.
    ForceRelease {
        /// The lock's key.
        key: String,
    },
    /// Who holds the lock → [`Outcome::Owner`](crate::call::Outcome::Owner): the token, or `None`.
    Owner {
        /// The lock's key.
        key: String,
    },
}

impl LockOp {
    /// The key the operation is on.
    pub fn key(&self) -> &str {
        match self {
            LockOp::Acquire { key, .. }
            | LockOp::Release { key, .. }
            | LockOp::ForceRelease { key }
            | LockOp::Owner { key } => key,
        }
    }

    /// The owner token the operation carries, checked (`None` for the two that carry none).
    pub fn check(&self) -> Result<(), LockError> {
        match self {
            LockOp::Acquire { owner, .. } | LockOp::Release { owner, .. } => check_owner(owner),
            LockOp::ForceRelease { .. } | LockOp::Owner { .. } => Ok(()),
        }
    }
}

/// A held lock in memory.
#[derive(Debug)]
struct Held {
    owner: Box<str>,
    /// Held while `now < expires_at`.
    expires_at: u64,
}

#[derive(Debug, Default)]
struct Table {
    /// foldhash, as the memory store's maps: std's SipHash would be more code in the component.
    held: HashMap<Box<str>, Held, foldhash::fast::RandomState>,
    /// The size after the last sweep: the next sweep runs when the table doubles.
    swept_at: usize,
}

/// The memory store's locks: one mutex over a map, timed by the host's `now` (ms) given to each call.
/// Expired locks are removed as the table grows (a sweep each time it doubles), so it holds at most
/// about twice the live locks.
#[derive(Debug, Default)]
pub struct MemoryLocks {
    table: Mutex<Table>,
}

impl MemoryLocks {
    /// No locks.
    pub fn new() -> MemoryLocks {
        MemoryLocks::default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // No code panics while holding it; a poisoned table is still consistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `key` for `owner` until `now + ttl` if nobody holds it at `now`.
    pub fn acquire(&self, key: &str, owner: &str, ttl: LockTtl, now: u64) -> bool {
        let mut table = self.table();
        let expires_at = now.saturating_add(ttl.ms());
        if let Some(held) = table.held.get_mut(key) {
            if now < held.expires_at {
                return false;
            }
            *held = Held {
                owner: owner.into(),
                expires_at,
            };
            return true;
        }
        if table.held.len() >= 2 * table.swept_at.max(32) {
            table.held.retain(|_, h| now < h.expires_at);
            table.swept_at = table.held.len();
        }
        table.held.insert(
            key.into(),
            Held {
                owner: owner.into(),
                expires_at,
            },
        );
        true
    }

    /// Frees `key` if `owner` holds it at `now`.
    pub fn release(&self, key: &str, owner: &str, now: u64) -> bool {
        let mut table = self.table();
        match table.held.get(key) {
            Some(h) if &*h.owner == owner => {
                let live = now < h.expires_at;
                table.held.remove(key);
                live
            }
            _ => false,
        }
    }

    /// Frees `key` whoever holds it: whether a lock was held at `now`.
    pub fn force_release(&self, key: &str, now: u64) -> bool {
        self.table()
            .held
            .remove(key)
            .is_some_and(|h| now < h.expires_at)
    }

    /// Who holds `key` at `now`.
    pub fn owner(&self, key: &str, now: u64) -> Option<String> {
        self.table()
            .held
            .get(key)
            .filter(|h| now < h.expires_at)
            .map(|h| h.owner.to_string())
    }

    /// Runs `op` at `now`: [`Outcome::Bool`](crate::call::Outcome::Bool) or
    /// [`Outcome::Owner`](crate::call::Outcome::Owner), as the networked stores answer it.
    pub fn run(&self, op: &LockOp, now: u64) -> crate::call::Outcome {
        use crate::call::Outcome;
        match op {
            LockOp::Acquire { key, owner, ttl } => {
                Outcome::Bool(self.acquire(key, owner, *ttl, now))
            }
            LockOp::Release { key, owner } => Outcome::Bool(self.release(key, owner, now)),
            LockOp::ForceRelease { key } => Outcome::Bool(self.force_release(key, now)),
            LockOp::Owner { key } => Outcome::Owner(self.owner(key, now)),
        }
    }

    /// Locks in the table (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.table().held.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_owner_and_wait_are_checked() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 5e12] {
            assert_eq!(LockTtl::from_secs(bad).unwrap_err().field, LockField::Ttl);
        }
        assert_eq!(LockTtl::from_secs(0.0001).unwrap().ms(), 1);
        assert_eq!(LockTtl::from_secs(1.5).unwrap().ms(), 1500);
        assert!(LockTtl::from_ms(0).is_err());
        assert_eq!(check_owner("").unwrap_err().field, LockField::Owner);
        assert!(check_owner(&"x".repeat(257)).is_err());
        assert!(check_owner(&"x".repeat(256)).is_ok());
        assert_eq!(
            LockWait::new(-1.0, 250.0, 0).unwrap_err().field,
            LockField::Seconds
        );
        assert_eq!(
            LockWait::new(f64::NAN, 250.0, 0).unwrap_err().field,
            LockField::Seconds
        );
        for bad in [0.0, 0.5, -3.0, f64::NAN, 3e9] {
            assert_eq!(
                LockWait::new(1.0, bad, 0).unwrap_err().field,
                LockField::RetryMs
            );
        }
        let e = LockWait::new(1.0, 0.0, 0).unwrap_err();
        assert!(e.js_message().starts_with("invalid retryMs: 0"));
        assert!(e.to_string().starts_with("invalid retry_ms: 0"));
    }

    #[test]
    fn a_wait_tries_every_retry_and_last_at_its_deadline() {
        let wait = LockWait::new(1.0, 300.0, 1_000).unwrap();
        assert_eq!(wait.after_refusal(1_000), Some(300));
        assert_eq!(wait.after_refusal(1_900), Some(100));
        assert_eq!(wait.after_refusal(2_000), None);
        let once = LockWait::new(0.0, 250.0, 5).unwrap();
        assert_eq!(once.after_refusal(5), None);
        let forever = LockWait::new(f64::INFINITY, 10.0, 0).unwrap();
        assert_eq!(forever.deadline(), None);
        assert_eq!(forever.after_refusal(u64::MAX), Some(10));
    }

    #[test]
    fn memory_locks_follow_the_semantics() {
        let locks = MemoryLocks::new();
        let ttl = LockTtl::from_ms(1_000).unwrap();
        assert!(locks.acquire("k", "a", ttl, 0));
        assert!(!locks.acquire("k", "a", ttl, 1), "not re-entrant");
        assert!(!locks.acquire("k", "b", ttl, 999));
        assert!(!locks.release("k", "b", 500));
        assert_eq!(locks.owner("k", 500).as_deref(), Some("a"));
        assert!(locks.release("k", "a", 500));
        assert_eq!(locks.owner("k", 500), None);
        assert!(locks.acquire("k", "b", ttl, 600));
        assert!(locks.force_release("k", 700));
        assert!(!locks.force_release("k", 700));
        assert!(locks.acquire("k", "a", ttl, 800));
        // Expired at exactly 800 + 1000.
        assert_eq!(locks.owner("k", 1_799).as_deref(), Some("a"));
        assert_eq!(locks.owner("k", 1_800), None);
        assert!(!locks.release("k", "a", 1_800));
        assert!(locks.acquire("k", "b", ttl, 1_800));
    }

    #[test]
    fn the_table_sweeps_expired_locks_as_it_grows() {
        let locks = MemoryLocks::new();
        let ttl = LockTtl::from_ms(10).unwrap();
        for i in 0..10_000u64 {
            assert!(locks.acquire(&format!("k{i}"), "o", ttl, i * 100));
        }
        assert!(locks.len() < 100, "{}", locks.len());
    }
}
