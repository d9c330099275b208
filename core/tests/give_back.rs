//! Giving back GCRA and counter uses (`gcra_consume_with_release`, `counter_consume_with_release`,
//! the GCRA and counter entries of `consume_mixed`): checked against a second store that never saw
//! the released call, over random histories on one key.
//!
//! - Nothing recorded since the call: the key is exactly as without it.
//! - Calls recorded since: never more uses than without the call (the rule's bound holds), never
//!   fewer than before the release; the counter (sums of uses) is exact.
#![cfg(feature = "rates")]

use proptest::prelude::*;
use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::Gcra;
use ratewindow_core::{Limit, MemoryStore, MixedEntry, Rule, Verdict};

/// (time step, cost) of each call; the released call is `calls[a]`, released `gap` ms after the last.
fn history() -> impl Strategy<Value = (Vec<(u64, u64)>, usize, u64)> {
    (1usize..12)
        .prop_flat_map(|n| {
            (
                prop::collection::vec((0u64..400, 1u64..4), n),
                0..n,
                0u64..600,
            )
        })
        .prop_map(|(calls, a, gap)| (calls, a, gap))
}

/// (remaining, reset_after_ms) of a peek of cost 1.
fn state(v: Verdict) -> (u32, u64) {
    (v.quota.remaining, v.quota.reset_after_ms)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, max_global_rejects: 1_000_000, ..ProptestConfig::default() })]

    #[test]
    fn a_gcra_give_back_never_returns_more_than_the_call_holds(
        (calls, a, gap) in history(),
        uses in 1u64..7,
        window_ms in 1u64..1_500,
        extra in 0u64..4,
    ) {
        let g = Gcra::new(uses, window_ms, uses + extra).unwrap();
        let (with, without) = (MemoryStore::with_shards(1), MemoryStore::with_shards(1));
        let (mut now, mut release, mut later) = (1_000u64, None, false);
        for (i, &(step, cost)) in calls.iter().enumerate() {
            now += step;
            let cost = cost.min(g.burst() as u64);
            if i == a {
                let (v, r) = with.gcra_consume_with_release("k", g, cost, now).unwrap();
                prop_assume!(v.allowed);
                release = r;
                continue;
            }
            let x = with.gcra_consume("k", g, cost, now).unwrap();
            let y = without.gcra_consume("k", g, cost, now).unwrap();
            // Histories where the call changed a later decision are not the same calls.
            prop_assume!(x.allowed == y.allowed);
            later |= i > a && x.allowed;
        }
        now += gap;
        let before_release = state(with.gcra_peek("k", g, 1, now).unwrap());
        with.release(release.expect("allowed"), now);
        for t in [now, now + window_ms / 3, now + window_ms, now + 3 * window_ms] {
            let (released, without) = (
                state(with.gcra_peek("k", g, 1, t).unwrap()),
                state(without.gcra_peek("k", g, 1, t).unwrap()),
            );
            if later {
                prop_assert!(released.0 <= without.0 && released.1 >= without.1, "{released:?} {without:?} at {t}");
            } else {
                prop_assert_eq!(released, without, "at {}", t);
            }
            if t == now {
                prop_assert!(released.0 >= before_release.0 && released.1 <= before_release.1);
            }
        }
    }

    #[test]
    fn a_counter_give_back_is_exact(
        (calls, a, gap) in history(),
        uses in 2u64..9,
        window_ms in 1u64..1_500,
    ) {
        let c = Counter::new(Limit::new(uses, window_ms).unwrap()).unwrap();
        let (with, without) = (MemoryStore::with_shards(1), MemoryStore::with_shards(1));
        let (mut now, mut release) = (1_000u64, None);
        for (i, &(step, cost)) in calls.iter().enumerate() {
            now += step;
            let cost = cost.min(uses);
            if i == a {
                let (v, r) = with.counter_consume_with_release("k", c, cost, now).unwrap();
                prop_assume!(v.allowed);
                release = r;
                continue;
            }
            let x = with.counter_consume("k", c, cost, now).unwrap();
            let y = without.counter_consume("k", c, cost, now).unwrap();
            prop_assume!(x.allowed == y.allowed);
        }
        now += gap;
        with.release(release.expect("allowed"), now);
        for t in [now, now + window_ms / 3, now + window_ms, now + 3 * window_ms] {
            prop_assert_eq!(
                with.counter_peek("k", c, 1, t).unwrap(),
                without.counter_peek("k", c, 1, t).unwrap(),
                "at {}", t
            );
        }
    }
}

#[test]
fn a_mixed_batch_gives_back_every_entry() {
    let store = MemoryStore::new();
    let g = Gcra::new(10, 1_000, 10).unwrap();
    let c = Counter::new(Limit::new(10, 1_000).unwrap()).unwrap();
    let s = Limit::new(3, 1_000).unwrap();
    let peeks = |t| {
        (
            store.gcra_peek("g", g, 1, t).unwrap(),
            store.counter_peek("c", c, 1, t).unwrap(),
            store.peek("s", s, t),
        )
    };
    assert!(store.gcra_consume("g", g, 2, 0).unwrap().allowed);
    assert!(store.counter_consume("c", c, 2, 0).unwrap().allowed);
    let before = peeks(10);
    let batch = store
        .consume_mixed(
            &[
                MixedEntry::new("g", Rule::Gcra(g), 3),
                MixedEntry::new("c", Rule::Counter(c), 4),
                MixedEntry::new("g", Rule::Gcra(g), 1), // the same key: 4 uses in all
                MixedEntry::new("s", Rule::Sliding(s), 1),
            ],
            10,
        )
        .unwrap();
    assert!(batch.verdict.allowed);
    assert_ne!(peeks(10), before);
    store.release(batch.release.unwrap(), 10);
    assert_eq!(peeks(10), before);
}

#[test]
fn single_calls_give_back_their_cost() {
    let store = MemoryStore::new();
    let g = Gcra::new(10, 1_000, 10).unwrap(); // T = 100 ms
    let (v, first) = store.gcra_consume_with_release("k", g, 4, 0).unwrap();
    assert_eq!(v.quota.remaining, 6);
    let (v, _) = store.gcra_consume_with_release("k", g, 3, 0).unwrap();
    assert_eq!(v.quota.remaining, 3);
    // Calls since, but the horizon (0) is not past the first call's start: all 4 come back.
    store.release(first.unwrap(), 0);
    assert_eq!(store.gcra_peek("k", g, 1, 0).unwrap().quota.remaining, 7);
    // A refusal gives nothing to release.
    let (v, none) = store.gcra_consume_with_release("k", g, 10, 0).unwrap();
    assert!(!v.allowed && none.is_none());
    let c = Counter::new(Limit::new(5, 1_000).unwrap()).unwrap();
    let (_, r) = store.counter_consume_with_release("n", c, 5, 0).unwrap();
    assert!(!store.counter_consume("n", c, 1, 1).unwrap().allowed);
    store.release(r.unwrap(), 1);
    assert_eq!(store.counter_peek("n", c, 1, 1).unwrap().quota.remaining, 5);
    assert_eq!(store.len(), 1); // the counter key is empty again: removed
}
