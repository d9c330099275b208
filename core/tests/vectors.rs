//! Runs every case in `tests/vectors/*.json` against the core's `MemoryStore`. Every binding runs the
//! same files and must agree to the last field.

mod common;

use common::Engine;
use ratewindow_core::{Entry, Limit, MemoryStore, Release, Window};
use serde_json::{json, Value};

impl Engine for MemoryStore {
    type Release = Release;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(MemoryStore::consume(self, key, limit, now))
    }
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(MemoryStore::peek(self, key, limit, now))
    }
    fn consume_many(&mut self, entries: &[Entry], now: u64) -> (Value, Option<Release>) {
        let consumed = MemoryStore::consume_many(self, entries, now);
        (json!(consumed.verdict), consumed.release)
    }
    fn peek_many(&mut self, entries: &[Entry], now: u64) -> Value {
        json!(MemoryStore::peek_many(self, entries, now))
    }
    fn release(&mut self, release: Release, now: u64) {
        MemoryStore::release(self, release, now)
    }
    fn hit(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> i64 {
        MemoryStore::hit(self, key, decay, amount, now)
    }
    fn attempts(&mut self, key: &str, now: u64) -> i64 {
        MemoryStore::attempts(self, key, now)
    }
    fn too_many_attempts(&mut self, key: &str, max: i64, now: u64) -> bool {
        MemoryStore::too_many_attempts(self, key, max, now)
    }
    fn remaining(&mut self, key: &str, max: i64, now: u64) -> i64 {
        MemoryStore::remaining(self, key, max, now)
    }
    fn available_in(&mut self, key: &str, now: u64) -> u64 {
        MemoryStore::available_in(self, key, now)
    }
    fn available_in_ms(&mut self, key: &str, now: u64) -> u64 {
        MemoryStore::available_in_ms(self, key, now)
    }
    fn reset_attempts(&mut self, key: &str, now: u64) {
        MemoryStore::reset_attempts(self, key, now)
    }
    fn clear(&mut self, key: &str) {
        MemoryStore::clear(self, key)
    }
    fn hit_window(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> (i64, u64) {
        MemoryStore::hit_window(self, key, decay, amount, now)
    }
    fn attempt(&mut self, key: &str, max: i64, decay: Window, now: u64) -> (bool, i64, u64) {
        MemoryStore::attempt(self, key, max, decay, now)
    }
    #[cfg(feature = "weights")]
    fn consume_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        json!(MemoryStore::consume_cost(self, key, limit, cost.into(), now).expect("checked"))
    }
    #[cfg(feature = "weights")]
    fn peek_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        json!(MemoryStore::peek_cost(self, key, limit, cost.into(), now).expect("checked"))
    }
}

#[test]
fn every_vector_matches_the_memory_store() {
    let cases = common::cases();
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .flat_map(|case| common::run_case(&mut MemoryStore::new(), case))
        .collect();
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[cfg(feature = "weights")]
#[test]
fn every_weight_vector_matches_the_memory_store() {
    let cases = common::cases_in("weights");
    assert!(cases.len() >= 8, "only {} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .flat_map(|case| common::run_case(&mut MemoryStore::new(), case))
        .collect();
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
