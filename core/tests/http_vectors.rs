//! Runs `tests/vectors/http/http.json` (format: `tests/vectors/README.md`, section HTTP) against
//! `ratewindow_core::http` and, for its flows, the memory store. The Node and Python middleware run the
//! same file through their bindings.

use ratewindow_core::http::{
    self, HeaderOptions, HttpError, HttpLimit, ProxyHeader, Trust, TOO_MANY_REQUESTS,
};
use ratewindow_core::{BatchVerdict, Limit, MemoryStore, Quota};
use serde_json::{json, Value};

fn document() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/http/http.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read http.json")).expect("JSON")
}

/// A text field: a string, or `{prefix?, repeat, times, suffix?}` for long ones.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            let part = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
            let times = o["times"].as_u64().expect("times") as usize;
            format!(
                "{}{}{}",
                part("prefix"),
                part("repeat").repeat(times),
                part("suffix")
            )
        }
        other => panic!("not a text field: {other}"),
    }
}

fn limit(v: &Value) -> Limit {
    Limit::new(
        v["uses"].as_u64().expect("uses"),
        v["window_ms"].as_u64().expect("window_ms"),
    )
    .expect("a valid limit")
}

/// The keys and limits of a case's `limits` (keys owned, so the `HttpLimit`s can borrow them).
fn limits_of(case: &Value) -> Vec<(Option<String>, Option<Limit>)> {
    case["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .map(|l| {
            if l["unlimited"] == json!(true) {
                (None, None)
            } else {
                (Some(text(&l["key"])), Some(limit(l)))
            }
        })
        .collect()
}

fn http_limits(owned: &[(Option<String>, Option<Limit>)]) -> Vec<HttpLimit<'_>> {
    owned
        .iter()
        .map(|(key, limit)| match (key, limit) {
            (Some(key), Some(limit)) => HttpLimit::new(key, *limit),
            _ => HttpLimit::Unlimited,
        })
        .collect()
}

fn error(e: &HttpError) -> Value {
    json!({ "error": e.kind() })
}

fn headers(h: &[(&'static str, String)]) -> Value {
    json!(h.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>())
}

fn options(case: &Value) -> HeaderOptions {
    HeaderOptions {
        ietf: case["ietf"].as_bool().expect("ietf"),
        legacy: case["legacy"].as_bool().expect("legacy"),
    }
}

fn status(verdict: &BatchVerdict) -> Value {
    if verdict.allowed {
        Value::Null
    } else {
        json!(TOO_MANY_REQUESTS)
    }
}

fn check(failures: &mut Vec<String>, section: &str, case: &Value, got: Value) {
    if got != case["expect"] {
        failures.push(format!(
            "{section} / {}:\n  expected {}\n  got      {}",
            case["name"], case["expect"], got
        ));
    }
}

#[test]
fn request_entries() {
    let doc = document();
    assert_eq!(doc["max_key_bytes"], json!(http::MAX_KEY_BYTES));
    let mut failures = Vec::new();
    let cases = doc["request_entries"].as_array().expect("request_entries");
    assert!(cases.len() >= 20);
    for case in cases {
        let owned = limits_of(case);
        let got = match http::request_entries(
            case["limiter"].as_str().expect("limiter"),
            &http_limits(&owned),
        ) {
            Ok(plan) => {
                assert_eq!(plan.entries.len(), plan.sources.len());
                // One limit: `request_entry_in` makes the same entry in a reused (dirty) buffer.
                if let [(key, Some(limit))] = owned.as_slice() {
                    let one = http::request_entry_in(
                        case["limiter"].as_str().unwrap(),
                        key.as_deref().unwrap_or(""),
                        *limit,
                        String::from("left over from an earlier request"),
                    );
                    assert_eq!(one.as_ref(), Ok(&plan.entries[0]), "{}", case["name"]);
                }
                let entries: Vec<Value> = plan
                    .entries
                    .iter()
                    .zip(&plan.sources)
                    .map(|(e, s)| {
                        json!({ "key": e.key, "uses": e.limit.uses(), "window_ms": e.limit.window_ms(), "source": s })
                    })
                    .collect();
                json!({ "entries": entries })
            }
            Err(e) => error(&e),
        };
        // Expected keys may be long: compare them as the runner spells them.
        let mut expect = case["expect"].clone();
        if let Some(entries) = expect.get_mut("entries").and_then(Value::as_array_mut) {
            for e in entries {
                e["key"] = json!(text(&e["key"]));
            }
        }
        let mut case = case.clone();
        case["expect"] = expect;
        check(&mut failures, "request_entries", &case, got);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn response_headers() {
    let doc = document();
    let mut failures = Vec::new();
    let cases = doc["response_headers"]
        .as_array()
        .expect("response_headers");
    assert!(cases.len() >= 10);
    for case in cases {
        let limits: Vec<Limit> = case["limits"]
            .as_array()
            .unwrap()
            .iter()
            .map(limit)
            .collect();
        let verdict: BatchVerdict =
            serde_json::from_value(case["verdict"].clone()).expect("verdict");
        let h = http::response_headers(
            case["limiter"].as_str().unwrap(),
            &limits,
            &verdict,
            case["now_ms"].as_u64().unwrap(),
            options(case),
        );
        // The same fields but the policy, for a host that holds the policy's value.
        let mut but_policy = Vec::new();
        http::write_response_headers_but_policy(
            case["limiter"].as_str().unwrap(),
            &limits,
            &verdict,
            case["now_ms"].as_u64().unwrap(),
            options(case),
            b"stale".to_vec(),
            |field, value| {
                but_policy.push((field, String::from_utf8(value.clone()).unwrap()));
                value
            },
        );
        let without: Vec<_> = h
            .iter()
            .filter(|(field, _)| *field != "RateLimit-Policy")
            .cloned()
            .collect();
        assert_eq!(but_policy, without, "{}", case["name"]);
        let got = json!({ "status": status(&verdict), "headers": headers(&h) });
        check(&mut failures, "response_headers", case, got);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn flows_through_the_memory_store() {
    let doc = document();
    let mut failures = Vec::new();
    for case in doc["flows"].as_array().expect("flows") {
        let store = MemoryStore::new();
        let owned = limits_of(case);
        let name = case["limiter"].as_str().unwrap();
        for (i, request) in case["requests"].as_array().unwrap().iter().enumerate() {
            let now = request["now_ms"].as_u64().unwrap();
            let plan = http::request_entries(name, &http_limits(&owned)).expect("entries");
            let verdict = if plan.entries.is_empty() {
                BatchVerdict::ALLOWED.with_quota(Quota::NONE)
            } else {
                store.consume_many(&plan.entries, now).verdict
            };
            let h = http::response_headers(name, &plan.limits(), &verdict, now, options(case));
            let got = json!({
                "status": status(&verdict),
                "blocked": verdict.blocked.map(|b| plan.sources[b]),
                "headers": headers(&h),
            });
            let mut named = request.clone();
            named["name"] = json!(format!("{} #{i}", case["name"]));
            check(&mut failures, "flows", &named, got);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn client_address() {
    let doc = document();
    let mut failures = Vec::new();
    let cases = doc["client_address"].as_array().expect("client_address");
    assert!(cases.len() >= 40);
    for case in cases {
        let got = match trust(&case["trust"]) {
            Err(e) => error(&e),
            Ok(trust) => {
                let xff = case.get("x_forwarded_for").map(text);
                let fwd = case.get("forwarded").map(text);
                let peer = text(&case["peer"]);
                let answer = http::client_address(&peer, xff.as_deref(), fwd.as_deref(), &trust);
                // A peer a Rust server holds as an `IpAddr` (or none): the same answer, inline.
                let held = match peer.as_str() {
                    "" => Some(None),
                    p => p.parse::<std::net::IpAddr>().ok().map(Some),
                };
                if let Some(held) = held {
                    let inline = http::client_ip_of(held, xff.as_deref(), fwd.as_deref(), &trust);
                    assert_eq!(
                        inline.as_ref().map(|a| a.as_str()),
                        answer.as_deref(),
                        "{}",
                        case["name"]
                    );
                }
                match answer {
                    Ok(address) => json!({ "address": address }),
                    Err(e) => error(&e),
                }
            }
        };
        check(&mut failures, "client_address", case, got);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A case's `trust`: absent (the peer), `{hops}` or `{proxies}`, with optional `header` and
/// `ipv6_prefix`.
fn trust(t: &Value) -> Result<Trust, HttpError> {
    let mut trust = if let Some(hops) = t.get("hops") {
        Trust::hops(hops.as_u64().unwrap() as u32)
    } else if let Some(list) = t.get("proxies") {
        Trust::proxies(list.as_array().unwrap().iter().map(|p| p.as_str().unwrap()))?
    } else {
        Trust::peer()
    };
    match t.get("header").and_then(Value::as_str) {
        Some("forwarded") => trust = trust.with_header(ProxyHeader::Forwarded),
        Some("x-forwarded-for") | None => {}
        Some(other) => panic!("unknown header {other}"),
    }
    if let Some(prefix) = t.get("ipv6_prefix") {
        trust = trust.with_ipv6_prefix(prefix.as_u64().unwrap() as u32)?;
    }
    Ok(trust)
}

mod properties {
    use proptest::prelude::*;
    use ratewindow_core::http::{self, HeaderOptions, HttpLimit, ProxyHeader, Trust};
    use ratewindow_core::{BatchVerdict, Limit, Quota};

    fn any_trust() -> impl Strategy<Value = Trust> {
        prop_oneof![
            Just(Trust::peer()),
            (0u32..5).prop_map(Trust::hops),
            Just(Trust::proxies(["10.0.0.0/8", "::1"]).unwrap()),
        ]
        .prop_flat_map(|t| {
            (Just(t), any::<bool>(), prop_oneof![Just(128u32), 1u32..128]).prop_map(
                |(t, fwd, prefix)| {
                    let t = if fwd {
                        t.with_header(ProxyHeader::Forwarded)
                    } else {
                        t
                    };
                    t.with_ipv6_prefix(prefix).unwrap()
                },
            )
        })
    }

    /// Text made mostly of what addresses and headers are made of, so the parsers' paths are walked.
    fn header_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9a-fA-F:.,;=\\[\\]\" %_a-z]{0,80}",
            any::<String>(),
            "(for=)?(\\[?[0-9a-f:]{2,20}\\]?|[0-9]{1,3}(\\.[0-9]{1,3}){3})(:[0-9]{1,6})?(, ?)?",
        ]
    }

    proptest! {
        #[test]
        fn client_address_never_panics_and_answers_an_address(
            peer in header_text(), xff in proptest::option::of(header_text()),
            fwd in proptest::option::of(header_text()), trust in any_trust(),
        ) {
            // Whatever the headers say, the answer is an address (or an IPv6 block) again, or the
            // peer's own text when the peer is not one and no forwarded address was believed; an
            // error only for an empty peer.
            let text = peer.trim_matches([' ', '\t']);
            match http::client_address(&peer, xff.as_deref(), fwd.as_deref(), &trust) {
                Ok(address) => {
                    let ip = address.split('/').next().unwrap();
                    prop_assert!(ip.parse::<std::net::IpAddr>().is_ok() || address == text, "{address}");
                }
                Err(e) => prop_assert!(text.is_empty() && e == http::HttpError::NoPeer, "{e}"),
            }
        }

        #[test]
        fn distinct_keys_never_share_a_store_key(a in any::<String>(), b in any::<String>(), name in "[a-z]{1,8}") {
            let limit = Limit::per_minute(5).unwrap();
            let ka = http::request_entries(&name, &[HttpLimit::new(&a, limit)]);
            let kb = http::request_entries(&name, &[HttpLimit::new(&b, limit)]);
            if let (Ok(ka), Ok(kb)) = (ka, kb) {
                prop_assert_eq!(a == b, ka.entries[0].key == kb.entries[0].key);
                prop_assert!(!ka.entries[0].key.bytes().any(|c| c < 0x20 || c == 0x7f));
            }
        }

        #[test]
        fn response_headers_never_panic(
            name in any::<String>(), uses in proptest::collection::vec(1u64..100, 0..4),
            allowed in any::<bool>(), blocked in proptest::option::of(0usize..6),
            retry in any::<u64>(), reset in any::<u64>(), now in any::<u64>(), limit in any::<u32>(),
        ) {
            let limits: Vec<Limit> = uses.iter().map(|&u| Limit::new(u, u * 1000).unwrap()).collect();
            let verdict = BatchVerdict { allowed, retry_after_ms: retry, retry_timestamp: None, blocked,
                quota: Quota { limit, remaining: 0, refill_after_ms: 0, reset_after_ms: reset } };
            let h = http::response_headers(&name, &limits, &verdict, now,
                HeaderOptions { ietf: true, legacy: true });
            // Every value is a valid field value: visible ASCII and spaces only.
            for (_, v) in h {
                prop_assert!(v.bytes().all(|c| (0x20..0x7f).contains(&c)), "{v:?}");
            }
        }
    }
}
