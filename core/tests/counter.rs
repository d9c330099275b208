//! The sliding-window counter against the core's exact sliding log: random arrivals and costs, the
//! admitted calls kept in a `CallLog`, and the error bound of `core/src/counter.rs` checked at every
//! step — over-admission at most `uses + floor(prev · e / w)` (< 2 · uses) in any window, a refusal only
//! when more than `uses − n` were admitted in the current and the previous fixed window. Also: the
//! store against the pure rule, the retry time is the first ms a call fits, typed errors.
#![cfg(feature = "rates")]

use proptest::prelude::*;
use ratewindow_core::counter::{Counter, CounterState};
use ratewindow_core::gcra::RateField;
use ratewindow_core::sliding::CallLog;
use ratewindow_core::{Limit, MemoryStore};

fn counter(uses: u64, window_ms: u64) -> Counter {
    Counter::new(Limit::new(uses, window_ms).unwrap()).unwrap()
}

/// Uses in the exact log inside `(t − w, t]`.
fn in_window(log: &CallLog, t: u64, w: u64) -> u64 {
    (log.len() - log.first_inside(t, w)) as u64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_error_bound_against_the_exact_log(
        (uses, w) in (1u64..20, 1u64..500),
        steps in prop::collection::vec((0u64..80, 1u64..5), 1..400),
    ) {
        let c = counter(uses, w);
        let mut log = CallLog::new(16, 1);
        let mut state: Option<CounterState> = None;
        let mut now = 1_000_000u64;
        for (dt, cost) in steps {
            now += dt;
            let n = cost.min(uses);
            let d = c.decide(state, n as u32, now, true);
            let k_start = now - now % w;
            match d.store {
                Some(s) => {
                    for _ in 0..n {
                        log.record(now);
                    }
                    state = Some(s);
                    let e = now - k_start;
                    let exact = in_window(&log, now, w);
                    let bound = uses + s.prev as u64 * e / w;
                    prop_assert!(exact <= bound, "{} uses in the window at {}, bound {}", exact, now, bound);
                    prop_assert!(exact < 2 * uses);
                }
                None => {
                    // Refused: more than uses - n admitted since the previous window opened.
                    let since = (0..log.len())
                        .filter(|&i| log.get(i) + w >= k_start)
                        .count() as u64;
                    prop_assert!(since + n > uses, "refused with {} since {}", since, k_start - w);
                    // The retry is the first ms at which the call fits, and no earlier one.
                    let at = d.verdict.retry_timestamp.unwrap();
                    prop_assert!(c.decide(state, n as u32, at, false).verdict.allowed);
                    prop_assert!(!c.decide(state, n as u32, at - 1, false).verdict.allowed);
                }
            }
        }
    }

    /// The refill time is when one more use remains, and the reset time when every use does.
    #[test]
    fn refill_and_reset_are_the_first_such_ms(
        (uses, w) in (1u64..10, 1u64..300),
        steps in prop::collection::vec((0u64..100, 1u64..4), 1..40),
    ) {
        let c = counter(uses, w);
        let mut state = None;
        let mut now = 5_000u64;
        for (dt, cost) in steps {
            now += dt;
            let d = c.decide(state, cost.min(uses) as u32, now, true);
            state = d.store.or(state);
            let q = d.verdict.quota;
            let remaining_at = |t: u64| c.decide(state, 1, t, false).verdict.quota.remaining;
            if q.remaining < uses as u32 {
                let at = now + q.refill_after_ms;
                prop_assert!(remaining_at(at) > q.remaining);
                prop_assert!(q.refill_after_ms == 0 || remaining_at(at - 1) <= q.remaining);
            } else {
                prop_assert_eq!(q.refill_after_ms, 0);
            }
            prop_assert_eq!(remaining_at(now + q.reset_after_ms), uses as u32);
        }
    }

    #[test]
    fn the_store_is_the_rule(
        (uses, w) in (1u64..10, 1u64..1_000),
        steps in prop::collection::vec((0u64..700, 0usize..3, 1u64..4, any::<bool>()), 1..80),
    ) {
        let c = counter(uses, w);
        let store = MemoryStore::with_shards(2);
        let mut states: [Option<CounterState>; 3] = [None; 3];
        let mut now = 0u64;
        for (dt, k, cost, peek) in steps {
            now += dt;
            let cost = cost.min(uses);
            let d = c.decide(states[k], cost as u32, now, !peek);
            let key = format!("c{k}");
            let got = if peek {
                store.counter_peek(&key, c, cost, now).unwrap()
            } else {
                store.counter_consume(&key, c, cost, now).unwrap()
            };
            prop_assert_eq!(got, d.verdict);
            states[k] = d.store.or(states[k]);
        }
    }
}

#[test]
fn the_previous_window_weighs_what_the_sliding_window_still_covers() {
    let c = counter(10, 1_000);
    let store = MemoryStore::new();
    // 10 uses at 500 (window 0), then at 1,250 (window 1, e = 250): estimate 10 · 750/1000 = 7.5.
    assert!(store.counter_consume("k", c, 10, 500).unwrap().allowed);
    let v = store.counter_consume("k", c, 2, 1_250).unwrap();
    assert_eq!((v.allowed, v.quota.remaining), (true, 0)); // 7.5 + 2 = 9.5: floor(0.5) left
    let refused = store.counter_consume("k", c, 1, 1_250).unwrap();
    // 7.5 + 2 + 1 > 10 until the previous window weighs 7: e = 300.
    assert_eq!(refused.retry_timestamp, Some(1_300));
    assert!(store.counter_consume("k", c, 1, 1_300).unwrap().allowed);
    assert_eq!(
        store
            .counter_peek("k", c, 1, 1_300)
            .unwrap()
            .quota
            .reset_after_ms,
        1_700
    );
}

#[test]
fn a_clock_that_steps_back_reads_the_key_window_at_its_start() {
    let c = counter(4, 1_000);
    let store = MemoryStore::new();
    assert!(store.counter_consume("k", c, 4, 900).unwrap().allowed);
    assert!(store.counter_consume("k", c, 1, 1_900).unwrap().allowed); // 4 · 0.1 + 1 fits
                                                                       // Back to window 0: read at 1,000 (the previous window at full weight): 4 + 1 > 4.
    let v = store.counter_consume("k", c, 1, 950).unwrap();
    assert!(!v.allowed);
    // 4 · (1000 − e)/1000 + 1 + 1 ≤ 4 from e = 500.
    assert_eq!(v.retry_timestamp, Some(1_500));
}

#[test]
fn out_of_range_is_a_typed_error() {
    let big = Limit::new(1_000_000_000, 86_400_000).unwrap();
    assert_eq!(Counter::new(big).unwrap_err().field, RateField::Uses);
    let c = counter(3, 1_000);
    let store = MemoryStore::new();
    for cost in [0, 4] {
        assert_eq!(
            store.counter_consume("k", c, cost, 0).unwrap_err().field,
            RateField::Cost
        );
    }
    assert!(store.is_empty());
    let _ = store.counter_consume("k", c, 1, 0).unwrap();
    store.purge(1_999);
    assert_eq!(store.len(), 1);
    store.purge(2_000);
    assert!(store.is_empty());
}
