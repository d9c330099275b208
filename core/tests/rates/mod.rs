//! The GCRA and counter vectors (`tests/vectors/gcra/`, `tests/vectors/counter/`) as call-machine
//! operations, for the suites that run them on real stores (`rates_redis.rs`, `rates_sql.rs`).

#![allow(dead_code)]

use std::path::PathBuf;

use ratewindow_core::call::{CallError, Outcome, RateOp};
use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::{Gcra, RateError, RateField};
use ratewindow_core::{Limit, LimitField, MemoryStore};
use serde_json::{json, Value};

pub fn files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut out = Vec::new();
    for dir in ["gcra", "counter"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .expect("vector directory")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        out.extend(files);
    }
    out
}

fn num(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

fn error(e: RateError) -> Value {
    json!({ "error": "invalid_rate", "field": e.field.name() })
}

pub fn gcra(limit: &Value) -> Result<Gcra, RateError> {
    let uses = num(limit, "uses");
    let burst = limit.get("burst").map_or(uses, |_| num(limit, "burst"));
    Gcra::new(uses, num(limit, "window_ms"), burst)
}

pub fn counter(limit: &Value) -> Result<Counter, RateError> {
    let l = Limit::new(num(limit, "uses"), num(limit, "window_ms")).map_err(|e| {
        RateError::new(
            match e.field {
                LimitField::Uses => RateField::Uses,
                LimitField::WindowMs => RateField::WindowMs,
            },
            e.value,
        )
    })?;
    Counter::new(l)
}

/// A vector op as a machine operation (`Ok(None)`: an op the machines do not run, e.g. a mixed
/// batch), or the error the vector expects.
fn op_of(op: &Value) -> Result<Option<RateOp>, RateError> {
    let key = op["key"].as_str().unwrap_or("").to_owned();
    let cost = op.get("cost").map_or(1, |_| num(op, "cost"));
    let limit = &op["limit"];
    Ok(Some(match op["op"].as_str().expect("op") {
        "gcra_consume" => RateOp::GcraConsume {
            key,
            gcra: gcra(limit)?,
            cost,
        },
        "gcra_peek" => RateOp::GcraPeek {
            key,
            gcra: gcra(limit)?,
            cost,
        },
        "gcra_reset" => RateOp::GcraReset { key },
        "counter_consume" => RateOp::CounterConsume {
            key,
            counter: counter(limit)?,
            cost,
        },
        "counter_peek" => RateOp::CounterPeek {
            key,
            counter: counter(limit)?,
            cost,
        },
        "counter_reset" => RateOp::CounterReset { key },
        "gcra_limit" => return gcra(limit).map(|_| None),
        "counter_limit" => return counter(limit).map(|_| None),
        _ => return Ok(None),
    }))
}

/// What a finished machine gives, as the vectors spell it.
pub fn spelled(result: Result<Outcome, CallError>) -> Value {
    match result.expect("the call") {
        Outcome::Verdict { verdict, release } => {
            assert!(release.is_none(), "no release for GCRA / counter uses");
            assert_eq!(verdict.blocked, (!verdict.allowed).then_some(0));
            json!(verdict.verdict())
        }
        Outcome::Unit => Value::Null,
        other => panic!("{other:?}"),
    }
}

/// Runs every case whose ops the machines carry through `run` (a fresh store per case: `case` is
/// the case's index), the vector's `now` given to each call. Returns (cases run, cases skipped).
pub fn run_vectors(
    mut run: impl FnMut(usize, RateOp, u64) -> Result<Outcome, CallError>,
) -> (usize, usize) {
    let (mut ran, mut skipped, mut failures) = (0, 0, Vec::new());
    let mut index = 0;
    for file in files() {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for case in doc["cases"].as_array().expect("cases") {
            index += 1;
            let ops = case["ops"].as_array().expect("ops");
            let carried = ops.iter().all(|op| {
                op["op"]
                    .as_str()
                    .is_some_and(|o| o.starts_with("gcra_") || o.starts_with("counter_"))
            });
            if !carried {
                skipped += 1;
                continue;
            }
            ran += 1;
            for (i, op) in ops.iter().enumerate() {
                let got = match op_of(op) {
                    Err(e) => error(e),
                    Ok(None) => json!({ "ok": true }), // a limit the machines accept
                    Ok(Some(rate)) => match rate.check() {
                        Err(e) => error(e),
                        Ok(()) => spelled(run(index, rate, num(op, "now"))),
                    },
                };
                if op["expect"] != got {
                    failures.push(format!(
                        "{name} / {} / op {i}: expected {} got {got}",
                        case["name"], op["expect"]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    (ran, skipped)
}

/// The memory store's answer to `op` at `now` (the behaviour every store must give).
pub fn memory(store: &MemoryStore, op: &RateOp, now: u64) -> Value {
    let verdict = match op.clone() {
        RateOp::GcraConsume { key, gcra, cost } => store.gcra_consume(&key, gcra, cost, now),
        RateOp::GcraPeek { key, gcra, cost } => store.gcra_peek(&key, gcra, cost, now),
        RateOp::CounterConsume { key, counter, cost } => {
            store.counter_consume(&key, counter, cost, now)
        }
        RateOp::CounterPeek { key, counter, cost } => store.counter_peek(&key, counter, cost, now),
        RateOp::GcraReset { key } => {
            store.gcra_reset(&key);
            return Value::Null;
        }
        RateOp::CounterReset { key } => {
            store.counter_reset(&key);
            return Value::Null;
        }
    };
    json!(verdict.expect("a checked cost"))
}

/// A random walk of operations on two keys under changing limits and costs, at times that move on
/// by 0 to `step_ms` ms: `(op, now)` pairs.
pub fn walk(steps: usize, seed: u64, step_ms: u64) -> Vec<(RateOp, u64)> {
    let mut seed = seed | 1;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut now = 1_700_000_000_000 + next(1_000_000);
    let mut out = Vec::with_capacity(steps);
    for _ in 0..steps {
        now += next(step_ms + 1);
        let key = ["a", "b"][next(2) as usize].to_owned();
        let uses = [1, 3, 7, 10, 64][next(5) as usize];
        let window = [90, 200, 1_000, 333][next(4) as usize];
        let op = if next(2) == 0 {
            let burst = [1, uses, uses * 2][next(3) as usize];
            let gcra = Gcra::new(uses, window, burst).unwrap();
            let cost = 1 + next(burst.min(4));
            match next(10) {
                0..=5 => RateOp::GcraConsume { key, gcra, cost },
                6..=8 => RateOp::GcraPeek { key, gcra, cost },
                _ => RateOp::GcraReset { key },
            }
        } else {
            let counter = Counter::new(Limit::new(uses, window).unwrap()).unwrap();
            let cost = 1 + next(uses.min(4));
            match next(10) {
                0..=5 => RateOp::CounterConsume { key, counter, cost },
                6..=8 => RateOp::CounterPeek { key, counter, cost },
                _ => RateOp::CounterReset { key },
            }
        };
        out.push((op, now));
    }
    out
}
