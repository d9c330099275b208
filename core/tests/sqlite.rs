//! SQLite through the core's call machine, on a real database file: every conformance vector (but the memory
//! store's horizon rules), and two processes' worth of connections racing for the last use.

mod common;
mod servers;

use common::Engine;
use ratewindow_core::call::{
    Call, CallError, Command, Fed, Next, Op, Outcome, ReleaseToken, WindowQuery,
};
use ratewindow_core::sql::{SqlValue, Sqlite, Statement};
use ratewindow_core::{BatchVerdict, Entry, Limit, Quota, Window};
use serde_json::{json, Value};

struct Lite {
    db: rusqlite::Connection,
    plans: Sqlite,
    next_id: u64,
}

impl Lite {
    fn open(path: &std::path::Path) -> Lite {
        let db = rusqlite::Connection::open(path).unwrap();
        db.execute_batch(Sqlite::CONNECTION_SETUP).unwrap();
        let plans = Sqlite::default();
        db.execute_batch(&plans.schema()).unwrap();
        Lite {
            db,
            plans,
            next_id: 0,
        }
    }

    fn run(&self, statement: &Statement) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
        servers::sqlite_rows(&self.db, statement)
    }

    /// Runs a command's statements in order; the driver's message on the first failure.
    fn answer(&self, command: Command<'_>) -> Result<Fed, String> {
        servers::sqlite_answer(&self.db, command)
    }

    /// Starts `op` at `now` and drives it to its end.
    fn go(&self, op: Op, now: u64) -> Result<Outcome, CallError> {
        let (result, give_backs) = self.plans.start(op, now).drive(|c| self.answer(c));
        assert!(give_backs.is_empty());
        result
    }

    fn verdict(&mut self, op: Op, now: u64) -> (BatchVerdict, Option<ReleaseToken>) {
        match self.go(op, now) {
            Ok(Outcome::Verdict { verdict, release }) => (verdict, release),
            other => panic!("expected a verdict, got {other:?}"),
        }
    }

    fn batch(&mut self, entries: &[Entry], now: u64) -> (BatchVerdict, Option<ReleaseToken>) {
        self.next_id += 1;
        let op = Op::Consume {
            entries: entries.to_vec(),
            call_id: format!("call-{}", self.next_id),
        };
        self.verdict(op, now)
    }

    fn int(&self, key: &str, query: WindowQuery, now: u64) -> i64 {
        match self.go(
            Op::Read {
                key: key.to_owned(),
                query,
            },
            now,
        ) {
            Ok(Outcome::Int(i)) => i,
            other => panic!("expected a number, got {other:?}"),
        }
    }
}

impl Engine for Lite {
    type Release = ReleaseToken;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(self.batch(&[Entry::new(key, limit)], now).0.verdict())
    }
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        let op = Op::Peek {
            entries: vec![Entry::new(key, limit)],
        };
        json!(self.verdict(op, now).0.verdict())
    }
    fn consume_many(&mut self, entries: &[Entry], now: u64) -> (Value, Option<ReleaseToken>) {
        let (verdict, release) = self.batch(entries, now);
        (json!(verdict), release)
    }
    fn peek_many(&mut self, entries: &[Entry], now: u64) -> Value {
        let op = Op::Peek {
            entries: entries.to_vec(),
        };
        json!(self.verdict(op, now).0)
    }
    fn release(&mut self, token: ReleaseToken, now: u64) {
        assert_eq!(self.go(Op::Release { token }, now), Ok(Outcome::Unit));
    }
    fn hit(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> i64 {
        self.hit_window(key, decay, amount, now).0
    }
    fn hit_window(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> (i64, u64) {
        let op = Op::Hit {
            key: key.to_owned(),
            decay,
            amount,
        };
        match self.go(op, now) {
            Ok(Outcome::Hit {
                count,
                reset_after_ms,
            }) => (count, reset_after_ms),
            other => panic!("expected a hit, got {other:?}"),
        }
    }
    fn attempt(&mut self, key: &str, max: i64, decay: Window, now: u64) -> (bool, i64, u64) {
        let op = Op::Attempt {
            key: key.to_owned(),
            max,
            decay,
        };
        match self.go(op, now) {
            Ok(Outcome::Attempt {
                allowed,
                count,
                reset_after_ms,
            }) => (allowed, count, reset_after_ms),
            other => panic!("expected an attempt, got {other:?}"),
        }
    }
    fn attempts(&mut self, key: &str, now: u64) -> i64 {
        self.int(key, WindowQuery::Attempts, now)
    }
    fn too_many_attempts(&mut self, key: &str, max: i64, now: u64) -> bool {
        let op = Op::Read {
            key: key.to_owned(),
            query: WindowQuery::TooManyAttempts { max },
        };
        match self.go(op, now) {
            Ok(Outcome::Bool(b)) => b,
            other => panic!("expected a yes or no, got {other:?}"),
        }
    }
    fn remaining(&mut self, key: &str, max: i64, now: u64) -> i64 {
        self.int(key, WindowQuery::Remaining { max }, now)
    }
    fn available_in(&mut self, key: &str, now: u64) -> u64 {
        self.int(key, WindowQuery::AvailableIn, now) as u64
    }
    fn available_in_ms(&mut self, key: &str, now: u64) -> u64 {
        self.int(key, WindowQuery::AvailableInMs, now) as u64
    }
    fn reset_attempts(&mut self, key: &str, now: u64) {
        let op = Op::ResetAttempts {
            key: key.to_owned(),
        };
        assert_eq!(self.go(op, now), Ok(Outcome::Unit));
    }
    fn clear(&mut self, key: &str) {
        let op = Op::Clear {
            key: key.to_owned(),
        };
        assert_eq!(self.go(op, 0), Ok(Outcome::Unit));
    }
}

fn temp_db(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ratewindow-sqlite-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("test.db");
    let _ = std::fs::remove_file(&path);
    path
}

/// The memory store's horizon (expiry judged by the latest time recorded) is its own rule; SQLite
/// trims by each call's `now`, so the vectors that pin the horizon are the memory store's alone.
const MEMORY_ONLY: &[&str] = &["expiry.json"];
/// Cases of other files that pin the memory store's horizon.
const MEMORY_ONLY_CASES: &[&str] =
    &["attempt while the clock lags opens the window at the horizon and counts from now"];

#[test]
fn every_vector_matches_on_sqlite() {
    let path = temp_db("vectors");
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in common::cases().iter().filter(|c| {
        !MEMORY_ONLY.contains(&c.file.as_str()) && !MEMORY_ONLY_CASES.contains(&c.name.as_str())
    }) {
        let mut lite = Lite::open(&path);
        lite.db
            .execute_batch("DELETE FROM ratewindow_calls; DELETE FROM ratewindow_windows;")
            .unwrap();
        failures.extend(common::run_case(&mut lite, case));
        ran += 1;
    }
    assert!(ran >= 40);
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn of_many_connections_racing_for_the_last_use_exactly_the_limit_passes() {
    let path = temp_db("race");
    Lite::open(&path);
    let limit = Limit::new(10, 60_000).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut lite = Lite::open(&path);
                lite.next_id = t * 1000;
                (0..16)
                    .filter(|_| {
                        lite.batch(&[Entry::new("k", limit), Entry::new("j", limit)], 1_000)
                            .0
                            .allowed
                    })
                    .count()
            })
        })
        .collect();
    let allowed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(allowed, 10);
}

#[test]
fn purge_removes_exactly_the_rows_that_left_their_windows() {
    let path = temp_db("purge");
    let mut lite = Lite::open(&path);
    let short = Limit::new(5, 1_000).unwrap();
    let long = Limit::new(5, 10_000).unwrap();
    lite.batch(&[Entry::new("a", short)], 0);
    lite.batch(&[Entry::new("b", long)], 0);
    lite.batch(&[Entry::new("c", short), Entry::new("c", long)], 0); // counted under its longest window
    lite.hit("w", Window::from_ms(1_000).unwrap(), 1, 0);
    for statement in lite.plans.plan_purge(1_000) {
        lite.run(&statement).unwrap();
    }
    let keys: Vec<String> = lite
        .db
        .prepare("SELECT key FROM ratewindow_calls ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(keys, ["b", "c"]);
    let windows: i64 = lite
        .db
        .query_row("SELECT count(*) FROM ratewindow_windows", [], |r| r.get(0))
        .unwrap();
    assert_eq!(windows, 0);
}

#[test]
fn rows_of_the_wrong_shape_are_typed_errors() {
    let plans = Sqlite::default();
    let entries = [Entry::new("a", Limit::new(1, 1000).unwrap())];
    let bad_rows = [
        vec![vec![SqlValue::Int(1), SqlValue::Int(2)]],
        vec![vec![SqlValue::Text("other".into()), SqlValue::Int(2)]],
        vec![vec![SqlValue::Text("a".into())]],
        vec![vec![SqlValue::Text("a".into()), SqlValue::Int(-5)]],
    ];
    for rows in bad_rows {
        let call = plans.begin_consume(&entries, 0, "id").unwrap();
        assert!(call.decide(&rows).is_err(), "{rows:?}");
    }
    let window = plans.begin_get_window("a", 0);
    assert!(window
        .decide(&[vec![SqlValue::Int(1)], vec![SqlValue::Int(2)]])
        .is_err());
}

// ---- The call machine ----

fn quota(limit: u32, remaining: u32, refill_after_ms: u64, reset_after_ms: u64) -> Quota {
    Quota {
        limit,
        remaining,
        refill_after_ms,
        reset_after_ms,
    }
}

fn statements_of(call: &mut Call) -> Vec<Statement> {
    match call.next() {
        Next::Run(Command::Sql { statements }) => statements.to_vec(),
        other => panic!("expected statements, got {other:?}"),
    }
}

fn run_all(lite: &Lite, statements: &[Statement]) -> Vec<Vec<SqlValue>> {
    let mut rows = Vec::new();
    for statement in statements {
        rows = lite.run(statement).unwrap();
    }
    rows
}

#[test]
fn the_quota_is_exact_on_the_hosts_clock() {
    let path = temp_db("quota");
    let mut lite = Lite::open(&path);
    let one = [Entry::new("k", Limit::new(3, 1_000).unwrap())];
    assert_eq!(lite.batch(&one, 0).0.quota, quota(3, 2, 1_000, 1_000));
    assert_eq!(lite.batch(&one, 100).0.quota, quota(3, 1, 900, 1_000));
    let peek = Op::Peek {
        entries: one.to_vec(),
    };
    assert_eq!(
        lite.verdict(peek.clone(), 200).0.quota,
        quota(3, 1, 800, 900)
    );
    assert_eq!(lite.batch(&one, 300).0.quota, quota(3, 0, 700, 1_000));
    let refused = lite.batch(&one, 400).0;
    assert_eq!((refused.allowed, refused.retry_after_ms), (false, 600));
    assert_eq!(refused.quota, quota(3, 0, 600, 900));
    // A clock that stepped back records at the newest call.
    let back = [Entry::new("b", Limit::new(2, 1_000).unwrap())];
    lite.batch(&back, 5_000);
    assert_eq!(lite.batch(&back, 4_500).0.quota, quota(2, 0, 1_500, 1_500));
    // An empty window: every use left, nothing to refill.
    let fresh = Op::Peek {
        entries: vec![Entry::new("fresh", Limit::new(4, 1_000).unwrap())],
    };
    assert_eq!(lite.verdict(fresh, 0).0.quota, quota(4, 4, 0, 0));
    // The tightest of a batch: fewest left, then the longer window, then the first.
    let batch = [
        Entry::new("x", Limit::new(5, 60_000).unwrap()),
        Entry::new("y", Limit::new(2, 1_000).unwrap()),
        Entry::new("z", Limit::new(2, 2_000).unwrap()),
    ];
    assert_eq!(
        lite.batch(&batch, 10_000).0.quota,
        quota(2, 1, 2_000, 2_000)
    );
    let same = [
        Entry::new("p", Limit::new(2, 1_000).unwrap()),
        Entry::new("q", Limit::new(2, 1_000).unwrap()),
    ];
    lite.batch(&[Entry::new("q", Limit::new(1, 1_000).unwrap())], 9_900);
    let (v, _) = lite.batch(&same, 10_000);
    assert_eq!(v.quota, quota(2, 0, 900, 1_000), "q has fewer left");
    let refused = lite.batch(&same, 10_100).0;
    assert_eq!(
        refused.blocked,
        Some(1),
        "p has a use left, q waits till 10_900"
    );
    assert_eq!(refused.quota, quota(2, 0, 800, 900));
    // An empty batch: allowed, a zero quota, no statement.
    let mut call = lite.plans.start(Op::Peek { entries: vec![] }, 0);
    match call.next() {
        Next::Done(Ok(Outcome::Verdict { verdict, release })) => {
            assert!(verdict.allowed && release.is_none());
            assert_eq!(verdict.quota, Quota::NONE);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_op_through_the_machine() {
    let path = temp_db("ops");
    let mut lite = Lite::open(&path);
    let decay = Window::from_ms(1_000).unwrap();
    assert_eq!(lite.hit_window("h", decay, 2, 0), (2, 1_000));
    assert_eq!(lite.attempt("h", 3, decay, 100), (true, 3, 900));
    assert_eq!(lite.attempt("h", 3, decay, 200), (false, 3, 800));
    assert!(lite.too_many_attempts("h", 3, 200));
    assert_eq!(lite.remaining("h", 5, 200), 2);
    assert_eq!(lite.available_in("h", 200), 1);
    lite.reset_attempts("h", 300);
    assert_eq!(lite.attempts("h", 300), 0);
    assert_eq!(lite.available_in_ms("h", 300), 700);
    lite.clear("h");
    assert_eq!(lite.available_in_ms("h", 300), 0);
    assert_eq!(lite.attempt("h", 0, decay, 300), (false, 0, 0));
    assert_eq!(lite.attempt("h", 1, decay, 300), (true, 1, 1_000));
    assert_eq!(
        lite.attempt("h", 1, decay, 1_300),
        (true, 1, 1_000),
        "a new window"
    );
    let one = [Entry::new("k", Limit::new(1, 1_000).unwrap())];
    let (v, token) = lite.batch(&one, 0);
    assert!(v.allowed);
    assert!(!lite.batch(&one, 1).0.allowed);
    lite.release(token.expect("allowed"), 2);
    assert!(lite.batch(&one, 3).0.allowed, "given back");
    // A Redis token, an empty call id.
    let token = ReleaseToken::Redis(ratewindow_core::redis::RedisRelease {
        keys: vec!["k".into()],
        call_id: "x".into(),
    });
    assert!(matches!(
        lite.go(Op::Release { token }, 0),
        Err(CallError::Unsupported(_))
    ));
    let empty_id = Op::Consume {
        entries: one.to_vec(),
        call_id: String::new(),
    };
    assert!(matches!(
        lite.go(empty_id, 0),
        Err(CallError::Unsupported(_))
    ));
}

#[test]
fn attempt_lets_exactly_max_through_across_connections() {
    let path = temp_db("attempt");
    Lite::open(&path);
    let decay = Window::from_ms(60_000).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut lite = Lite::open(&path);
                (0..20)
                    .filter(|i| lite.attempt("race", 5, decay, 1_000 + i).0)
                    .count()
            })
        })
        .collect();
    let allowed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(allowed, 5);
}

#[test]
fn a_failure_inside_the_transaction_rolls_back_and_the_original_error_stands() {
    let path = temp_db("rollback");
    let mut lite = Lite::open(&path);
    let one = [Entry::new("k", Limit::new(5, 1_000).unwrap())];
    // The reads ran; the writes fail.
    let mut call = lite.plans.start(
        Op::Consume {
            entries: one.to_vec(),
            call_id: "c".into(),
        },
        0,
    );
    let first = statements_of(&mut call);
    assert_eq!(first[0].sql, "BEGIN IMMEDIATE");
    call.feed(Fed::Rows(run_all(&lite, &first)));
    let writes = statements_of(&mut call);
    assert_eq!(writes.last().map(|s| s.sql.as_str()), Some("COMMIT"));
    call.fail("disk I/O error");
    let rollback = statements_of(&mut call);
    assert_eq!(rollback.len(), 1);
    assert_eq!(rollback[0].sql, "ROLLBACK");
    run_all(&lite, &rollback);
    call.feed(Fed::Rows(vec![]));
    match call.next() {
        Next::Done(Err(CallError::Store { message })) => assert_eq!(message, "disk I/O error"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        lite.batch(&one, 0).0.quota.remaining,
        4,
        "nothing was counted"
    );

    // A failed rollback (the BEGIN itself failed) changes nothing: the original error stands.
    let mut call = lite.plans.start(
        Op::Attempt {
            key: "a".into(),
            max: 1,
            decay: Window::from_ms(10).unwrap(),
        },
        0,
    );
    let _ = statements_of(&mut call);
    call.fail("database is locked");
    assert_eq!(statements_of(&mut call)[0].sql, "ROLLBACK");
    call.fail("cannot rollback - no transaction is active");
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Store { message })) if message == "database is locked"
    ));

    // Rows of the wrong shape inside the transaction: ROLLBACK, then the row error.
    let mut call = lite.plans.start(
        Op::Hit {
            key: "h".into(),
            decay: Window::from_ms(10).unwrap(),
            amount: 1,
        },
        0,
    );
    let first = statements_of(&mut call);
    run_all(&lite, &first);
    call.feed(Fed::Rows(vec![vec![SqlValue::Text("x".into())]]));
    let rollback = statements_of(&mut call);
    assert_eq!(rollback[0].sql, "ROLLBACK");
    run_all(&lite, &rollback);
    call.feed(Fed::Rows(vec![]));
    match call.next() {
        Next::Done(Err(e @ CallError::Rows(_))) => assert_eq!(e.kind(), "reply"),
        other => panic!("{other:?}"),
    }
    // The connection is out of any transaction: a new call runs.
    assert_eq!(
        lite.hit_window("h", Window::from_ms(10).unwrap(), 1, 0),
        (1, 10)
    );

    // Outside a transaction (a peek, a read) there is nothing to roll back.
    let mut call = lite.plans.start(
        Op::Peek {
            entries: one.to_vec(),
        },
        0,
    );
    let _ = statements_of(&mut call);
    call.feed(Fed::Rows(vec![vec![SqlValue::Int(1)]]));
    assert!(matches!(call.next(), Next::Done(Err(CallError::Rows(_)))));
}

#[test]
fn a_busy_timeout_is_a_store_error_and_counts_nothing() {
    let path = temp_db("busy");
    let mut lite = Lite::open(&path);
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    lite.db
        .execute_batch(&Sqlite::connection_setup(50))
        .unwrap();
    let one = [Entry::new("k", Limit::new(5, 1_000).unwrap())];
    let mut sent = Vec::new();
    let (result, _) = lite
        .plans
        .start(
            Op::Consume {
                entries: one.to_vec(),
                call_id: "busy".into(),
            },
            0,
        )
        .drive(|command| {
            if let Command::Sql { statements } = command {
                sent.push(statements.iter().map(|s| s.sql.clone()).collect::<Vec<_>>());
            }
            lite.answer(command)
        });
    match result {
        Err(CallError::Store { message }) => assert!(message.contains("locked"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sent.last().unwrap(), &["ROLLBACK"]);
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        lite.batch(&one, 0).0.quota.remaining,
        4,
        "nothing was counted"
    );
}

/// The SQL conversation vectors (`tests/vectors/conversations/sql.json`), run on the machines directly:
/// each step's statements and parameters checked, its rows or failure fed back, the outcome compared.
#[test]
fn the_sql_conversations_run_on_the_machines() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors/conversations/sql.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = file["cases"].as_array().unwrap();
    assert!(cases.len() >= 6);
    let call_id = "conversation-call";
    for case in cases {
        let name = case["name"].as_str().unwrap();
        for call in case["calls"].as_array().unwrap() {
            let op = &call["op"];
            let entries = || -> Vec<Entry> {
                op["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        let l = &e["limit"];
                        Entry::new(
                            e["key"].as_str().unwrap(),
                            Limit::new(
                                l["uses"].as_u64().unwrap(),
                                l["window_ms"].as_u64().unwrap(),
                            )
                            .unwrap(),
                        )
                    })
                    .collect()
            };
            let key = || op["key"].as_str().unwrap().to_owned();
            let decay = || Window::from_ms(op["decay_ms"].as_u64().unwrap()).unwrap();
            let machine_op = match op["op"].as_str().unwrap() {
                "consume_many" => Op::Consume {
                    entries: entries(),
                    call_id: call_id.to_owned(),
                },
                "peek_many" => Op::Peek { entries: entries() },
                "attempt" => Op::Attempt {
                    key: key(),
                    max: op["max"].as_i64().unwrap(),
                    decay: decay(),
                },
                "hit" => Op::Hit {
                    key: key(),
                    decay: decay(),
                    amount: op["amount"].as_i64().unwrap(),
                },
                other => panic!("{name}: op {other} is not run here"),
            };
            let mut machine = match case["store"].as_str().unwrap() {
                "postgres" => ratewindow_core::sql::Postgres::default().start(machine_op),
                "sqlite" => Sqlite::default().start(machine_op, call["now"].as_u64().unwrap()),
                other => panic!("{name}: store {other}"),
            };
            for (i, step) in call["steps"].as_array().unwrap().iter().enumerate() {
                let statements = match machine.next() {
                    Next::Run(Command::Sql { statements }) => statements.to_vec(),
                    other => panic!("{name}: step {i}: expected statements, got {other:?}"),
                };
                let texts: Vec<&str> = statements.iter().map(|s| s.sql.as_str()).collect();
                let want_texts: Vec<&str> = step["command"]["sql"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap())
                    .collect();
                assert_eq!(texts, want_texts, "{name}: step {i}");
                let params = json!(statements.iter().map(|s| &s.params).collect::<Vec<_>>())
                    .to_string()
                    .replace(&format!("\"{call_id}\""), "\"{call_id}\"");
                assert_eq!(
                    params,
                    step["command"]["params"].to_string(),
                    "{name}: step {i}"
                );
                if let Some(message) = step["fail"].as_str() {
                    machine.fail(message);
                } else {
                    let rows: Vec<Vec<SqlValue>> =
                        serde_json::from_value(step["rows"].clone()).unwrap();
                    machine.feed(Fed::Rows(rows));
                }
            }
            let outcome = match machine.next() {
                Next::Done(result) => result,
                Next::Run(command) => panic!("{name}: the call asks for more: {command:?}"),
            };
            let got = match outcome {
                Err(e) => json!({ "error": e.kind() }),
                Ok(Outcome::Verdict { verdict, release }) => {
                    json!({ "verdict": verdict, "release": release.is_some() })
                }
                Ok(Outcome::Hit {
                    count,
                    reset_after_ms,
                }) => json!({ "hit": { "count": count, "reset_after_ms": reset_after_ms } }),
                Ok(Outcome::Attempt {
                    allowed,
                    count,
                    reset_after_ms,
                }) => json!({ "attempt": {
                    "allowed": allowed, "count": count, "reset_after_ms": reset_after_ms } }),
                Ok(Outcome::Int(n)) => json!({ "int": n }),
                Ok(Outcome::Bool(b)) => json!({ "bool": b }),
                Ok(Outcome::Unit) => json!({ "unit": null }),
                #[cfg(feature = "lock")]
                Ok(Outcome::Owner(owner)) => json!({ "owner": owner }),
            };
            assert_eq!(got, call["outcome"], "{name}");
        }
    }
}
