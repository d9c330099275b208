//! GCRA and the sliding-window counter through the component in wasmtime, in both worlds: every case of
//! `tests/vectors/gcra/*.json` and `tests/vectors/counter/*.json` (single calls, batches mixing them
//! with the sliding log, give-backs), and bad input as the `error` variant, never a trap.

use ratewindow_host_rs::{Algorithm, EngineWorld, Error, HostedWorld, Ops, RateLimit, Verdict};
use serde_json::{json, Value};

use crate::common::{json_files, key, num, verdict};

fn algorithm(name: &str) -> Algorithm {
    match name {
        "gcra" => Algorithm::Gcra,
        "counter" => Algorithm::Counter,
        "sliding" => Algorithm::Sliding,
        other => panic!("unknown algorithm {other}"),
    }
}

fn rate(a: Algorithm, v: &Value) -> RateLimit {
    RateLimit {
        algorithm: a,
        uses: num(v, "uses"),
        window_ms: num(v, "window_ms"),
        burst: v["burst"].as_f64(),
    }
}

fn cost(v: &Value) -> f64 {
    v["cost"].as_f64().unwrap_or(1.0)
}

fn entries(op: &Value) -> Vec<(String, RateLimit, f64)> {
    op["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries in {op}"))
        .iter()
        .map(|e| {
            let a = algorithm(e["algorithm"].as_str().expect("algorithm"));
            (key(e).to_owned(), rate(a, &e["limit"]), cost(e))
        })
        .collect()
}

/// A refusal in the vectors' shape: `invalid_rate` and the engine's field.
fn result<T>(r: Result<T, Error>, ok: impl FnOnce(T) -> Value) -> Value {
    match r {
        Ok(v) => ok(v),
        Err(Error::InvalidLimit { field, .. }) => {
            json!({ "error": "invalid_rate", "field": field })
        }
        Err(Error::InvalidArgument { field, .. }) if field == "cost" => {
            json!({ "error": "invalid_rate", "field": "cost" })
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

fn one(v: Verdict) -> Value {
    verdict(v, false)
}

fn batch(v: Verdict) -> Value {
    verdict(v, true)
}

fn run(ops: &mut dyn Ops, op: &Value) -> wasmtime::Result<Value> {
    let now = op["now"].as_u64().expect("now");
    let name = op["op"].as_str().expect("op");
    let (alg, action) = name.split_once('_').unwrap_or((name, ""));
    Ok(match (alg, action) {
        ("gcra" | "counter", "consume") => {
            let l = rate(algorithm(alg), &op["limit"]);
            result(ops.consume_rate(key(op), l, cost(op), now)?, one)
        }
        ("gcra" | "counter", "peek") => {
            let l = rate(algorithm(alg), &op["limit"]);
            result(ops.peek_rate(key(op), l, cost(op), now)?, one)
        }
        ("gcra" | "counter", "reset") => {
            ops.reset_rate(key(op), algorithm(alg), now)?;
            Value::Null
        }
        ("gcra" | "counter", "limit") => {
            let l = rate(algorithm(alg), &op["limit"]);
            result(ops.check_rate(l)?, |()| json!({ "ok": true }))
        }
        ("consume", "mixed") => result(
            ops.consume_mixed(&entries(op), now, op["id"].as_str())?,
            batch,
        ),
        ("peek", "mixed") => result(ops.peek_mixed(&entries(op), now)?, batch),
        ("release", _) => {
            ops.release(op["id"].as_str().expect("id"), now)?;
            Value::Null
        }
        _ => panic!("unknown vector op {name}: teach this runner"),
    })
}

/// Runs every GCRA and counter vector through `ops`; returns how many ops ran.
fn run_all(ops: &mut dyn Ops) -> usize {
    let mut count = 0;
    for file in json_files("gcra").into_iter().chain(json_files("counter")) {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
        for case in doc["cases"].as_array().expect("cases") {
            ops.fresh_store().expect("fresh store");
            for (i, op) in case["ops"].as_array().expect("ops").iter().enumerate() {
                let got = run(ops, op).unwrap_or_else(|e| panic!("{op} trapped: {e:?}"));
                let expect = op.get("expect").cloned().unwrap_or(Value::Null);
                let (file, name) = (file.display(), &case["name"]);
                assert_eq!(got, expect, "{file} / {name} / op {i}: {op}");
                count += 1;
            }
        }
    }
    count
}

#[test]
fn engine_world_passes_every_gcra_and_counter_vector() {
    let mut world = EngineWorld::new().expect("instantiate the engine component");
    assert!(run_all(&mut world) > 0);
}

#[test]
fn hosted_world_passes_every_gcra_and_counter_vector_on_the_host_clock() {
    let mut world = HostedWorld::new().expect("instantiate the hosted component");
    assert!(run_all(&mut world) > 0);
    assert!(world.store.data().clock_reads > 0);
}

fn gcra(uses: f64, window_ms: f64, burst: Option<f64>) -> RateLimit {
    RateLimit {
        algorithm: Algorithm::Gcra,
        uses,
        window_ms,
        burst,
    }
}

fn counter(uses: f64, window_ms: f64) -> RateLimit {
    RateLimit {
        algorithm: Algorithm::Counter,
        uses,
        window_ms,
        burst: None,
    }
}

fn bad_rates_are_errors(ops: &mut dyn Ops) {
    ops.fresh_store().unwrap();
    let bad = [
        (gcra(f64::NAN, 1000.0, None), "uses", "NaN"),
        (gcra(10.0, 2.5, None), "window_ms", "2.5"),
        (gcra(10.0, 1000.0, Some(0.0)), "burst", "0"),
        (gcra(10.0, 1000.0, Some(-1.0)), "burst", "-1"),
        (gcra(10.0, 1000.0, Some(1.5)), "burst", "1.5"),
        (gcra(10.0, 1000.0, Some(f64::INFINITY)), "burst", "Infinity"),
        (
            gcra(10.0, 1000.0, Some(4294967296.0)),
            "burst",
            "4294967296",
        ),
        (counter(0.0, 1000.0), "uses", "0"),
        (counter(1.0, -0.0), "window_ms", "-0"),
        (
            counter(4294967295.0, 4320000000000000.0),
            "uses",
            "4294967295",
        ),
    ];
    let fine = gcra(10.0, 1000.0, Some(10.0));
    for (l, field, value) in bad {
        let want = Err(Error::InvalidLimit {
            field,
            value: value.to_owned(),
        });
        assert_eq!(ops.check_rate(l).unwrap(), want, "{l:?}");
        assert_eq!(ops.consume_rate("k", l, 1.0, 5).unwrap().map(|_| ()), want);
        assert_eq!(ops.peek_rate("k", l, 1.0, 5).unwrap().map(|_| ()), want);
        let list = [("fine".to_owned(), fine, 1.0), ("k".to_owned(), l, 1.0)];
        assert_eq!(ops.consume_mixed(&list, 5, None).unwrap().map(|_| ()), want);
        assert_eq!(ops.peek_mixed(&list, 5).unwrap().map(|_| ()), want);
    }
    for c in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, 11.0, 1e300] {
        for l in [fine, counter(10.0, 1000.0)] {
            let is_cost = |r: Result<Verdict, Error>| matches!(r, Err(Error::InvalidArgument { ref field, .. }) if field == "cost");
            assert!(
                is_cost(ops.consume_rate("k", l, c, 5).unwrap()),
                "{c} {l:?}"
            );
            assert!(is_cost(ops.peek_rate("k", l, c, 5).unwrap()), "{c} {l:?}");
            let sliding = RateLimit {
                algorithm: Algorithm::Sliding,
                ..counter(10.0, 1000.0)
            };
            let list = [("s".to_owned(), sliding, 1.0), ("k".to_owned(), l, c)];
            assert!(is_cost(ops.consume_mixed(&list, 5, None).unwrap()));
        }
    }
    assert_eq!(ops.key_count().unwrap(), 0, "nothing was recorded");
    assert!(
        ops.consume_rate("k", fine, 10.0, 5)
            .unwrap()
            .unwrap()
            .allowed
    );
    let refused = ops.consume_rate("k", fine, 1.0, 5).unwrap().unwrap();
    assert_eq!((refused.allowed, refused.retry_after_ms), (false, 100));
}

#[test]
fn engine_world_refuses_bad_rates_with_the_error_variant() {
    let mut world = EngineWorld::new().expect("instantiate the engine component");
    bad_rates_are_errors(&mut world);
    // A wrapped clock's -1 is refused before the store sees it.
    world.fresh_store().unwrap();
    let r = world
        .consume_rate("k", gcra(1.0, 1000.0, None), 1.0, u64::MAX)
        .unwrap();
    assert!(matches!(r, Err(Error::InvalidArgument { ref field, .. }) if field == "now"));
}

#[test]
fn hosted_world_refuses_bad_rates_with_the_error_variant() {
    let mut world = HostedWorld::new().expect("instantiate the hosted component");
    bad_rates_are_errors(&mut world);
}
