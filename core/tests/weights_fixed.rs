//! The weighted fixed-window attempt (`Op::AttemptCost`): counted only when count + cost <= max, else
//! nothing. The memory store against a plain model, SQLite against the memory store at the same times
//! (a seeded walk), Redis (`weighted_attempt.lua`, the server's clock) against the model inside one
//! long window, calls costing 1 (`fixed.lua`) on the same key, and exact totals under concurrency.

#![cfg(feature = "weights")]

mod servers;
mod walk;
use walk::{weight_seeds, Rng};

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{Command, Fed, Op, Outcome, Redis};
use ratewindow_core::redis::RedisOptions;
use ratewindow_core::sql::{SqlValue, Sqlite};
use ratewindow_core::{MemoryStore, Window};
use servers::redis_connection as connection;

/// The model: one window (count, ends) or none.
fn model(
    window: &mut Option<(i64, u64)>,
    max: i64,
    cost: i64,
    decay: u64,
    now: u64,
) -> (bool, i64, u64) {
    if let Some((count, ends)) = window {
        if *ends > now {
            if *count + cost <= max {
                *count += cost;
                return (true, *count, *ends - now);
            }
            return (false, *count, *ends - now);
        }
    }
    if cost > max {
        *window = None;
        return (false, 0, 0);
    }
    *window = Some((cost, now + decay));
    (true, cost, decay)
}

#[test]
fn the_memory_store_answers_as_the_model() {
    for seed in weight_seeds() {
        let store = MemoryStore::new();
        let (mut rng, mut window, mut now, mut refused) = (Rng(seed), None, 0u64, 0);
        for step in 0..2_000 {
            let (max, cost, decay) = (
                5 + rng.below(6) as i64,
                1 + rng.below(7) as u32,
                50 + rng.below(100),
            );
            let want = model(&mut window, max, cost.into(), decay, now);
            let got = store
                .attempt_cost("k", max, cost, Window::from_ms(decay).unwrap(), now)
                .unwrap();
            assert_eq!(
                got, want,
                "seed {seed} step {step} at {now}: max {max} cost {cost}"
            );
            refused += usize::from(!got.0);
            now += rng.below(20);
        }
        assert!(refused > 200, "seed {seed}: {refused}");
    }
    let store = MemoryStore::new();
    let e = store
        .attempt_cost("k", 5, 0, Window::from_ms(10).unwrap(), 0)
        .unwrap_err();
    assert_eq!(e.field.name(), "cost");
}

fn lite(path: &std::path::Path) -> rusqlite::Connection {
    let db = rusqlite::Connection::open(path).unwrap();
    db.execute_batch(Sqlite::CONNECTION_SETUP).unwrap();
    db.execute_batch(&Sqlite::default().schema()).unwrap();
    db
}

fn sqlite_op(db: &rusqlite::Connection, op: Op, now: u64) -> Outcome {
    let (result, _) = Sqlite::default().start(op, now).drive(|command| {
        let Command::Sql { statements } = command else {
            return Err("no scripts".to_owned());
        };
        let mut rows = Vec::new();
        for statement in statements {
            let mut st = db.prepare(&statement.sql).map_err(|e| e.to_string())?;
            let params = statement.params.iter().map(|p| match p {
                SqlValue::Int(i) => rusqlite::types::Value::Integer(*i),
                SqlValue::Text(s) => rusqlite::types::Value::Text(s.clone()),
                other => panic!("{other:?}"),
            });
            let columns = st.column_count();
            rows = st
                .query_map(rusqlite::params_from_iter(params), |row| {
                    (0..columns)
                        .map(|i| Ok(SqlValue::Int(row.get::<_, i64>(i)?)))
                        .collect()
                })
                .and_then(|r| r.collect())
                .map_err(|e| e.to_string())?;
        }
        Ok(Fed::Rows(rows))
    });
    result.expect("the call")
}

fn attempt(key: &str, max: i64, cost: u32, decay: u64) -> Op {
    let decay = Window::from_ms(decay).unwrap();
    let key = key.to_owned();
    if cost == 1 && max % 2 == 0 {
        // Half of the calls costing 1 take the unweighted op: both count on one window.
        return Op::Attempt { key, max, decay };
    }
    Op::AttemptCost {
        key,
        max,
        decay,
        cost,
    }
}

fn counted(outcome: Outcome) -> (bool, i64, u64) {
    match outcome {
        Outcome::Attempt {
            allowed,
            count,
            reset_after_ms,
        } => (allowed, count, reset_after_ms),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sqlite_answers_as_the_memory_store() {
    for seed in weight_seeds() {
        let dir =
            std::env::temp_dir().join(format!("ratewindow-wfixed-{}-{seed}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join("db"));
        let db = lite(&dir.join("db"));
        let store = MemoryStore::new();
        let (mut rng, mut now) = (Rng(seed), 1_000u64);
        for step in 0..600 {
            let (max, cost, decay) = (
                5 + rng.below(6) as i64,
                1 + rng.below(7) as u32,
                50 + rng.below(100),
            );
            let got = counted(sqlite_op(&db, attempt("k", max, cost, decay), now));
            let want = store
                .attempt_cost("k", max, cost, Window::from_ms(decay).unwrap(), now)
                .unwrap();
            assert_eq!(
                got, want,
                "seed {seed} step {step} at {now}: max {max} cost {cost}"
            );
            now += rng.below(20);
        }
        let zero = Op::AttemptCost {
            key: "k".into(),
            max: 5,
            decay: Window::from_ms(10).unwrap(),
            cost: 0,
        };
        let (result, _) = Sqlite::default()
            .start(zero, now)
            .drive(|_| Err("runs nothing".to_owned()));
        assert!(result.is_err());
    }
}

fn options(test: &str) -> RedisOptions {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    RedisOptions::default().with_prefix(format!("ratewindow-test:wf:{test}:{nanos}:"))
}

fn redis_op(con: &mut redis::Connection, options: &RedisOptions, op: Op) -> Outcome {
    let (result, _) = Redis::new(options.clone())
        .start(op)
        .drive(|command| servers::redis_answer(con, command));
    result.expect("the call")
}

/// Inside one window of a minute (the server's clock cannot end it during the test), every attempt's
/// counted flag and count are the model's; the ms left only shrink.
#[test]
fn redis_answers_as_the_model_inside_one_window() {
    let mut con = connection();
    for seed in weight_seeds() {
        let options = options(&format!("walk{seed}"));
        let (mut rng, mut window, mut refused, mut last) = (Rng(seed), None, 0, u64::MAX);
        for step in 0..300 {
            let (max, cost) = (6 + rng.below(30) as i64, 1 + rng.below(5) as u32);
            let (want, want_count, _) = model(&mut window, max, cost.into(), 60_000, 0);
            let (got, count, ms_left) = counted(redis_op(
                &mut con,
                &options,
                attempt("k", max, cost, 60_000),
            ));
            assert_eq!(
                (got, count),
                (want, want_count),
                "seed {seed} step {step}: max {max} cost {cost}"
            );
            assert!(ms_left <= last && ms_left > 0 && ms_left <= 60_000);
            last = ms_left;
            refused += usize::from(!got);
        }
        assert!(refused > 50, "seed {seed}: {refused}");
        let (none, count, ms) =
            counted(redis_op(&mut con, &options, attempt("fresh", 2, 3, 1_000)));
        assert_eq!(
            (none, count, ms),
            (false, 0, 0),
            "a cost above max opens nothing"
        );
        let (opened, count, ms) =
            counted(redis_op(&mut con, &options, attempt("fresh", 3, 3, 1_000)));
        assert!(opened && count == 3 && ms == 1_000);
        let _: i64 = redis::cmd("DEL")
            .arg(options.window_key("k"))
            .arg(options.window_key("fresh"))
            .query(&mut con)
            .unwrap();
    }
}

/// 8 threads x 20 attempts costing 3 under a maximum of 50: exactly 16 counted (48 hits).
#[test]
fn redis_counts_exactly_what_fits_under_concurrency() {
    let options = options("race");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let options = options.clone();
            std::thread::spawn(move || {
                let mut con = connection();
                (0..20)
                    .filter(|_| {
                        counted(redis_op(&mut con, &options, attempt("hot", 50, 3, 60_000))).0
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(admitted, 16);
    let mut con = connection();
    let hits: i64 = redis::cmd("GET")
        .arg(options.window_key("hot"))
        .query(&mut con)
        .unwrap();
    assert_eq!(hits, 48);
    let _: i64 = redis::cmd("DEL")
        .arg(options.window_key("hot"))
        .query(&mut con)
        .unwrap();
}
