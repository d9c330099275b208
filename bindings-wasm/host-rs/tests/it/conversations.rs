//! Every Redis case of `tests/vectors/conversations/*.json` through the component's public `redis-store`
//! (hosted world) with a scripted `store-io.run-script`: each command the component's machine sends is
//! checked against the case's next step and answered with its reply or its failure; the outcome, the
//! error kind and the reported give-back failures must be the case's.

use std::sync::{Arc, Mutex};

use ratewindow_core::redis::weighted::WEIGHTED;
use ratewindow_core::redis::{Script as CoreScript, FIXED, SLIDING};
use ratewindow_host_rs::hosted::exports::ratewindow::engine::{
    redis::RedisOptions,
    types::{Entry, Limit as WitLimit},
};
use ratewindow_host_rs::{Error, HostedWorld, ScriptReply, ScriptValue, Verdict};
use serde_json::{json, Value};
use wasmtime::component::ResourceAny;

use crate::common;

/// The steps of the call running now, and what went wrong (checked after each call).
#[derive(Default)]
struct Script {
    steps: Vec<Value>,
    next: usize,
    call_id: Option<String>,
    mismatches: Vec<String>,
}

fn script_value(v: &Value) -> ScriptValue {
    match v {
        Value::Null => ScriptValue::Nil,
        Value::Number(n) => match n.as_i64() {
            Some(i) => ScriptValue::Integer(i),
            None => ScriptValue::Float(n.as_f64().expect("a number")),
        },
        Value::String(s) => ScriptValue::Text(s.clone()),
        Value::Bool(b) => ScriptValue::Integer(i64::from(*b)),
        other => panic!("a reply value cannot be {other}"),
    }
}

fn script_reply(v: &Value) -> ScriptReply {
    match v {
        Value::Array(items) => ScriptReply::Array(items.iter().map(script_value).collect()),
        other => ScriptReply::Value(script_value(other)),
    }
}

impl Script {
    /// Answers one `run-script` call from the next step, recording any difference from it.
    fn answer(
        &mut self,
        script: &str,
        sha1: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<ScriptReply, String> {
        let Some(step) = self.steps.get(self.next).cloned() else {
            self.mismatches
                .push(format!("a command after the last step: {keys:?} {args:?}"));
            return Err("the conversation has no more steps".to_owned());
        };
        self.next += 1;
        if let Some(command) = step.get("command") {
            let by_sha1 = script.is_empty();
            let known: [&CoreScript; 3] = [&SLIDING, &FIXED, &WEIGHTED];
            let named = known.iter().find(|s| s.sha1 == sha1);
            let name = named.map_or("?", |s| s.name);
            let source_ok = by_sha1 || known.iter().any(|s| s.source == script);
            let source_matches = by_sha1 || named.is_some_and(|s| s.source == script);
            let mut got_args = Vec::new();
            for (i, a) in args.iter().enumerate() {
                let want = command["args"].get(i).and_then(Value::as_str);
                if want == Some("{call_id}") {
                    if a.is_empty() || self.call_id.as_ref().is_some_and(|id| id != a) {
                        self.mismatches
                            .push(format!("call id {a:?} (earlier {:?})", self.call_id));
                    }
                    self.call_id = Some(a.clone());
                    got_args.push(json!("{call_id}"));
                } else {
                    got_args.push(json!(a));
                }
            }
            let got = json!({ "script": name, "by_sha1": by_sha1, "keys": keys, "args": got_args });
            if got != *command || !source_ok || !source_matches {
                self.mismatches.push(format!(
                    "step {}: sent {got} (source sent: {}), expected {command}",
                    self.next - 1,
                    !by_sha1
                ));
            }
        }
        match (step.get("reply"), step.get("fail")) {
            (Some(reply), None) => Ok(script_reply(reply)),
            (None, Some(fail)) => Err(fail.as_str().expect("fail is text").to_owned()),
            _ => panic!("a step has exactly one of reply and fail: {step}"),
        }
    }
}

fn outcome_error(e: Error) -> Value {
    json!({ "error": e.kind() })
}

fn verdict_value(v: impl Into<Verdict>, batch: bool) -> Value {
    common::verdict(v.into(), batch)
}

struct Conversation {
    world: HostedWorld,
    store: ResourceAny,
    script: Arc<Mutex<Script>>,
    /// The release token of each call, by its index in the case.
    tokens: Vec<Option<ResourceAny>>,
}

fn wit_limit(v: &Value) -> WitLimit {
    let l = common::limit(v);
    WitLimit {
        uses: l.uses,
        window_ms: l.window_ms,
    }
}

fn wit_entries(op: &Value) -> Vec<Entry> {
    common::entries(op)
        .into_iter()
        .map(|(key, l, cost)| Entry {
            key,
            limit: WitLimit {
                uses: l.uses,
                window_ms: l.window_ms,
            },
            cost,
        })
        .collect()
}

impl Conversation {
    fn new(options: &Value) -> Conversation {
        let mut world = HostedWorld::new().expect("instantiate the hosted component");
        let script = Arc::new(Mutex::new(Script::default()));
        let shared = Arc::clone(&script);
        world.store.data_mut().runner = Some(Box::new(move |script, sha1, keys, args| {
            shared
                .lock()
                .expect("script")
                .answer(script, sha1, keys, args)
        }));
        let handle = world
            .redis_store(&RedisOptions {
                prefix: options["prefix"].as_str().map(str::to_owned),
                hash_tag_before: options["hash_tag"].as_str().map(str::to_owned),
                evalsha: options["evalsha"].as_bool(),
            })
            .expect("constructor");
        Conversation {
            world,
            store: handle,
            script,
            tokens: Vec::new(),
        }
    }

    /// Runs one public call; its outcome in the vectors' shape.
    fn call(&mut self, op: &Value) -> Value {
        let s = self.store;
        let (store, redis) = self.world.split_redis();
        let r = redis.redis_store();
        let key = || common::key(op);
        let mut token = None;
        let out = match op["op"].as_str().expect("op") {
            // A weighted call (`cost`): `consume-cost`.
            "consume" if op.get("cost").is_some() => match r
                .call_consume_cost(
                    &mut *store,
                    s,
                    key(),
                    wit_limit(&op["limit"]),
                    common::num(op, "cost"),
                )
                .expect("the component trapped")
            {
                Ok(c) => {
                    token = c.release;
                    json!({ "verdict": verdict_value(c.verdict, false), "release": token.is_some() })
                }
                Err(e) => outcome_error(e.into()),
            },
            "peek" if op.get("cost").is_some() => match r
                .call_peek_cost(
                    &mut *store,
                    s,
                    key(),
                    wit_limit(&op["limit"]),
                    common::num(op, "cost"),
                )
                .expect("the component trapped")
            {
                Ok(v) => json!({ "verdict": verdict_value(v, false), "release": false }),
                Err(e) => outcome_error(e.into()),
            },
            "consume" => match r
                .call_consume(&mut *store, s, key(), wit_limit(&op["limit"]))
                .expect("the component trapped")
            {
                Ok(c) => {
                    token = c.release;
                    json!({ "verdict": verdict_value(c.verdict, false), "release": token.is_some() })
                }
                Err(e) => outcome_error(e.into()),
            },
            "consume_many" => match r
                .call_consume_many(&mut *store, s, &wit_entries(op))
                .expect("the component trapped")
            {
                Ok(c) => {
                    token = c.release;
                    json!({ "verdict": verdict_value(c.verdict, true), "release": token.is_some() })
                }
                Err(e) => outcome_error(e.into()),
            },
            "peek" => match r
                .call_peek(&mut *store, s, key(), wit_limit(&op["limit"]))
                .expect("the component trapped")
            {
                Ok(v) => json!({ "verdict": verdict_value(v, false), "release": false }),
                Err(e) => outcome_error(e.into()),
            },
            "peek_many" => match r
                .call_peek_many(&mut *store, s, &wit_entries(op))
                .expect("the component trapped")
            {
                Ok(v) => json!({ "verdict": verdict_value(v, true), "release": false }),
                Err(e) => outcome_error(e.into()),
            },
            "release" => {
                let of = op["of"].as_u64().expect("of") as usize;
                let held = self.tokens[of].expect("the released call had a token");
                match r
                    .call_release(&mut *store, s, held)
                    .expect("the component trapped")
                {
                    Ok(_) => json!({ "unit": null }),
                    Err(e) => outcome_error(e.into()),
                }
            }
            "hit" => match r
                .call_hit_window(
                    &mut *store,
                    s,
                    key(),
                    common::num(op, "decay_ms"),
                    common::int(op, "amount"),
                )
                .expect("the component trapped")
            {
                Ok(h) => {
                    json!({ "hit": { "count": h.count, "reset_after_ms": h.reset_after_ms } })
                }
                Err(e) => outcome_error(e.into()),
            },
            "attempt" => match r
                .call_attempt(
                    &mut *store,
                    s,
                    key(),
                    common::int(op, "max"),
                    common::num(op, "decay_ms"),
                )
                .expect("the component trapped")
            {
                Ok(a) => json!({ "attempt": {
                    "allowed": a.allowed, "count": a.count, "reset_after_ms": a.reset_after_ms } }),
                Err(e) => outcome_error(e.into()),
            },
            "attempts" => int_outcome(
                r.call_attempts(&mut *store, s, key())
                    .expect("the component trapped"),
            ),
            "too_many_attempts" => match r
                .call_too_many_attempts(&mut *store, s, key(), common::int(op, "max"))
                .expect("the component trapped")
            {
                Ok(b) => json!({ "bool": b }),
                Err(e) => outcome_error(e.into()),
            },
            "remaining" => int_outcome(
                r.call_remaining(&mut *store, s, key(), common::int(op, "max"))
                    .expect("the component trapped"),
            ),
            "available_in" => int_outcome(
                r.call_available_in(&mut *store, s, key())
                    .expect("the component trapped")
                    .map(|n| n as i64),
            ),
            "available_in_ms" => int_outcome(
                r.call_available_in_ms(&mut *store, s, key())
                    .expect("the component trapped")
                    .map(|n| n as i64),
            ),
            "reset_attempts" => unit_outcome(
                r.call_reset_attempts(&mut *store, s, key())
                    .expect("the component trapped"),
            ),
            "clear" => unit_outcome(
                r.call_clear(&mut *store, s, key())
                    .expect("the component trapped"),
            ),
            other => panic!("unknown op {other}"),
        };
        self.tokens.push(token);
        out
    }
}

fn int_outcome(
    r: Result<i64, ratewindow_host_rs::hosted::exports::ratewindow::engine::errors::Error>,
) -> Value {
    match r {
        Ok(n) => json!({ "int": n }),
        Err(e) => outcome_error(e.into()),
    }
}

fn unit_outcome(
    r: Result<(), ratewindow_host_rs::hosted::exports::ratewindow::engine::errors::Error>,
) -> Value {
    match r {
        Ok(()) => json!({ "unit": null }),
        Err(e) => outcome_error(e.into()),
    }
}

/// Whether a case runs a batch mixing algorithms, which the component's `redis-store` does not have
/// (its core is built without the `mixed` feature, which needs the SQL machines).
fn mixes(case: &Value) -> bool {
    case["calls"].as_array().into_iter().flatten().any(|call| {
        matches!(
            call["op"]["op"].as_str(),
            Some("consume_mixed" | "peek_mixed")
        )
    })
}

#[test]
fn every_redis_conversation_reaches_its_outcome_through_the_component() {
    let mut cases = 0;
    let mut calls = 0;
    let (mut left_out, mut weighted) = (0, 0);
    for file in common::json_files("conversations") {
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
        for case in doc["cases"].as_array().expect("cases") {
            if case["store"] != "redis" {
                continue;
            }
            if mixes(case) {
                left_out += 1;
                continue;
            }
            let calls_of = case["calls"].as_array().into_iter().flatten();
            if calls_of.clone().any(|c| {
                c["op"].get("cost").is_some() || c["op"]["entries"].to_string().contains("\"cost\"")
            }) {
                weighted += 1;
            }
            let name = case["name"].as_str().unwrap_or("?");
            let mut conv = Conversation::new(&case["options"]);
            for (i, call) in case["calls"].as_array().expect("calls").iter().enumerate() {
                let steps = call["steps"].as_array().cloned().unwrap_or_default();
                *conv.script.lock().unwrap() = Script {
                    steps: steps.clone(),
                    ..Script::default()
                };
                conv.world.store.data_mut().give_back_failures.clear();
                let got = conv.call(&call["op"]);
                let script = conv.script.lock().unwrap();
                assert!(
                    script.mismatches.is_empty(),
                    "{name} / call {i}: {:#?}",
                    script.mismatches
                );
                assert_eq!(
                    script.next,
                    steps.len(),
                    "{name} / call {i}: the call ran {} of {} steps",
                    script.next,
                    steps.len()
                );
                assert_eq!(got, call["outcome"], "{name} / call {i}: {}", call["op"]);
                let reported: Vec<Value> = conv
                    .world
                    .store
                    .data()
                    .give_back_failures
                    .iter()
                    .map(|f| {
                        assert!(!f.call_id.is_empty() && !f.message.is_empty());
                        json!({ "keys": f.keys })
                    })
                    .collect();
                let expected = call.get("give_back_failures").cloned().unwrap_or(json!([]));
                assert_eq!(
                    json!(reported),
                    expected,
                    "{name} / call {i}: give-back failures"
                );
                calls += 1;
            }
            cases += 1;
        }
    }
    assert!(cases >= 19 && calls > cases, "{cases} cases, {calls} calls");
    assert!(
        weighted >= 3 && (1..=2).contains(&left_out),
        "{weighted} weighted cases, {left_out} mixed left out"
    );
}
