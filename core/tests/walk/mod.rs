//! What the seeded random walks share (a store against the memory store, step by step): the numbers,
//! the seeds, the rules of a mixed batch and the entries of a weighted call. Every walk prints its seed
//! and replays it from the environment.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::Gcra;
use ratewindow_core::{Entry, Limit, Rule};

/// xorshift64*: a walk's numbers, from a seed printed so a failure can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A mixed walk's seed: `RATEWINDOW_SEED` when set (to replay one), else the clock's.
pub fn seed() -> u64 {
    std::env::var("RATEWINDOW_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

/// The seeds a weighted walk runs: `RATEWINDOW_WEIGHT_SEED` alone when set (to replay one), else a
/// fixed few.
pub fn weight_seeds() -> Vec<u64> {
    match std::env::var("RATEWINDOW_WEIGHT_SEED") {
        Ok(s) => vec![s.parse().expect("a seed")],
        Err(_) => vec![1, 2, 3, 0x9e37_79b9_7f4a_7c15],
    }
}

pub fn sliding(uses: u64, window_ms: u64) -> Rule {
    Rule::Sliding(Limit::new(uses, window_ms).unwrap())
}

pub fn gcra(uses: u64, window_ms: u64, burst: u64) -> Rule {
    Rule::Gcra(Gcra::new(uses, window_ms, burst).unwrap())
}

pub fn counter(uses: u64, window_ms: u64) -> Rule {
    Rule::Counter(Counter::new(Limit::new(uses, window_ms).unwrap()).unwrap())
}

/// A mixed entry's cost under `rule`: 1 to 3, at most what the rule can ever allow.
pub fn cost_for(rng: &mut Rng, rule: &Rule) -> u64 {
    let top = match rule {
        Rule::Sliding(l) => l.uses() as u64,
        Rule::Gcra(g) => g.burst() as u64,
        Rule::Counter(c) => c.limit().uses() as u64,
    };
    1 + rng.below(top.min(3))
}

/// A random weighted call: one or two entries on keys k and j, costs 1..=uses (with `ones`, a third of
/// them 1), small and changing limits. Each key has one longest window per walk (`windows`), which
/// every call on it names (a second entry on one key may name a shorter one): the memory store
/// forgets a log once its window has passed, and a later, longer window would find the calls a SQL
/// store keeps until a purge; on Redis a key's expiry is then its window on both stores.
pub fn weighted_entries(rng: &mut Rng, windows: [u64; 2], ones: bool) -> Vec<Entry> {
    let entry = |rng: &mut Rng, key: &str, w: u64| {
        let uses = [1, 2, 3, 5, 8][rng.below(5) as usize];
        let cost = if ones && rng.below(3) == 0 {
            1
        } else {
            1 + rng.below(uses)
        };
        Entry::with_cost(key, Limit::new(uses, w).unwrap(), cost).unwrap()
    };
    match rng.below(8) {
        0 => {
            let shorter = 1 + rng.below(windows[0]);
            vec![entry(rng, "k", windows[0]), entry(rng, "k", shorter)]
        }
        1 => vec![entry(rng, "k", windows[0]), entry(rng, "j", windows[1])],
        _ => vec![entry(rng, "k", windows[0])],
    }
}
