//! The fixed window on the memory store, one behaviour a test.

use ratewindow_core::{MemoryStore, Window};

fn decay(ms: u64) -> Window {
    Window::from_ms(ms).unwrap()
}

#[test]
fn the_first_hit_opens_a_window_that_later_hits_do_not_move() {
    let store = MemoryStore::new();
    assert_eq!(store.hit("k", decay(1000), 1, 0), 1);
    assert_eq!(store.hit("k", decay(1000), 1, 999), 2);
    assert_eq!(store.available_in_ms("k", 999), 1);
}

#[test]
fn a_window_that_ended_counts_from_zero() {
    let store = MemoryStore::new();
    assert_eq!(store.hit("k", decay(1000), 4, 0), 4);
    assert_eq!(store.attempts("k", 1000), 0);
    assert_eq!(store.hit("k", decay(1000), 1, 1000), 1);
}

#[test]
fn a_negative_amount_gives_hits_back() {
    let store = MemoryStore::new();
    store.hit("k", decay(1000), 3, 0);
    assert_eq!(store.hit("k", decay(1000), -2, 1), 1);
}

#[test]
fn too_many_attempts_holds_at_or_over_max_while_the_window_runs() {
    let store = MemoryStore::new();
    store.hit("k", decay(1000), 2, 0);
    assert!(store.too_many_attempts("k", 2, 1));
    assert!(!store.too_many_attempts("k", 3, 1));
    assert!(!store.too_many_attempts("k", 2, 1000));
}

#[test]
fn remaining_is_floored_at_zero() {
    let store = MemoryStore::new();
    store.hit("k", decay(1000), 5, 0);
    assert_eq!(store.remaining("k", 3, 1), 0);
    assert_eq!(store.remaining("k", 10, 1), 5);
}

#[test]
fn available_in_rounds_seconds_up() {
    let store = MemoryStore::new();
    store.hit("k", decay(60_000), 1, 0);
    assert_eq!(store.available_in("k", 1), 60);
    assert_eq!(store.available_in("k", 58_999), 2);
    assert_eq!(store.available_in("k", 59_999), 1);
    assert_eq!(store.available_in("k", 60_000), 0);
}

#[test]
fn reset_attempts_clears_the_counter_and_keeps_the_window() {
    let store = MemoryStore::new();
    store.hit("k", decay(1000), 3, 0);
    store.reset_attempts("k", 100);
    assert_eq!(store.attempts("k", 100), 0);
    assert_eq!(store.hit("k", decay(1000), 1, 200), 1);
    assert_eq!(store.available_in_ms("k", 200), 800);
}

#[test]
fn clear_removes_the_counter_and_the_window() {
    let store = MemoryStore::new();
    store.hit("k", decay(1000), 3, 0);
    store.clear("k");
    assert_eq!(store.available_in("k", 100), 0);
    assert_eq!(store.hit("k", decay(1000), 1, 200), 1);
    assert_eq!(store.available_in_ms("k", 200), 1000);
}

#[test]
fn hits_saturate_instead_of_overflowing() {
    let store = MemoryStore::new();
    store.hit("k", decay(1000), i64::MAX, 0);
    assert_eq!(store.hit("k", decay(1000), 1, 1), i64::MAX);
    assert_eq!(store.remaining("k", i64::MIN, 1), 0);
}
