//! The failure guard's native half (`NativeGuard`): a thin shell over `ratewindow_js_glue::guard`,
//! which `ts/guard.ts` drives. Every export runs inside [`crate::guard`] (`catch_unwind`), so a panic
//! becomes a JS error with code `panic`.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratewindow_js_glue::guard::{self as g, GuardRecord, JsGuard};

use crate::key::Key;
use crate::{coded, glue, guard};

/// One guard's configuration, counters and block cache, and the record its verdicts are written into.
#[napi]
pub struct NativeGuard {
    inner: JsGuard,
    record: Float64Array,
}

impl NativeGuard {
    /// The guard and its record.
    #[inline(always)]
    fn out(&mut self) -> (&mut JsGuard, &mut GuardRecord) {
        // SAFETY: the Float64Array is kept alive by the reference napi-rs holds for this struct, and JS
        // runs nothing while this call runs, so nothing else reads or writes it meanwhile.
        let slice = unsafe { self.record.as_mut() };
        let out = <&mut GuardRecord>::try_from(slice).expect("length checked in the constructor");
        (&mut self.inner, out)
    }
}

#[napi]
impl NativeGuard {
    /// A guard: `policy` `'deny'` / `'allow'`, or `null` for a fallback store; `maxKeys` the block
    /// cache's bound, or `null` for none. Refused options throw with code
    /// `invalid_argument:timeout_ms` / `:policy` / `:max_keys`.
    #[napi(constructor)]
    pub fn new(
        record: Float64Array,
        timeout_ms: f64,
        policy: Option<String>,
        max_keys: Option<f64>,
    ) -> Result<Self, String> {
        if record.len() != g::LEN {
            return Err(coded(
                "invalid_argument:record",
                format!(
                    "a guard's record holds {} numbers, not {}",
                    g::LEN,
                    record.len()
                ),
            ));
        }
        let inner = glue(|| JsGuard::new(timeout_ms, policy.as_deref(), max_keys))?;
        Ok(NativeGuard { inner, record })
    }

    /// The timeout, ms.
    #[napi(getter)]
    pub fn timeout_ms(&self) -> f64 {
        self.inner.timeout_ms()
    }

    /// `deny`, `allow` or `fallback`.
    #[napi(getter)]
    pub fn policy(&self) -> &'static str {
        self.inner.policy()
    }

    /// Whether the block cache is on.
    #[napi(getter)]
    pub fn caching(&self) -> bool {
        self.inner.caching()
    }

    /// Counts a call that goes to the store without a cache check.
    #[napi]
    pub fn begin(&mut self) {
        self.inner.begin();
    }

    /// Counts a call on one entry and checks the block cache: `0`, or the cached wait (the refusal in
    /// the record).
    #[napi]
    pub fn check(&mut self, key: Key, uses: f64, window_ms: f64, now: f64) -> Result<f64, String> {
        glue(|| {
            let (inner, out) = self.out();
            inner.check(key.get()?, uses, window_ms, now, out)
        })
    }

    /// Appends an entry to the pending batch of `checkBatch`; an invalid limit clears it.
    #[napi]
    pub fn batch_push(&mut self, key: Key, uses: f64, window_ms: f64) -> Result<(), String> {
        glue(|| match key.entry(0) {
            Ok(k) => self.inner.batch_push(k, uses, window_ms),
            Err(e) => {
                self.inner.batch_clear();
                Err(e)
            }
        })
    }

    /// Discards the pending batch.
    #[napi]
    pub fn batch_clear(&mut self) {
        self.inner.batch_clear();
    }

    /// Counts a call on the pending batch and checks the block cache: as `check`.
    #[napi]
    pub fn check_batch(&mut self, now: f64) -> Result<f64, String> {
        guard(|| {
            let (inner, out) = self.out();
            Ok(inner.check_batch(now, out))
        })
    }

    /// The store answered in time.
    #[napi]
    pub fn answered(&mut self, allowed: bool) {
        self.inner.answered(allowed);
    }

    /// A call not counted yet answered in time by the store: the call and its answer, counted in one
    /// crossing.
    #[napi]
    pub fn settled(&mut self, allowed: bool) {
        self.inner.settled(allowed);
    }

    /// [`Self::settled`] for `allowed` calls allowed and `refused` refused at once: the host counts
    /// the calls answered in time and hands them over before it reads the counters (one crossing for
    /// many calls; the counters are sums, so their order does not matter).
    #[napi]
    pub fn settled_many(&mut self, allowed: u32, refused: u32) {
        for _ in 0..allowed {
            self.inner.settled(true);
        }
        for _ in 0..refused {
            self.inner.settled(false);
        }
    }

    /// The store refused in time: counted, and the blocked entry cached (with the cache on).
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn refused(
        &mut self,
        key: Key,
        uses: f64,
        window_ms: f64,
        started: f64,
        retry_after_ms: f64,
        retry_timestamp: f64,
        reset_after_ms: f64,
    ) -> Result<(), String> {
        guard(|| {
            match key.get() {
                Ok(k) => self.inner.refused(
                    k,
                    uses,
                    window_ms,
                    started,
                    retry_after_ms,
                    retry_timestamp,
                    reset_after_ms,
                ),
                // A key the store accepted but that is not valid Unicode: counted, not cached.
                Err(_) => self.inner.answered(false),
            }
            Ok(())
        })
    }

    /// A call on an entry was given back through the guard: forgets it in the block cache.
    #[napi]
    pub fn forget(&mut self, key: Key, uses: f64, window_ms: f64) {
        if let Ok(k) = key.get() {
            self.inner.forget(k, uses, window_ms);
        }
    }

    /// The store failed (`timeout`, `store-error`, `not-ready`): `1` allowed, `0` refused (the refusal
    /// in the record), `2` ask the fallback store. `begin`: count the call too (it was not counted).
    #[napi]
    pub fn failed(&mut self, failure: String, begin: bool) -> Result<f64, String> {
        glue(|| {
            let (inner, out) = self.out();
            inner.failed(&failure, begin, out)
        })
    }

    /// The fallback store answered.
    #[napi]
    pub fn fallback_answered(&mut self, allowed: bool) {
        self.inner.fallback_answered(allowed);
    }

    /// The fallback store failed too: the `deny` refusal, in the record.
    #[napi]
    pub fn fallback_failed(&mut self) -> Result<(), String> {
        guard(|| {
            let (inner, out) = self.out();
            inner.fallback_failed(out);
            Ok(())
        })
    }

    /// The late-answer rule: `1` release, `2` keep, `0` ignore.
    #[napi]
    pub fn late(&self, answered_allowed: bool, late_allowed: bool) -> u32 {
        self.inner.late(answered_allowed, late_allowed)
    }

    /// A late answer's release finished (`ok`) or failed.
    #[napi]
    pub fn late_released(&mut self, ok: bool) {
        self.inner.late_released(ok);
    }

    /// The counters, in the order of `guardStatsLayout()`.
    #[napi]
    pub fn stats(&self) -> Vec<f64> {
        self.inner.stats().to_vec()
    }

    /// Entries the block cache holds.
    #[napi]
    pub fn cached(&self) -> f64 {
        self.inner.cached()
    }
}

/// Whether an error a store threw (its `code`, else its type's name) is a store failure (`true`) or
/// the caller's own mistake, to rethrow (`false`).
#[napi]
pub fn guard_is_failure(code: String) -> bool {
    JsGuard::is_failure(&code)
}

/// The guard record's slot names, in order (`ts/guard.ts` checks them on load).
#[napi]
pub fn guard_record_layout() -> Vec<&'static str> {
    g::NAMES.to_vec()
}

/// The counters' names, in the order `NativeGuard.stats()` answers them.
#[napi]
pub fn guard_stats_layout() -> Vec<&'static str> {
    g::STATS.to_vec()
}
