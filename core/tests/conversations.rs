//! Runs every scripted conversation in `tests/vectors/conversations/*.json` on the core's call
//! machines: each command is checked against the script, the script's reply or failure is fed back,
//! and the outcome must match. Every binding runs the same files through its public stores.

use std::path::PathBuf;

use ratewindow_core::call::{
    Call, Command, Fed, Next, Op, Outcome, Redis, ReleaseToken, WindowQuery,
};
use ratewindow_core::redis::{RedisOptions, Reply};
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Sqlite};
use ratewindow_core::{Entry, Limit, Window};
use serde_json::{json, Value};

fn files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/conversations");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/vectors/conversations")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn limit(v: &Value) -> Limit {
    Limit::new(
        v["uses"].as_u64().unwrap(),
        v["window_ms"].as_u64().unwrap(),
    )
    .unwrap()
}

fn entries(v: &Value) -> Vec<Entry> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| Entry::new(e["key"].as_str().unwrap(), limit(&e["limit"])))
        .collect()
}

fn key(op: &Value) -> String {
    op["key"].as_str().unwrap().to_owned()
}

fn decay(op: &Value) -> Window {
    Window::from_ms(op["decay_ms"].as_u64().unwrap()).unwrap()
}

/// The core's op for a vector op; `single` when the public call answers a single verdict.
fn op(v: &Value, call_id: &str, tokens: &[Option<ReleaseToken>]) -> (Op, bool) {
    let max = || v["max"].as_i64().unwrap();
    let read = |query| Op::Read { key: key(v), query };
    let single = |key: &Value, lim: &Value| vec![Entry::new(key.as_str().unwrap(), limit(lim))];
    let call_id = call_id.to_owned();
    let op = match v["op"].as_str().unwrap() {
        "consume" => Op::Consume {
            entries: single(&v["key"], &v["limit"]),
            call_id,
        },
        "peek" => Op::Peek {
            entries: single(&v["key"], &v["limit"]),
        },
        "consume_many" => Op::Consume {
            entries: entries(&v["entries"]),
            call_id,
        },
        "peek_many" => Op::Peek {
            entries: entries(&v["entries"]),
        },
        "release" => {
            let of = v["of"].as_u64().unwrap() as usize;
            let token = tokens[of].clone().expect("`of` names an allowed consume");
            Op::Release { token }
        }
        "hit" => Op::Hit {
            key: key(v),
            decay: decay(v),
            amount: v["amount"].as_i64().unwrap(),
        },
        "attempt" => Op::Attempt {
            key: key(v),
            max: max(),
            decay: decay(v),
        },
        "attempts" => read(WindowQuery::Attempts),
        "too_many_attempts" => read(WindowQuery::TooManyAttempts { max: max() }),
        "remaining" => read(WindowQuery::Remaining { max: max() }),
        "available_in" => read(WindowQuery::AvailableIn),
        "available_in_ms" => read(WindowQuery::AvailableInMs),
        "reset_attempts" => Op::ResetAttempts { key: key(v) },
        "clear" => Op::Clear { key: key(v) },
        other => panic!("unknown op {other}"),
    };
    let is_single = matches!(v["op"].as_str(), Some("consume" | "peek"));
    (op, is_single)
}

fn reply(v: &Value) -> Reply {
    match v {
        Value::Null => Reply::Nil,
        Value::Number(n) => Reply::Int(n.as_i64().unwrap()),
        Value::String(s) => Reply::Text(s.clone()),
        Value::Array(items) => Reply::Array(items.iter().map(reply).collect()),
        other => panic!("not a reply: {other}"),
    }
}

fn sql_value(v: &Value) -> SqlValue {
    serde_json::from_value(v.clone()).unwrap()
}

/// What a command looks like in a vector, for comparison (with the call id put back as `{call_id}`).
fn command_json(command: Command<'_>, call_id: &str) -> Value {
    match command {
        Command::Script {
            script,
            keys,
            args,
            by_sha1,
        } => json!({
            "script": script.name,
            "by_sha1": by_sha1,
            "keys": keys,
            "args": args.iter().map(|a| if a == call_id { "{call_id}" } else { a.as_str() }).collect::<Vec<_>>(),
        }),
        Command::Plain { args } => json!({ "command": args }),
        Command::Sql { statements } => json!({
            "sql": statements.iter().map(|s| s.sql.clone()).collect::<Vec<_>>(),
            "params": statements
                .iter()
                .map(|s| {
                    s.params
                        .iter()
                        .map(|p| match p {
                            SqlValue::Text(t) if t == call_id => json!("{call_id}"),
                            p => json!(p),
                        })
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>(),
        }),
    }
}

fn outcome_json(
    outcome: &Result<Outcome, ratewindow_core::call::CallError>,
    single: bool,
) -> Value {
    match outcome {
        Err(e) => json!({ "error": e.kind() }),
        Ok(Outcome::Verdict { verdict, release }) => {
            let mut v = json!(verdict);
            if single {
                v.as_object_mut().unwrap().remove("blocked");
            }
            json!({ "verdict": v, "release": release.is_some() })
        }
        Ok(Outcome::Hit {
            count,
            reset_after_ms,
        }) => {
            json!({ "hit": { "count": count, "reset_after_ms": reset_after_ms } })
        }
        Ok(Outcome::Attempt {
            allowed,
            count,
            reset_after_ms,
        }) => json!({
            "attempt": { "allowed": allowed, "count": count, "reset_after_ms": reset_after_ms }
        }),
        Ok(Outcome::Int(i)) => json!({ "int": i }),
        Ok(Outcome::Bool(b)) => json!({ "bool": b }),
        Ok(Outcome::Unit) => json!({ "unit": null }),
        #[cfg(feature = "lock")]
        Ok(Outcome::Owner(owner)) => json!({ "owner": owner }),
    }
}

enum Store {
    Redis(Redis),
    Postgres(Postgres),
    Sqlite(Sqlite),
}

impl Store {
    fn of(case: &Value) -> Store {
        let options = &case["options"];
        let sql_names =
            || SqlNames::new(options["prefix"].as_str().unwrap_or("ratewindow")).unwrap();
        match case["store"].as_str().unwrap() {
            "redis" => {
                let mut o = RedisOptions::default();
                if let Some(prefix) = options["prefix"].as_str() {
                    o = o.with_prefix(prefix);
                }
                if let Some(sep) = options["hash_tag"].as_str() {
                    o = o.with_hash_tag_before(sep).unwrap();
                }
                Store::Redis(Redis::new(o).evalsha(options["evalsha"].as_bool().unwrap_or(true)))
            }
            "postgres" => Store::Postgres(Postgres::new(sql_names())),
            "sqlite" => Store::Sqlite(Sqlite::new(sql_names())),
            other => panic!("unknown store {other}"),
        }
    }

    fn start(&self, op: Op, now: u64) -> Call {
        match self {
            Store::Redis(r) => r.start(op),
            Store::Postgres(p) => p.start(op),
            Store::Sqlite(s) => s.start(op, now),
        }
    }
}

fn run_case(case: &Value) -> Vec<String> {
    let name = case["name"].as_str().unwrap();
    let store = Store::of(case);
    let mut failures = Vec::new();
    let mut tokens: Vec<Option<ReleaseToken>> = Vec::new();
    for (n, spec) in case["calls"].as_array().unwrap().iter().enumerate() {
        let here = format!("{name} / call {n}");
        // A release runs under the id of the consume it gives back.
        let call_id = match &spec["op"]["of"] {
            Value::Number(of) => format!("call-{of}"),
            _ => format!("call-{n}"),
        };
        let (op, single) = op(&spec["op"], &call_id, &tokens);
        let mut call = store.start(op, spec["now"].as_u64().unwrap_or(0));
        let mut steps = spec["steps"].as_array().unwrap().iter();
        let result = loop {
            match call.next() {
                Next::Done(result) => break result,
                Next::Run(command) => {
                    let Some(step) = steps.next() else {
                        failures.push(format!(
                            "{here}: asked for more than the script: {}",
                            command_json(command, &call_id)
                        ));
                        break Err(ratewindow_core::call::CallError::Unsupported("off script"));
                    };
                    let got = command_json(command, &call_id);
                    if let Some(want) = step.get("command") {
                        for (field, value) in want.as_object().unwrap() {
                            if got[field] != *value {
                                failures.push(format!(
                                    "{here}: command {field}: want {value}, got {}",
                                    got[field]
                                ));
                            }
                        }
                    }
                    if let Some(message) = step["fail"].as_str() {
                        call.fail(message);
                    } else if let Some(rows) = step.get("rows") {
                        let rows = rows
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|row| row.as_array().unwrap().iter().map(sql_value).collect())
                            .collect();
                        call.feed(Fed::Rows(rows));
                    } else {
                        call.feed(Fed::Reply(reply(&step["reply"])));
                    }
                }
            }
        };
        if steps.next().is_some() {
            failures.push(format!("{here}: the call ended before the script did"));
        }
        let got = outcome_json(&result, single);
        if got != spec["outcome"] {
            failures.push(format!(
                "{here}: outcome: want {}, got {got}",
                spec["outcome"]
            ));
        }
        let reported: Vec<Value> = call
            .take_give_back_failures()
            .into_iter()
            .map(|f| json!({ "keys": f.keys }))
            .collect();
        let want_reported = spec.get("give_back_failures").cloned().unwrap_or(json!([]));
        if json!(reported) != want_reported {
            failures.push(format!(
                "{here}: give-back failures: want {want_reported}, got {}",
                json!(reported)
            ));
        }
        tokens.push(match result {
            Ok(Outcome::Verdict { release, .. }) => release,
            _ => None,
        });
    }
    failures
}

#[test]
fn every_conversation_matches_the_machines() {
    let mut count = 0;
    let mut failures = Vec::new();
    for file in files() {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for case in doc["cases"].as_array().unwrap() {
            count += 1;
            failures.extend(run_case(case));
        }
    }
    assert!(count >= 19, "only {count} conversations");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
