//! The failure guard: what a binding decides when a store call times out, fails or comes before the
//! store is ready, what it does with an answer that arrives after it stopped waiting, and a local cache
//! of refusals. No I/O and no timers: the host measures time, races its timers and runs the stores;
//! every decision is made here, once, for Node and Python alike.
//!
//! # The API (stable: the Node and Python guards bind it)
//!
//! ```text
//! GuardConfig::new(timeout_ms: u64, policy: Policy) -> Result<GuardConfig, GuardError>
//! GuardConfig::from_f64(timeout_ms: f64, policy: Policy)          // a host number, checked
//!     .timeout_ms() -> u64        .policy() -> Policy
//!     .on_failure(Failure) -> OnFailure                           // Answer(BatchVerdict) | Fallback
//!     .failure_verdict(Failure) -> BatchVerdict                   // the verdict for deny / allow
//! Policy::parse("deny" | "allow") -> Result<Policy, GuardError>  // Policy::{Deny, Allow, Fallback}
//!     .name() -> "deny" | "allow" | "fallback"                    // Fallback: the binding got a store
//! Failure::{Timeout, StoreError, NotReady}
//!     .name() -> "timeout" | "store-error" | "not-ready"
//!     Failure::of_error_code(code: &str) -> Option<Failure>       // None: the caller's error, rethrow
//! late_action(answered_allowed: bool, late_allowed: bool) -> LateAction  // Release | Keep | Ignore
//! BlockCache::new(max_keys: usize) -> Result<BlockCache, GuardError>  // DEFAULT_MAX_KEYS = 100_000
//! BlockCache::from_f64(max_keys: f64) -> Result<BlockCache, GuardError>
//!     .check(entries: impl IntoIterator<Item = (&str, Limit)>, now) -> Option<BatchVerdict>
//!     .record(entries: &[(impl AsRef<str>, Limit)], verdict: &BatchVerdict, started)
//!     .insert(key, limit, started, retry_after_ms, retry_timestamp, reset_after_ms)
//!     .forget(entries)   .clear()   .len()   .max_keys()
//! Guard::new(config: GuardConfig, cache: Option<BlockCache>)    // config + counters + cache
//!     .begin() / .begin_checked(entries, now) -> Option<BatchVerdict>   // counts the call
//!     .answered(allowed: bool)                                  // the store answered in time
//!     .answered_verdict(entries, &verdict, started)             // … and caches a refusal
//!     .failed(Failure) -> OnFailure                             // counts the failure (+ its verdict)
//!     .fallback_answered(allowed: bool) / .fallback_failed() -> BatchVerdict (deny)
//!     .late(answered_allowed, late_allowed) -> LateAction       // counts nothing itself
//!     .late_released(ok: bool)                                  // a late release done / failed
//!     .released(entries)                                        // a local release: drops cache entries
//!     .stats() -> GuardStats   .config()   .cache() / .cache_mut()
//! GuardError { field: GuardField::{TimeoutMs, Policy, MaxKeys}, value }  .code() "invalid_argument:timeout_ms"
//!     .message(spelled: &str)   // "invalid timeoutMs: NaN (expected …)", the field as the host spells it
//! ```
//!
//! # The rules
//!
//! - **Configuration.** `timeout_ms` is a whole number of milliseconds from 1 to 2^31 (NaN, negative,
//!   zero, fractional or larger: a [`GuardError`] naming `timeout_ms`). The policy is `'deny'` or
//!   `'allow'`; [`Policy::Fallback`] is what a binding sets when it is handed a fallback store, which
//!   the binding keeps.
//! - **The failure verdict.** Under `deny` a call whose store timed out, failed or was not ready is
//!   refused with `retry_after_ms` = the timeout (a retry sooner would most likely meet the same
//!   failing store), no `retry_timestamp` (the guard has no store clock: the seed's "a store without
//!   it is told apart by retryAfterMs") and no `blocked` entry (no entry refused it); under `allow` it
//!   is allowed. Both have a zero quota (`limit` 0: the store's state is unknown). Under a fallback
//!   the fallback store answers; if it fails too the call is refused as under `deny`.
//! - **Which errors are failures.** An error the store throws is a `store-error`, except the caller's
//!   own mistakes (codes `invalid_limit:*`, `invalid_argument:*`), which the guard rethrows: bad input
//!   is not an outage.
//! - **The late answer.** A consume that answers after the guard gave its verdict: if the late answer
//!   recorded the call (allowed) and the guard refused it, the call is **released** (exactly that
//!   call, by the verdict's `release`); if the guard allowed it (`allow`, or a fallback that allowed),
//!   the count **stays**, as the call ran; a late refusal recorded nothing and is **ignored**. A
//!   late peek is ignored.
//! - **The block cache** (opt-in): a refusal's blocked entry (key and limit) is remembered until
//!   `started + retry_after_ms` on the host's monotonic clock, where `started` is when the call was
//!   sent (so the cache never outlasts the store's own wait: the store's clock read the time after
//!   `started`). A consume or peek naming any remembered entry is refused without a round trip, with
//!   the remaining wait, the remembered `retry_timestamp` (the same wait's), the index of the entry
//!   with the longest remembered wait (ties keep the first) and that entry's quota (`remaining` 0).
//!   This is exact for the sliding window — no call can be allowed before that time — except after a
//!   release: a release through the guard forgets the call's entries; a release in another process is
//!   not seen here. Bounded: at most `max_keys` entries (default 100,000), evicting the one that
//!   expires soonest (O(log n)); expired entries are dropped as they are met. Lookups hash the key as
//!   given, without copying it.
//! - **Counters** ([`GuardStats`]): calls, allowed, refused (by the store, a policy, a fallback or the
//!   cache), timeouts, store errors, not-ready, late releases, late releases failed, fallback calls,
//!   cache hits.

use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::Arc;

use indexmap::{Equivalent, IndexMap};
use serde::{Deserialize, Serialize};

use crate::verdict::{BatchVerdict, Quota};
use crate::Limit;

type Hasher = foldhash::fast::RandomState;

/// The largest timeout the guard accepts, in milliseconds: 2^31 (what a host timer can hold).
pub const MAX_TIMEOUT_MS: u64 = 1 << 31;

/// The block cache's default bound, in entries (key and limit).
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// The largest bound a block cache accepts.
pub const MAX_MAX_KEYS: usize = u32::MAX as usize;

/// Which guard option was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardField {
    /// `timeout_ms`: how long a call waits for the store.
    TimeoutMs,
    /// `policy`: what a failure gets (`deny`, `allow`).
    Policy,
    /// `max_keys`: the block cache's bound.
    MaxKeys,
}

impl GuardField {
    /// The field's name as the core and the vectors spell it.
    pub const fn name(self) -> &'static str {
        match self {
            GuardField::TimeoutMs => "timeout_ms",
            GuardField::Policy => "policy",
            GuardField::MaxKeys => "max_keys",
        }
    }

    /// The accepted values, in words.
    pub const fn range(self) -> &'static str {
        match self {
            GuardField::TimeoutMs => "a whole number of milliseconds from 1 to 2147483648",
            GuardField::Policy => "'deny', 'allow' or a fallback store",
            GuardField::MaxKeys => "a whole number from 1 to 4294967295",
        }
    }
}

impl std::fmt::Display for GuardField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A guard option that cannot be held: the field, and the value given as text (`NaN`, `-1`, `1.5`,
/// `'sometimes'`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {field}: {value} (expected {})", field.range())]
pub struct GuardError {
    /// The refused field.
    pub field: GuardField,
    /// The refused value, as text.
    pub value: String,
}

impl GuardError {
    /// A refusal of `field` holding `value`.
    pub fn new(field: GuardField, value: impl ToString) -> GuardError {
        GuardError {
            field,
            value: value.to_string(),
        }
    }

    /// The error's stable code: `invalid_argument:timeout_ms`, `invalid_argument:policy`,
    /// `invalid_argument:max_keys`.
    pub fn code(&self) -> String {
        format!("invalid_argument:{}", self.field.name())
    }

    /// The message with the field spelled as the host spells it (`timeoutMs`, `onFailure`, `maxKeys`
    /// in JavaScript): `invalid timeoutMs: NaN (expected a whole number of milliseconds from 1 to …)`.
    pub fn message(&self, spelled: &str) -> String {
        format!(
            "invalid {spelled}: {} (expected {})",
            self.value,
            self.field.range()
        )
    }
}

/// A host number as text, as JavaScript mostly spells it (`NaN`, `Infinity`, `-1`, `1.5`).
fn number_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        if v == 0.0 && v.is_sign_negative() {
            "-0".to_owned()
        } else {
            format!("{}", v as i64)
        }
    } else {
        format!("{v}")
    }
}

/// What a failed call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Refuse the call (fail closed).
    Deny,
    /// Allow the call (fail open).
    Allow,
    /// Ask the fallback store the binding holds (refused as under `Deny` if it fails too).
    Fallback,
}

impl Policy {
    /// `'deny'` or `'allow'`; anything else is refused naming `policy`. (`Fallback` is set by a binding
    /// that was handed a store, never parsed.)
    pub fn parse(text: &str) -> Result<Policy, GuardError> {
        match text {
            "deny" => Ok(Policy::Deny),
            "allow" => Ok(Policy::Allow),
            other => Err(GuardError::new(GuardField::Policy, format!("'{other}'"))),
        }
    }

    /// `deny`, `allow` or `fallback`.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::Deny => "deny",
            Policy::Allow => "allow",
            Policy::Fallback => "fallback",
        }
    }
}

/// Why the guard, not the store, answered a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Failure {
    /// The store did not answer within the timeout.
    #[serde(rename = "timeout")]
    Timeout,
    /// The store (its client) threw.
    #[serde(rename = "store-error")]
    StoreError,
    /// The store was not ready (still connecting) within the timeout.
    #[serde(rename = "not-ready")]
    NotReady,
}

impl Failure {
    /// `timeout`, `store-error` or `not-ready`: the verdict's `failed` field.
    pub const fn name(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::StoreError => "store-error",
            Failure::NotReady => "not-ready",
        }
    }

    /// A failure from its name.
    pub fn parse(name: &str) -> Option<Failure> {
        match name {
            "timeout" => Some(Failure::Timeout),
            "store-error" => Some(Failure::StoreError),
            "not-ready" => Some(Failure::NotReady),
            _ => None,
        }
    }

    /// What an error a store threw means, from its code (a binding passes the error's `code`, or its
    /// type's name when it has none; `""` when neither): the caller's own mistakes are not failures
    /// (`None`: the guard rethrows them) — the engine's codes `invalid_limit:*` and
    /// `invalid_argument:*`, the Node package's `ERR_RATEWINDOW_INVALID_LIMIT` and
    /// `ERR_RATEWINDOW_INVALID_ARGUMENT`, Python's `InvalidLimitError` and `InvalidArgumentError`,
    /// and a `TypeError` (an argument of the wrong type). Everything else is a
    /// [`Failure::StoreError`].
    pub fn of_error_code(code: &str) -> Option<Failure> {
        const CALLERS: [&str; 7] = [
            "invalid_limit",
            "invalid_argument",
            "ERR_RATEWINDOW_INVALID_LIMIT",
            "ERR_RATEWINDOW_INVALID_ARGUMENT",
            "InvalidLimitError",
            "InvalidArgumentError",
            "TypeError",
        ];
        if CALLERS.iter().any(|c| {
            code.strip_prefix(c)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
        }) {
            None
        } else {
            Some(Failure::StoreError)
        }
    }
}

/// What a failed call gets: a verdict, or the fallback store's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// This verdict (`deny` or `allow`).
    Answer(BatchVerdict),
    /// Ask the fallback store.
    Fallback,
}

/// A guard's validated configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GuardConfig {
    timeout_ms: u64,
    policy: Policy,
}

impl GuardConfig {
    /// A configuration, or an error naming `timeout_ms` (1 to 2^31).
    pub fn new(timeout_ms: u64, policy: Policy) -> Result<GuardConfig, GuardError> {
        if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
            return Err(GuardError::new(GuardField::TimeoutMs, timeout_ms));
        }
        Ok(GuardConfig { timeout_ms, policy })
    }

    /// A configuration from a host number (JS `number`, Python `float` or `int`): NaN, infinities,
    /// fractions, zero, negatives and values above 2^31 are refused with the value as given.
    pub fn from_f64(timeout_ms: f64, policy: Policy) -> Result<GuardConfig, GuardError> {
        if timeout_ms.fract() == 0.0 && timeout_ms >= 1.0 && timeout_ms <= MAX_TIMEOUT_MS as f64 {
            Ok(GuardConfig {
                timeout_ms: timeout_ms as u64,
                policy,
            })
        } else {
            Err(GuardError::new(
                GuardField::TimeoutMs,
                number_text(timeout_ms),
            ))
        }
    }

    /// How long a call waits for the store, in ms.
    pub const fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// What a failure gets.
    pub const fn policy(&self) -> Policy {
        self.policy
    }

    /// The verdict a failure gets under `deny` (also a failed fallback's) or `allow`; under a
    /// fallback policy, the `deny` verdict (what a call gets when the fallback fails too).
    pub const fn failure_verdict(&self, _failure: Failure) -> BatchVerdict {
        match self.policy {
            Policy::Allow => BatchVerdict::ALLOWED,
            Policy::Deny | Policy::Fallback => self.deny_verdict(),
        }
    }

    /// The refusal a failure gets under `deny`: `retry_after_ms` = the timeout, no `retry_timestamp`,
    /// no `blocked`, a zero quota.
    pub const fn deny_verdict(&self) -> BatchVerdict {
        BatchVerdict {
            allowed: false,
            retry_after_ms: self.timeout_ms,
            retry_timestamp: None,
            blocked: None,
            quota: Quota::NONE,
        }
    }

    /// What a failed call gets: the policy's verdict, or [`OnFailure::Fallback`].
    pub const fn on_failure(&self, failure: Failure) -> OnFailure {
        match self.policy {
            Policy::Fallback => OnFailure::Fallback,
            _ => OnFailure::Answer(self.failure_verdict(failure)),
        }
    }
}

/// What to do with a consume's answer that arrived after the guard answered the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LateAction {
    /// The store recorded a call the guard refused: give back exactly that call (its `release`).
    Release,
    /// The store recorded a call the guard allowed: the call ran, the count stays.
    Keep,
    /// The store refused: nothing was recorded, nothing to do.
    Ignore,
}

/// The late-answer rule: `answered_allowed` is the verdict the guard gave (`false` under `deny`,
/// `true` under `allow`, the fallback's under a fallback), `late_allowed` the store's late verdict.
pub const fn late_action(answered_allowed: bool, late_allowed: bool) -> LateAction {
    match (late_allowed, answered_allowed) {
        (false, _) => LateAction::Ignore,
        (true, false) => LateAction::Release,
        (true, true) => LateAction::Keep,
    }
}

/// A guard's counters, each counting since the guard was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GuardStats {
    /// Calls (consumes and peeks) begun.
    pub calls: u64,
    /// Calls answered allowed (by the store, the `allow` policy or a fallback).
    pub allowed: u64,
    /// Calls answered refused (by the store, the `deny` policy, a fallback or the block cache).
    pub refused: u64,
    /// Calls the store did not answer within the timeout.
    pub timeouts: u64,
    /// Calls whose store threw.
    pub store_errors: u64,
    /// Calls the store was not ready for within the timeout.
    pub not_ready: u64,
    /// Late answers released (the call given back).
    pub late_releases: u64,
    /// Late answers that should have been released but could not be (the release threw, or the
    /// store's verdict had no `release`).
    pub late_releases_failed: u64,
    /// Calls answered by the fallback store.
    pub fallback_calls: u64,
    /// Calls refused by the block cache without a round trip.
    pub cache_hits: u64,
}

impl GuardStats {
    /// The counters' names (as Rust and Python spell them), in the order of [`GuardStats::counts`].
    pub const NAMES: [&'static str; 10] = [
        "calls",
        "allowed",
        "refused",
        "timeouts",
        "store_errors",
        "not_ready",
        "late_releases",
        "late_releases_failed",
        "fallback_calls",
        "cache_hits",
    ];

    /// The counters, in the order of [`GuardStats::NAMES`].
    pub fn counts(&self) -> [u64; 10] {
        [
            self.calls,
            self.allowed,
            self.refused,
            self.timeouts,
            self.store_errors,
            self.not_ready,
            self.late_releases,
            self.late_releases_failed,
            self.fallback_calls,
            self.cache_hits,
        ]
    }
}

/// A cached entry's identity: key, uses, window. The key is shared with the expiry order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct CacheKey {
    key: Arc<str>,
    uses: u32,
    window_ms: u64,
}

impl Hash for CacheKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        KeyRef {
            key: &self.key,
            uses: self.uses,
            window_ms: self.window_ms,
        }
        .hash(state)
    }
}

/// A lookup of a [`CacheKey`] by a borrowed key: hashes as it does, copies nothing.
#[derive(Clone, Copy)]
struct KeyRef<'a> {
    key: &'a str,
    uses: u32,
    window_ms: u64,
}

impl Hash for KeyRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(self.key.as_bytes());
        state.write_u8(0xff);
        state.write_u32(self.uses);
        state.write_u64(self.window_ms);
    }
}

impl Equivalent<CacheKey> for KeyRef<'_> {
    fn equivalent(&self, k: &CacheKey) -> bool {
        self.uses == k.uses && self.window_ms == k.window_ms && *self.key == *k.key
    }
}

/// A remembered refusal, on the host's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Blocked {
    /// Until when no call is allowed (exclusive).
    until: u64,
    /// Until when the entry's window is empty (at least `until`).
    reset_until: u64,
    /// The store's `retry_timestamp` for this wait.
    retry_timestamp: Option<u64>,
}

/// A local cache of refusals: each blocked entry (key and limit) until its wait ends. See the module
/// docs for the exactness rule and the bound.
#[derive(Debug, Clone)]
pub struct BlockCache {
    map: IndexMap<CacheKey, Blocked, Hasher>,
    /// `(until, key)` in expiry order: the first expires soonest.
    order: BTreeSet<(u64, CacheKey)>,
    max_keys: usize,
}

impl Default for BlockCache {
    fn default() -> Self {
        BlockCache::with_bound(DEFAULT_MAX_KEYS)
    }
}

impl BlockCache {
    fn with_bound(max_keys: usize) -> BlockCache {
        BlockCache {
            map: IndexMap::with_hasher(Hasher::default()),
            order: BTreeSet::new(),
            max_keys,
        }
    }

    /// A cache of at most `max_keys` entries (1 to 2^32 - 1), or an error naming `max_keys`.
    pub fn new(max_keys: usize) -> Result<BlockCache, GuardError> {
        // Compared as u64: on a 32-bit target (wasm32) `MAX_MAX_KEYS` is `usize::MAX`.
        if max_keys == 0 || max_keys as u64 > MAX_MAX_KEYS as u64 {
            return Err(GuardError::new(GuardField::MaxKeys, max_keys));
        }
        Ok(BlockCache::with_bound(max_keys))
    }

    /// A cache bounded by a host number, checked as [`BlockCache::new`] does.
    pub fn from_f64(max_keys: f64) -> Result<BlockCache, GuardError> {
        if max_keys.fract() == 0.0 && max_keys >= 1.0 && max_keys <= MAX_MAX_KEYS as f64 {
            Ok(BlockCache::with_bound(max_keys as usize))
        } else {
            Err(GuardError::new(GuardField::MaxKeys, number_text(max_keys)))
        }
    }

    /// The bound.
    pub const fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Entries held (some may have expired and not yet been met).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    fn remove_at(&mut self, index: usize) {
        if let Some((key, blocked)) = self.map.swap_remove_index(index) {
            self.order.remove(&(blocked.until, key));
        }
    }

    /// The refusal a call naming `entries` gets at `now` (host monotonic ms) without a round trip, or
    /// `None` when no entry is remembered as blocked (the call goes to the store). The verdict names
    /// the entry with the longest remaining wait (ties keep the first).
    pub fn check<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, Limit)>,
        now: u64,
    ) -> Option<BatchVerdict> {
        if self.map.is_empty() {
            return None;
        }
        let mut best: Option<(usize, Limit, Blocked)> = None;
        for (i, (key, limit)) in entries.into_iter().enumerate() {
            let probe = KeyRef {
                key,
                uses: limit.uses(),
                window_ms: limit.window_ms(),
            };
            let Some(index) = self.map.get_index_of(&probe) else {
                continue;
            };
            let blocked = self.map[index];
            if blocked.until <= now {
                self.remove_at(index);
                continue;
            }
            if best.is_none_or(|(_, _, b)| blocked.until > b.until) {
                best = Some((i, limit, blocked));
            }
        }
        let (index, limit, blocked) = best?;
        let wait = blocked.until - now;
        Some(BatchVerdict {
            allowed: false,
            retry_after_ms: wait,
            retry_timestamp: blocked.retry_timestamp,
            blocked: Some(index),
            quota: Quota {
                limit: limit.uses(),
                remaining: 0,
                refill_after_ms: wait,
                reset_after_ms: blocked.reset_until.saturating_sub(now).max(wait),
            },
        })
    }

    /// Remembers that `key` under `limit` refuses every call until `started + retry_after_ms`
    /// (`started`: when the refused call was sent, host monotonic ms). A zero wait remembers nothing.
    /// A new refusal of a remembered entry replaces it. When full, the entry that expires soonest
    /// goes (expired ones first).
    pub fn insert(
        &mut self,
        key: &str,
        limit: Limit,
        started: u64,
        retry_after_ms: u64,
        retry_timestamp: Option<u64>,
        reset_after_ms: u64,
    ) {
        if retry_after_ms == 0 {
            return;
        }
        let until = started.saturating_add(retry_after_ms);
        let blocked = Blocked {
            until,
            reset_until: started.saturating_add(reset_after_ms).max(until),
            retry_timestamp,
        };
        let probe = KeyRef {
            key,
            uses: limit.uses(),
            window_ms: limit.window_ms(),
        };
        if let Some((_, held, old)) = self.map.get_full_mut(&probe) {
            let held = held.clone();
            let old_until = old.until;
            *old = blocked;
            if old_until != until {
                self.order.remove(&(old_until, held.clone()));
                self.order.insert((until, held));
            }
            return;
        }
        // Expired entries go first (they expire soonest), then, if still full, the soonest to expire.
        while let Some((first, _)) = self.order.first() {
            if *first > started && self.map.len() < self.max_keys {
                break;
            }
            let (_, key) = self.order.pop_first().expect("non-empty");
            self.map.swap_remove(&key);
        }
        let held = CacheKey {
            key: Arc::from(key),
            uses: probe.uses,
            window_ms: probe.window_ms,
        };
        self.order.insert((until, held.clone()));
        self.map.insert(held, blocked);
    }

    /// Remembers a call's refusal: its blocked entry (the only one whose wait the verdict gives),
    /// from its `retry_after_ms`, `retry_timestamp` and quota. An allowed verdict, or one without
    /// `blocked` (the guard's own), remembers nothing.
    pub fn record<K: AsRef<str>>(
        &mut self,
        entries: &[(K, Limit)],
        verdict: &BatchVerdict,
        started: u64,
    ) {
        if verdict.allowed {
            return;
        }
        let Some((key, limit)) = verdict.blocked.and_then(|i| entries.get(i)) else {
            return;
        };
        let reset_after_ms = if verdict.quota.limit == 0 {
            verdict.retry_after_ms
        } else {
            verdict.quota.reset_after_ms
        };
        self.insert(
            key.as_ref(),
            *limit,
            started,
            verdict.retry_after_ms,
            verdict.retry_timestamp,
            reset_after_ms,
        );
    }

    /// Forgets `entries` (a call given back through the guard: its keys may allow again).
    pub fn forget<'a>(&mut self, entries: impl IntoIterator<Item = (&'a str, Limit)>) {
        for (key, limit) in entries {
            let probe = KeyRef {
                key,
                uses: limit.uses(),
                window_ms: limit.window_ms(),
            };
            if let Some(index) = self.map.get_index_of(&probe) {
                self.remove_at(index);
            }
        }
    }
}

/// One guard's state: its configuration, its counters and its optional block cache. The binding holds
/// one per guarded store and reports each step of a call; every verdict the guard makes comes from
/// here.
#[derive(Debug, Clone)]
pub struct Guard {
    config: GuardConfig,
    stats: GuardStats,
    cache: Option<BlockCache>,
}

impl Guard {
    /// A guard with `config` and, if given, a block cache.
    pub fn new(config: GuardConfig, cache: Option<BlockCache>) -> Guard {
        Guard {
            config,
            stats: GuardStats::default(),
            cache,
        }
    }

    /// The configuration.
    pub const fn config(&self) -> &GuardConfig {
        &self.config
    }

    /// The counters.
    pub const fn stats(&self) -> GuardStats {
        self.stats
    }

    /// The block cache, if on.
    pub const fn cache(&self) -> Option<&BlockCache> {
        self.cache.as_ref()
    }

    /// The block cache, if on, to change.
    pub fn cache_mut(&mut self) -> Option<&mut BlockCache> {
        self.cache.as_mut()
    }

    /// Counts a call begun without a cache check.
    pub fn begin(&mut self) {
        self.stats.calls += 1;
    }

    /// Counts a call begun and checks the block cache (if on): `Some` refusal (counted as a cache hit
    /// and a refusal) answers the call without a round trip.
    pub fn begin_checked<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, Limit)>,
        now: u64,
    ) -> Option<BatchVerdict> {
        self.stats.calls += 1;
        let hit = self.cache.as_mut()?.check(entries, now);
        if hit.is_some() {
            self.stats.cache_hits += 1;
            self.stats.refused += 1;
        }
        hit
    }

    /// The store answered in time.
    pub fn answered(&mut self, allowed: bool) {
        if allowed {
            self.stats.allowed += 1;
        } else {
            self.stats.refused += 1;
        }
    }

    /// The store answered in time with `verdict`, for a call on `entries` sent at `started`: counts
    /// it, and remembers a refusal in the block cache (if on).
    pub fn answered_verdict<K: AsRef<str>>(
        &mut self,
        entries: &[(K, Limit)],
        verdict: &BatchVerdict,
        started: u64,
    ) {
        self.answered(verdict.allowed);
        if let Some(cache) = self.cache.as_mut() {
            cache.record(entries, verdict, started);
        }
    }

    /// The store failed: counts the failure and says what the call gets (a policy's verdict, counted,
    /// or the fallback).
    pub fn failed(&mut self, failure: Failure) -> OnFailure {
        match failure {
            Failure::Timeout => self.stats.timeouts += 1,
            Failure::StoreError => self.stats.store_errors += 1,
            Failure::NotReady => self.stats.not_ready += 1,
        }
        let on = self.config.on_failure(failure);
        match on {
            OnFailure::Answer(verdict) => self.answered(verdict.allowed),
            OnFailure::Fallback => self.stats.fallback_calls += 1,
        }
        on
    }

    /// The fallback store answered.
    pub fn fallback_answered(&mut self, allowed: bool) {
        self.answered(allowed);
    }

    /// The fallback store failed too: the call is refused as under `deny` (counted).
    pub fn fallback_failed(&mut self) -> BatchVerdict {
        self.stats.refused += 1;
        self.config.deny_verdict()
    }

    /// The late-answer rule ([`late_action`]); counts nothing (see [`Guard::late_released`]).
    pub const fn late(&self, answered_allowed: bool, late_allowed: bool) -> LateAction {
        late_action(answered_allowed, late_allowed)
    }

    /// A late answer's release finished (`ok`) or failed (it threw, or there was no `release`).
    pub fn late_released(&mut self, ok: bool) {
        if ok {
            self.stats.late_releases += 1;
        } else {
            self.stats.late_releases_failed += 1;
        }
    }

    /// A call on `entries` was given back through the guard: forget its entries in the block cache.
    pub fn released<'a>(&mut self, entries: impl IntoIterator<Item = (&'a str, Limit)>) {
        if let Some(cache) = self.cache.as_mut() {
            cache.forget(entries);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(uses: u64, window_ms: u64) -> Limit {
        Limit::new(uses, window_ms).unwrap()
    }

    #[test]
    fn timeout_is_checked() {
        for bad in [f64::NAN, -1.0, 0.0, -0.0, 1.5, f64::INFINITY, 2147483649.0] {
            let err = GuardConfig::from_f64(bad, Policy::Deny).unwrap_err();
            assert_eq!(err.field, GuardField::TimeoutMs);
            assert_eq!(err.code(), "invalid_argument:timeout_ms");
        }
        let err = GuardConfig::from_f64(f64::NAN, Policy::Deny).unwrap_err();
        assert_eq!(
            err.message("timeoutMs"),
            "invalid timeoutMs: NaN (expected a whole number of milliseconds from 1 to 2147483648)"
        );
        assert_eq!(
            GuardConfig::from_f64(-1.0, Policy::Deny).unwrap_err().value,
            "-1"
        );
        assert_eq!(
            GuardConfig::from_f64(1.5, Policy::Deny).unwrap_err().value,
            "1.5"
        );
        assert_eq!(
            GuardConfig::from_f64(1.0, Policy::Allow)
                .unwrap()
                .timeout_ms(),
            1
        );
        assert_eq!(
            GuardConfig::from_f64(2147483648.0, Policy::Allow)
                .unwrap()
                .timeout_ms(),
            MAX_TIMEOUT_MS
        );
        assert!(GuardConfig::new(0, Policy::Deny).is_err());
        assert!(GuardConfig::new(MAX_TIMEOUT_MS + 1, Policy::Deny).is_err());
        assert!(GuardConfig::new(MAX_TIMEOUT_MS, Policy::Deny).is_ok());
    }

    #[test]
    fn policy_is_parsed() {
        assert_eq!(Policy::parse("deny"), Ok(Policy::Deny));
        assert_eq!(Policy::parse("allow"), Ok(Policy::Allow));
        for bad in ["fallback", "Deny", "", "sometimes"] {
            let err = Policy::parse(bad).unwrap_err();
            assert_eq!(err.field, GuardField::Policy);
            assert_eq!(err.code(), "invalid_argument:policy");
        }
        assert_eq!(
            Policy::parse("sometimes").unwrap_err().message("onFailure"),
            "invalid onFailure: 'sometimes' (expected 'deny', 'allow' or a fallback store)"
        );
    }

    #[test]
    fn failure_names_round_trip() {
        for f in [Failure::Timeout, Failure::StoreError, Failure::NotReady] {
            assert_eq!(Failure::parse(f.name()), Some(f));
            assert_eq!(
                serde_json::to_string(&f).unwrap(),
                format!("\"{}\"", f.name())
            );
        }
        assert_eq!(Failure::parse("late"), None);
        assert_eq!(Failure::of_error_code("store"), Some(Failure::StoreError));
        assert_eq!(Failure::of_error_code(""), Some(Failure::StoreError));
        assert_eq!(
            Failure::of_error_code("ECONNRESET"),
            Some(Failure::StoreError)
        );
        assert_eq!(Failure::of_error_code("invalid_limit:uses"), None);
        assert_eq!(Failure::of_error_code("invalid_argument:key"), None);
        for caller in [
            "ERR_RATEWINDOW_INVALID_LIMIT",
            "ERR_RATEWINDOW_INVALID_ARGUMENT",
            "InvalidLimitError",
            "InvalidArgumentError",
            "TypeError",
            "invalid_limit",
        ] {
            assert_eq!(Failure::of_error_code(caller), None, "{caller}");
        }
        for store in [
            "ERR_RATEWINDOW_STORE",
            "ERR_RATEWINDOW_STORE_REPLY",
            "ECONNREFUSED",
            "TypeErrors",
            "Error",
        ] {
            assert_eq!(
                Failure::of_error_code(store),
                Some(Failure::StoreError),
                "{store}"
            );
        }
    }

    #[test]
    fn deny_refuses_for_the_timeout_allow_allows() {
        let deny = GuardConfig::new(250, Policy::Deny).unwrap();
        for f in [Failure::Timeout, Failure::StoreError, Failure::NotReady] {
            let OnFailure::Answer(v) = deny.on_failure(f) else {
                panic!("deny answers")
            };
            assert!(!v.allowed);
            assert_eq!(v.retry_after_ms, 250);
            assert_eq!(v.retry_timestamp, None);
            assert_eq!(v.blocked, None);
            assert_eq!(v.quota, Quota::NONE);
        }
        let one = GuardConfig::new(1, Policy::Deny).unwrap();
        assert_eq!(one.deny_verdict().retry_after_ms, 1);
        let allow = GuardConfig::new(250, Policy::Allow).unwrap();
        assert_eq!(
            allow.on_failure(Failure::Timeout),
            OnFailure::Answer(BatchVerdict::ALLOWED)
        );
        let fallback = GuardConfig::new(250, Policy::Fallback).unwrap();
        assert_eq!(
            fallback.on_failure(Failure::StoreError),
            OnFailure::Fallback
        );
        assert!(!fallback.failure_verdict(Failure::StoreError).allowed);
    }

    #[test]
    fn late_answers() {
        // deny: the guard refused; a late allowed consume is released.
        assert_eq!(late_action(false, true), LateAction::Release);
        // allow (or a fallback that allowed): the call ran, the count stays.
        assert_eq!(late_action(true, true), LateAction::Keep);
        // a late refusal recorded nothing.
        assert_eq!(late_action(false, false), LateAction::Ignore);
        assert_eq!(late_action(true, false), LateAction::Ignore);
    }

    #[test]
    fn guard_counts() {
        let mut g = Guard::new(GuardConfig::new(100, Policy::Deny).unwrap(), None);
        g.begin();
        g.answered(true);
        g.begin();
        assert!(matches!(g.failed(Failure::Timeout), OnFailure::Answer(v) if !v.allowed));
        g.begin();
        g.failed(Failure::StoreError);
        g.begin();
        g.failed(Failure::NotReady);
        assert_eq!(g.late(false, true), LateAction::Release);
        g.late_released(true);
        g.late_released(false);
        assert_eq!(g.begin_checked([("k", limit(1, 10))], 0), None);
        let s = g.stats();
        assert_eq!(
            s,
            GuardStats {
                calls: 5,
                allowed: 1,
                refused: 3,
                timeouts: 1,
                store_errors: 1,
                not_ready: 1,
                late_releases: 1,
                late_releases_failed: 1,
                fallback_calls: 0,
                cache_hits: 0,
            }
        );
        let mut f = Guard::new(GuardConfig::new(100, Policy::Fallback).unwrap(), None);
        f.begin();
        assert_eq!(f.failed(Failure::Timeout), OnFailure::Fallback);
        f.fallback_answered(true);
        f.begin();
        assert_eq!(f.failed(Failure::StoreError), OnFailure::Fallback);
        assert!(!f.fallback_failed().allowed);
        let s = f.stats();
        assert_eq!(
            (
                s.calls,
                s.fallback_calls,
                s.allowed,
                s.refused,
                s.timeouts,
                s.store_errors
            ),
            (2, 2, 1, 1, 1, 1)
        );
    }

    fn refusal(blocked: usize, retry_after_ms: u64, retry_timestamp: u64) -> BatchVerdict {
        BatchVerdict {
            allowed: false,
            retry_after_ms,
            retry_timestamp: Some(retry_timestamp),
            blocked: Some(blocked),
            quota: Quota {
                limit: 5,
                remaining: 0,
                refill_after_ms: retry_after_ms,
                reset_after_ms: retry_after_ms + 3_000,
            },
        }
    }

    #[test]
    fn cache_refuses_until_the_wait_ends() {
        let five = limit(5, 10_000);
        let mut g = Guard::new(
            GuardConfig::new(100, Policy::Deny).unwrap(),
            Some(BlockCache::default()),
        );
        let call = [("a", five), ("b", five)];
        assert_eq!(g.begin_checked(call, 1_000), None);
        // Sent at 1_000, refused on b: 4_000 ms to wait, store clock 1_700_000_004_000.
        g.answered_verdict(&call, &refusal(1, 4_000, 1_700_000_004_000), 1_000);
        let hit = g.begin_checked(call, 2_000).expect("cached");
        assert_eq!(
            hit,
            BatchVerdict {
                allowed: false,
                retry_after_ms: 3_000,
                retry_timestamp: Some(1_700_000_004_000),
                blocked: Some(1),
                quota: Quota {
                    limit: 5,
                    remaining: 0,
                    refill_after_ms: 3_000,
                    reset_after_ms: 6_000,
                },
            }
        );
        // Only b is blocked: a call on a alone goes to the store, b alone is refused (index 0).
        assert_eq!(g.begin_checked([("a", five)], 2_000), None);
        assert_eq!(
            g.begin_checked([("b", five)], 4_999).unwrap().blocked,
            Some(0)
        );
        assert_eq!(
            g.begin_checked([("b", five)], 4_999)
                .unwrap()
                .retry_after_ms,
            1
        );
        // The same key under another limit is another entry.
        assert_eq!(g.begin_checked([("b", limit(6, 10_000))], 2_000), None);
        assert_eq!(g.begin_checked([("b", limit(5, 9_999))], 2_000), None);
        // At the end of the wait the store is asked again, and the entry is gone.
        assert_eq!(g.begin_checked([("b", five)], 5_000), None);
        assert_eq!(g.cache().unwrap().len(), 0);
        let s = g.stats();
        assert_eq!((s.calls, s.cache_hits, s.refused), (8, 3, 4));
    }

    #[test]
    fn cache_names_the_longest_wait_ties_first() {
        let five = limit(5, 10_000);
        let mut cache = BlockCache::default();
        cache.insert("a", five, 0, 100, Some(100), 100);
        cache.insert("b", five, 0, 300, Some(300), 300);
        cache.insert("c", five, 0, 300, Some(300), 300);
        let v = cache
            .check([("a", five), ("c", five), ("b", five)], 10)
            .unwrap();
        assert_eq!((v.blocked, v.retry_after_ms), (Some(1), 290));
        assert_eq!(v.retry_timestamp, Some(300));
    }

    #[test]
    fn cache_ignores_allowed_and_guard_verdicts() {
        let five = limit(5, 10_000);
        let mut cache = BlockCache::default();
        let call = [("a".to_owned(), five)];
        cache.record(&call, &BatchVerdict::ALLOWED, 0);
        cache.record(
            &call,
            &GuardConfig::new(50, Policy::Deny).unwrap().deny_verdict(),
            0,
        );
        // A blocked index out of range (a store of the user's that lies) is ignored, not a panic.
        cache.record(&call, &refusal(3, 100, 100), 0);
        assert!(cache.is_empty());
        cache.insert("a", five, 0, 0, None, 0);
        assert!(cache.is_empty());
    }

    #[test]
    fn release_forgets_the_call() {
        let five = limit(5, 10_000);
        let mut g = Guard::new(
            GuardConfig::new(100, Policy::Deny).unwrap(),
            Some(BlockCache::default()),
        );
        g.answered_verdict(&[("a", five)], &refusal(0, 1_000, 1_000), 0);
        assert!(g.begin_checked([("a", five)], 10).is_some());
        g.released([("a", five), ("z", five)]);
        assert_eq!(g.begin_checked([("a", five)], 10), None);
    }

    #[test]
    fn a_new_refusal_replaces_the_old() {
        let five = limit(5, 10_000);
        let mut cache = BlockCache::new(10).unwrap();
        cache.insert("a", five, 0, 1_000, Some(1_000), 1_000);
        cache.insert("a", five, 500, 200, Some(700), 200);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.check([("a", five)], 600).unwrap().retry_after_ms, 100);
        assert_eq!(cache.check([("a", five)], 700), None);
        assert!(cache.is_empty());
        assert!(cache.order.is_empty());
    }

    #[test]
    fn bound_evicts_the_soonest_to_expire() {
        let five = limit(5, 10_000);
        let mut cache = BlockCache::new(3).unwrap();
        cache.insert("late", five, 0, 9_000, None, 9_000);
        cache.insert("soon", five, 0, 1_000, None, 1_000);
        cache.insert("mid", five, 0, 5_000, None, 5_000);
        cache.insert("new", five, 0, 2_000, None, 2_000);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.check([("soon", five)], 10), None);
        for key in ["late", "mid", "new"] {
            assert!(cache.check([(key, five)], 10).is_some(), "{key}");
        }
        // Expired entries go first, however many, before a live one is evicted.
        cache.insert("later", five, 2_500, 10_000, None, 10_000);
        assert_eq!(cache.len(), 3);
        assert!(cache.check([("new", five)], 2_600).is_none());
        assert!(cache.check([("mid", five)], 2_600).is_some());
        assert_eq!(cache.map.len(), cache.order.len());
    }

    #[test]
    fn bound_is_checked() {
        assert!(BlockCache::new(0).is_err());
        assert_eq!(BlockCache::new(1).unwrap().max_keys(), 1);
        for bad in [f64::NAN, 0.0, -3.0, 2.5, 4294967296.0] {
            let err = BlockCache::from_f64(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_argument:max_keys");
        }
        assert_eq!(BlockCache::from_f64(7.0).unwrap().max_keys(), 7);
        assert_eq!(BlockCache::default().max_keys(), DEFAULT_MAX_KEYS);
    }

    #[test]
    fn many_keys_stay_bounded() {
        let five = limit(5, 10_000);
        let mut cache = BlockCache::new(1_000).unwrap();
        for i in 0..10_000u64 {
            cache.insert(
                &format!("k{i}"),
                five,
                i,
                1_000 + (i * 7919) % 5_000,
                None,
                0,
            );
            assert!(cache.len() <= 1_000);
        }
        assert_eq!(cache.map.len(), cache.order.len());
    }
}
