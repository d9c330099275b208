//! Model-based property tests: random sequences of operations over a handful of keys and random times
//! (including a clock that steps back), checked against a deliberately naive model written here with
//! plain vectors, sorting and linear scans — and the extremes: 1 ms windows, the largest window,
//! `uses = u32::MAX`, and times near `u64::MAX`.

use std::collections::HashMap;

use proptest::prelude::*;
use ratewindow_core::{
    BatchVerdict, Entry, Limit, MemoryStore, Quota, Release, Verdict, Window, MAX_WINDOW_MS,
};

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone)]
struct MLog {
    times: Vec<u64>,
    expires: u64,
    life: u64,
}

#[derive(Debug, Clone)]
struct MCall {
    key: String,
    life: u64,
    at: u64,
    window: u64,
}

#[derive(Debug, Default)]
struct Model {
    horizon: u64,
    logs: HashMap<String, MLog>,
    windows: HashMap<String, (i64, u64)>,
    lives: u64,
}

fn inside(t: u64, now: u64, w: u64) -> bool {
    // Written differently from the core on purpose: in 128 bits, no early return.
    (t as u128) + (w as u128) > now as u128
}

/// Deadlines saturate at `u64::MAX`, which means "past the end of time": never.
fn alive(deadline: u64, horizon: u64) -> bool {
    deadline == u64::MAX || deadline > horizon
}

impl Model {
    fn wait(&self, key: &str, l: Limit, now: u64, horizon: u64) -> Option<u64> {
        let log = self
            .logs
            .get(key)
            .filter(|log| alive(log.expires, horizon))?;
        let mut times: Vec<u64> = log.times.clone();
        times.sort();
        let count = times
            .iter()
            .filter(|&&t| inside(t, now, l.window_ms()))
            .count();
        if count < l.uses() as usize {
            return None;
        }
        let oldest_of_newest = times[times.len() - l.uses() as usize];
        Some(((oldest_of_newest as u128) + l.window_ms() as u128).min(u64::MAX as u128) as u64)
    }

    fn refusal(now: u64, until: u64) -> Verdict {
        Verdict {
            allowed: false,
            retry_after_ms: (until.saturating_sub(now)).max(1),
            retry_timestamp: Some(until),
            quota: Quota::NONE,
        }
    }

    /// The calls of `key` inside `l`'s window at `now`, sorted (none for a dead log).
    fn inside_calls(&self, key: &str, l: Limit, now: u64, horizon: u64) -> Vec<u64> {
        let mut times: Vec<u64> = self
            .logs
            .get(key)
            .filter(|log| alive(log.expires, horizon))
            .map(|log| log.times.clone())
            .unwrap_or_default();
        times.retain(|&t| inside(t, now, l.window_ms()));
        times.sort();
        times
    }

    /// Ms from `now` until a call at `t` leaves a window of `w`, saturating at the end of time.
    fn leaves(t: u64, w: u64, now: u64) -> u64 {
        ((t as u128 + w as u128).min(u64::MAX as u128)).saturating_sub(now as u128) as u64
    }

    /// An entry's quota as its log stands.
    fn quota(&self, key: &str, l: Limit, now: u64, horizon: u64) -> Quota {
        let times = self.inside_calls(key, l, now, horizon);
        let w = l.window_ms();
        Quota {
            limit: l.uses(),
            remaining: (l.uses() as usize).saturating_sub(times.len()) as u32,
            refill_after_ms: times.first().map_or(0, |&t| Model::leaves(t, w, now)),
            reset_after_ms: times.last().map_or(0, |&t| Model::leaves(t, w, now)),
        }
    }

    fn batch(&mut self, entries: &[Entry], now: u64, record: bool) -> (BatchVerdict, Vec<MCall>) {
        let horizon = self.horizon.max(now);
        if record {
            self.horizon = horizon;
        }
        let mut keys: Vec<(String, u64)> = Vec::new();
        for e in entries {
            match keys.iter_mut().find(|(k, _)| *k == e.key) {
                Some((_, w)) => *w = (*w).max(e.limit.window_ms()),
                None => keys.push((e.key.clone(), e.limit.window_ms())),
            }
        }
        if record {
            for (key, w) in &keys {
                if let Some(log) = self.logs.get_mut(key) {
                    if !alive(log.expires, horizon) {
                        log.times.clear();
                    }
                    log.times.retain(|&t| inside(t, now, *w));
                    if log.times.is_empty() {
                        self.logs.remove(key);
                    }
                }
            }
        }
        let mut blocked: Option<(usize, u64)> = None;
        for (i, e) in entries.iter().enumerate() {
            if let Some(until) = self.wait(&e.key, e.limit, now, horizon) {
                if blocked.is_none_or(|(_, b)| until > b) {
                    blocked = Some((i, until));
                }
            }
        }
        if let Some((i, until)) = blocked {
            let v = Model::refusal(now, until);
            let l = entries[i].limit;
            let newest = *self
                .inside_calls(&entries[i].key, l, now, horizon)
                .last()
                .expect("a refusing entry has calls inside");
            let bv = BatchVerdict {
                allowed: false,
                retry_after_ms: v.retry_after_ms,
                retry_timestamp: v.retry_timestamp,
                blocked: Some(i),
                quota: Quota {
                    limit: l.uses(),
                    remaining: 0,
                    refill_after_ms: v.retry_after_ms,
                    reset_after_ms: Model::leaves(newest, l.window_ms(), now).max(v.retry_after_ms),
                },
            };
            return (bv, Vec::new());
        }
        let mut calls = Vec::new();
        if record {
            for (key, w) in keys {
                let lives = &mut self.lives;
                let log = self.logs.entry(key.clone()).or_insert_with(|| {
                    *lives += 1;
                    MLog {
                        times: Vec::new(),
                        expires: 0,
                        life: *lives,
                    }
                });
                let at = log.times.iter().copied().max().unwrap_or(0).max(now);
                log.times.push(at);
                log.expires = log.expires.max(at.max(horizon).saturating_add(w));
                calls.push(MCall {
                    key,
                    life: log.life,
                    at,
                    window: w,
                });
            }
        }
        // The tightest: fewest remaining, then the longer window, then the first.
        let quota = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                (
                    self.quota(&e.key, e.limit, now, horizon),
                    e.limit.window_ms(),
                    i,
                )
            })
            .min_by_key(|&(q, w, i)| (q.remaining, std::cmp::Reverse(w), i))
            .map_or(Quota::NONE, |(q, _, _)| q);
        (BatchVerdict::ALLOWED.with_quota(quota), calls)
    }

    fn release(&mut self, calls: &[MCall], now: u64) {
        self.horizon = self.horizon.max(now);
        for call in calls {
            if !inside(call.at, now, call.window) {
                continue;
            }
            if let Some(log) = self.logs.get_mut(&call.key) {
                if log.life == call.life && alive(log.expires, self.horizon) {
                    if let Some(pos) = log.times.iter().position(|&t| t == call.at) {
                        log.times.remove(pos);
                    }
                    if log.times.is_empty() {
                        self.logs.remove(&call.key);
                    }
                }
            }
        }
    }

    fn live_window(&self, key: &str, now: u64) -> Option<(i64, u64)> {
        self.windows
            .get(key)
            .copied()
            .filter(|&(_, ends)| alive(ends, self.horizon.max(now)))
    }

    fn hit(&mut self, key: &str, decay: u64, amount: i64, now: u64) -> i64 {
        self.horizon = self.horizon.max(now);
        let window = match self.live_window(key, now) {
            Some((count, ends)) => (count.saturating_add(amount), ends),
            None => (amount, self.horizon.saturating_add(decay)),
        };
        self.windows.insert(key.to_owned(), window);
        window.0
    }

    fn attempt(&mut self, key: &str, max: i64, decay: u64, now: u64) -> (bool, i64, u64) {
        self.horizon = self.horizon.max(now);
        match self.live_window(key, now) {
            Some((count, ends)) if count < max => {
                self.windows.insert(key.to_owned(), (count + 1, ends));
                (true, count + 1, ends.saturating_sub(now))
            }
            Some((count, ends)) => (false, count, ends.saturating_sub(now)),
            None if max > 0 => {
                let ends = self.horizon.saturating_add(decay);
                self.windows.insert(key.to_owned(), (1, ends));
                (true, 1, ends.saturating_sub(now))
            }
            None => (false, 0, 0),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The operations.

#[derive(Debug, Clone)]
enum Op {
    Consume(usize, Limit),
    ConsumeMany(Vec<(usize, Limit)>),
    Peek(usize, Limit),
    PeekMany(Vec<(usize, Limit)>),
    Release(usize),
    Hit(usize, u64, i64),
    Attempt(usize, i64, u64),
    Attempts(usize),
    AvailableIn(usize),
    ResetAttempts(usize),
    Clear(usize),
}

const KEYS: [&str; 6] = ["a", "b", "c", "user:1", "user:2", "ü"];

fn limit() -> impl Strategy<Value = Limit> + Clone {
    (
        prop_oneof![4 => 1u64..4, 1 => Just(u32::MAX as u64)],
        prop_oneof![2 => Just(1u64), 6 => 2u64..60, 2 => 60u64..400, 1 => Just(MAX_WINDOW_MS)],
    )
        .prop_map(|(u, w)| Limit::new(u, w).unwrap())
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let entries = || prop::collection::vec((0..KEYS.len(), limit()), 0..4);
    prop_oneof![
        6 => (key.clone(), limit()).prop_map(|(k, l)| Op::Consume(k, l)),
        4 => entries().prop_map(Op::ConsumeMany),
        2 => (key.clone(), limit()).prop_map(|(k, l)| Op::Peek(k, l)),
        2 => entries().prop_map(Op::PeekMany),
        2 => (0usize..8).prop_map(Op::Release),
        3 => (key.clone(), prop_oneof![Just(1u64), 2u64..300, Just(MAX_WINDOW_MS)], -3i64..5)
            .prop_map(|(k, d, a)| Op::Hit(k, d, a)),
        2 => (key.clone(), -1i64..4, prop_oneof![Just(1u64), 2u64..300, Just(MAX_WINDOW_MS)])
            .prop_map(|(k, m, d)| Op::Attempt(k, m, d)),
        1 => key.clone().prop_map(Op::Attempts),
        1 => key.clone().prop_map(Op::AvailableIn),
        1 => key.clone().prop_map(Op::ResetAttempts),
        1 => key.prop_map(Op::Clear),
    ]
}

/// Times: mostly forward in small steps, sometimes the same millisecond, sometimes back.
fn steps() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![3 => Just(0i64), 10 => 1i64..40, 2 => -60i64..0, 1 => 200i64..2000],
        1..80,
    )
}

fn run(ops: &[Op], steps: &[i64], start: u64, shards: usize) -> Result<(), TestCaseError> {
    let store = MemoryStore::with_shards(shards);
    let mut model = Model::default();
    let mut releases: Vec<(Option<Release>, Vec<MCall>)> = Vec::new();
    let mut now = start;
    for (i, op) in ops.iter().enumerate() {
        let step = steps[i % steps.len()];
        now = if step >= 0 {
            now.saturating_add(step as u64)
        } else {
            now.saturating_sub(step.unsigned_abs())
        };
        let entries = |list: &[(usize, Limit)]| -> Vec<Entry> {
            list.iter().map(|&(k, l)| Entry::new(KEYS[k], l)).collect()
        };
        match op {
            Op::Consume(k, l) => {
                let (want, _) = model.batch(&[Entry::new(KEYS[*k], *l)], now, true);
                prop_assert_eq!(
                    store.consume(KEYS[*k], *l, now),
                    want.verdict(),
                    "op {} {:?} at {}",
                    i,
                    op,
                    now
                );
            }
            Op::ConsumeMany(list) => {
                let list = entries(list);
                let (want, calls) = model.batch(&list, now, true);
                let got = store.consume_many(&list, now);
                prop_assert_eq!(got.verdict, want, "op {} {:?} at {}", i, op, now);
                prop_assert_eq!(got.release.is_some(), want.allowed);
                releases.push((got.release, calls));
            }
            Op::Peek(k, l) => {
                let (want, _) = model.batch(&[Entry::new(KEYS[*k], *l)], now, false);
                prop_assert_eq!(
                    store.peek(KEYS[*k], *l, now),
                    want.verdict(),
                    "op {} {:?} at {}",
                    i,
                    op,
                    now
                );
            }
            Op::PeekMany(list) => {
                let list = entries(list);
                let (want, _) = model.batch(&list, now, false);
                prop_assert_eq!(
                    store.peek_many(&list, now),
                    want,
                    "op {} {:?} at {}",
                    i,
                    op,
                    now
                );
            }
            Op::Release(r) => {
                if !releases.is_empty() {
                    let n = releases.len();
                    let (release, calls) = &mut releases[r % n];
                    if let Some(release) = release.take() {
                        store.release(release, now);
                        model.release(calls, now);
                    }
                }
            }
            Op::Hit(k, decay, amount) => {
                let want = model.hit(KEYS[*k], *decay, *amount, now);
                let ends = model.live_window(KEYS[*k], now).map(|(_, e)| e);
                let want_ms = ends.map_or(0, |e| e.saturating_sub(now));
                let decay = Window::from_ms(*decay).unwrap();
                // hit and hit_window alternate, so both are checked against the model.
                if i % 2 == 0 {
                    let got = store.hit(KEYS[*k], decay, *amount, now);
                    prop_assert_eq!(got, want, "op {} {:?} at {}", i, op, now);
                } else {
                    let got = store.hit_window(KEYS[*k], decay, *amount, now);
                    prop_assert_eq!(got, (want, want_ms), "op {} {:?} at {}", i, op, now);
                }
            }
            Op::Attempt(k, max, decay) => {
                let want = model.attempt(KEYS[*k], *max, *decay, now);
                let got = store.attempt(KEYS[*k], *max, Window::from_ms(*decay).unwrap(), now);
                prop_assert_eq!(got, want, "op {} {:?} at {}", i, op, now);
            }
            Op::Attempts(k) => {
                let want = model.live_window(KEYS[*k], now).map_or(0, |(c, _)| c);
                prop_assert_eq!(store.attempts(KEYS[*k], now), want, "op {} {:?}", i, op);
                prop_assert_eq!(
                    store.too_many_attempts(KEYS[*k], 2, now),
                    model
                        .live_window(KEYS[*k], now)
                        .is_some_and(|(c, _)| c >= 2)
                );
                prop_assert_eq!(store.remaining(KEYS[*k], 2, now), (2 - want).max(0));
            }
            Op::AvailableIn(k) => {
                let ms = model
                    .live_window(KEYS[*k], now)
                    .map_or(0, |(_, ends)| ends.saturating_sub(now));
                prop_assert_eq!(store.available_in_ms(KEYS[*k], now), ms);
                prop_assert_eq!(store.available_in(KEYS[*k], now), ms.div_ceil(1000));
            }
            Op::ResetAttempts(k) => {
                store.reset_attempts(KEYS[*k], now);
                model.horizon = model.horizon.max(now);
                if let Some((_, ends)) = model.live_window(KEYS[*k], now) {
                    model.windows.insert(KEYS[*k].to_owned(), (0, ends));
                }
            }
            Op::Clear(k) => {
                store.clear(KEYS[*k]);
                model.windows.remove(KEYS[*k]);
            }
        }
    }
    // Whatever happened, purging at the end of time leaves only the keys whose deadline saturated there.
    store.purge(u64::MAX);
    let forever = model
        .logs
        .values()
        .filter(|l| l.expires == u64::MAX)
        .count()
        + model.windows.values().filter(|w| w.1 == u64::MAX).count();
    prop_assert_eq!(store.len(), forever);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_store_agrees_with_the_naive_model(ops in prop::collection::vec(op(), 1..120), steps in steps(), shards in prop_oneof![Just(1usize), Just(2), Just(16)]) {
        run(&ops, &steps, 1_000, shards)?;
    }

    #[test]
    fn the_store_agrees_with_the_model_near_the_end_of_time(ops in prop::collection::vec(op(), 1..80), steps in steps(), back in 0u64..3000) {
        run(&ops, &steps, u64::MAX - back, 4)?;
    }

    #[test]
    fn the_store_agrees_with_the_model_from_time_zero(ops in prop::collection::vec(op(), 1..80), steps in steps()) {
        run(&ops, &steps, 0, 2)?;
    }
}

#[test]
fn extreme_limits_never_panic_or_overflow() {
    let store = MemoryStore::new();
    let huge = Limit::new(u32::MAX as u64, MAX_WINDOW_MS).unwrap();
    let tiny = Limit::new(1, 1).unwrap();
    for now in [0, 1, u64::MAX - 1, u64::MAX] {
        assert!(store.consume("huge", huge, now).allowed);
    }
    assert!(store.consume("tiny", tiny, u64::MAX).allowed);
    let refused = store.consume("tiny", tiny, u64::MAX);
    // The call at u64::MAX leaves at u64::MAX + 1, which saturates: the wait reads as 1 ms.
    assert_eq!(
        refused,
        Verdict {
            allowed: false,
            retry_after_ms: 1,
            retry_timestamp: Some(u64::MAX),
            quota: Quota {
                limit: 1,
                remaining: 0,
                refill_after_ms: 1,
                reset_after_ms: 1,
            },
        }
    );
    let decay = Window::from_ms(MAX_WINDOW_MS).unwrap();
    assert_eq!(store.hit("k", decay, i64::MAX, u64::MAX - 5), i64::MAX);
    assert_eq!(store.hit("k", decay, i64::MAX, u64::MAX - 5), i64::MAX);
    assert_eq!(store.hit("k", decay, i64::MIN, u64::MAX - 5), -1);
    assert_eq!(store.available_in_ms("k", u64::MAX - 5), 5);
}
