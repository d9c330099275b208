//! One memory store as both JS builds expose it: each method is one `BackendStore` method of
//! `bindings-node/ts/backend.ts`, taking the numbers as JS gave them and answering its primary number,
//! with the rest of the answer written into the store's [`Record`].
//!
//! Answers (the TypeScript layer builds the objects users see from them):
//! - single verdicts (`consume`, `peek`): `0` when allowed, else the `retry_timestamp` (>= 1); the
//!   quota in the record;
//! - batches: `consume_many` answers a release handle (> 0) when allowed, `peek_many` `0`; both answer
//!   minus the `retry_timestamp` when refused, with `blocked` in the record; the quota in the record;
//! - `hit`: the count; `hit_window`: the count, with `resetAfterMs` in the record; `attempt`: the
//!   count, with `allowed` and `resetAfterMs` in the record.
//!
//! A call that fails changes nothing (its arguments are all checked before the store is touched).

use std::collections::HashMap;

use ratewindow_core::{Entry, MemoryStore, Release, Verdict};

use crate::number::{self, Field};
use crate::record::{self, Record};
use crate::Res;

/// One core [`MemoryStore`], its pending batch and the releases of its allowed batches.
pub struct JsStore {
    pub(crate) store: MemoryStore,
    batch: Vec<Entry>,
    /// The pending batch mixing algorithms (`rates.rs`).
    #[cfg(feature = "rates")]
    pub(crate) mixed: Vec<ratewindow_core::MixedEntry>,
    releases: HashMap<u64, Release>,
    next_handle: u64,
}

impl JsStore {
    /// A store over `store` (the addon's default shards; one shard in wasm, which runs one thread).
    pub fn new(store: MemoryStore) -> JsStore {
        JsStore {
            store,
            batch: Vec::new(),
            #[cfg(feature = "rates")]
            mixed: Vec::new(),
            releases: HashMap::new(),
            next_handle: 1,
        }
    }

    /// `MemoryStore::consume`: `0` when allowed (and recorded), else the retry timestamp.
    #[inline(always)]
    pub fn consume(
        &self,
        key: &str,
        uses: f64,
        window_ms: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let limit = number::limit(uses, window_ms)?;
        Ok(single(
            out,
            self.store.consume(key, limit, number::now(now)?),
        ))
    }

    /// `MemoryStore::peek`: like [`consume`](Self::consume), recording and creating nothing.
    #[inline(always)]
    pub fn peek(
        &self,
        key: &str,
        uses: f64,
        window_ms: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let limit = number::limit(uses, window_ms)?;
        Ok(single(out, self.store.peek(key, limit, number::now(now)?)))
    }

    /// How many entries the pending batch holds (the index the next pushed entry gets).
    pub fn batch_len(&self) -> usize {
        self.batch.len()
    }

    /// Appends an entry to the pending batch; an invalid limit clears it.
    pub fn batch_push(&mut self, key: &str, uses: f64, window_ms: f64) -> Res<()> {
        match number::limit(uses, window_ms) {
            Ok(limit) => {
                self.batch.push(Entry::new(key, limit));
                Ok(())
            }
            Err(e) => {
                self.batch.clear();
                Err(e)
            }
        }
    }

    /// Runs the pending batch (consumed or peeked) and clears it, even when the time is refused.
    fn take_batch<T>(
        &mut self,
        now: f64,
        run: impl FnOnce(&MemoryStore, &[Entry], u64) -> T,
    ) -> Res<T> {
        // Taken out first, so even a panic cannot leave entries behind for the next batch.
        let mut batch = std::mem::take(&mut self.batch);
        let answer = number::now(now).map(|now| run(&self.store, &batch, now));
        batch.clear();
        self.batch = batch;
        answer
    }

    /// `MemoryStore::consume_many` of the pending batch: a release handle (> 0) when allowed, else minus
    /// the retry timestamp.
    pub fn batch_consume(&mut self, now: f64, out: &mut Record) -> Res<f64> {
        let consumed = self.take_batch(now, |store, batch, now| store.consume_many(batch, now))?;
        record::write_quota(out, consumed.verdict.quota);
        Ok(match consumed.release {
            Some(release) => self.keep_release(release),
            None => refused(
                out,
                consumed.verdict.blocked,
                consumed.verdict.retry_timestamp,
            ),
        })
    }

    /// `MemoryStore::peek_many` of the pending batch: `0` when allowed, else minus the retry timestamp.
    pub fn batch_peek(&mut self, now: f64, out: &mut Record) -> Res<f64> {
        let verdict = self.take_batch(now, |store, batch, now| store.peek_many(batch, now))?;
        record::write_quota(out, verdict.quota);
        Ok(if verdict.allowed {
            0.0
        } else {
            refused(out, verdict.blocked, verdict.retry_timestamp)
        })
    }

    /// Keeps an allowed batch's release under a new handle (> 0), which it answers.
    pub(crate) fn keep_release(&mut self, release: Release) -> f64 {
        let handle = self.next_handle;
        self.next_handle += 1;
        self.releases.insert(handle, release);
        handle as f64
    }

    /// Discards the pending batch.
    pub fn batch_clear(&mut self) {
        self.batch.clear();
    }

    /// Gives back the calls of an allowed batch, once; an unknown or dropped handle does nothing.
    pub fn release(&mut self, handle: f64, now: f64) -> Res<()> {
        let now = number::now(now)?;
        if let Some(release) = self.releases.remove(&number::handle(handle)) {
            self.store.release(release, now);
        }
        Ok(())
    }

    /// Forgets a release handle without releasing. Idempotent.
    pub fn drop_release(&mut self, handle: f64) {
        self.releases.remove(&number::handle(handle));
    }

    /// How many release handles the store holds.
    pub fn release_handles(&self) -> u32 {
        self.releases.len() as u32
    }

    /// `MemoryStore::hit` (the fixed window's fast path): the count after adding `amount`.
    #[inline(always)]
    pub fn hit(&self, key: &str, decay_ms: f64, amount: f64, now: f64) -> Res<f64> {
        let decay = number::decay(decay_ms)?;
        let amount = number::int(Field::Amount, amount)?;
        Ok(self.store.hit(key, decay, amount, number::now(now)?) as f64)
    }

    /// `MemoryStore::hit_window`: the count, with `resetAfterMs` in the record.
    pub fn hit_window(
        &self,
        key: &str,
        decay_ms: f64,
        amount: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let decay = number::decay(decay_ms)?;
        let amount = number::int(Field::Amount, amount)?;
        let (count, reset_after_ms) = self.store.hit_window(key, decay, amount, number::now(now)?);
        out[record::RESET_AFTER_MS] = reset_after_ms as f64;
        Ok(count as f64)
    }

    /// `MemoryStore::attempt` (one hit counted only below `max`, atomically): the count, with `allowed`
    /// and `resetAfterMs` in the record.
    pub fn attempt(
        &self,
        key: &str,
        max: f64,
        decay_ms: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let max = number::int(Field::Max, max)?;
        let decay = number::decay(decay_ms)?;
        let (allowed, count, reset_after_ms) =
            self.store.attempt(key, max, decay, number::now(now)?);
        out[record::ALLOWED] = f64::from(u8::from(allowed));
        out[record::RESET_AFTER_MS] = reset_after_ms as f64;
        Ok(count as f64)
    }

    /// [`Self::attempt`] costing `cost` hits (`MemoryStore::attempt_cost`): counted only when the
    /// window's count plus `cost` is at most `max`; a cost that is not a whole number from 1 is
    /// `invalid_argument:cost`.
    #[cfg(feature = "weights")]
    pub fn attempt_cost(
        &self,
        key: &str,
        max: f64,
        decay_ms: f64,
        cost: f64,
        now: f64,
        out: &mut Record,
    ) -> Res<f64> {
        let max = number::int(Field::Max, max)?;
        let decay = number::decay(decay_ms)?;
        let cost = attempt_cost(cost)?;
        let (allowed, count, reset_after_ms) = self
            .store
            .attempt_cost(key, max, cost, decay, number::now(now)?)
            .map_err(|_| bad_attempt_cost(f64::from(cost)))?;
        out[record::ALLOWED] = f64::from(u8::from(allowed));
        out[record::RESET_AFTER_MS] = reset_after_ms as f64;
        Ok(count as f64)
    }

    /// `MemoryStore::attempts`.
    pub fn attempts(&self, key: &str, now: f64) -> Res<f64> {
        Ok(self.store.attempts(key, number::now(now)?) as f64)
    }

    /// `MemoryStore::too_many_attempts`.
    pub fn too_many_attempts(&self, key: &str, max: f64, now: f64) -> Res<bool> {
        let max = number::int(Field::Max, max)?;
        Ok(self.store.too_many_attempts(key, max, number::now(now)?))
    }

    /// `MemoryStore::remaining`: `max` minus the hits, floored at 0.
    pub fn remaining(&self, key: &str, max: f64, now: f64) -> Res<f64> {
        let max = number::int(Field::Max, max)?;
        Ok(self.store.remaining(key, max, number::now(now)?) as f64)
    }

    /// `MemoryStore::available_in`: whole seconds until the window ends, rounded up.
    pub fn available_in(&self, key: &str, now: f64) -> Res<f64> {
        Ok(self.store.available_in(key, number::now(now)?) as f64)
    }

    /// `MemoryStore::available_in_ms`.
    pub fn available_in_ms(&self, key: &str, now: f64) -> Res<f64> {
        Ok(self.store.available_in_ms(key, number::now(now)?) as f64)
    }

    /// `MemoryStore::reset_attempts`: zeroes the count, keeping the window.
    pub fn reset_attempts(&self, key: &str, now: f64) -> Res<()> {
        self.store.reset_attempts(key, number::now(now)?);
        Ok(())
    }

    /// `MemoryStore::clear`: removes the count and the window.
    pub fn clear(&self, key: &str) {
        self.store.clear(key);
    }

    /// `MemoryStore::purge`: removes every expired key.
    pub fn purge(&self, now: f64) -> Res<()> {
        self.store.purge(number::now(now)?);
        Ok(())
    }

    /// `MemoryStore::len`.
    pub fn size(&self) -> f64 {
        self.store.len() as f64
    }
}

/// A single verdict's answer: the quota into the record, `0` or the retry timestamp returned.
#[inline(always)]
pub(crate) fn single(out: &mut Record, verdict: Verdict) -> f64 {
    record::write_quota(out, verdict.quota);
    verdict.retry_timestamp.map_or(0.0, |t| t as f64)
}

/// A refused batch's answer: `blocked` into the record, minus the retry timestamp returned.
#[inline]
pub(crate) fn refused(
    out: &mut Record,
    blocked: Option<usize>,
    retry_timestamp: Option<u64>,
) -> f64 {
    out[record::BLOCKED] = blocked.unwrap_or(0) as f64;
    -(retry_timestamp.unwrap_or(1) as f64)
}

/// Validates a limit with the core (what `checkLimit` exports).
pub fn check_limit(uses: f64, window_ms: f64) -> Res<()> {
    number::limit(uses, window_ms).map(|_| ())
}

/// A fixed-window attempt's cost: a whole number from 1 (to `u32::MAX`), else `invalid_argument:cost`.
#[cfg(feature = "weights")]
pub fn attempt_cost(cost: f64) -> Res<u32> {
    if cost.fract() == 0.0 && cost >= 1.0 && cost <= f64::from(u32::MAX) {
        Ok(cost as u32)
    } else {
        Err(bad_attempt_cost(cost))
    }
}

#[cfg(feature = "weights")]
#[cold]
fn bad_attempt_cost(cost: f64) -> crate::Failure {
    crate::Failure::new(
        "invalid_argument:cost",
        format!(
            "invalid cost: {} (expected a whole number from 1)",
            number::text(cost)
        ),
    )
}

#[cfg(test)]
mod tests {
    //! The answers and the record, and hostile numbers: nothing panics, a failing call changes nothing.
    use super::*;

    const HOSTILE: [f64; 12] = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        -1.0,
        0.5,
        1.5,
        9_007_199_254_740_992.0,
        1.8446744073709552e19,
        1e308,
        -1e308,
        4_320_000_000_000_001.0,
    ];

    #[test]
    fn verdicts_with_their_quota() {
        let store = JsStore::new(MemoryStore::new());
        let mut out = [0.0; record::LEN];
        assert_eq!(store.consume("k", 2.0, 1000.0, 0.0, &mut out), Ok(0.0));
        assert_eq!(out[..4], [2.0, 1.0, 1000.0, 1000.0]);
        assert_eq!(store.consume("k", 2.0, 1000.0, 10.0, &mut out), Ok(0.0));
        assert_eq!(store.consume("k", 2.0, 1000.0, 20.0, &mut out), Ok(1000.0));
        assert_eq!(out[..4], [2.0, 0.0, 980.0, 990.0]);
        assert_eq!(store.peek("k", 3.0, 1000.0, 20.0, &mut out), Ok(0.0));
        assert_eq!(out[record::REMAINING], 1.0);
    }

    #[test]
    fn batches_release_and_name_the_blocked_entry() {
        let mut store = JsStore::new(MemoryStore::new());
        let mut out = [0.0; record::LEN];
        store.batch_push("a", 1.0, 1000.0).unwrap();
        store.batch_push("b", 5.0, 1000.0).unwrap();
        let handle = store.batch_consume(0.0, &mut out).unwrap();
        assert!(handle > 0.0);
        assert_eq!(out[record::LIMIT], 1.0);
        store.batch_push("b", 5.0, 1000.0).unwrap();
        store.batch_push("a", 1.0, 1000.0).unwrap();
        assert_eq!(store.batch_peek(10.0, &mut out), Ok(-1000.0));
        assert_eq!(out[record::BLOCKED], 1.0);
        store.release(handle, 20.0).unwrap();
        assert_eq!(store.release_handles(), 0);
        store.batch_push("a", 1.0, 1000.0).unwrap();
        assert!(store.batch_consume(30.0, &mut out).unwrap() > 0.0);
    }

    #[test]
    fn fixed_windows_and_the_atomic_attempt() {
        let store = JsStore::new(MemoryStore::with_shards(1));
        let mut out = [0.0; record::LEN];
        assert_eq!(store.attempt("k", 2.0, 1000.0, 0.0, &mut out), Ok(1.0));
        assert_eq!(
            (out[record::ALLOWED], out[record::RESET_AFTER_MS]),
            (1.0, 1000.0)
        );
        assert_eq!(store.attempt("k", 2.0, 1000.0, 100.0, &mut out), Ok(2.0));
        assert_eq!(store.attempt("k", 2.0, 1000.0, 200.0, &mut out), Ok(2.0));
        assert_eq!(
            (out[record::ALLOWED], out[record::RESET_AFTER_MS]),
            (0.0, 800.0)
        );
        assert_eq!(store.hit_window("k", 1000.0, 3.0, 500.0, &mut out), Ok(5.0));
        assert_eq!(out[record::RESET_AFTER_MS], 500.0);
        assert_eq!(store.hit("k", 1000.0, -1.0, 500.0), Ok(4.0));
        assert_eq!(store.remaining("k", 10.0, 500.0), Ok(6.0));
        assert_eq!(store.too_many_attempts("k", 4.0, 500.0), Ok(true));
        assert_eq!(store.available_in("k", 500.0), Ok(1.0));
        assert_eq!(store.available_in_ms("k", 999.0), Ok(1.0));
        assert_eq!(store.attempts("k", 1000.0), Ok(0.0));
    }

    #[test]
    fn hostile_numbers_are_refused_and_change_nothing() {
        let mut store = JsStore::new(MemoryStore::with_shards(1));
        let mut out = [0.0; record::LEN];
        for v in HOSTILE {
            let _ = store.consume("k", v, 1000.0, 0.0, &mut out);
            let _ = store.consume("k", 1.0, v, 0.0, &mut out);
            let _ = store.consume("k", 1.0, 1000.0, v, &mut out);
            let _ = store.peek("k", v, v, v, &mut out);
            let _ = store.batch_push("k", v, 1000.0);
            let _ = store.batch_consume(v, &mut out);
            let _ = store.batch_peek(v, &mut out);
            let _ = store.release(v, v);
            store.drop_release(v);
            let _ = store.hit("f", v, 1.0, 0.0);
            let _ = store.hit("f", 1000.0, v, 0.0);
            let _ = store.hit_window("f", v, v, v, &mut out);
            let _ = store.attempt("f", v, v, v, &mut out);
            let _ = store.too_many_attempts("f", v, v);
            let _ = store.remaining("f", v, v);
            let _ = store.attempts("f", v);
            let _ = store.available_in("f", v);
            let _ = store.purge(v);
        }
        // Whatever was accepted above, the fixed window holds no count from a refused amount.
        let e = store.hit("g", 1000.0, 0.5, 0.0).unwrap_err();
        assert_eq!(e.code, "invalid_argument:amount");
        assert_eq!(store.attempts("g", 0.0), Ok(0.0));
        assert_eq!(store.size(), store.store.len() as f64);
        let e = store.batch_push("k", 1.0, 0.0).unwrap_err();
        assert_eq!(e.code, "invalid_limit:window_ms");
        assert_eq!(
            store.batch_peek(0.0, &mut out),
            Ok(0.0),
            "an invalid limit clears the batch"
        );
    }
}
