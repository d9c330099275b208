//! The sliding window log on the memory store, one behaviour a test.

use ratewindow_core::{BatchVerdict, Entry, Limit, MemoryStore, Quota, Verdict};

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

fn refused(now: u64, until: u64) -> Verdict {
    Verdict::refused(now, until)
}

/// The verdict without its quota (the quota is pinned in `memory.rs` and the vectors).
fn bare(v: Verdict) -> Verdict {
    v.with_quota(Quota::NONE)
}

#[test]
fn allows_uses_calls_within_the_window_then_refuses() {
    let store = MemoryStore::new();
    let l = limit(3, 1000);
    for now in 0..3 {
        assert_eq!(bare(store.consume("k", l, now)), Verdict::ALLOWED);
    }
    assert_eq!(bare(store.consume("k", l, 3)), refused(3, 1000));
}

#[test]
fn a_call_leaves_the_window_at_exactly_t_plus_window() {
    let store = MemoryStore::new();
    let l = limit(1, 1000);
    assert!(store.consume("k", l, 0).allowed);
    assert_eq!(bare(store.consume("k", l, 999)), refused(999, 1000));
    assert!(store.consume("k", l, 1000).allowed);
}

#[test]
fn the_window_slides_rather_than_resetting_in_buckets() {
    let store = MemoryStore::new();
    let l = limit(2, 1000);
    assert!(store.consume("k", l, 500).allowed);
    assert!(store.consume("k", l, 900).allowed);
    // A bucketed window would reset at 1000.
    assert_eq!(bare(store.consume("k", l, 1000)), refused(1000, 1500));
    assert!(store.consume("k", l, 1500).allowed);
    assert_eq!(bare(store.consume("k", l, 1700)), refused(1700, 1900));
}

#[test]
fn retry_after_is_at_least_one_ms() {
    let store = MemoryStore::new();
    let l = limit(1, 1);
    assert!(store.consume("k", l, 10).allowed);
    assert_eq!(bare(store.consume("k", l, 10)), refused(10, 11));
}

#[test]
fn every_refusal_in_one_wait_gives_the_same_retry_timestamp() {
    let store = MemoryStore::new();
    let l = limit(1, 1000);
    assert!(store.consume("k", l, 100).allowed);
    let stamps: Vec<_> = [200, 500, 1099]
        .iter()
        .map(|&t| store.consume("k", l, t).retry_timestamp)
        .collect();
    assert_eq!(stamps, vec![Some(1100); 3]);
}

#[test]
fn same_millisecond_calls_count_apart() {
    let store = MemoryStore::new();
    let l = limit(3, 1000);
    for _ in 0..3 {
        assert!(store.consume("k", l, 5).allowed);
    }
    assert!(!store.consume("k", l, 5).allowed);
}

#[test]
fn keys_count_apart() {
    let store = MemoryStore::new();
    let l = limit(1, 1000);
    assert!(store.consume("a", l, 0).allowed);
    assert!(store.consume("b", l, 0).allowed);
    assert!(!store.consume("a", l, 1).allowed);
}

#[test]
fn a_lowered_limit_waits_on_the_oldest_of_the_newest_uses_calls() {
    let store = MemoryStore::new();
    for t in [0, 100, 200, 300] {
        assert!(store.consume("k", limit(5, 1000), t).allowed);
    }
    assert_eq!(
        bare(store.consume("k", limit(2, 1000), 400)),
        refused(400, 1200)
    );
    assert_eq!(
        bare(store.consume("k", limit(1, 1000), 400)),
        refused(400, 1300)
    );
}

#[test]
fn a_clock_that_steps_back_records_max_of_now_and_newest() {
    let store = MemoryStore::new();
    let l = limit(2, 1000);
    assert!(store.consume("k", l, 1000).allowed);
    assert!(store.consume("k", l, 500).allowed); // recorded at 1000
    assert_eq!(bare(store.consume("k", l, 1999)), refused(1999, 2000));
    assert!(store.consume("k", l, 2000).allowed);
}

#[test]
fn consume_many_records_against_every_entry_only_if_all_allow() {
    let store = MemoryStore::new();
    let (a, b) = (limit(1, 1000), limit(1, 1000));
    assert!(store.consume("b", b, 0).allowed);
    let batch = [Entry::new("a", a), Entry::new("b", b)];
    let refused = store.consume_many(&batch, 10);
    assert_eq!(refused.verdict.blocked, Some(1));
    assert!(refused.release.is_none());
    assert!(
        store.consume("a", a, 20).allowed,
        "the refused batch recorded nothing on `a`"
    );
}

#[test]
fn consume_many_names_the_longest_wait_and_ties_keep_the_first() {
    let store = MemoryStore::new();
    for (k, w) in [("a", 1000), ("b", 5000), ("c", 5000)] {
        assert!(store.consume(k, limit(1, w), 0).allowed);
    }
    let v = store
        .consume_many(
            &[
                Entry::new("a", limit(1, 1000)),
                Entry::new("b", limit(1, 5000)),
                Entry::new("c", limit(1, 5000)),
            ],
            100,
        )
        .verdict;
    assert_eq!(
        v,
        BatchVerdict {
            allowed: false,
            retry_after_ms: 4900,
            retry_timestamp: Some(5000),
            blocked: Some(1),
            quota: Quota {
                limit: 1,
                remaining: 0,
                refill_after_ms: 4900,
                reset_after_ms: 4900,
            },
        }
    );
}

#[test]
fn peek_many_answers_like_consume_many_and_records_nothing() {
    let store = MemoryStore::new();
    let l = limit(1, 1000);
    assert!(store.consume("a", l, 0).allowed);
    let batch = [Entry::new("b", l), Entry::new("a", l)];
    let peeked = store.peek_many(&batch, 10);
    assert_eq!(peeked, store.consume_many(&batch, 10).verdict);
    assert!(store.peek_many(&[Entry::new("fresh", l)], 10).allowed);
    assert_eq!(store.len(), 1, "peeks created no key");
    assert!(store.consume("fresh", l, 10).allowed);
}

#[test]
fn an_empty_batch_is_allowed_and_records_nothing() {
    let store = MemoryStore::new();
    let consumed = store.consume_many(&[], 0);
    assert_eq!(
        consumed.verdict.with_quota(Quota::NONE),
        BatchVerdict::ALLOWED
    );
    assert!(store.is_empty());
}

#[test]
fn release_gives_back_exactly_its_own_call() {
    let store = MemoryStore::new();
    let l = limit(2, 1000);
    let batch = [Entry::new("k", l)];
    let _first = store.consume_many(&batch, 0);
    let second = store.consume_many(&batch, 0);
    store.release(second.release.unwrap(), 1);
    assert!(store.consume("k", l, 2).allowed);
    assert!(
        !store.consume("k", l, 3).allowed,
        "only one call was given back"
    );
}

#[test]
fn a_release_after_the_call_left_its_window_does_nothing() {
    let store = MemoryStore::new();
    let l = limit(1, 1000);
    let old = store.consume_many(&[Entry::new("k", l)], 0);
    assert!(store.consume("k", l, 1000).allowed);
    store.release(old.release.unwrap(), 1500);
    assert!(!store.consume("k", l, 1600).allowed);
}

#[test]
fn a_release_from_another_store_does_nothing() {
    let (one, two) = (MemoryStore::new(), MemoryStore::new());
    let l = limit(1, 1000);
    let consumed = one.consume_many(&[Entry::new("k", l)], 0);
    assert!(two.consume("k", l, 0).allowed);
    two.release(consumed.release.unwrap(), 1);
    assert!(!two.consume("k", l, 2).allowed);
}

#[test]
fn a_release_from_an_earlier_life_of_a_swept_key_leaves_the_new_calls_alone() {
    let store = MemoryStore::new();
    let l = limit(1, 1000);
    let old = store.consume_many(&[Entry::new("k", l)], 0);
    store.purge(5000); // the key expired and is gone
    assert!(store.is_empty());
    // The clock steps back to the very millisecond of the old call: a new life records the same time.
    assert!(store.consume("k", l, 0).allowed);
    store.release(old.release.unwrap(), 1);
    assert!(
        !store.consume("k", l, 2).allowed,
        "the new call is still counted"
    );
}
