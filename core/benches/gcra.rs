//! GCRA in the core (`MemoryStore::gcra_consume`) against governor's keyed limiter (a DashMap of
//! String keys, `check_key`) at 10,000 keys round-robin, allowed and refused variants, both on
//! simulated time: governor on its `FakeRelativeClock`, ours with a `now` argument, both advancing
//! 1 ms every 1,000 calls.
//!
//! Two measures:
//! 1. Criterion's wall-clock time per call (`gcra/...` and `governor-gcra/...`), and its ratio.
//! 2. Interleaved rounds of thread CPU time (from `/proc/thread-self/schedstat`, ns): in each round
//!    both sides run `RW_GCRA_CALLS` calls (default 2,000,000) one after the other, the order
//!    alternating; the median of the per-round ratios is printed. CPU time does not count the time
//!    the thread waited for a core, so it holds better on a loaded machine.
//!
//! ```text
//! cargo bench -p ratewindow-core --bench gcra                 # both
//! RW_GCRA_ROUNDS=15 cargo bench -p ratewindow-core --bench gcra -- --rounds-only
//! ```
//! `RW_GCRA_ROUNDS` sets the rounds (default 9), `RW_GCRA_VARIANTS` a comma list of the variants
//! to run in the rounds (default all); `--rounds-only` skips Criterion. Instructions per call,
//! load-independent (the binary is the one cargo bench built, `target/release/deps/gcra-*`):
//! `RW_GCRA_ROUNDS=1 RW_GCRA_CALLS=200000 RW_GCRA_VARIANTS=refused valgrind --tool=callgrind
//! target/release/deps/gcra-<hash> --rounds-only`, then `callgrind_annotate --inclusive=yes` and
//! divide `Ours::call` / `Theirs::call` (or `gcra_consume` / `check_key`) by the calls (220,000:
//! 20,000 warm-up calls and 200,000 measured, per side).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::Criterion;
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use ratewindow_core::gcra::Gcra;
use ratewindow_core::MemoryStore;

const KEYS: usize = 10_000;
const START: u64 = 1_700_000_000_000;

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("user:{i}")).collect()
}

/// The variants: (ours, governor's).
/// - "allowed": 99 a second (T = 10.1 ms) with a burst of 1,000; each key comes back every 10 ms of
///   simulated time, so every call is allowed and every key stays live (both sides find the key and
///   update it in place).
/// - "allowed-expiring": 1,000 a second with a burst of 1,000: a key's bucket is full again 1 ms
///   after its call, so our store removes it (its memory back) and re-creates it on its next call;
///   governor keeps every key until `retain_recent` is called.
/// - "refused": 1 an hour with a burst of 1: every call after a key's first is refused.
const VARIANTS: [&str; 3] = ["allowed", "allowed-expiring", "refused"];

fn limits(variant: &str) -> (Gcra, Quota) {
    match variant {
        "allowed" => (
            Gcra::new(99, 1_000, 1_000).unwrap(),
            Quota::with_period(Duration::from_micros(10_101))
                .unwrap()
                .allow_burst(NonZeroU32::new(1_000).unwrap()),
        ),
        "allowed-expiring" => (
            Gcra::new(1_000, 1_000, 1_000).unwrap(),
            Quota::per_second(NonZeroU32::new(1_000).unwrap()),
        ),
        _ => (
            Gcra::new(1, 3_600_000, 1).unwrap(),
            Quota::per_hour(NonZeroU32::new(1).unwrap()),
        ),
    }
}

struct Ours {
    store: MemoryStore,
    gcra: Gcra,
    i: u64,
}

impl Ours {
    fn new(variant: &str) -> Ours {
        Ours {
            store: MemoryStore::new(),
            gcra: limits(variant).0,
            i: 0,
        }
    }

    // Not inlined, so callgrind gives each side's whole call (its loop step, clock and limiter).
    #[inline(never)]
    fn call(&mut self, ks: &[String]) -> bool {
        self.i += 1;
        let now = START + self.i / 1000;
        let key = &ks[self.i as usize % KEYS];
        self.store
            .gcra_consume(key, self.gcra, 1, now)
            .is_ok_and(|v| v.allowed)
    }
}

type Governor = RateLimiter<
    String,
    governor::state::keyed::DefaultKeyedStateStore<String>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
>;

struct Theirs {
    limiter: Governor,
    clock: FakeRelativeClock,
    i: u64,
}

impl Theirs {
    fn new(variant: &str) -> Theirs {
        let clock = FakeRelativeClock::default();
        Theirs {
            limiter: RateLimiter::dashmap_with_clock(limits(variant).1, clock.clone()),
            clock,
            i: 0,
        }
    }

    // Not inlined, so callgrind gives each side's whole call (its loop step, clock and limiter).
    #[inline(never)]
    fn call(&mut self, ks: &[String]) -> bool {
        self.i += 1;
        if self.i % 1000 == 0 {
            self.clock.advance(Duration::from_millis(1));
        }
        self.limiter.check_key(&ks[self.i as usize % KEYS]).is_ok()
    }
}

fn bench(c: &mut Criterion) {
    let ks = keys();
    for variant in VARIANTS {
        let mut g = c.benchmark_group("gcra");
        g.bench_function(format!("{variant}/{KEYS} keys"), |b| {
            let mut ours = Ours::new(variant);
            b.iter(|| black_box(ours.call(&ks)))
        });
        g.finish();
        let mut g = c.benchmark_group("governor-gcra");
        g.bench_function(format!("{variant}/{KEYS} keys"), |b| {
            let mut theirs = Theirs::new(variant);
            b.iter(|| black_box(theirs.call(&ks)))
        });
        g.finish();
    }
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

/// This thread's CPU time so far, in ns.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rounds() {
    let rounds: usize = std::env::var("RW_GCRA_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let calls: u64 = std::env::var("RW_GCRA_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let ks = keys();
    println!(
        "\nGCRA vs governor, {KEYS} keys round-robin: thread CPU ns per call, {rounds} interleaved rounds of {calls} calls"
    );
    let only = std::env::var("RW_GCRA_VARIANTS").unwrap_or_default();
    for variant in VARIANTS {
        if !only.is_empty() && !only.split(',').any(|v| v == variant) {
            continue;
        }
        let (mut ours, mut theirs) = (Ours::new(variant), Theirs::new(variant));
        // Warm: every key exists on both sides.
        for _ in 0..2 * KEYS {
            black_box(ours.call(&ks));
            black_box(theirs.call(&ks));
        }
        let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let mut allowed = (0u64, 0u64);
        for round in 0..rounds {
            let mut run_ours = || {
                let t = cpu_ns();
                for _ in 0..calls {
                    allowed.0 += ours.call(&ks) as u64;
                }
                (cpu_ns() - t) as f64 / calls as f64
            };
            let (x, y);
            if round % 2 == 0 {
                x = run_ours();
                let t = cpu_ns();
                for _ in 0..calls {
                    allowed.1 += theirs.call(&ks) as u64;
                }
                y = (cpu_ns() - t) as f64 / calls as f64;
            } else {
                let t = cpu_ns();
                for _ in 0..calls {
                    allowed.1 += theirs.call(&ks) as u64;
                }
                y = (cpu_ns() - t) as f64 / calls as f64;
                x = run_ours();
            }
            a.push(x);
            b.push(y);
            ratios.push(y / x);
        }
        let total = calls * rounds as u64;
        println!(
            "  {variant}: ours {:.1} ns, governor {:.1} ns (medians); speed ratio governor/ours median {:.2} (rounds {:.2}..{:.2}); allowed ours {} / governor {} of {total}",
            median(a),
            median(b),
            median(ratios.clone()),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
            allowed.0,
            allowed.1,
        );
    }
}

fn main() {
    let rounds_only = std::env::args().any(|a| a == "--rounds-only");
    if !rounds_only {
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3))
            .configure_from_args();
        bench(&mut c);
        c.final_summary();
        println!("\nGCRA vs governor, Criterion wall clock (speed ratio = governor ns / ours ns; >= 1.0 is the target):");
        for variant in VARIANTS {
            let id = format!("{variant}/{KEYS} keys");
            match (mean_ns("gcra", &id), mean_ns("governor-gcra", &id)) {
                (Some(a), Some(b)) => println!(
                    "  {id:<22} ours {a:7.1} ns   governor {b:7.1} ns   speed ratio {:.2}",
                    b / a
                ),
                _ => println!("  {id}: not measured in this run"),
            }
        }
    }
    rounds();
}
