//! The conformance vectors (`tests/vectors/*.json`), run against any engine of the core's: the memory
//! store, and SQLite through its plans. Format: `tests/vectors/README.md`.

#![allow(dead_code)]

use std::path::PathBuf;

#[cfg(feature = "weights")]
use ratewindow_core::check_cost_f64;
use ratewindow_core::gcra::RateError;
use ratewindow_core::{Entry, Limit, LimitError, Window};
use serde_json::{json, Value};

/// An engine the vectors can drive: every op at an explicit `now`.
pub trait Engine {
    /// The release handle an allowed batch gives.
    type Release;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value;
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value;
    fn consume_many(&mut self, entries: &[Entry], now: u64) -> (Value, Option<Self::Release>);
    fn peek_many(&mut self, entries: &[Entry], now: u64) -> Value;
    fn release(&mut self, release: Self::Release, now: u64);
    fn hit(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> i64;
    fn attempts(&mut self, key: &str, now: u64) -> i64;
    fn too_many_attempts(&mut self, key: &str, max: i64, now: u64) -> bool;
    fn remaining(&mut self, key: &str, max: i64, now: u64) -> i64;
    fn available_in(&mut self, key: &str, now: u64) -> u64;
    fn available_in_ms(&mut self, key: &str, now: u64) -> u64;
    fn reset_attempts(&mut self, key: &str, now: u64);
    fn clear(&mut self, key: &str);

    /// A call costing `cost` uses (checked: `1..=uses`); the weight vectors (`weights/`) need it.
    fn consume_cost(&mut self, _key: &str, _limit: Limit, _cost: u32, _now: u64) -> Value {
        panic!("this engine does not run the weight vectors")
    }
    /// A peek of a call costing `cost` uses.
    fn peek_cost(&mut self, _key: &str, _limit: Limit, _cost: u32, _now: u64) -> Value {
        panic!("this engine does not run the weight vectors")
    }

    /// A hit returning the count and the ms until its window ends. The default composes `hit` and
    /// `available_in_ms` (fine for an engine the vectors drive from one thread); an engine that
    /// answers both in one step overrides it.
    fn hit_window(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> (i64, u64) {
        let count = self.hit(key, decay, amount, now);
        (count, self.available_in_ms(key, now))
    }

    /// One hit only if the key has fewer than `max` in its running window: `(counted, count after,
    /// ms until the window ends)`. The default composes the other fixed-window ops (one thread only,
    /// not atomic); an engine with an atomic attempt overrides it.
    fn attempt(&mut self, key: &str, max: i64, decay: Window, now: u64) -> (bool, i64, u64) {
        let ms_left = self.available_in_ms(key, now);
        if ms_left > 0 {
            let count = self.attempts(key, now);
            if count < max {
                let (count, ms_left) = self.hit_window(key, decay, 1, now);
                return (true, count, ms_left);
            }
            return (false, count, ms_left);
        }
        if max < 1 {
            return (false, 0, 0);
        }
        let (count, ms_left) = self.hit_window(key, decay, 1, now);
        (true, count, ms_left)
    }
}

pub struct Case {
    pub file: String,
    pub name: String,
    pub ops: Vec<Value>,
}

/// Every case of every vector file, in file order.
pub fn cases() -> Vec<Case> {
    cases_in("")
}

/// Every case of every vector file in `tests/vectors/{sub}`, in file order.
pub fn cases_in(sub: &str) -> Vec<Case> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors")
        .join(sub);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("tests/vectors")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
        for case in doc["cases"].as_array().expect("cases") {
            out.push(Case {
                file: file.file_name().unwrap().to_string_lossy().into_owned(),
                name: case["name"].as_str().expect("name").to_owned(),
                ops: case["ops"].as_array().expect("ops").clone(),
            });
        }
    }
    out
}

fn num(op: &Value, field: &str) -> f64 {
    op[field]
        .as_f64()
        .unwrap_or_else(|| panic!("`{field}` must be a number in {op}"))
}

fn limit(value: &Value) -> Result<Limit, LimitError> {
    Limit::from_f64(num(value, "uses"), num(value, "window_ms"))
}

/// A vector's refusal of its input: a limit, or a cost.
pub enum Invalid {
    Limit(LimitError),
    Cost(RateError),
}

impl From<LimitError> for Invalid {
    fn from(e: LimitError) -> Invalid {
        Invalid::Limit(e)
    }
}

impl From<RateError> for Invalid {
    fn from(e: RateError) -> Invalid {
        Invalid::Cost(e)
    }
}

/// An op's or an entry's `cost` (absent: `None`), checked against `limit` as a host number.
fn cost(value: &Value, limit: Limit) -> Result<Option<u32>, RateError> {
    match value.get("cost") {
        None => Ok(None),
        #[cfg(feature = "weights")]
        Some(c) => check_cost_f64(c.as_f64().expect("cost: a number"), limit).map(Some),
        #[cfg(not(feature = "weights"))]
        Some(_) => {
            let _ = limit;
            panic!("a vector with a cost (tests/vectors/weights) needs the `weights` feature")
        }
    }
}

/// An entry costing `cost` uses (only the weight vectors have costs, so only `weights` builds them).
#[cfg(feature = "weights")]
fn weighted_entry(key: &str, limit: Limit, cost: u32) -> Result<Entry, RateError> {
    Entry::with_cost(key, limit, cost.into())
}

#[cfg(not(feature = "weights"))]
fn weighted_entry(_key: &str, _limit: Limit, _cost: u32) -> Result<Entry, RateError> {
    unreachable!("`cost` has no cost without the `weights` feature")
}

fn entries(op: &Value) -> Result<Vec<Entry>, Invalid> {
    op["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            let key = e["key"].as_str().expect("key");
            let limit = limit(&e["limit"])?;
            Ok(match cost(e, limit)? {
                None => Entry::new(key, limit),
                Some(c) => weighted_entry(key, limit, c)?,
            })
        })
        .collect()
}

/// Runs one case on a fresh engine; returns the mismatches.
pub fn run_case<E: Engine>(engine: &mut E, case: &Case) -> Vec<String> {
    let mut releases: std::collections::HashMap<String, Option<E::Release>> = Default::default();
    let mut failures = Vec::new();
    for (i, op) in case.ops.iter().enumerate() {
        // A negative time is passed wrapped, as a host with only unsigned integers (jco) passes it.
        let raw_now = op["now"]
            .as_u64()
            .or_else(|| op["now"].as_i64().map(|t| t as u64))
            .expect("now: a whole number");
        // The check every binding makes before it calls the store (`invalid_time.json`).
        let now = match ratewindow_core::input::check_now(raw_now) {
            Ok(now) => now,
            Err(_) => {
                let got = json!({ "error": "invalid_argument", "field": "now" });
                let want = op.get("expect").cloned().unwrap_or(Value::Null);
                if got != want {
                    failures.push(format!(
                        "{} / {} / op {i} {}:\n    want {want}\n    got  {got}",
                        case.file, case.name, op["op"]
                    ));
                }
                continue;
            }
        };
        let key = || op["key"].as_str().expect("key");
        let max = || op["max"].as_i64().expect("max");
        let result: Result<Value, Invalid> = (|| {
            Ok(match op["op"].as_str().expect("op") {
                "consume" => {
                    let limit = limit(&op["limit"])?;
                    match cost(op, limit)? {
                        None => engine.consume(key(), limit, now),
                        Some(c) => engine.consume_cost(key(), limit, c, now),
                    }
                }
                "peek" => {
                    let limit = limit(&op["limit"])?;
                    match cost(op, limit)? {
                        None => engine.peek(key(), limit, now),
                        Some(c) => engine.peek_cost(key(), limit, c, now),
                    }
                }
                "consume_many" => {
                    let (verdict, release) = engine.consume_many(&entries(op)?, now);
                    if let Some(id) = op["id"].as_str() {
                        releases.insert(id.to_owned(), release);
                    }
                    verdict
                }
                "peek_many" => engine.peek_many(&entries(op)?, now),
                "release" => {
                    let id = op["id"].as_str().expect("id");
                    if let Some(release) = releases
                        .get_mut(id)
                        .expect("a consume_many with this id")
                        .take()
                    {
                        engine.release(release, now);
                    }
                    Value::Null
                }
                "hit" => json!(engine.hit(
                    key(),
                    Window::from_f64(num(op, "decay_ms"))?,
                    op["amount"].as_i64().expect("amount"),
                    now
                )),
                "hit_window" => {
                    let (count, reset_after_ms) = engine.hit_window(
                        key(),
                        Window::from_f64(num(op, "decay_ms"))?,
                        op["amount"].as_i64().expect("amount"),
                        now,
                    );
                    json!({ "count": count, "reset_after_ms": reset_after_ms })
                }
                "attempt" => {
                    let (allowed, count, reset_after_ms) =
                        engine.attempt(key(), max(), Window::from_f64(num(op, "decay_ms"))?, now);
                    json!({ "allowed": allowed, "count": count, "reset_after_ms": reset_after_ms })
                }
                "attempts" => json!(engine.attempts(key(), now)),
                "too_many_attempts" => json!(engine.too_many_attempts(key(), max(), now)),
                "remaining" => json!(engine.remaining(key(), max(), now)),
                "available_in" => json!(engine.available_in(key(), now)),
                "available_in_ms" => json!(engine.available_in_ms(key(), now)),
                "reset_attempts" => {
                    engine.reset_attempts(key(), now);
                    Value::Null
                }
                "clear" => {
                    engine.clear(key());
                    Value::Null
                }
                "limit" => {
                    Limit::from_f64(num(op, "uses"), num(op, "window_ms"))?;
                    json!({ "ok": true })
                }
                other => panic!("unknown op {other}"),
            })
        })();
        let got = result.unwrap_or_else(|e| match e {
            Invalid::Limit(e) => json!({ "error": "invalid_limit", "field": e.field.name() }),
            Invalid::Cost(e) => json!({ "error": "invalid_argument", "field": e.field.name() }),
        });
        let want = op.get("expect").cloned().unwrap_or(Value::Null);
        if got != want {
            failures.push(format!(
                "{} / {} / op {i} {}:\n    want {want}\n    got  {got}",
                case.file, case.name, op["op"]
            ));
        }
    }
    failures
}
