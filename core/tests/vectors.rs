//! Runs every case in `tests/vectors/*.json` against the core's `MemoryStore` (format in the README
//! there). Every binding runs the same files and must agree to the last field.

use std::collections::HashMap;
use std::path::PathBuf;

use ratewindow_core::{Entry, Limit, LimitError, MemoryStore, Release, Window};
use serde_json::{json, Value};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors")
}

fn num(op: &Value, field: &str) -> f64 {
    op[field]
        .as_f64()
        .unwrap_or_else(|| panic!("`{field}` must be a number in {op}"))
}

fn limit(value: &Value) -> Result<Limit, LimitError> {
    Limit::from_f64(num(value, "uses"), num(value, "window_ms"))
}

fn entries(op: &Value) -> Result<Vec<Entry>, LimitError> {
    op["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            Ok(Entry::new(
                e["key"].as_str().expect("key"),
                limit(&e["limit"])?,
            ))
        })
        .collect()
}

fn error_json(e: LimitError) -> Value {
    json!({ "error": "invalid_limit", "field": e.field.name() })
}

fn run_op(
    store: &MemoryStore,
    releases: &mut HashMap<String, Option<Release>>,
    op: &Value,
) -> Value {
    let now = op["now"].as_u64().expect("now: a whole number");
    let key = || op["key"].as_str().expect("key");
    let name = op["op"].as_str().expect("op");
    let result: Result<Value, LimitError> = (|| {
        Ok(match name {
            "consume" => json!(store.consume(key(), limit(&op["limit"])?, now)),
            "peek" => json!(store.peek(key(), limit(&op["limit"])?, now)),
            "consume_many" => {
                let consumed = store.consume_many(&entries(op)?, now);
                if let Some(id) = op["id"].as_str() {
                    releases.insert(id.to_owned(), consumed.release);
                }
                json!(consumed.verdict)
            }
            "peek_many" => json!(store.peek_many(&entries(op)?, now)),
            "release" => {
                let id = op["id"].as_str().expect("id");
                let slot = releases
                    .get_mut(id)
                    .unwrap_or_else(|| panic!("no consume_many with id {id}"));
                if let Some(release) = slot.take() {
                    store.release(release, now);
                }
                Value::Null
            }
            "hit" => {
                let decay = Window::from_f64(num(op, "decay_ms"))?;
                json!(store.hit(key(), decay, op["amount"].as_i64().expect("amount"), now))
            }
            "attempts" => json!(store.attempts(key(), now)),
            "too_many_attempts" => {
                json!(store.too_many_attempts(key(), op["max"].as_i64().expect("max"), now))
            }
            "remaining" => json!(store.remaining(key(), op["max"].as_i64().expect("max"), now)),
            "available_in" => json!(store.available_in(key(), now)),
            "available_in_ms" => json!(store.available_in_ms(key(), now)),
            "reset_attempts" => {
                store.reset_attempts(key(), now);
                Value::Null
            }
            "clear" => {
                store.clear(key());
                Value::Null
            }
            "limit" => {
                Limit::from_f64(num(op, "uses"), num(op, "window_ms"))?;
                json!({ "ok": true })
            }
            other => panic!("unknown op {other}"),
        })
    })();
    result.unwrap_or_else(error_json)
}

#[test]
fn every_vector_matches_the_core() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("tests/vectors")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vectors found");
    let (mut cases, mut failures) = (0, Vec::new());
    for file in &files {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("JSON");
        for case in doc["cases"].as_array().expect("cases") {
            cases += 1;
            let store = MemoryStore::new();
            let mut releases = HashMap::new();
            for (i, op) in case["ops"].as_array().expect("ops").iter().enumerate() {
                let got = run_op(&store, &mut releases, op);
                let want = op.get("expect").cloned().unwrap_or(Value::Null);
                if got != want {
                    failures.push(format!(
                        "{} / {} / op {i} {}:\n    want {want}\n    got  {got}",
                        file.file_name().unwrap().to_string_lossy(),
                        case["name"],
                        op["op"]
                    ));
                }
            }
        }
    }
    assert!(cases >= 40, "only {cases} cases");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
