//! The lock for both JS builds (`ratewindow_core::lock`): the arguments from JS numbers and strings,
//! refused naming the field as JS spells it (`ttl`, `owner`, `seconds`, `retryMs`: code
//! `invalid_argument:<field>`); the memory store's locks ([`JsLocks`]); the networked stores' lock calls
//! ([`Calls::lock`], driven like every call); and `block`'s schedule ([`JsWait`]).

use ratewindow_core::lock::{check_owner, LockError, LockOp, LockTtl, LockWait, MemoryLocks};

use crate::calls::{CallRecord, Calls};
use crate::{number, Failure, Res};

/// A lock argument refused: code `invalid_argument:<field>` (JS spelling), the core's message.
pub fn failure(e: &LockError) -> Failure {
    Failure::new(
        format!("invalid_argument:{}", e.field.js_name()),
        e.js_message(),
    )
}

/// The operation `op` (`acquire`, `release`, `forceRelease`, `owner`) on `key`, its arguments checked:
/// `owner` for acquire and release, `ttl` (seconds) for acquire.
pub fn op(op: &str, key: String, owner: Option<String>, ttl: f64) -> Res<LockOp> {
    let checked = |owner: Option<String>| -> Res<String> {
        let owner = owner.unwrap_or_default();
        check_owner(&owner).map_err(|e| failure(&e))?;
        Ok(owner)
    };
    Ok(match op {
        "acquire" => LockOp::Acquire {
            key,
            ttl: LockTtl::from_secs(ttl).map_err(|e| failure(&e))?,
            owner: checked(owner)?,
        },
        "release" => LockOp::Release {
            key,
            owner: checked(owner)?,
        },
        "forceRelease" => LockOp::ForceRelease { key },
        "owner" => LockOp::Owner { key },
        other => {
            return Err(Failure::new(
                "invalid_argument:op",
                format!("unknown lock operation {other:?}"),
            ))
        }
    })
}

/// Checks a TTL (seconds) and an owner token, as a lock is made.
pub fn check(ttl: f64, owner: &str) -> Res<()> {
    LockTtl::from_secs(ttl).map_err(|e| failure(&e))?;
    check_owner(owner).map_err(|e| failure(&e))
}

/// The memory store's locks, timed by the host's `now` (ms).
#[derive(Debug, Default)]
pub struct JsLocks {
    locks: MemoryLocks,
}

impl JsLocks {
    /// No locks.
    pub fn new() -> JsLocks {
        JsLocks::default()
    }

    /// Runs `op` at `now`: 1 or 0 for acquire, release and forceRelease; for owner the holder's token.
    pub fn run(
        &self,
        op_name: &str,
        key: String,
        owner: Option<String>,
        ttl: f64,
        now: f64,
    ) -> Res<(f64, Option<String>)> {
        let now = number::now(now)?;
        let op = op(op_name, key, owner, ttl)?;
        Ok(match self.locks.run(&op, now) {
            ratewindow_core::call::Outcome::Bool(b) => (if b { 1.0 } else { 0.0 }, None),
            ratewindow_core::call::Outcome::Owner(owner) => (0.0, owner),
            _ => (0.0, None),
        })
    }

    /// Locks in the table.
    pub fn size(&self) -> f64 {
        self.locks.len() as f64
    }
}

/// `block(seconds, retryMs)`'s schedule, started at `now` (ms).
#[derive(Debug)]
pub struct JsWait(LockWait);

impl JsWait {
    /// A wait of `seconds` (0: one try; Infinity: no end) trying every `retry_ms`.
    pub fn new(seconds: f64, retry_ms: f64, now: f64) -> Res<JsWait> {
        let now = number::now(now)?;
        LockWait::new(seconds, retry_ms, now)
            .map(JsWait)
            .map_err(|e| failure(&e))
    }

    /// After a refused try at `now`: ms to sleep, or -1: give up.
    pub fn after_refusal(&self, now: f64) -> Res<f64> {
        let now = number::now(now)?;
        Ok(self.0.after_refusal(now).map_or(-1.0, |ms| ms as f64))
    }
}

impl Calls {
    /// Starts the lock operation `op` (see [`op`]); `now`: SQLite's clock (ms).
    pub fn lock(
        &mut self,
        out: &mut CallRecord,
        op_name: &str,
        key: String,
        owner: Option<String>,
        ttl: f64,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let op = op(op_name, key, owner, ttl)?;
        self.start_lock(out, op, now)
    }
}

#[cfg(feature = "lock-commands")]
impl Calls {
    /// A lock's commands on a Redis store with plain commands, planned once (the core's
    /// `Redis::lock_commands`; its owner and TTL checked, code `invalid_argument:<field>`): the
    /// acquire's `SET` arguments, then the release script's keys and arguments, as one string whose
    /// pieces' JS lengths are in `out` from `PIECES`; `out[VALUE]` the acquire's piece count, `out[KEYS]`
    /// and `out[ARGS]` the release's key and argument counts, `out[BY_SHA1]` whether the release runs
    /// by SHA1, `out[ALLOWED]` / `out[RETRY_AFTER_MS]` where the owner is in the acquire's pieces / the
    /// release's arguments (another owner's lock on the key and TTL: these with its owner there). `None` on any other store (or one without plain commands): every operation is a call.
    pub fn lock_commands(
        &self,
        out: &mut CallRecord,
        key: &str,
        owner: &str,
        ttl: f64,
    ) -> Res<Option<String>> {
        use crate::calls::{ALLOWED, ARGS, BY_SHA1, KEYS, LEN, PIECES, RETRY_AFTER_MS, VALUE};
        let ttl = LockTtl::from_secs(ttl).map_err(|e| failure(&e))?;
        check_owner(owner).map_err(|e| failure(&e))?;
        let Some(redis) = self.redis_planner() else {
            return Ok(None);
        };
        let Some(plan) = redis
            .lock_commands(key, owner, ttl)
            .map_err(|e| failure(&e))?
        else {
            return Ok(None);
        };
        let pieces = || {
            plan.acquire
                .iter()
                .chain(&plan.release_keys)
                .chain(&plan.release_args)
        };
        if pieces().count() > LEN - PIECES {
            return Ok(None);
        }
        out[VALUE] = plan.acquire.len() as f64;
        out[KEYS] = plan.release_keys.len() as f64;
        out[ARGS] = plan.release_args.len() as f64;
        out[BY_SHA1] = if redis.runs_by_sha1() { 1.0 } else { 0.0 };
        out[ALLOWED] = plan.acquire_owner as f64;
        out[RETRY_AFTER_MS] = plan.release_owner as f64;
        let mut s = String::with_capacity(pieces().map(String::len).sum());
        for (i, piece) in pieces().enumerate() {
            out[PIECES + i] = if piece.is_ascii() {
                piece.len()
            } else {
                piece.chars().map(char::len_utf16).sum()
            } as f64;
            s.push_str(piece);
        }
        Ok(Some(s))
    }
}

/// Every reply that answers a lock's planned command (`acquire`: its `SET … NX`; else the release
/// script), with its answer (the core's `Redis::lock_answers`): a host looks each reply up in this
/// table; a reply not in it is no answer (drive the operation as a call, fed this reply).
#[cfg(feature = "lock-commands")]
pub fn lock_answers(acquire: bool) -> ratewindow_core::call::LockAnswers {
    ratewindow_core::call::Redis::lock_answers(acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_refused_naming_the_js_field() {
        assert_eq!(check(0.0, "o").unwrap_err().code, "invalid_argument:ttl");
        assert_eq!(check(1.0, "").unwrap_err().code, "invalid_argument:owner");
        let e = JsWait::new(1.0, 0.0, 0.0).unwrap_err();
        assert_eq!(e.code, "invalid_argument:retryMs");
        assert!(e.message.contains("retryMs"), "{}", e.message);
        assert_eq!(
            JsWait::new(-1.0, 10.0, 0.0).unwrap_err().code,
            "invalid_argument:seconds"
        );
    }

    #[test]
    fn memory_locks_answer_in_numbers_and_tokens() {
        let locks = JsLocks::new();
        let run = |op: &str, owner: Option<&str>, now: f64| {
            locks
                .run(op, "k".into(), owner.map(Into::into), 1.0, now)
                .unwrap()
        };
        assert_eq!(run("acquire", Some("a"), 0.0).0, 1.0);
        assert_eq!(run("acquire", Some("b"), 10.0).0, 0.0);
        assert_eq!(run("owner", None, 10.0).1.as_deref(), Some("a"));
        assert_eq!(run("release", Some("b"), 10.0).0, 0.0);
        assert_eq!(run("forceRelease", None, 10.0).0, 1.0);
        assert_eq!(run("owner", None, 10.0).1, None);
    }
}
