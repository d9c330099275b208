//! A plain reference model of the memory store, for differential tests (`core/tests/batch_model.rs`,
//! proptest) and the `memory_model` fuzz target (`fuzz/`, which includes this file): vectors and
//! linear scans, no hashing, no sweeping, nothing shared with the store's code.
//!
//! Its domain, chosen so the model can stay naive: time never goes back (the store's horizon is then
//! always `now`), and each key has one limit (sliding log) or one decay (fixed window) for the whole
//! run, given by the key's index — so a key's log is always trimmed by the same window.

#![allow(dead_code)]

use ratewindow_core::{Entry, Limit, MemoryStore, Window};

/// The keys a run uses: `k0` .. `k{KEYS-1}`.
pub const KEYS: usize = 6;

/// Key `i`'s sliding-window limit.
pub fn limit_of(i: usize) -> Limit {
    let (uses, window) = [(1, 10), (2, 25), (3, 100), (1, 1), (5, 7), (2, 1_000)][i % KEYS];
    Limit::new(uses, window).expect("valid")
}

/// Key `i`'s fixed-window decay.
pub fn decay_of(i: usize) -> Window {
    Window::from_ms([10, 1, 100, 3, 50, 1_000][i % KEYS]).expect("valid")
}

/// Key `i`'s name.
pub fn key(i: usize) -> String {
    format!("k{}", i % KEYS)
}

/// One operation of a run. Times are deltas added to the clock before it runs.
#[derive(Debug, Clone)]
pub enum Op {
    /// `consume_many` of these key indices (repeats allowed; empty allowed).
    Consume(Vec<usize>),
    /// `peek_many` of these key indices.
    Peek(Vec<usize>),
    /// `hit` of `amount` on a key.
    Hit(usize, i64),
    /// `attempt` with `max` on a key.
    Attempt(usize, i64),
    /// `attempts` of a key.
    Attempts(usize),
    /// `clear` of a key.
    Clear(usize),
}

/// What the model answers, compared field by field with the store's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A batch verdict: allowed, the wait, the blocked entry.
    Verdict(bool, u64, Option<usize>),
    /// A count.
    Count(i64),
    /// An attempt: counted, count, ms left.
    Attempt(bool, i64, u64),
    /// Nothing.
    Unit,
}

/// The model: every call time of each key, and each key's fixed window `(count, ends_at)`.
#[derive(Debug, Default)]
pub struct Model {
    calls: Vec<Vec<u64>>,
    windows: Vec<Option<(i64, u64)>>,
}

impl Model {
    /// An empty model.
    pub fn new() -> Model {
        Model {
            calls: vec![Vec::new(); KEYS],
            windows: vec![None; KEYS],
        }
    }

    /// When key `k` may take another call at `now` under its limit, if it may not now.
    fn wait_until(&self, k: usize, now: u64) -> Option<u64> {
        let limit = limit_of(k);
        let w = limit.window_ms();
        let mut inside: Vec<u64> = self.calls[k]
            .iter()
            .copied()
            .filter(|&t| t as u128 + w as u128 > now as u128)
            .collect();
        inside.sort_unstable();
        let uses = limit.uses() as usize;
        if inside.len() < uses {
            return None;
        }
        // The call that must leave for one more to fit: the (len - uses)-th oldest.
        Some(inside[inside.len() - uses] + w)
    }

    fn batch(&mut self, keys: &[usize], now: u64, record: bool) -> Answer {
        let mut blocked: Option<(usize, u64)> = None;
        for (i, &k) in keys.iter().enumerate() {
            if let Some(until) = self.wait_until(k % KEYS, now) {
                if blocked.is_none_or(|(_, longest)| until > longest) {
                    blocked = Some((i, until));
                }
            }
        }
        match blocked {
            Some((i, until)) => Answer::Verdict(false, until - now, Some(i)),
            None => {
                if record {
                    let mut seen = Vec::new();
                    for &k in keys {
                        if !seen.contains(&(k % KEYS)) {
                            seen.push(k % KEYS);
                            self.calls[k % KEYS].push(now);
                        }
                    }
                }
                Answer::Verdict(true, 0, None)
            }
        }
    }

    fn live_window(&mut self, k: usize, now: u64) -> Option<&mut (i64, u64)> {
        let window = &mut self.windows[k];
        if window.is_some_and(|(_, ends)| ends <= now) {
            *window = None;
        }
        window.as_mut()
    }

    /// Runs `op` at `now` on the model.
    pub fn apply(&mut self, op: &Op, now: u64) -> Answer {
        match op {
            Op::Consume(keys) => self.batch(keys, now, true),
            Op::Peek(keys) => self.batch(keys, now, false),
            Op::Hit(k, amount) => {
                let k = k % KEYS;
                let count = match self.live_window(k, now) {
                    Some(w) => {
                        w.0 = w.0.saturating_add(*amount);
                        w.0
                    }
                    None => {
                        self.windows[k] = Some((*amount, now + decay_of(k).as_ms()));
                        *amount
                    }
                };
                Answer::Count(count)
            }
            Op::Attempt(k, max) => {
                let k = k % KEYS;
                match self.live_window(k, now) {
                    Some(w) => {
                        let counted = w.0 < *max;
                        if counted {
                            w.0 += 1;
                        }
                        Answer::Attempt(counted, w.0, w.1 - now)
                    }
                    None if *max >= 1 => {
                        let ends = now + decay_of(k).as_ms();
                        self.windows[k] = Some((1, ends));
                        Answer::Attempt(true, 1, ends - now)
                    }
                    None => Answer::Attempt(false, 0, 0),
                }
            }
            Op::Attempts(k) => Answer::Count(self.live_window(k % KEYS, now).map_or(0, |w| w.0)),
            Op::Clear(k) => {
                self.windows[k % KEYS] = None;
                Answer::Unit
            }
        }
    }
}

/// Runs `op` at `now` on the store.
pub fn apply(store: &MemoryStore, op: &Op, now: u64) -> Answer {
    let entries = |keys: &[usize]| -> Vec<Entry> {
        keys.iter()
            .map(|&k| Entry::new(key(k), limit_of(k % KEYS)))
            .collect()
    };
    match op {
        Op::Consume(keys) => {
            let v = store.consume_many(&entries(keys), now).verdict;
            Answer::Verdict(v.allowed, v.retry_after_ms, v.blocked)
        }
        Op::Peek(keys) => {
            let v = store.peek_many(&entries(keys), now);
            Answer::Verdict(v.allowed, v.retry_after_ms, v.blocked)
        }
        Op::Hit(k, amount) => Answer::Count(store.hit(&key(*k), decay_of(k % KEYS), *amount, now)),
        Op::Attempt(k, max) => {
            let (counted, count, left) = store.attempt(&key(*k), *max, decay_of(k % KEYS), now);
            Answer::Attempt(counted, count, left)
        }
        Op::Attempts(k) => Answer::Count(store.attempts(&key(*k), now)),
        Op::Clear(k) => {
            store.clear(&key(*k));
            Answer::Unit
        }
    }
}
