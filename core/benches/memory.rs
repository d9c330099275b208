//! Bytes held per key: 1,000,000 keys with 5 recorded calls each, counted by a global allocator that
//! tracks live heap bytes (what the store asked for; the allocator's own overhead comes on top).
//!
//! `cargo bench -p ratewindow-core --bench memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use ratewindow_core::{Limit, MemoryStore, Window};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 1_000_000;

fn main() {
    // `cargo bench` passes `--bench`; a `cargo test` run of benches passes nothing we need.
    let names: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
    let key_bytes: usize = names.iter().map(|k| k.len()).sum();

    let before = LIVE.load(Ordering::Relaxed);
    let store = MemoryStore::new();
    let limit = Limit::new(5, 600_000).unwrap();
    for call in 0..5u64 {
        for name in &names {
            assert!(store.consume(name, limit, 1_000 + call).allowed);
        }
    }
    let sliding = LIVE.load(Ordering::Relaxed) - before;
    let per_key = sliding as f64 / KEYS as f64;
    let key_text = key_bytes as f64 / KEYS as f64;
    println!(
        "sliding log: {KEYS} keys x 5 calls: {:.1} MB live heap",
        sliding as f64 / 1e6
    );
    println!(
        "  {per_key:.1} bytes per key with its 5 calls = {:.1} per key + 8 per call (key text {key_text:.1} bytes included)",
        per_key - 40.0
    );
    println!(
        "  target: under 150 per key + 8 per call -> {}",
        if per_key - 40.0 < 150.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    drop(store);

    // Weighted calls: one time per use, so a key's memory follows the uses in its window, not the
    // calls: 5 calls costing 20 hold what 100 calls costing 1 hold.
    // (Cargo feature `weights`.)
    #[cfg(feature = "weights")]
    {
        let weighted_keys = KEYS / 10;
        let limit = Limit::new(100, 600_000).unwrap();
        for (calls, cost) in [(5u64, 20u64), (100, 1)] {
            let before = LIVE.load(Ordering::Relaxed);
            let store = MemoryStore::new();
            for call in 0..calls {
                for name in &names[..weighted_keys] {
                    assert!(
                        store
                            .consume_cost(name, limit, cost, 1_000 + call)
                            .unwrap()
                            .allowed
                    );
                }
            }
            let bytes = (LIVE.load(Ordering::Relaxed) - before) as f64 / weighted_keys as f64;
            println!(
                "weighted sliding log: {weighted_keys} keys x {calls} calls of cost {cost}: {bytes:.1} bytes per key, {:.1} per call, {:.2} per use",
                bytes / calls as f64,
                bytes / (calls * cost) as f64
            );
            drop(store);
        }
    }

    let before = LIVE.load(Ordering::Relaxed);
    let store = MemoryStore::new();
    let decay = Window::from_ms(600_000).unwrap();
    for name in &names {
        store.hit(name, decay, 1, 1_000);
    }
    let fixed = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "fixed window: {:.1} bytes per key (key text included)",
        fixed as f64 / KEYS as f64
    );
}
