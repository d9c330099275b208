//! A batch of 100,000 distinct keys on every store: the memory store counts it; the Redis, PostgreSQL
//! and SQLite call machines plan it (start the call and take its first command). Issue 11's target is
//! under 100 ms each; before the batches were hashed, the memory store took seconds at 40,000 keys.
//!
//! `cargo bench -p ratewindow-core --bench batch` (`BATCH_KEYS=40000` for another size). The Redis call
//! machine refuses more than 10,000 entries (`redis::MAX_BATCH`), so its "plan" line times that
//! refusal; `plan_consume_many` times the plan itself at the full size.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ratewindow_core::call::{Next, Op, Redis};
use ratewindow_core::redis::{plan_consume_many, RedisOptions};
use ratewindow_core::sql::{Postgres, SqlNames, Sqlite};
use ratewindow_core::{Entry, Limit, MemoryStore};

fn keys() -> usize {
    std::env::var("BATCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn entries(n: usize) -> Vec<Entry> {
    let limit = Limit::new(5, 60_000).unwrap();
    (0..n)
        .map(|i| Entry::new(format!("user:{i}"), limit))
        .collect()
}

/// Whether the call's first step is a command (planned) rather than an outcome (refused).
fn planned(next: Next<'_>) -> bool {
    matches!(next, Next::Run(_))
}

fn batches(c: &mut Criterion) {
    let n = keys();
    let batch = entries(n);
    let mut group = c.benchmark_group(format!("batch of {n} distinct keys"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("memory: consume_many", |b| {
        b.iter_batched(
            MemoryStore::new,
            // The store and the release are returned, so freeing them is not timed.
            |store| {
                let consumed = store.consume_many(&batch, 1_000);
                (store, black_box(consumed))
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("memory: peek_many (store holding the keys)", |b| {
        let store = MemoryStore::new();
        let _ = store.consume_many(&batch, 1_000);
        b.iter(|| black_box(store.peek_many(&batch, 1_001).allowed))
    });

    // The Redis call machine refuses a batch above `redis::MAX_BATCH` (10,000: what the clients
    // carry) at once; the plan itself (keys, arguments, the release) is timed at this size too.
    for (name, options) in [
        (
            "redis: plan_consume_many (the plan alone)",
            RedisOptions::default(),
        ),
        (
            "redis (hash tag): plan_consume_many (the plan alone)",
            RedisOptions::default().with_hash_tag_before(":").unwrap(),
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(plan_consume_many(&batch, &options, "0123456789abcdef").is_ok()))
        });
    }

    let redis = Redis::new(RedisOptions::default());
    let redis_tagged = Redis::new(RedisOptions::default().with_hash_tag_before(":").unwrap());
    let names = SqlNames::new("bench").unwrap();
    let postgres = Postgres::new(names.clone());
    let sqlite = Sqlite::new(names);
    let op = || Op::Consume {
        entries: batch.clone(),
        call_id: "0123456789abcdef".to_owned(),
    };
    // Each reports whether it planned, once, so a refused batch (a maximum) is visible in the output.
    for (name, start) in [
        ("redis: plan", &|op| redis.start(op)),
        ("redis (hash tag): plan", &|op| redis_tagged.start(op)),
        ("postgres: plan", &|op| postgres.start(op)),
        ("sqlite: plan", &|op| sqlite.start(op, 1_000)),
    ] as [(&str, &dyn Fn(Op) -> ratewindow_core::call::Call); 4]
    {
        let mut call = start(op());
        eprintln!(
            "{name}: {}",
            if planned(call.next()) {
                "planned"
            } else {
                "refused (over its maximum?)"
            }
        );
        group.bench_function(name, |b| {
            b.iter_batched(
                op,
                |op| {
                    let mut call = start(op);
                    black_box(planned(call.next()))
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, batches);
criterion_main!(benches);
