//! The failure guard's vectors (`tests/vectors/guard/guard.json`) against `core::guard`: option
//! checks, which error codes are failures, the failure verdicts, the late-answer rule and block-cache
//! sequences. The Node addon runs the same file (`bindings-node/test/guard-vectors.test.mjs`).

use ratewindow_core::guard::{
    late_action, BlockCache, Failure, GuardConfig, LateAction, OnFailure, Policy,
};
use ratewindow_core::{BatchVerdict, Limit};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/guard/guard.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read guard.json")).expect("JSON")
}

/// A JSON number, or one of the strings standing for what JSON cannot hold.
fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => match s.as_str() {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            other => panic!("not a number: {other}"),
        },
        other => panic!("not a number: {other}"),
    }
}

fn policy(name: &str) -> Result<Policy, ratewindow_core::guard::GuardError> {
    if name == "fallback" {
        Ok(Policy::Fallback)
    } else {
        Policy::parse(name)
    }
}

fn entries(v: &Value) -> Vec<(String, Limit)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let key = e[0].as_str().unwrap().to_owned();
            let limit = Limit::new(e[1].as_u64().unwrap(), e[2].as_u64().unwrap()).unwrap();
            (key, limit)
        })
        .collect()
}

#[test]
fn options() {
    for case in vectors()["options"].as_array().unwrap() {
        let made = policy(case["policy"].as_str().unwrap())
            .and_then(|p| GuardConfig::from_f64(number(&case["timeout_ms"]), p))
            .and_then(|c| {
                case.get("max_keys")
                    .map(|m| BlockCache::from_f64(number(m)))
                    .transpose()
                    .map(|_| c)
            });
        match (&made, case.get("error")) {
            (Ok(_), None) => {}
            (Err(e), Some(want)) => {
                assert_eq!(e.code(), want["code"].as_str().unwrap(), "{case}");
                assert_eq!(e.value, want["value"].as_str().unwrap(), "{case}");
            }
            _ => panic!("{case}: got {made:?}"),
        }
    }
}

#[test]
fn error_codes() {
    for case in vectors()["error_codes"].as_array().unwrap() {
        let got = Failure::of_error_code(case["code"].as_str().unwrap()).map(Failure::name);
        assert_eq!(got, case["failure"].as_str(), "{case}");
    }
}

#[test]
fn failures() {
    for case in vectors()["failures"].as_array().unwrap() {
        let config = GuardConfig::from_f64(
            number(&case["timeout_ms"]),
            policy(case["policy"].as_str().unwrap()).unwrap(),
        )
        .unwrap();
        let failure = Failure::parse(case["failure"].as_str().unwrap()).unwrap();
        match config.on_failure(failure) {
            OnFailure::Answer(v) => {
                let want: BatchVerdict = serde_json::from_value(case["verdict"].clone()).unwrap();
                assert_eq!(v, want, "{case}");
            }
            OnFailure::Fallback => {
                assert_eq!(case["fallback"], Value::Bool(true), "{case}");
                let want: BatchVerdict =
                    serde_json::from_value(case["fallback_failed"].clone()).unwrap();
                assert_eq!(config.deny_verdict(), want, "{case}");
            }
        }
    }
}

#[test]
fn late() {
    for case in vectors()["late"].as_array().unwrap() {
        let got = late_action(
            case["answered_allowed"].as_bool().unwrap(),
            case["late_allowed"].as_bool().unwrap(),
        );
        let want = match case["action"].as_str().unwrap() {
            "release" => LateAction::Release,
            "keep" => LateAction::Keep,
            "ignore" => LateAction::Ignore,
            other => panic!("action {other}"),
        };
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn cache() {
    for case in vectors()["cache"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut cache = BlockCache::from_f64(number(&case["max_keys"])).unwrap();
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let at = format!("{name}, step {i}: {step}");
            match step["op"].as_str().unwrap() {
                "refused" => {
                    let verdict: BatchVerdict =
                        serde_json::from_value(step["verdict"].clone()).unwrap();
                    cache.record(
                        &entries(&step["entries"]),
                        &verdict,
                        step["started"].as_u64().unwrap(),
                    );
                }
                "check" => {
                    let call = entries(&step["entries"]);
                    let got = cache.check(
                        call.iter().map(|(k, l)| (k.as_str(), *l)),
                        step["now"].as_u64().unwrap(),
                    );
                    let want: Option<BatchVerdict> =
                        serde_json::from_value(step["expect"].clone()).unwrap();
                    assert_eq!(got, want, "{at}");
                }
                "forget" => {
                    let call = entries(&step["entries"]);
                    cache.forget(call.iter().map(|(k, l)| (k.as_str(), *l)));
                }
                "len" => assert_eq!(cache.len() as u64, step["expect"].as_u64().unwrap(), "{at}"),
                other => panic!("op {other}"),
            }
        }
    }
}
