//! The failure guard (`ratewindow_core::guard`) as both JS builds expose it: one [`JsGuard`] per
//! guarded store, reporting each step of a call in one crossing of numbers (and, for the block cache,
//! the key), with the verdict the guard makes written into a [`GuardRecord`]. The TypeScript layer
//! (`bindings-node/ts/guard.ts`) races the timers and runs the stores; every decision is the core's.
//!
//! Answers:
//! - [`check`](JsGuard::check) / [`check_batch`](JsGuard::check_batch): `0` when the call goes to the
//!   store, else the block cache's wait (`retryAfterMs` >= 1) with the refusal in the record;
//! - [`failed`](JsGuard::failed): `1` allowed, `0` refused (the refusal in the record), `2` ask the
//!   fallback store;
//! - [`late`](JsGuard::late): `1` release, `2` keep, `0` ignore.
//!
//! Host numbers from a user's store (a `retryAfterMs` of NaN, a negative `retryTimestamp`) are never
//! trusted: they are converted with saturating casts, and a wait that is not a positive number is not
//! cached.

use ratewindow_core::guard::{
    BlockCache, Failure as GuardFailure, Guard, GuardConfig, GuardError, GuardField, LateAction,
    OnFailure, Policy,
};
use ratewindow_core::{BatchVerdict, Limit, Quota};

use crate::number;
use crate::{Failure, Res};

/// `retryAfterMs` of the guard's verdict.
pub const RETRY_AFTER_MS: usize = 0;
/// `retryTimestamp` (NaN: none).
pub const RETRY_TIMESTAMP: usize = 1;
/// `blocked` (NaN: none).
pub const BLOCKED: usize = 2;
/// `limit` (0: no quota, the store's state is unknown).
pub const LIMIT: usize = 3;
/// `remaining`.
pub const REMAINING: usize = 4;
/// `refillAfterMs`.
pub const REFILL_AFTER_MS: usize = 5;
/// `resetAfterMs`.
pub const RESET_AFTER_MS: usize = 6;

/// Slots in a guard record.
pub const LEN: usize = 7;

/// The slots' names, in order, as `ts/guard.ts` spells them.
pub const NAMES: [&str; LEN] = [
    "retryAfterMs",
    "retryTimestamp",
    "blocked",
    "limit",
    "remaining",
    "refillAfterMs",
    "resetAfterMs",
];

/// One guard record.
pub type GuardRecord = [f64; LEN];

/// The counters' names as JavaScript spells them, in the order [`JsGuard::stats`] answers them (that of
/// [`GuardStats::NAMES`](ratewindow_core::guard::GuardStats::NAMES)).
pub const STATS: [&str; 10] = [
    "calls",
    "allowed",
    "refused",
    "timeouts",
    "storeErrors",
    "notReady",
    "lateReleases",
    "lateReleasesFailed",
    "fallbackCalls",
    "cacheHits",
];

/// Writes a verdict the guard made.
fn write(out: &mut GuardRecord, v: &BatchVerdict) {
    out[RETRY_AFTER_MS] = v.retry_after_ms as f64;
    out[RETRY_TIMESTAMP] = v.retry_timestamp.map_or(f64::NAN, |t| t as f64);
    out[BLOCKED] = v.blocked.map_or(f64::NAN, |b| b as f64);
    out[LIMIT] = f64::from(v.quota.limit);
    out[REMAINING] = f64::from(v.quota.remaining);
    out[REFILL_AFTER_MS] = v.quota.refill_after_ms as f64;
    out[RESET_AFTER_MS] = v.quota.reset_after_ms as f64;
}

/// A guard option's refusal, the field named as JS spells it: `timeoutMs`, `onFailure`,
/// `blockCache.maxKeys`.
#[cold]
fn option_failure(e: GuardError) -> Failure {
    let spelled = match e.field {
        GuardField::TimeoutMs => "timeoutMs",
        GuardField::Policy => "onFailure",
        GuardField::MaxKeys => "blockCache.maxKeys",
    };
    Failure::new(e.code(), e.message(spelled))
}

/// A host time (monotonic ms, maybe fractional) as whole ms, rounded down; NaN and negatives are 0.
#[inline(always)]
fn ms(v: f64) -> u64 {
    v as u64
}

/// One guard: configuration, counters, block cache, and the pending batch of a cache check.
pub struct JsGuard {
    guard: Guard,
    batch: Vec<(String, Limit)>,
}

impl JsGuard {
    /// A guard waiting `timeout_ms` for its store; `policy` `deny` or `allow`, `None` for a fallback
    /// store (the TypeScript layer holds it); `max_keys` the block cache's bound, `None` for no cache.
    pub fn new(timeout_ms: f64, policy: Option<&str>, max_keys: Option<f64>) -> Res<JsGuard> {
        let policy = match policy {
            None => Policy::Fallback,
            Some(p) => Policy::parse(p).map_err(option_failure)?,
        };
        let config = GuardConfig::from_f64(timeout_ms, policy).map_err(option_failure)?;
        let cache = max_keys
            .map(BlockCache::from_f64)
            .transpose()
            .map_err(option_failure)?;
        Ok(JsGuard {
            guard: Guard::new(config, cache),
            batch: Vec::new(),
        })
    }

    /// The timeout, ms.
    pub fn timeout_ms(&self) -> f64 {
        self.guard.config().timeout_ms() as f64
    }

    /// `deny`, `allow` or `fallback`.
    pub fn policy(&self) -> &'static str {
        self.guard.config().policy().name()
    }

    /// Whether the block cache is on.
    pub fn caching(&self) -> bool {
        self.guard.cache().is_some()
    }

    /// Counts a call that goes to the store without a cache check.
    pub fn begin(&mut self) {
        self.guard.begin();
    }

    /// Counts a call on one entry and checks the block cache at `now`: `0`, or the cached refusal's
    /// wait with the refusal in the record.
    pub fn check(
        &mut self,
        key: &str,
        uses: f64,
        window_ms: f64,
        now: f64,
        out: &mut GuardRecord,
    ) -> Res<f64> {
        let limit = number::limit(uses, window_ms)?;
        Ok(match self.guard.begin_checked([(key, limit)], ms(now)) {
            Some(v) => {
                write(out, &v);
                v.retry_after_ms as f64
            }
            None => 0.0,
        })
    }

    /// Appends an entry to the pending batch of [`check_batch`](Self::check_batch); an invalid limit
    /// clears it.
    pub fn batch_push(&mut self, key: &str, uses: f64, window_ms: f64) -> Res<()> {
        match number::limit(uses, window_ms) {
            Ok(limit) => {
                self.batch.push((key.to_owned(), limit));
                Ok(())
            }
            Err(e) => {
                self.batch.clear();
                Err(e)
            }
        }
    }

    /// Discards the pending batch.
    pub fn batch_clear(&mut self) {
        self.batch.clear();
    }

    /// Counts a call on the pending batch (then cleared) and checks the block cache: as
    /// [`check`](Self::check).
    pub fn check_batch(&mut self, now: f64, out: &mut GuardRecord) -> f64 {
        let batch = std::mem::take(&mut self.batch);
        let hit = self
            .guard
            .begin_checked(batch.iter().map(|(k, l)| (k.as_str(), *l)), ms(now));
        self.batch = batch;
        self.batch.clear();
        match hit {
            Some(v) => {
                write(out, &v);
                v.retry_after_ms as f64
            }
            None => 0.0,
        }
    }

    /// The store answered in time, allowed or refused (a refusal with nothing to cache).
    pub fn answered(&mut self, allowed: bool) {
        self.guard.answered(allowed);
    }

    /// A call not counted yet (no cache check: [`begin`](Self::begin) was not called) answered in
    /// time by the store: counts the call and its answer in one crossing.
    pub fn settled(&mut self, allowed: bool) {
        self.guard.begin();
        self.guard.answered(allowed);
    }

    /// The store refused in time: counts it and, with the cache on, remembers the blocked entry
    /// (`key` under `uses`/`window_ms`) from the call's send time `started`, its `retry_after_ms`,
    /// `retry_timestamp` (NaN or negative: none) and `reset_after_ms` (NaN: none). An invalid limit
    /// is not cached (the store accepted it, so it is a store of the user's: the refusal still counts).
    #[allow(clippy::too_many_arguments)]
    pub fn refused(
        &mut self,
        key: &str,
        uses: f64,
        window_ms: f64,
        started: f64,
        retry_after_ms: f64,
        retry_timestamp: f64,
        reset_after_ms: f64,
    ) {
        let Ok(limit) = number::limit(uses, window_ms) else {
            self.guard.answered(false);
            return;
        };
        let retry_timestamp = (retry_timestamp.is_finite() && retry_timestamp >= 0.0)
            .then_some(retry_timestamp as u64);
        let quota = if reset_after_ms.is_finite() && reset_after_ms >= 0.0 {
            Quota {
                limit: limit.uses(),
                remaining: 0,
                refill_after_ms: ms(retry_after_ms),
                reset_after_ms: ms(reset_after_ms),
            }
        } else {
            Quota::NONE
        };
        let verdict = BatchVerdict {
            allowed: false,
            retry_after_ms: ms(retry_after_ms),
            retry_timestamp,
            blocked: Some(0),
            quota,
        };
        self.guard
            .answered_verdict(&[(key, limit)], &verdict, ms(started));
    }

    /// A call on an entry was given back through the guard: forgets it in the block cache.
    pub fn forget(&mut self, key: &str, uses: f64, window_ms: f64) {
        if let Ok(limit) = number::limit(uses, window_ms) {
            self.guard.released([(key, limit)]);
        }
    }

    /// Whether an error a store threw (its `code`, else its type's name) is a store failure (`true`)
    /// or the caller's own mistake, to rethrow (`false`).
    pub fn is_failure(code: &str) -> bool {
        GuardFailure::of_error_code(code).is_some()
    }

    /// The store failed (`timeout`, `store-error`, `not-ready`): `1` allowed, `0` refused (the
    /// refusal in the record), `2` ask the fallback store. `begin`: the call was not counted yet
    /// (no cache check), count it too.
    pub fn failed(&mut self, failure: &str, begin: bool, out: &mut GuardRecord) -> Res<f64> {
        let failure = GuardFailure::parse(failure).ok_or_else(|| {
            Failure::new(
                "invalid_argument:failure",
                format!("invalid failure: {failure} (expected timeout, store-error or not-ready)"),
            )
        })?;
        if begin {
            self.guard.begin();
        }
        Ok(match self.guard.failed(failure) {
            OnFailure::Answer(v) if v.allowed => 1.0,
            OnFailure::Answer(v) => {
                write(out, &v);
                0.0
            }
            OnFailure::Fallback => 2.0,
        })
    }

    /// The fallback store answered.
    pub fn fallback_answered(&mut self, allowed: bool) {
        self.guard.fallback_answered(allowed);
    }

    /// The fallback store failed too: the `deny` refusal, in the record.
    pub fn fallback_failed(&mut self, out: &mut GuardRecord) {
        let v = self.guard.fallback_failed();
        write(out, &v);
    }

    /// The late-answer rule: `1` release, `2` keep, `0` ignore.
    pub fn late(&self, answered_allowed: bool, late_allowed: bool) -> u32 {
        match self.guard.late(answered_allowed, late_allowed) {
            LateAction::Ignore => 0,
            LateAction::Release => 1,
            LateAction::Keep => 2,
        }
    }

    /// A late answer's release finished (`ok`) or failed.
    pub fn late_released(&mut self, ok: bool) {
        self.guard.late_released(ok);
    }

    /// The counters, in the order of [`STATS`].
    pub fn stats(&self) -> [f64; STATS.len()] {
        self.guard.stats().counts().map(|n| n as f64)
    }

    /// Entries the block cache holds (0 without one).
    pub fn cached(&self) -> f64 {
        self.guard.cache().map_or(0, BlockCache::len) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_named_as_js_spells_them() {
        let e = JsGuard::new(f64::NAN, Some("deny"), None).err().unwrap();
        assert_eq!(e.code, "invalid_argument:timeout_ms");
        assert!(
            e.message.starts_with("invalid timeoutMs: NaN"),
            "{}",
            e.message
        );
        let e = JsGuard::new(10.0, Some("maybe"), None).err().unwrap();
        assert_eq!(e.code, "invalid_argument:policy");
        assert!(
            e.message.starts_with("invalid onFailure: 'maybe'"),
            "{}",
            e.message
        );
        let e = JsGuard::new(10.0, None, Some(0.0)).err().unwrap();
        assert_eq!(e.code, "invalid_argument:max_keys");
        assert!(
            e.message.starts_with("invalid blockCache.maxKeys: 0"),
            "{}",
            e.message
        );
        let g = JsGuard::new(10.0, None, Some(5.0)).ok().unwrap();
        assert_eq!(
            (g.policy(), g.timeout_ms(), g.caching()),
            ("fallback", 10.0, true)
        );
    }

    #[test]
    fn a_refusal_is_cached_and_given_back() {
        let mut g = JsGuard::new(100.0, Some("deny"), Some(10.0)).ok().unwrap();
        let mut out = [0.0; LEN];
        assert_eq!(g.check("k", 5.0, 10_000.0, 1_000.5, &mut out).unwrap(), 0.0);
        g.refused("k", 5.0, 10_000.0, 1_000.5, 3_000.0, 1.7e12, 9_000.0);
        assert_eq!(
            g.check("k", 5.0, 10_000.0, 2_000.0, &mut out).unwrap(),
            2_000.0
        );
        assert_eq!(out[RETRY_TIMESTAMP], 1.7e12);
        assert_eq!(out[BLOCKED], 0.0);
        assert_eq!(
            (out[LIMIT], out[REMAINING], out[RESET_AFTER_MS]),
            (5.0, 0.0, 8_000.0)
        );
        g.batch_push("other", 1.0, 10.0).unwrap();
        g.batch_push("k", 5.0, 10_000.0).unwrap();
        assert_eq!(g.check_batch(2_500.0, &mut out), 1_500.0);
        assert_eq!(out[BLOCKED], 1.0);
        g.forget("k", 5.0, 10_000.0);
        assert_eq!(g.check("k", 5.0, 10_000.0, 2_000.0, &mut out).unwrap(), 0.0);
        // A user's store answering nonsense caches nothing.
        g.refused("n", 5.0, 10_000.0, 0.0, f64::NAN, -1.0, f64::NAN);
        g.refused("n", 5.0, f64::NAN, 0.0, 100.0, 1.0, 1.0);
        assert_eq!(g.cached(), 0.0);
        let s = g.stats();
        assert_eq!((s[0], s[2], s[9]), (4.0, 5.0, 2.0));
    }

    #[test]
    fn failures_and_late_answers() {
        let mut out = [0.0; LEN];
        let mut deny = JsGuard::new(250.0, Some("deny"), None).ok().unwrap();
        assert_eq!(deny.failed("timeout", true, &mut out).unwrap(), 0.0);
        assert_eq!(out[RETRY_AFTER_MS], 250.0);
        assert!(out[RETRY_TIMESTAMP].is_nan() && out[BLOCKED].is_nan());
        assert_eq!(deny.late(false, true), 1);
        assert_eq!(deny.late(false, false), 0);
        assert!(deny.failed("later", true, &mut out).is_err());
        let mut allow = JsGuard::new(250.0, Some("allow"), None).ok().unwrap();
        assert_eq!(allow.failed("store-error", false, &mut out).unwrap(), 1.0);
        assert_eq!(allow.late(true, true), 2);
        let mut fb = JsGuard::new(250.0, None, None).ok().unwrap();
        assert_eq!(fb.failed("not-ready", true, &mut out).unwrap(), 2.0);
        fb.fallback_failed(&mut out);
        assert_eq!(out[RETRY_AFTER_MS], 250.0);
        assert!(JsGuard::is_failure("ERR_RATEWINDOW_STORE"));
        // Counted with the failure when `begin` (the unknown failure counted nothing).
        assert_eq!(deny.stats()[0], 1.0);
        assert_eq!(allow.stats()[0], 0.0);
        let mut s = JsGuard::new(250.0, Some("deny"), None).ok().unwrap();
        s.settled(true);
        s.settled(false);
        assert_eq!(s.stats()[..3], [2.0, 1.0, 1.0]);
        assert!(!JsGuard::is_failure("ERR_RATEWINDOW_INVALID_LIMIT"));
    }
}
