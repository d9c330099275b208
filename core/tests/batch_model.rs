//! Differential property test: the memory store against the plain model of `model/mod.rs` (vectors and
//! linear scans), for both algorithms — the sliding log through batches of up to 40 entries with
//! repeated keys (so the hashed path for batches above 8 entries and the scan below it both run) and
//! the fixed window through hits and attempts — over random operation sequences and clocks.
//!
//! The `memory_model` fuzz target (`fuzz/`) drives the same model with the fuzzer's bytes.

mod model;

use model::{Model, Op, KEYS};
use proptest::prelude::*;
use ratewindow_core::MemoryStore;

fn keys(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..KEYS, 0..max)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => keys(40).prop_map(Op::Consume),
        1 => keys(40).prop_map(Op::Peek),
        2 => keys(8).prop_map(Op::Consume),
        2 => (0..KEYS, -2i64..4).prop_map(|(k, a)| Op::Hit(k, a)),
        2 => (0..KEYS, -1i64..5).prop_map(|(k, m)| Op::Attempt(k, m)),
        1 => (0..KEYS).prop_map(Op::Attempts),
        1 => (0..KEYS).prop_map(Op::Clear),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_store_agrees_with_the_plain_model(
        ops in prop::collection::vec((0u64..30, op()), 1..150),
        start in 0u64..2_000_000,
        shards in prop_oneof![Just(1usize), Just(4), Just(16)],
    ) {
        let store = MemoryStore::with_shards(shards);
        let mut reference = Model::new();
        let mut now = start;
        for (step, op) in &ops {
            now += step;
            let want = reference.apply(op, now);
            let got = model::apply(&store, op, now);
            prop_assert_eq!(got, want, "{:?} at {}", op, now);
        }
    }
}

/// A batch naming each of many keys twice, with different windows: each key is recorded once, and
/// the refusal names the entry with the longest wait (the hashed path finds the first entry of each
/// key; the scan is used only up to 8 entries).
#[test]
fn a_large_batch_with_repeated_keys_records_each_key_once() {
    use ratewindow_core::{Entry, Limit};
    let store = MemoryStore::new();
    let short = Limit::new(1, 1_000).unwrap();
    let long = Limit::new(1, 5_000).unwrap();
    let mut entries: Vec<Entry> = (0..500)
        .map(|i| Entry::new(format!("k{i}"), short))
        .collect();
    entries.extend((0..500).map(|i| Entry::new(format!("k{i}"), long)));
    let consumed = store.consume_many(&entries, 0);
    assert!(consumed.verdict.allowed);
    assert_eq!(consumed.release.unwrap().calls().len(), 500);
    // At 2000 the short windows have let the call go, the long ones have not: entry 500 waits longest.
    let refused = store.peek_many(&entries, 2_000);
    assert_eq!(
        (refused.allowed, refused.blocked, refused.retry_after_ms),
        (false, Some(500), 3_000)
    );
    // Each key was trimmed by its longest window, so the call is still there for the long entry.
    assert!(!store.peek("k499", long, 4_999).allowed);
    assert!(store.peek("k499", long, 5_000).allowed);
}
