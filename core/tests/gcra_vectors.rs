//! Runs every case in `tests/vectors/gcra/*.json` and `tests/vectors/counter/*.json` against the
//! core's `MemoryStore` (format: tests/vectors/README.md, "GCRA and counter vectors").
//!
//! `RW_VECTORS_WRITE=1 cargo test -p ratewindow-core --test gcra_vectors` fills in every op's
//! `expect` from the store and rewrites the files (for new cases; check the values by hand and by
//! the model tests in gcra.rs and counter.rs before committing them).
#![cfg(feature = "rates")]

use std::path::PathBuf;

use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::{Gcra, RateError};
use ratewindow_core::{Limit, MemoryStore, MixedEntry, Release, Rule};
use serde_json::{json, Value};

fn files() -> Vec<PathBuf> {
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

fn gcra(limit: &Value) -> Result<Gcra, RateError> {
    let uses = num(limit, "uses");
    let burst = limit.get("burst").map_or(uses, |_| num(limit, "burst"));
    Gcra::new(uses, num(limit, "window_ms"), burst)
}

fn counter(limit: &Value) -> Result<Counter, RateError> {
    let l = Limit::new(num(limit, "uses"), num(limit, "window_ms")).map_err(|e| {
        RateError::new(
            match e.field {
                ratewindow_core::LimitField::Uses => ratewindow_core::gcra::RateField::Uses,
                ratewindow_core::LimitField::WindowMs => ratewindow_core::gcra::RateField::WindowMs,
            },
            e.value,
        )
    })?;
    Counter::new(l)
}

fn entries(op: &Value) -> Result<Vec<MixedEntry>, RateError> {
    op["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            let limit = &e["limit"];
            let rule = match e["algorithm"].as_str().expect("algorithm") {
                "sliding" => Rule::Sliding(
                    Limit::new(num(limit, "uses"), num(limit, "window_ms")).expect("valid"),
                ),
                "gcra" => Rule::Gcra(gcra(limit)?),
                "counter" => Rule::Counter(counter(limit)?),
                other => panic!("unknown algorithm {other}"),
            };
            let cost = e.get("cost").map_or(1, |_| num(e, "cost"));
            Ok(MixedEntry::new(e["key"].as_str().expect("key"), rule, cost))
        })
        .collect()
}

/// Runs one op; returns what it gives, as the vectors spell it.
fn run(store: &MemoryStore, releases: &mut Vec<(String, Option<Release>)>, op: &Value) -> Value {
    let now = num(op, "now");
    let key = op["key"].as_str().unwrap_or("");
    let cost = op.get("cost").map_or(1, |_| num(op, "cost"));
    let result = match op["op"].as_str().expect("op") {
        "gcra_consume" => gcra(&op["limit"])
            .and_then(|g| store.gcra_consume(key, g, cost, now))
            .map(|v| json!(v)),
        "gcra_peek" => gcra(&op["limit"])
            .and_then(|g| store.gcra_peek(key, g, cost, now))
            .map(|v| json!(v)),
        "gcra_reset" => {
            store.gcra_reset(key);
            Ok(Value::Null)
        }
        "counter_consume" => counter(&op["limit"])
            .and_then(|c| store.counter_consume(key, c, cost, now))
            .map(|v| json!(v)),
        "counter_peek" => counter(&op["limit"])
            .and_then(|c| store.counter_peek(key, c, cost, now))
            .map(|v| json!(v)),
        "counter_reset" => {
            store.counter_reset(key);
            Ok(Value::Null)
        }
        "consume_mixed" => entries(op)
            .and_then(|es| store.consume_mixed(&es, now))
            .map(|c| {
                if let Some(id) = op["id"].as_str() {
                    releases.push((id.to_owned(), c.release));
                }
                json!(c.verdict)
            }),
        "peek_mixed" => entries(op)
            .and_then(|es| store.peek_mixed(&es, now))
            .map(|v| json!(v)),
        "release" => {
            let id = op["id"].as_str().expect("id");
            if let Some(r) = releases
                .iter_mut()
                .find(|(i, _)| i == id)
                .and_then(|(_, r)| r.take())
            {
                store.release(r, now);
            }
            Ok(Value::Null)
        }
        "gcra_limit" => gcra(&op["limit"]).map(|_| json!({ "ok": true })),
        "counter_limit" => counter(&op["limit"]).map(|_| json!({ "ok": true })),
        other => panic!("unknown op {other}"),
    };
    result.unwrap_or_else(error)
}

#[test]
fn every_gcra_and_counter_vector_matches_the_memory_store() {
    let write = std::env::var_os("RW_VECTORS_WRITE").is_some();
    let (mut cases, mut failures) = (0, Vec::new());
    for file in files() {
        let mut doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for case in doc["cases"].as_array_mut().expect("cases") {
            cases += 1;
            let case_name = case["name"].as_str().expect("name").to_owned();
            let store = MemoryStore::new();
            let mut releases = Vec::new();
            for (i, op) in case["ops"]
                .as_array_mut()
                .expect("ops")
                .iter_mut()
                .enumerate()
            {
                let got = run(&store, &mut releases, op);
                if write {
                    op["expect"] = got;
                } else if op["expect"] != got {
                    failures.push(format!(
                        "{name} / {case_name} / op {i}: expected {} got {got}",
                        op["expect"]
                    ));
                }
            }
        }
        if write {
            let mut text = serde_json::to_string_pretty(&doc).expect("JSON");
            text.push('\n');
            std::fs::write(&file, text).expect("write");
        }
    }
    assert!(cases >= 10, "only {cases} cases");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
