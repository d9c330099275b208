//! The `clocked-memory` interface of the `hosted` world: the same store, each call reading the imported
//! `clock` once at its start.

use crate::bindings::exports::ratewindow::engine::{
    clocked_memory::{self, Consumed, GuestMemoryStore, ReleaseToken, ReleaseTokenBorrow},
    errors::Error,
    types::{
        AttemptResult, BatchVerdict, Entry, HitWindow, Limit, MixedEntry, RateAlgorithm, RateLimit,
        Verdict,
    },
};
use crate::bindings::ratewindow::engine::clock::now_ms;
use std::rc::Rc;

use ratewindow_core::lock::MemoryLocks;

use crate::store::{Store, Token};
use crate::Component;

/// A [`Store`] on the host's clock, and its locks (shared with the `lock` resources made on it).
pub struct ClockedStore(Store, Rc<MemoryLocks>);

impl ClockedStore {
    /// The store's locks.
    pub fn locks(&self) -> Rc<MemoryLocks> {
        Rc::clone(&self.1)
    }
}

impl clocked_memory::Guest for Component {
    type MemoryStore = ClockedStore;
    type ReleaseToken = Token;
}

impl GuestMemoryStore for ClockedStore {
    fn new() -> ClockedStore {
        ClockedStore(Store::create(), Rc::new(MemoryLocks::new()))
    }

    fn consume(&self, key: String, limit: Limit) -> Result<Verdict, Error> {
        self.0.consume(&key, &limit, now_ms())
    }

    fn peek(&self, key: String, limit: Limit) -> Result<Verdict, Error> {
        self.0.peek(&key, &limit, now_ms())
    }

    fn consume_cost(&self, key: String, limit: Limit, cost: f64) -> Result<Verdict, Error> {
        self.0.weighted(&key, &limit, cost, now_ms(), true)
    }

    fn peek_cost(&self, key: String, limit: Limit, cost: f64) -> Result<Verdict, Error> {
        self.0.weighted(&key, &limit, cost, now_ms(), false)
    }

    fn consume_many(&self, entries: Vec<Entry>) -> Result<Consumed, Error> {
        let (verdict, token) = self.0.consume_many(entries, now_ms())?;
        Ok(Consumed {
            verdict,
            release: token.map(ReleaseToken::new),
        })
    }

    fn peek_many(&self, entries: Vec<Entry>) -> Result<BatchVerdict, Error> {
        self.0.peek_many(entries, now_ms())
    }

    fn release(&self, token: ReleaseTokenBorrow<'_>) {
        self.0.release(token.get::<Token>(), now_ms())
    }

    fn consume_rate(&self, key: String, limit: RateLimit, cost: f64) -> Result<Verdict, Error> {
        self.0.rate(&key, &limit, cost, now_ms(), true)
    }

    fn peek_rate(&self, key: String, limit: RateLimit, cost: f64) -> Result<Verdict, Error> {
        self.0.rate(&key, &limit, cost, now_ms(), false)
    }

    fn reset_rate(&self, key: String, algorithm: RateAlgorithm) {
        self.0.reset_rate(&key, algorithm)
    }

    fn consume_mixed(&self, entries: Vec<MixedEntry>) -> Result<Consumed, Error> {
        let (verdict, token) = self.0.mixed(entries, now_ms(), true)?;
        Ok(Consumed {
            verdict,
            release: token.map(ReleaseToken::new),
        })
    }

    fn peek_mixed(&self, entries: Vec<MixedEntry>) -> Result<BatchVerdict, Error> {
        Ok(self.0.mixed(entries, now_ms(), false)?.0)
    }

    fn hit(&self, key: String, decay_ms: f64, amount: i64) -> Result<i64, Error> {
        self.0.hit(&key, decay_ms, amount, now_ms())
    }

    fn hit_window(&self, key: String, decay_ms: f64, amount: i64) -> Result<HitWindow, Error> {
        self.0.hit_window(&key, decay_ms, amount, now_ms())
    }

    fn attempt(&self, key: String, max: i64, decay_ms: f64) -> Result<AttemptResult, Error> {
        self.0.attempt(&key, max, decay_ms, now_ms())
    }

    fn attempts(&self, key: String) -> i64 {
        self.0.attempts(&key, now_ms())
    }

    fn too_many_attempts(&self, key: String, max: i64) -> bool {
        self.0.too_many_attempts(&key, max, now_ms())
    }

    fn remaining(&self, key: String, max: i64) -> i64 {
        self.0.remaining(&key, max, now_ms())
    }

    fn available_in(&self, key: String) -> u64 {
        self.0.available_in(&key, now_ms())
    }

    fn available_in_ms(&self, key: String) -> u64 {
        self.0.available_in_ms(&key, now_ms())
    }

    fn reset_attempts(&self, key: String) {
        self.0.reset_attempts(&key, now_ms())
    }

    fn clear(&self, key: String) {
        self.0.clear(&key)
    }

    fn purge(&self) {
        self.0.purge(now_ms())
    }

    fn key_count(&self) -> u64 {
        self.0.key_count()
    }
}
