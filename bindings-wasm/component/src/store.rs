//! The `memory` interface: the core's [`MemoryStore`] with `now` passed by the host.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use ratewindow_core::{MemoryStore, Release};

use crate::bindings::exports::ratewindow::engine::{
    errors::Error,
    memory::{Consumed, GuestMemoryStore, GuestReleaseToken, ReleaseToken, ReleaseTokenBorrow},
    types::{
        AttemptResult, BatchVerdict, Entry, HitWindow, Limit, MixedEntry, RateAlgorithm, RateLimit,
        Verdict,
    },
};
use crate::convert::{self, Rate};

static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

/// The store behind a `memory-store` resource (and, in the hosted world, a `clocked-memory` one).
pub struct Store {
    /// Tells this store's tokens from another's, so a token released in the wrong store stays usable.
    id: u64,
    inner: MemoryStore,
}

/// The release of one allowed `consume-many`: taken on first use, so a second release does nothing.
pub struct Token {
    store: u64,
    release: RefCell<Option<Release>>,
}

impl GuestReleaseToken for Token {}

#[cfg(feature = "hosted")]
impl crate::bindings::exports::ratewindow::engine::clocked_memory::GuestReleaseToken for Token {}

impl Store {
    /// An empty store. One shard: a component instance runs one call at a time.
    pub fn create() -> Store {
        Store {
            id: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
            inner: MemoryStore::with_shards(1),
        }
    }

    pub fn consume(&self, key: &str, limit: &Limit, now: u64) -> Result<Verdict, Error> {
        let limit = convert::limit(limit)?;
        Ok(self.inner.consume(key, limit, convert::now(now)?).into())
    }

    pub fn peek(&self, key: &str, limit: &Limit, now: u64) -> Result<Verdict, Error> {
        let limit = convert::limit(limit)?;
        Ok(self.inner.peek(key, limit, convert::now(now)?).into())
    }

    /// A sliding-log call costing `cost` uses, recorded when allowed (`record`) or only judged.
    pub fn weighted(
        &self,
        key: &str,
        limit: &Limit,
        cost: f64,
        now: u64,
        record: bool,
    ) -> Result<Verdict, Error> {
        let limit = convert::limit(limit)?;
        let cost = u64::from(convert::cost(cost, limit)?);
        let now = convert::now(now)?;
        let verdict = if record {
            self.inner.consume_cost(key, limit, cost, now)
        } else {
            self.inner.peek_cost(key, limit, cost, now)
        };
        Ok(verdict?.into())
    }

    /// The verdict, and the token when it is allowed.
    pub fn consume_many(
        &self,
        entries: Vec<Entry>,
        now: u64,
    ) -> Result<(BatchVerdict, Option<Token>), Error> {
        let entries = convert::entries(entries)?;
        let consumed = self.inner.consume_many(&entries, convert::now(now)?);
        let token = consumed.release.map(|r| Token {
            store: self.id,
            release: RefCell::new(Some(r)),
        });
        Ok((consumed.verdict.into(), token))
    }

    pub fn peek_many(&self, entries: Vec<Entry>, now: u64) -> Result<BatchVerdict, Error> {
        let entries = convert::entries(entries)?;
        Ok(self.inner.peek_many(&entries, convert::now(now)?).into())
    }

    pub fn release(&self, token: &Token, now: u64) {
        if token.store != self.id {
            return;
        }
        // `try_borrow_mut`: never panics, even if a host managed to re-enter.
        let taken = token
            .release
            .try_borrow_mut()
            .ok()
            .and_then(|mut r| r.take());
        if let Some(release) = taken {
            self.inner.release(release, now);
        }
    }

    /// GCRA or the counter: a call costing `cost` uses, recorded when allowed (`record`) or only judged.
    pub fn rate(
        &self,
        key: &str,
        limit: &RateLimit,
        cost: f64,
        now: u64,
        record: bool,
    ) -> Result<Verdict, Error> {
        let rate = convert::rate(limit, cost)?;
        let now = convert::now(now)?;
        let store = &self.inner;
        let verdict = match (rate, record) {
            (Rate::Gcra(g, cost), true) => store.gcra_consume(key, g, cost, now),
            (Rate::Gcra(g, cost), false) => store.gcra_peek(key, g, cost, now),
            (Rate::Counter(c, cost), true) => store.counter_consume(key, c, cost, now),
            (Rate::Counter(c, cost), false) => store.counter_peek(key, c, cost, now),
        };
        Ok(verdict?.into())
    }

    /// The verdict of a mixed batch, and the token when it is allowed and recorded.
    pub fn mixed(
        &self,
        entries: Vec<MixedEntry>,
        now: u64,
        record: bool,
    ) -> Result<(BatchVerdict, Option<Token>), Error> {
        let entries = convert::mixed(entries)?;
        let now = convert::now(now)?;
        if !record {
            return Ok((self.inner.peek_mixed(&entries, now)?.into(), None));
        }
        let consumed = self.inner.consume_mixed(&entries, now)?;
        let token = consumed.release.map(|r| Token {
            store: self.id,
            release: RefCell::new(Some(r)),
        });
        Ok((consumed.verdict.into(), token))
    }

    pub fn reset_rate(&self, key: &str, algorithm: RateAlgorithm) {
        match algorithm {
            RateAlgorithm::Gcra => self.inner.gcra_reset(key),
            RateAlgorithm::Counter => self.inner.counter_reset(key),
        }
    }

    pub fn hit(&self, key: &str, decay_ms: f64, amount: i64, now: u64) -> Result<i64, Error> {
        let decay = convert::window(decay_ms)?;
        Ok(self.inner.hit(key, decay, amount, convert::now(now)?))
    }

    pub fn hit_window(
        &self,
        key: &str,
        decay_ms: f64,
        amount: i64,
        now: u64,
    ) -> Result<HitWindow, Error> {
        let decay = convert::window(decay_ms)?;
        Ok(convert::hit_window(self.inner.hit_window(
            key,
            decay,
            amount,
            convert::now(now)?,
        )))
    }

    pub fn attempt(
        &self,
        key: &str,
        max: i64,
        decay_ms: f64,
        now: u64,
    ) -> Result<AttemptResult, Error> {
        let decay = convert::window(decay_ms)?;
        let now = convert::now(now)?;
        Ok(convert::attempt(self.inner.attempt(key, max, decay, now)))
    }

    pub fn attempts(&self, key: &str, now: u64) -> i64 {
        self.inner.attempts(key, now)
    }

    pub fn too_many_attempts(&self, key: &str, max: i64, now: u64) -> bool {
        self.inner.too_many_attempts(key, max, now)
    }

    pub fn remaining(&self, key: &str, max: i64, now: u64) -> i64 {
        self.inner.remaining(key, max, now)
    }

    pub fn available_in(&self, key: &str, now: u64) -> u64 {
        self.inner.available_in(key, now)
    }

    pub fn available_in_ms(&self, key: &str, now: u64) -> u64 {
        self.inner.available_in_ms(key, now)
    }

    pub fn reset_attempts(&self, key: &str, now: u64) {
        self.inner.reset_attempts(key, now)
    }

    pub fn clear(&self, key: &str) {
        self.inner.clear(key)
    }

    pub fn purge(&self, now: u64) {
        self.inner.purge(now)
    }

    pub fn key_count(&self) -> u64 {
        self.inner.len() as u64
    }
}

impl GuestMemoryStore for Store {
    fn new() -> Store {
        Store::create()
    }

    fn consume(&self, key: String, limit: Limit, now: u64) -> Result<Verdict, Error> {
        Store::consume(self, &key, &limit, now)
    }

    fn peek(&self, key: String, limit: Limit, now: u64) -> Result<Verdict, Error> {
        Store::peek(self, &key, &limit, now)
    }

    fn consume_cost(
        &self,
        key: String,
        limit: Limit,
        cost: f64,
        now: u64,
    ) -> Result<Verdict, Error> {
        Store::weighted(self, &key, &limit, cost, now, true)
    }

    fn peek_cost(&self, key: String, limit: Limit, cost: f64, now: u64) -> Result<Verdict, Error> {
        Store::weighted(self, &key, &limit, cost, now, false)
    }

    fn consume_many(&self, entries: Vec<Entry>, now: u64) -> Result<Consumed, Error> {
        let (verdict, token) = Store::consume_many(self, entries, now)?;
        Ok(Consumed {
            verdict,
            release: token.map(ReleaseToken::new),
        })
    }

    fn peek_many(&self, entries: Vec<Entry>, now: u64) -> Result<BatchVerdict, Error> {
        Store::peek_many(self, entries, now)
    }

    fn release(&self, token: ReleaseTokenBorrow<'_>, now: u64) {
        Store::release(self, token.get::<Token>(), now)
    }

    fn consume_rate(
        &self,
        key: String,
        limit: RateLimit,
        cost: f64,
        now: u64,
    ) -> Result<Verdict, Error> {
        Store::rate(self, &key, &limit, cost, now, true)
    }

    fn peek_rate(
        &self,
        key: String,
        limit: RateLimit,
        cost: f64,
        now: u64,
    ) -> Result<Verdict, Error> {
        Store::rate(self, &key, &limit, cost, now, false)
    }

    fn reset_rate(&self, key: String, algorithm: RateAlgorithm) {
        Store::reset_rate(self, &key, algorithm)
    }

    fn consume_mixed(&self, entries: Vec<MixedEntry>, now: u64) -> Result<Consumed, Error> {
        let (verdict, token) = Store::mixed(self, entries, now, true)?;
        Ok(Consumed {
            verdict,
            release: token.map(ReleaseToken::new),
        })
    }

    fn peek_mixed(&self, entries: Vec<MixedEntry>, now: u64) -> Result<BatchVerdict, Error> {
        Ok(Store::mixed(self, entries, now, false)?.0)
    }

    fn hit(&self, key: String, decay_ms: f64, amount: i64, now: u64) -> Result<i64, Error> {
        Store::hit(self, &key, decay_ms, amount, now)
    }

    fn hit_window(
        &self,
        key: String,
        decay_ms: f64,
        amount: i64,
        now: u64,
    ) -> Result<HitWindow, Error> {
        Store::hit_window(self, &key, decay_ms, amount, now)
    }

    fn attempt(
        &self,
        key: String,
        max: i64,
        decay_ms: f64,
        now: u64,
    ) -> Result<AttemptResult, Error> {
        Store::attempt(self, &key, max, decay_ms, now)
    }

    fn attempts(&self, key: String, now: u64) -> i64 {
        Store::attempts(self, &key, now)
    }

    fn too_many_attempts(&self, key: String, max: i64, now: u64) -> bool {
        Store::too_many_attempts(self, &key, max, now)
    }

    fn remaining(&self, key: String, max: i64, now: u64) -> i64 {
        Store::remaining(self, &key, max, now)
    }

    fn available_in(&self, key: String, now: u64) -> u64 {
        Store::available_in(self, &key, now)
    }

    fn available_in_ms(&self, key: String, now: u64) -> u64 {
        Store::available_in_ms(self, &key, now)
    }

    fn reset_attempts(&self, key: String, now: u64) {
        Store::reset_attempts(self, &key, now)
    }

    fn clear(&self, key: String) {
        Store::clear(self, &key)
    }

    fn purge(&self, now: u64) {
        Store::purge(self, now)
    }

    fn key_count(&self) -> u64 {
        Store::key_count(self)
    }
}
