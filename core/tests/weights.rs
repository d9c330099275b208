//! Weighted calls on the sliding log against a plain model: a list of (time, cost, id) calls, summed
//! by a linear scan, the wait found by trying every moment a call leaves. One key, a monotonic clock
//! (the store's horizon is then `now`), consumes and peeks of costs 1..=uses, releases of any earlier
//! call. The weight vectors (`tests/vectors/weights/`) pin the fields case by case.

#![cfg(feature = "weights")]

use proptest::prelude::*;
use ratewindow_core::{Entry, Limit, MemoryStore, Release};

#[derive(Debug, Clone)]
enum Op {
    Consume(u64, u32),
    Peek(u64, u32),
    Release(u64, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..30u64, 1..=6u32).prop_map(|(dt, c)| Op::Consume(dt, c)),
        1 => (0..30u64, 1..=6u32).prop_map(|(dt, c)| Op::Peek(dt, c)),
        1 => (0..30u64, 0..40usize).prop_map(|(dt, i)| Op::Release(dt, i)),
    ]
}

/// Uses held at `t` by the model's calls in a window of `w`.
fn held(calls: &[(u64, u32, usize)], t: u64, w: u64) -> u64 {
    calls
        .iter()
        .filter(|c| t < c.0 + w)
        .map(|c| c.1 as u64)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn weighted_calls_agree_with_the_plain_model(
        uses in 1..=6u64,
        window in 1..=60u64,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let limit = Limit::new(uses, window).unwrap();
        let store = MemoryStore::new();
        let mut model: Vec<(u64, u32, usize)> = Vec::new();
        let mut releases: Vec<Option<Release>> = Vec::new();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Consume(dt, cost) | Op::Peek(dt, cost) => {
                    now += dt;
                    let cost = cost.min(uses as u32);
                    let consume = matches!(op, Op::Consume(..));
                    let inside = held(&model, now, window);
                    let allowed = inside + cost as u64 <= uses;
                    // The first moment `cost` more fit: every candidate is a time a call leaves.
                    let until = (!allowed).then(|| {
                        model
                            .iter()
                            .map(|c| c.0 + window)
                            .filter(|&t| t > now && held(&model, t, window) + cost as u64 <= uses)
                            .min()
                            .expect("a call leaves")
                    });
                    let entries = [Entry::with_cost("k", limit, cost.into()).unwrap()];
                    let verdict = if consume {
                        let consumed = store.consume_many(&entries, now);
                        releases.push(consumed.release);
                        consumed.verdict
                    } else {
                        store.peek_many(&entries, now)
                    };
                    if consume && allowed {
                        model.push((now, cost, releases.len() - 1));
                    }
                    let after = held(&model, now, window);
                    prop_assert_eq!(verdict.allowed, allowed, "at {} cost {}", now, cost);
                    prop_assert_eq!(verdict.retry_timestamp, until);
                    prop_assert_eq!(verdict.quota.remaining as u64, uses.saturating_sub(after));
                    let newest = model.iter().map(|c| c.0 + window).filter(|&t| t > now).max();
                    let reset = newest.map_or(0, |t| t - now).max(verdict.retry_after_ms);
                    prop_assert_eq!(verdict.quota.reset_after_ms, reset);
                    // Single calls agree with the batch of one.
                    let single = store.peek_cost("k", limit, cost.into(), now).unwrap();
                    let again = store.peek_many(&entries, now);
                    prop_assert_eq!(single.allowed, again.allowed);
                    prop_assert_eq!(single.retry_timestamp, again.retry_timestamp);
                    prop_assert_eq!(single.quota, again.quota);
                }
                Op::Release(dt, i) => {
                    now += dt;
                    if releases.is_empty() {
                        continue;
                    }
                    let i = i % releases.len();
                    if let Some(release) = releases[i].take() {
                        store.release(release, now);
                        // The call's uses come back if it is still inside its window.
                        model.retain(|c| !(c.2 == i && now < c.0 + window));
                    }
                }
            }
            // Calls that have left can never count again: the model forgets them as the store does.
            model.retain(|c| now < c.0 + window);
        }
    }
}

#[test]
fn consume_cost_and_peek_cost_refuse_costs_outside_the_limit() {
    let store = MemoryStore::new();
    let limit = Limit::new(3, 1_000).unwrap();
    for cost in [0, 4, u64::MAX] {
        let e = store.consume_cost("k", limit, cost, 0).unwrap_err();
        assert_eq!(e.field.name(), "cost");
        assert!(store.peek_cost("k", limit, cost, 0).is_err());
    }
    for cost in [0.0, -1.0, 1.5, f64::NAN, 4.0] {
        let e = ratewindow_core::check_cost_f64(cost, limit).unwrap_err();
        assert_eq!(e.field.name(), "cost", "{cost}");
    }
    assert_eq!(ratewindow_core::check_cost_f64(3.0, limit), Ok(3));
    assert_eq!(
        store
            .consume_cost("k", limit, 3, 0)
            .unwrap()
            .quota
            .remaining,
        0
    );
}
