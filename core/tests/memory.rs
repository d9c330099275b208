//! The memory store as a shared, long-lived object: threads, expiry and memory.

use std::sync::{Arc, Barrier};
use std::thread;

use ratewindow_core::{Entry, Limit, MemoryStore, Window};

#[test]
fn the_store_is_send_and_sync() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<MemoryStore>();
    shared::<ratewindow_core::Release>();
}

/// Runs `f` on 8 threads released at once; returns how many said yes.
fn race(f: impl Fn(usize) -> bool + Send + Sync + 'static) -> usize {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (f, barrier) = (f.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&ok| ok)
        .count()
}

#[test]
fn of_8_concurrent_calls_at_the_limit_exactly_one_passes() {
    for round in 0..50 {
        let store = Arc::new(MemoryStore::new());
        let limit = Limit::new(3, 60_000).unwrap();
        assert!(store.consume("k", limit, 0).allowed);
        assert!(store.consume("k", limit, 0).allowed);
        let s = store.clone();
        assert_eq!(
            race(move |_| s.consume("k", limit, 1).allowed),
            1,
            "round {round}"
        );
    }
}

#[test]
fn of_8_concurrent_batches_at_the_limit_exactly_one_passes() {
    for round in 0..50 {
        let store = Arc::new(MemoryStore::with_shards(4));
        let limit = Limit::new(1, 60_000).unwrap();
        let s = store.clone();
        // Each batch shares "global" and has a key of its own, in shards locked in differing orders.
        let passed = race(move |i| {
            let batch = [
                Entry::new(format!("user:{i}"), limit),
                Entry::new("global", limit),
            ];
            s.consume_many(&batch, 1).verdict.allowed
        });
        assert_eq!(passed, 1, "round {round}");
        let users_counted = (0..8)
            .filter(|i| !store.peek(&format!("user:{i}"), limit, 2).allowed)
            .count();
        assert_eq!(users_counted, 1, "refused batches recorded nothing");
    }
}

#[test]
fn concurrent_fixed_window_hits_are_all_counted() {
    let store = Arc::new(MemoryStore::new());
    let s = store.clone();
    let decay = Window::from_ms(60_000).unwrap();
    race(move |_| {
        for _ in 0..1000 {
            s.hit("k", decay, 1, 5);
        }
        true
    });
    assert_eq!(store.attempts("k", 6), 8000);
}

#[test]
fn a_store_that_saw_many_keys_shrinks_back_as_a_few_are_used() {
    let store = MemoryStore::new();
    let limit = Limit::new(5, 1_000).unwrap();
    let decay = Window::from_ms(1_000).unwrap();
    for i in 0..100_000 {
        assert!(store.consume(&format!("burst:{i}"), limit, 0).allowed);
        store.hit(&format!("fixed:{i}"), decay, 1, 0);
    }
    assert_eq!(store.len(), 200_000);
    // Later, only three keys are used. Every key of the burst has expired; the sweep removes them.
    let mut now = 5_000;
    for op in 0..40_000 {
        now += 1;
        store.consume(["a", "b", "c"][op % 3], limit, now);
    }
    assert_eq!(
        store.len(),
        3,
        "expired keys are swept without a background thread"
    );
}

#[test]
fn purge_removes_every_expired_key_at_once() {
    let store = MemoryStore::new();
    let limit = Limit::new(1, 1_000).unwrap();
    for i in 0..1_000 {
        let _ = store.consume(&format!("k{i}"), limit, i);
    }
    store.purge(1_500); // a call at 500 leaves at exactly 1500: keys 0..=500 have expired
    assert_eq!(store.len(), 499);
}

#[test]
fn a_panic_in_another_thread_does_not_break_the_store() {
    let store = Arc::new(MemoryStore::with_shards(1));
    let s = store.clone();
    let limit = Limit::new(1, 1_000).unwrap();
    // A panic while holding nothing of ours, then use the store: it keeps working.
    let _ = thread::spawn(move || {
        let _ = s.consume("k", limit, 0);
        panic!("a caller's bug");
    })
    .join();
    assert!(!store.consume("k", limit, 1).allowed);
}

#[test]
fn attempt_counts_exactly_max_under_threads() {
    let store = Arc::new(MemoryStore::new());
    let decay = Window::from_ms(60_000).unwrap();
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                (0..50)
                    .filter(|i| store.attempt("job", 5, decay, 1_000 + i % 3).0)
                    .count()
            })
        })
        .collect();
    let counted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(counted, 5);
    assert_eq!(store.attempts("job", 1_002), 5);
    let (allowed, count, ms_left) = store.attempt("job", 5, decay, 1_002);
    assert!(!allowed);
    assert_eq!(count, 5);
    assert!((59_998..=60_000).contains(&ms_left), "{ms_left}");
}

#[test]
fn hit_window_returns_the_count_and_the_end_together() {
    let store = MemoryStore::new();
    let decay = Window::from_ms(1_000).unwrap();
    assert_eq!(store.hit_window("k", decay, 2, 0), (2, 1_000));
    assert_eq!(store.hit_window("k", decay, -1, 400), (1, 600));
    assert_eq!(store.hit("k", decay, 1, 500), 2);
    assert_eq!(store.hit_window("k", decay, 1, 1_000), (1, 1_000));
}
