//! Criterion benchmarks of the engine, with the `governor` crate's keyed GCRA limiter on the same key
//! patterns in the same run. After the run it prints our time per operation as a ratio to governor's.
//!
//! `cargo bench -p ratewindow-core --bench engine`

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::Criterion;
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use ratewindow_core::{Entry, Limit, MemoryStore, Window};

/// 5 uses per 10 s, the pattern of the issue.
fn limit() -> Limit {
    Limit::new(5, 10_000).unwrap()
}

/// The same in GCRA terms: a burst of 5, one use back every 2 s.
fn quota() -> Quota {
    Quota::with_period(Duration::from_secs(2))
        .unwrap()
        .allow_burst(NonZeroU32::new(5).unwrap())
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i}")).collect()
}

/// Simulated time: one operation a microsecond, so a key round-robin of 10,000 sees each key every 10 ms.
fn now_of(i: u64) -> u64 {
    1_700_000_000_000 + i / 1000
}

fn sliding(c: &mut Criterion) {
    let mut g = c.benchmark_group("sliding");
    g.bench_function("consume/hot key", |b| {
        let store = MemoryStore::new();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(store.consume("user:1", limit(), now_of(i)))
        })
    });
    for n in [10_000usize, 1_000_000] {
        let ks = keys(n);
        g.bench_function(format!("consume/{n} keys"), |b| {
            let store = MemoryStore::new();
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                black_box(store.consume(&ks[i as usize % n], limit(), now_of(i)))
            })
        });
    }
    let ks = keys(10_000);
    g.bench_function("consume_many of 3/10000 keys", |b| {
        let store = MemoryStore::new();
        let everyone = Limit::new(1_000_000, 60_000).unwrap();
        let per_channel = Limit::new(50, 10_000).unwrap();
        let batches: Vec<[Entry; 3]> = (0..10_000)
            .map(|i| {
                [
                    Entry::new(ks[i].clone(), limit()),
                    Entry::new(format!("channel:{}", i % 100), per_channel),
                    Entry::new("everyone", everyone),
                ]
            })
            .collect();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(
                store
                    .consume_many(&batches[i as usize % 10_000], now_of(i))
                    .verdict,
            )
        })
    });
    g.bench_function("peek/10000 keys", |b| {
        let store = MemoryStore::new();
        for (i, k) in ks.iter().enumerate() {
            let _ = store.consume(k, limit(), now_of(i as u64));
        }
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(store.peek(&ks[i as usize % 10_000], limit(), now_of(10_000 + i)))
        })
    });
    g.bench_function("consume_many of 1 + release/hot key", |b| {
        let store = MemoryStore::new();
        let batch = [Entry::new("user:1", limit())];
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            let consumed = store.consume_many(&batch, now_of(i));
            store.release(
                consumed.release.expect("every call is given back"),
                now_of(i),
            );
        })
    });
    g.finish();
}

fn fixed(c: &mut Criterion) {
    let mut g = c.benchmark_group("fixed");
    let decay = Window::from_ms(10_000).unwrap();
    let ks = keys(10_000);
    g.bench_function("hit/10000 keys", |b| {
        let store = MemoryStore::new();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(store.hit(&ks[i as usize % 10_000], decay, 1, now_of(i)))
        })
    });
    g.finish();
}

fn governor(c: &mut Criterion) {
    let mut g = c.benchmark_group("governor");
    g.bench_function("check_key/hot key", |b| {
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::dashmap_with_clock(quota(), clock.clone());
        let key = "user:1".to_owned();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            if i % 1000 == 0 {
                clock.advance(Duration::from_millis(1));
            }
            black_box(limiter.check_key(&key).is_ok())
        })
    });
    for n in [10_000usize, 1_000_000] {
        let ks = keys(n);
        g.bench_function(format!("check_key/{n} keys"), |b| {
            let clock = FakeRelativeClock::default();
            let limiter = RateLimiter::dashmap_with_clock(quota(), clock.clone());
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                if i % 1000 == 0 {
                    clock.advance(Duration::from_millis(1));
                }
                black_box(limiter.check_key(&ks[i as usize % n]).is_ok())
            })
        });
    }
    g.finish();
}

/// Mean time per iteration of one benchmark, from Criterion's saved estimates.
fn mean_ns(group: &str, id: &str) -> Option<f64> {
    let dir: String = id.chars().map(|c| if c == '/' { '_' } else { c }).collect();
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).parent()?;
    let path = target
        .join("criterion")
        .join(group)
        .join(dir)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn ratios() {
    println!("\nratewindow vs governor (time per op, ours / theirs; < 1 is faster):");
    let pairs = [
        ("sliding", "consume/hot key", "check_key/hot key", 1.5),
        ("sliding", "consume/10000 keys", "check_key/10000 keys", 1.5),
        (
            "sliding",
            "consume/1000000 keys",
            "check_key/1000000 keys",
            1.5,
        ),
        ("fixed", "hit/10000 keys", "check_key/10000 keys", 1.0),
    ];
    for (group, ours, theirs, target) in pairs {
        match (mean_ns(group, ours), mean_ns("governor", theirs)) {
            (Some(a), Some(b)) => println!(
                "  {group}/{ours:<22} {a:8.1} ns   governor {theirs:<24} {b:8.1} ns   ratio {:.2} (target <= {target})",
                a / b
            ),
            _ => println!("  {group}/{ours}: not measured in this run (filtered out?)"),
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    sliding(&mut c);
    fixed(&mut c);
    governor(&mut c);
    c.final_summary();
    ratios();
}
