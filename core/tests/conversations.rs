//! Runs every scripted conversation in `tests/vectors/conversations/*.json` on the core's call
//! machines: each command is checked against the script, the script's reply or failure is fed back,
//! and the outcome must match. Every binding runs the same files through its public stores.

use std::path::PathBuf;

use ratewindow_core::call::{
    Call, Command, Fed, Next, Op, Outcome, Redis, ReleaseToken, WindowQuery,
};
use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::Gcra;
use ratewindow_core::redis::{RedisOptions, Reply};
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Sqlite};
use ratewindow_core::{Entry, Limit, MixedEntry, Rule, Window};
use serde_json::{json, Value};

mod servers;

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

/// An entry, weighted when it has a `cost` (`weights.json`).
fn entry(e: &Value) -> Entry {
    let (key, limit) = (e["key"].as_str().unwrap(), limit(&e["limit"]));
    match e["cost"].as_u64() {
        Some(cost) => Entry::with_cost(key, limit, cost).unwrap(),
        None => Entry::new(key, limit),
    }
}

fn entries(v: &Value) -> Vec<Entry> {
    v.as_array().unwrap().iter().map(entry).collect()
}

/// The entries of a `consume_mixed` / `peek_mixed` (as in `tests/vectors/gcra/`).
fn mixed_entries(v: &Value) -> Vec<MixedEntry> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let l = &e["limit"];
            let rule = match e["algorithm"].as_str().unwrap() {
                "sliding" => Rule::Sliding(limit(l)),
                "gcra" => Rule::Gcra(
                    Gcra::new(
                        l["uses"].as_u64().unwrap(),
                        l["window_ms"].as_u64().unwrap(),
                        l["burst"].as_u64().unwrap_or(l["uses"].as_u64().unwrap()),
                    )
                    .unwrap(),
                ),
                "counter" => Rule::Counter(Counter::new(limit(l)).unwrap()),
                other => panic!("unknown algorithm {other}"),
            };
            MixedEntry::new(
                e["key"].as_str().unwrap(),
                rule,
                e["cost"].as_u64().unwrap_or(1),
            )
        })
        .collect()
}

fn key(op: &Value) -> String {
    op["key"].as_str().unwrap().to_owned()
}

fn decay(op: &Value) -> Window {
    Window::from_ms(op["decay_ms"].as_u64().unwrap()).unwrap()
}

/// What a vector op starts: one of the core's ops, or a batch mixing algorithms (`Some(call_id)`: a
/// consume).
enum Start {
    Op(Op),
    Mixed(Vec<MixedEntry>, Option<String>),
}

/// The core's op for a vector op; `single` when the public call answers a single verdict.
fn op(v: &Value, call_id: &str, tokens: &[Option<ReleaseToken>]) -> (Start, bool) {
    match v["op"].as_str().unwrap() {
        "consume_mixed" => {
            let entries = mixed_entries(&v["entries"]);
            return (Start::Mixed(entries, Some(call_id.to_owned())), false);
        }
        "peek_mixed" => return (Start::Mixed(mixed_entries(&v["entries"]), None), false),
        _ => {}
    }
    let max = || v["max"].as_i64().unwrap();
    let read = |query| Op::Read { key: key(v), query };

    let call_id = call_id.to_owned();
    let op = match v["op"].as_str().unwrap() {
        "consume" => Op::Consume {
            // A single call (with a `cost`: weighted) is a batch of one entry.
            entries: vec![entry(v)],
            call_id,
        },
        "peek" => Op::Peek {
            // A single call (with a `cost`: weighted) is a batch of one entry.
            entries: vec![entry(v)],
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
    (Start::Op(op), is_single)
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

    fn start(&self, start: Start, now: u64) -> Call {
        match (self, start) {
            (Store::Redis(r), Start::Op(op)) => r.start(op),
            (Store::Postgres(p), Start::Op(op)) => p.start(op),
            (Store::Sqlite(s), Start::Op(op)) => s.start(op, now),
            (Store::Redis(r), Start::Mixed(entries, id)) => r.mixed(entries, None, id.as_deref()),
            (Store::Postgres(p), Start::Mixed(entries, id)) => p.mixed(entries, id.as_deref()),
            (Store::Sqlite(s), Start::Mixed(entries, id)) => s.mixed(entries, now, id.as_deref()),
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

/// Writes `tests/vectors/conversations/weights.json`: weighted calls and batches mixing algorithms,
/// each call run by the core's machine against the REAL servers (Redis at `REDIS_URL`, PostgreSQL as
/// the other tests find it, SQLite files), every command and its reply recorded as a step; a few
/// steps carry a failure or a reply put in place of the server's (the command is then not run).
/// Run on a Redis of your own (it flushes the database):
/// `REDIS_URL=redis://127.0.0.1:6475/ cargo test -p ratewindow-core --test conversations -- --ignored record`
mod record {
    use super::*;
    use ratewindow_core::call::MIXED;
    use ratewindow_core::redis::weighted::WEIGHTED;

    use super::servers;

    const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
    const LOST: &str = "Connection is closed.";

    enum Server {
        Redis(redis::Connection),
        Sqlite(rusqlite::Connection),
        Postgres(postgres::Client),
    }

    /// What a step gets instead of the server's answer.
    enum Fault {
        Fail(&'static str),
        Reply(Value),
    }

    fn redis_json(v: redis::Value) -> Value {
        match v {
            redis::Value::Nil => Value::Null,
            redis::Value::Int(i) => json!(i),
            redis::Value::BulkString(b) => json!(String::from_utf8(b).unwrap()),
            redis::Value::SimpleString(s) => json!(s),
            redis::Value::Array(items) => Value::Array(items.into_iter().map(redis_json).collect()),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    fn sqlite_rows(
        db: &rusqlite::Connection,
        st: &ratewindow_core::sql::Statement,
    ) -> Vec<Vec<SqlValue>> {
        servers::sqlite_rows(db, st).unwrap()
    }

    fn pg_rows(
        client: &mut postgres::Client,
        st: &ratewindow_core::sql::Statement,
    ) -> Vec<Vec<SqlValue>> {
        servers::pg_rows(client, st).unwrap()
    }

    impl Server {
        /// Runs `command` for real: the step's answer (`reply` or `rows`) and what to feed.
        fn run(&mut self, command: Command<'_>) -> (Value, Fed) {
            match (self, command) {
                (
                    Server::Redis(c),
                    Command::Script {
                        script,
                        keys,
                        args,
                        by_sha1,
                    },
                ) => {
                    let mut cmd = redis::cmd(if by_sha1 { "EVALSHA" } else { "EVAL" });
                    cmd.arg(if by_sha1 { script.sha1 } else { script.source })
                        .arg(keys.len());
                    for k in keys {
                        cmd.arg(k);
                    }
                    for a in args {
                        cmd.arg(a);
                    }
                    let v: redis::Value = cmd.query(c).unwrap();
                    let j = redis_json(v);
                    let fed = Fed::Reply(reply(&j));
                    (json!({ "reply": j }), fed)
                }
                (Server::Sqlite(db), Command::Sql { statements }) => {
                    let mut rows = Vec::new();
                    for st in statements {
                        rows = sqlite_rows(db, st);
                    }
                    (json!({ "rows": rows }), Fed::Rows(rows))
                }
                (Server::Postgres(c), Command::Sql { statements }) => {
                    let mut rows = Vec::new();
                    for st in statements {
                        rows = pg_rows(c, st);
                    }
                    (json!({ "rows": rows }), Fed::Rows(rows))
                }
                _ => panic!("a command of another store"),
            }
        }
    }

    struct Recorder {
        server: Server,
        store: Store,
        options: Value,
        kind: &'static str,
        calls: Vec<Value>,
        tokens: Vec<Option<ReleaseToken>>,
    }

    impl Recorder {
        fn redis(c: &redis::Client) -> Recorder {
            let mut conn = c.get_connection().unwrap();
            let _: () = redis::cmd("FLUSHDB").query(&mut conn).unwrap();
            // Only the scripts these cases run (none of them the sliding or fixed script).
            for s in [&WEIGHTED, &MIXED] {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(s.source)
                    .query(&mut conn)
                    .unwrap();
                assert_eq!(sha, s.sha1, "{}", s.name);
            }
            let options = json!({ "prefix": "ratewindow:", "evalsha": true });
            Recorder::new(Server::Redis(conn), "redis", options)
        }

        fn sqlite(dir: &std::path::Path, n: usize) -> Recorder {
            let path = dir.join(format!("record-{n}.db"));
            let _ = std::fs::remove_file(&path);
            let db = rusqlite::Connection::open(&path).unwrap();
            db.execute_batch(Sqlite::CONNECTION_SETUP).unwrap();
            db.execute_batch(&Sqlite::default().schema()).unwrap();
            Recorder::new(
                Server::Sqlite(db),
                "sqlite",
                json!({ "prefix": "ratewindow" }),
            )
        }

        fn postgres() -> Recorder {
            let mut c = servers::pg_connect();
            drop_pg(&mut c);
            c.batch_execute(&Postgres::new(SqlNames::new(PG).unwrap()).schema())
                .unwrap();
            Recorder::new(Server::Postgres(c), "postgres", json!({ "prefix": PG }))
        }

        fn new(server: Server, kind: &'static str, options: Value) -> Recorder {
            let store = Store::of(&json!({ "store": kind, "options": options }));
            Recorder {
                server,
                store,
                options,
                kind,
                calls: Vec::new(),
                tokens: Vec::new(),
            }
        }

        /// Records one call of `op` (at `now` on SQLite); `faults` replace steps by index; `before`
        /// runs on the server before the step of its index is run.
        fn call(
            &mut self,
            op_json: Value,
            now: Option<u64>,
            faults: Vec<(usize, Fault)>,
            mut before: impl FnMut(usize, &mut Server),
        ) -> &mut Recorder {
            let n = self.calls.len();
            let call_id = match &op_json["of"] {
                Value::Number(of) => format!("call-{of}"),
                _ => format!("call-{n}"),
            };
            let (op, single) = op(&op_json, &call_id, &self.tokens);
            let mut call = self.store.start(op, now.unwrap_or(0));
            let mut steps = Vec::new();
            let mut faults = faults
                .into_iter()
                .collect::<std::collections::HashMap<_, _>>();
            let result = loop {
                match call.next() {
                    Next::Done(result) => break result,
                    Next::Run(command) => {
                        let i = steps.len();
                        let shown = command_json(command, &call_id);
                        for a in shown["args"].as_array().into_iter().flatten() {
                            let a = a.as_str().unwrap();
                            assert!(
                                a == "{call_id}" || !a.contains(&call_id),
                                "the call id inside an argument: {a}"
                            );
                        }
                        let mut step = json!({ "command": shown });
                        match faults.remove(&i) {
                            Some(Fault::Fail(message)) => {
                                step["fail"] = json!(message);
                                call.fail(message);
                            }
                            Some(Fault::Reply(r)) => {
                                let fed = if self.kind == "redis" {
                                    Fed::Reply(reply(&r))
                                } else {
                                    Fed::Rows(serde_json::from_value(r.clone()).unwrap())
                                };
                                step[if self.kind == "redis" {
                                    "reply"
                                } else {
                                    "rows"
                                }] = r;
                                call.feed(fed);
                            }
                            None => {
                                before(i, &mut self.server);
                                let (answer, fed) = self.server.run(command);
                                for (k, v) in answer.as_object().unwrap() {
                                    step[k] = v.clone();
                                }
                                call.feed(fed);
                            }
                        }
                        steps.push(step);
                    }
                }
            };
            assert!(
                faults.is_empty(),
                "a fault for a step the call did not take"
            );
            let mut spec =
                json!({ "op": op_json, "steps": steps, "outcome": outcome_json(&result, single) });
            if let Some(now) = now {
                spec["now"] = json!(now);
            }
            let reported: Vec<Value> = call
                .take_give_back_failures()
                .into_iter()
                .map(|f| json!({ "keys": f.keys }))
                .collect();
            assert!(reported.is_empty());
            self.tokens.push(match result {
                Ok(Outcome::Verdict { release, .. }) => release,
                _ => None,
            });
            self.calls.push(spec);
            self
        }

        fn plain(&mut self, op_json: Value, now: Option<u64>) -> &mut Recorder {
            self.call(op_json, now, Vec::new(), |_, _| {})
        }

        fn case(&mut self, name: &str) -> Value {
            json!({ "name": name, "store": self.kind, "options": self.options, "calls": std::mem::take(&mut self.calls) })
        }
    }

    const PG: &str = "rwconv";

    fn drop_pg(c: &mut postgres::Client) {
        c.batch_execute(&format!(
            "DO $d$ DECLARE f text; BEGIN \
               FOR f IN SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE '{PG}\\_%' LOOP \
                 EXECUTE 'DROP FUNCTION IF EXISTS ' || f; \
               END LOOP; END $d$; \
             DROP TABLE IF EXISTS {PG}_log, {PG}_calls, {PG}_windows, {PG}_locks, {PG}_gcra, {PG}_counters;"
        ))
        .unwrap();
    }

    fn lim(uses: u64, window_ms: u64) -> Value {
        json!({ "uses": uses, "window_ms": window_ms })
    }

    fn w(key: &str, uses: u64, window_ms: u64, cost: u64) -> Value {
        json!({ "key": key, "limit": lim(uses, window_ms), "cost": cost })
    }

    fn m(key: &str, algorithm: &str, limit: Value, cost: u64) -> Value {
        json!({ "key": key, "algorithm": algorithm, "limit": limit, "cost": cost })
    }

    fn gcra(uses: u64, window_ms: u64, burst: u64) -> Value {
        json!({ "uses": uses, "window_ms": window_ms, "burst": burst })
    }

    /// One mixed batch: a user's GCRA, a global sliding log costing 2, a counter.
    fn batch(gcra_cost: u64) -> Value {
        json!([
            m("user:1", "gcra", gcra(10, 1000, 4), gcra_cost),
            m("global", "sliding", lim(5, 60_000), 2),
            m("user:1", "counter", lim(50, 1000), 3),
        ])
    }

    #[test]
    #[ignore = "writes tests/vectors/conversations/weights.json from the real servers"]
    fn record() {
        let url =
            std::env::var("REDIS_URL").expect("REDIS_URL: a Redis of your own (it is flushed)");
        let client = redis::Client::open(url).unwrap();
        let mut cases = Vec::new();
        let k = lim(5, 1000);

        // Redis: weighted calls.
        let mut r = Recorder::redis(&client);
        r.plain(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 3 }),
            None,
        )
        .plain(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 3 }),
            None,
        )
        .plain(
            json!({ "op": "peek", "key": "k", "limit": k, "cost": 2 }),
            None,
        )
        .plain(
            json!({ "op": "consume_many", "entries": [w("k", 5, 1000, 2), w("g", 10, 60_000, 4)] }),
            None,
        )
        .plain(json!({ "op": "release", "of": 3 }), None)
        .plain(
            json!({ "op": "peek_many", "entries": [w("k", 5, 1000, 3), w("g", 10, 60_000, 10)] }),
            None,
        );
        cases.push(r.case("weighted (Redis): a call costing 3 is one EVALSHA of the weighted script; 3 more do not fit in 5, 2 do; a batch's release gives back exactly its costs"));
        let mut r = Recorder::redis(&client);
        r.call(
            json!({ "op": "consume_many", "entries": [w("k", 5, 1000, 4)] }),
            None,
            vec![(0, Fault::Fail(NOSCRIPT))],
            |_, _| {},
        );
        cases.push(r.case("weighted (Redis): NOSCRIPT sends the weighted script in full, once"));
        let mut r = Recorder::redis(&client);
        r.call(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 2 }),
            None,
            vec![(0, Fault::Fail(LOST))],
            |_, _| {},
        )
        .call(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 2 }),
            None,
            vec![(0, Fault::Reply(json!("OK")))],
            |_, _| {},
        )
        .call(
            json!({ "op": "peek_many", "entries": [w("k", 5, 1000, 2)] }),
            None,
            vec![(
                0,
                Fault::Reply(json!([1, 0, -1, -1, 1000, 0, 6, 1000, 1000])),
            )],
            |_, _| {},
        )
        .call(
            json!({ "op": "consume_many", "entries": [w("k", 5, 1000, 2)] }),
            None,
            vec![(0, Fault::Reply(json!([1, 0, -1, -1, 1000, 0, 5, 0, 0])))],
            |_, _| {},
        );
        cases.push(r.case("weighted (Redis): a lost connection is a store error; a reply of the wrong shape, more uses left than the limit, or a consume that took none is a reply error"));

        // Redis: batches mixing algorithms.
        let mut r = Recorder::redis(&client);
        r.plain(json!({ "op": "peek_mixed", "entries": batch(2) }), None)
            .plain(json!({ "op": "consume_mixed", "entries": batch(2) }), None)
            .plain(json!({ "op": "consume_mixed", "entries": batch(3) }), None)
            .plain(json!({ "op": "release", "of": 1 }), None)
            .plain(json!({ "op": "peek_mixed", "entries": batch(1) }), None);
        cases.push(r.case("mixed (Redis): a peek is one read; an allowed consume reads, then writes what it decided if nothing changed; a refusal is the read alone; the release gives back the sliding log's calls"));
        let mut r = Recorder::redis(&client);
        r.call(
            json!({ "op": "consume_mixed", "entries": batch(1) }),
            None,
            vec![(0, Fault::Fail(NOSCRIPT))],
            |_, _| {},
        )
        .call(
            json!({ "op": "consume_mixed", "entries": batch(1) }),
            None,
            vec![],
            |i, s| {
                // Between the read and the write another client counts a call on the global log.
                if i == 1 {
                    let Server::Redis(c) = s else { unreachable!() };
                    let now: Vec<u64> = redis::cmd("TIME").query(c).unwrap();
                    let ms = now[0] * 1000 + now[1] / 1000;
                    let _: () = redis::cmd("ZADD")
                        .arg("ratewindow:log:global")
                        .arg(ms)
                        .arg("another")
                        .query(c)
                        .unwrap();
                }
            },
        )
        .call(
            json!({ "op": "peek_mixed", "entries": batch(1) }),
            None,
            vec![(0, Fault::Fail(LOST))],
            |_, _| {},
        )
        .call(
            json!({ "op": "peek_mixed", "entries": batch(1) }),
            None,
            vec![(0, Fault::Reply(json!("OK")))],
            |_, _| {},
        );
        cases.push(r.case("mixed (Redis): NOSCRIPT sends mixed.lua in full; a write that lost the race to another call writes nothing and the call reads again; a lost connection is a store error, a reply of the wrong shape a reply error"));

        // SQLite: the host's clock.
        let dir = std::env::temp_dir().join(format!("rw-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Recorder::sqlite(&dir, 0);
        r.plain(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 3 }),
            Some(1000),
        )
        .plain(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 3 }),
            Some(1100),
        )
        .plain(
            json!({ "op": "consume_many", "entries": [w("k", 5, 1000, 2), w("g", 10, 60_000, 4)] }),
            Some(1200),
        )
        .plain(json!({ "op": "release", "of": 2 }), Some(1300))
        .plain(
            json!({ "op": "peek", "key": "k", "limit": k, "cost": 2 }),
            Some(1300),
        );
        cases.push(r.case("weighted (SQLite): a call costing 3 inserts its uses in one transaction; 3 more do not fit in 5; a batch's release gives back exactly its costs"));
        let mut r = Recorder::sqlite(&dir, 1);
        r.plain(
            json!({ "op": "peek_mixed", "entries": batch(2) }),
            Some(1000),
        )
        .plain(
            json!({ "op": "consume_mixed", "entries": batch(2) }),
            Some(1000),
        )
        .plain(
            json!({ "op": "consume_mixed", "entries": batch(3) }),
            Some(1000),
        )
        .plain(json!({ "op": "release", "of": 1 }), Some(1100))
        .plain(
            json!({ "op": "consume_mixed", "entries": batch(1) }),
            Some(1200),
        );
        cases.push(r.case("mixed (SQLite): one transaction reads every key's state and writes what the call decided; a refusal rolls back; the release gives back the sliding log's calls"));
        std::fs::remove_dir_all(&dir).unwrap();

        // PostgreSQL: the server's clock.
        let mut r = Recorder::postgres();
        r.plain(
            json!({ "op": "consume", "key": "k", "limit": k, "cost": 3 }),
            None,
        )
        .plain(
            json!({ "op": "consume_many", "entries": [w("k", 5, 1000, 3), w("g", 10, 60_000, 4)] }),
            None,
        )
        .plain(
            json!({ "op": "consume_many", "entries": [w("k", 5, 1000, 2), w("g", 10, 60_000, 4)] }),
            None,
        )
        .plain(json!({ "op": "release", "of": 2 }), None)
        .plain(json!({ "op": "peek_mixed", "entries": batch(2) }), None)
        .plain(json!({ "op": "consume_mixed", "entries": batch(2) }), None)
        .plain(json!({ "op": "consume_mixed", "entries": batch(3) }), None)
        .plain(json!({ "op": "release", "of": 5 }), None);
        cases.push(r.case("weighted and mixed (PostgreSQL): each call one statement; 3 more uses do not fit in 5, 2 do; a mixed batch's release gives back the sliding log's calls"));
        if let Server::Postgres(c) = &mut r.server {
            drop_pg(c);
        }

        let doc = json!({
            "description": "Weighted calls on the sliding log (`cost` on consume, peek and each batch entry) and batches mixing algorithms (`consume_mixed`, `peek_mixed`: entries as in tests/vectors/gcra/) on Redis, SQLite and PostgreSQL. Recorded from the real servers by the core's machines (core/tests/conversations.rs, `record`), with a few failures and bad replies put in place of the server's answer.",
            "cases": cases,
        });
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/vectors/conversations/weights.json");
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
    }
}
