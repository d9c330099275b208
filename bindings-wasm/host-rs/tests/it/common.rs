//! The conformance-vector runner shared by the tests: runs one JSON op through any [`Ops`] and gives the
//! result in the vectors' JSON shape.

use std::path::PathBuf;

use ratewindow_host_rs::{Error, Limit, Ops, Verdict, Weighted};
use serde_json::{json, Value};

pub fn vector_files() -> Vec<PathBuf> {
    json_files("")
}

/// The JSON files of `tests/vectors/<sub>`, sorted; at least one.
pub fn json_files(sub: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors")
        .join(sub);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vectors in {}", dir.display());
    files
}

pub fn num(op: &Value, field: &str) -> f64 {
    op[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {op}"))
}

fn uint(op: &Value, field: &str) -> u64 {
    op[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {op}"))
}

pub fn int(op: &Value, field: &str) -> i64 {
    op[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} in {op}"))
}

pub fn key(op: &Value) -> &str {
    op["key"].as_str().unwrap_or_else(|| panic!("key in {op}"))
}

pub fn limit(v: &Value) -> Limit {
    Limit {
        uses: num(v, "uses"),
        window_ms: num(v, "window_ms"),
    }
}

/// A batch's entries, each with its `cost` when it has one (the weights vectors).
pub fn entries(op: &Value) -> Vec<Weighted> {
    op["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries in {op}"))
        .iter()
        .map(|e| (key(e).to_owned(), limit(&e["limit"]), e["cost"].as_f64()))
        .collect()
}

/// A verdict in the vectors' shape (`blocked` for batches only), quota fields included.
pub fn verdict(v: Verdict, batch: bool) -> Value {
    let mut out = json!({
        "allowed": v.allowed,
        "retry_after_ms": v.retry_after_ms,
        "retry_timestamp": v.retry_timestamp,
        "limit": v.limit,
        "remaining": v.remaining,
        "refill_after_ms": v.refill_after_ms,
        "reset_after_ms": v.reset_after_ms,
    });
    if batch {
        out["blocked"] = json!(v.blocked);
    }
    out
}

fn error(e: Error) -> Value {
    match e {
        Error::InvalidLimit { field, .. } => json!({ "error": "invalid_limit", "field": field }),
        Error::InvalidArgument { field, .. } => {
            json!({ "error": "invalid_argument", "field": field })
        }
        other => panic!("unexpected error {other:?}"),
    }
}

fn result<T>(r: Result<T, Error>, ok: impl FnOnce(T) -> Value) -> Value {
    r.map_or_else(error, ok)
}

/// Runs one op; a trap or host failure panics (fails the test).
pub fn run(ops: &mut dyn Ops, op: &Value) -> Value {
    // A negative time (a wrapped clock) is passed as its wrapping, the u64 jco lowers -1 to.
    let now = op["now"]
        .as_i64()
        .map(|t| t as u64)
        .unwrap_or_else(|| uint(op, "now"));
    let name = op["op"].as_str().expect("op");
    let host = |r: wasmtime::Result<Value>| r.unwrap_or_else(|e| panic!("{name} trapped: {e:?}"));
    host((|| -> wasmtime::Result<Value> {
        Ok(match name {
            "limit" => result(ops.check_limit(limit(op))?, |()| json!({ "ok": true })),
            // A `cost` (the weights vectors) takes the weighted calls.
            "consume" => {
                let r = match op["cost"].as_f64() {
                    Some(cost) => ops.consume_cost(key(op), limit(&op["limit"]), cost, now)?,
                    None => ops.consume(key(op), limit(&op["limit"]), now)?,
                };
                result(r, |v| verdict(v, false))
            }
            "peek" => {
                let r = match op["cost"].as_f64() {
                    Some(cost) => ops.peek_cost(key(op), limit(&op["limit"]), cost, now)?,
                    None => ops.peek(key(op), limit(&op["limit"]), now)?,
                };
                result(r, |v| verdict(v, false))
            }
            "consume_many" => {
                let list = entries(op);
                let r = if list.iter().any(|e| e.2.is_some()) {
                    ops.consume_many_weighted(&list, now, op["id"].as_str())?
                } else {
                    let plain: Vec<(String, Limit)> =
                        list.into_iter().map(|(k, l, _)| (k, l)).collect();
                    ops.consume_many(&plain, now, op["id"].as_str())?
                };
                result(r, |v| verdict(v, true))
            }
            "peek_many" => {
                let list = entries(op);
                let r = if list.iter().any(|e| e.2.is_some()) {
                    ops.peek_many_weighted(&list, now)?
                } else {
                    let plain: Vec<(String, Limit)> =
                        list.into_iter().map(|(k, l, _)| (k, l)).collect();
                    ops.peek_many(&plain, now)?
                };
                result(r, |v| verdict(v, true))
            }
            "release" => {
                ops.release(op["id"].as_str().expect("id"), now)?;
                Value::Null
            }
            "hit" => result(
                ops.hit(key(op), num(op, "decay_ms"), int(op, "amount"), now)?,
                |n| json!(n),
            ),
            "hit_window" => result(
                ops.hit_window(key(op), num(op, "decay_ms"), int(op, "amount"), now)?,
                |w| json!({ "count": w.count, "reset_after_ms": w.reset_after_ms }),
            ),
            "attempt" => result(
                ops.attempt(key(op), int(op, "max"), num(op, "decay_ms"), now)?,
                |w| json!({ "allowed": w.allowed, "count": w.count, "reset_after_ms": w.reset_after_ms }),
            ),
            "attempts" => json!(ops.attempts(key(op), now)?),
            "too_many_attempts" => json!(ops.too_many_attempts(key(op), int(op, "max"), now)?),
            "remaining" => json!(ops.remaining(key(op), int(op, "max"), now)?),
            "available_in" => json!(ops.available_in(key(op), now)?),
            "available_in_ms" => json!(ops.available_in_ms(key(op), now)?),
            "reset_attempts" => {
                ops.reset_attempts(key(op), now)?;
                Value::Null
            }
            "clear" => {
                ops.clear(key(op), now)?;
                Value::Null
            }
            other => panic!("unknown op {other}"),
        })
    })())
}

/// Runs every case of every vector file through `ops`; returns how many ops ran.
pub fn run_all(ops: &mut dyn Ops) -> usize {
    run_files(ops, vector_files())
}

/// Runs every case of `files` through `ops`; returns how many ops ran.
pub fn run_files(ops: &mut dyn Ops, files: Vec<PathBuf>) -> usize {
    let mut count = 0;
    for file in files {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
        for case in doc["cases"].as_array().expect("cases") {
            ops.fresh_store().expect("fresh store");
            for (i, op) in case["ops"].as_array().expect("ops").iter().enumerate() {
                let got = run(ops, op);
                let expect = op.get("expect").cloned().unwrap_or(Value::Null);
                assert_eq!(
                    got,
                    expect,
                    "{} / {} / op {i}: {op}",
                    file.display(),
                    case["name"]
                );
                count += 1;
            }
        }
    }
    count
}
