//! The lock (`ratewindow_core::lock`) on every store: the vectors of `tests/vectors/lock/lock.json` on
//! the memory store and SQLite (the host's clock, given), on a real Redis (127.0.0.1:6379 or
//! `REDIS_URL`) and a real PostgreSQL (the server's clock: each step at its offset from the case's
//! start, the `exact` steps skipped); exactly one holder among 8 threads x 64 acquirers on each store.

#![cfg(feature = "lock")]

mod servers;
use servers::{pg_connect, redis_connection};

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{Call, Command, Fed, Outcome, Redis};
use ratewindow_core::lock::{LockField, LockOp, LockTtl, LockWait, MemoryLocks};
use ratewindow_core::redis::RedisOptions;
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Sqlite, Statement};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/lock/lock.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("lock.json")).expect("JSON")
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "NaN" => f64::NAN,
        Value::String(s) if s == "Infinity" => f64::INFINITY,
        other => other.as_f64().expect("a number"),
    }
}

fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000;
    format!(
        "{}_{nanos}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A step's operation, its arguments checked as a binding checks them.
fn op(step: &Value, key_prefix: &str) -> LockOp {
    let key = format!("{key_prefix}{}", step["key"].as_str().unwrap());
    let owner = || step["owner"].as_str().unwrap().to_owned();
    match step["op"].as_str().unwrap() {
        "acquire" => LockOp::Acquire {
            key,
            owner: owner(),
            ttl: LockTtl::from_secs(number(&step["ttl"])).unwrap(),
        },
        "release" => LockOp::Release {
            key,
            owner: owner(),
        },
        "force_release" => LockOp::ForceRelease { key },
        "owner" => LockOp::Owner { key },
        other => panic!("unknown op {other}"),
    }
}

fn expected(step: &Value) -> Outcome {
    match &step["expect"] {
        Value::Bool(b) if step["op"] != "owner" => Outcome::Bool(*b),
        Value::Null => Outcome::Owner(None),
        Value::String(s) => Outcome::Owner(Some(s.clone())),
        other => panic!("unexpected expectation {other}"),
    }
}

/// Runs every case: `run(op, at)` answers an operation at the step's time.
fn run_cases(store: &str, host_clock: bool, mut run: impl FnMut(LockOp, u64) -> Outcome) {
    for case in vectors()["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prefix = format!("{}:", unique());
        let start = Instant::now();
        for step in case["steps"].as_array().unwrap() {
            if !host_clock && step["exact"] == true {
                continue;
            }
            let at = step["at"].as_u64().unwrap();
            if !host_clock {
                let due = start + Duration::from_millis(at);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            let got = run(op(step, &prefix), at + 1_700_000_000_000);
            assert_eq!(got, expected(step), "{store}: {name}: {step}");
        }
    }
}

#[test]
fn vectors_errors_and_waits() {
    let v = vectors();
    for case in v["errors"].as_array().unwrap() {
        let field = match case["op"].as_str().unwrap() {
            "acquire" => {
                LockTtl::from_secs(number(&case["ttl"]))
                    .and_then(|_| {
                        ratewindow_core::lock::check_owner(case["owner"].as_str().unwrap())
                    })
                    .unwrap_err()
                    .field
            }
            "block" => {
                LockWait::new(number(&case["seconds"]), number(&case["retry_ms"]), 0)
                    .unwrap_err()
                    .field
            }
            other => panic!("{other}"),
        };
        let want = case["error"].as_str().unwrap();
        assert_eq!(field.name(), want, "{}", case["name"]);
        assert!(matches!(
            field,
            LockField::Ttl | LockField::Owner | LockField::Seconds | LockField::RetryMs
        ));
    }
    for case in v["waits"].as_array().unwrap() {
        let wait = LockWait::new(
            number(&case["seconds"]),
            number(&case["retry_ms"]),
            case["start"].as_u64().unwrap(),
        );
        if let Some(field) = case["error"].as_str() {
            assert_eq!(wait.unwrap_err().field.name(), field, "{}", case["name"]);
            continue;
        }
        let wait = wait.unwrap();
        for r in case["refusals"].as_array().unwrap() {
            assert_eq!(
                wait.after_refusal(r["at"].as_u64().unwrap()),
                r["sleep"].as_u64(),
                "{}: {r}",
                case["name"]
            );
        }
    }
}

#[test]
fn vectors_on_memory() {
    let locks = MemoryLocks::new();
    run_cases("memory", true, |op, now| locks.run(&op, now));
}

// ---- SQLite -----------------------------------------------------------------------------------------

fn sqlite_answer(db: &rusqlite::Connection, command: Command<'_>) -> Result<Fed, String> {
    let Command::Sql { statements } = command else {
        return Err("a SQL host runs no scripts".into());
    };
    let mut rows = Vec::new();
    for statement in statements {
        rows = sqlite_run(db, statement).map_err(|e| e.to_string())?;
    }
    Ok(Fed::Rows(rows))
}

fn sqlite_run(
    db: &rusqlite::Connection,
    statement: &Statement,
) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
    servers::sqlite_rows(db, statement)
}

fn sqlite_open(path: &std::path::Path) -> rusqlite::Connection {
    let db = rusqlite::Connection::open(path).unwrap();
    db.execute_batch(Sqlite::CONNECTION_SETUP).unwrap();
    db.execute_batch(&Sqlite::default().schema()).unwrap();
    db
}

fn drive_ok(call: Call, run: impl FnMut(Command<'_>) -> Result<Fed, String>) -> Outcome {
    call.drive(run).0.expect("the lock call")
}

#[test]
fn vectors_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("rw_lock_{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = sqlite_open(&dir.join("locks.db"));
    let plans = Sqlite::default();
    run_cases("sqlite", true, |op, now| {
        drive_ok(plans.lock(op, now), |c| sqlite_answer(&db, c))
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Redis ------------------------------------------------------------------------------------------

fn redis_answer(con: &mut redis::Connection, command: Command<'_>) -> Result<Fed, String> {
    servers::redis_answer(con, command)
}

fn redis_store() -> Redis {
    Redis::new(RedisOptions::default().with_prefix("rwtest:lock:"))
}

/// The store whose host runs plain commands: acquire `SET NX PX`, force `DEL`, owner `GET`.
#[cfg(feature = "lock-commands")]
fn redis_plain_store() -> Redis {
    redis_store().plain_commands(true)
}

#[test]
fn vectors_on_redis() {
    let mut con = redis_connection();
    let store = redis_store();
    run_cases("redis", false, |op, _| {
        drive_ok(store.lock(op), |c| redis_answer(&mut con, c))
    });
}

#[test]
#[cfg(feature = "lock-commands")]
fn vectors_on_redis_with_plain_commands() {
    let mut con = redis_connection();
    let store = redis_plain_store();
    run_cases("redis (plain commands)", false, |op, _| {
        drive_ok(store.lock(op), |c| redis_answer(&mut con, c))
    });
}

#[test]
#[cfg(feature = "lock-commands")]
fn a_plain_acquire_and_a_script_release_share_the_key() {
    let mut con = redis_connection();
    let (plain, script) = (redis_plain_store(), redis_store());
    let key = format!("mixed:{}", unique());
    let run = |store: &Redis, op: LockOp, con: &mut redis::Connection| {
        drive_ok(store.lock(op), |c| redis_answer(con, c))
    };
    let acquire = |owner: &str| LockOp::Acquire {
        key: key.clone(),
        owner: owner.into(),
        ttl: LockTtl::from_ms(60_000).unwrap(),
    };
    assert_eq!(run(&plain, acquire("a"), &mut con), Outcome::Bool(true));
    assert_eq!(run(&script, acquire("b"), &mut con), Outcome::Bool(false));
    assert_eq!(run(&plain, acquire("a"), &mut con), Outcome::Bool(false));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(plain.options().lock_key(&key))
        .query(&mut con)
        .unwrap();
    assert!((59_000..=60_000).contains(&pttl), "{pttl}");
    let owner = LockOp::Owner { key: key.clone() };
    assert_eq!(
        run(&script, owner.clone(), &mut con),
        Outcome::Owner(Some("a".into()))
    );
    assert_eq!(
        run(&plain, owner.clone(), &mut con),
        Outcome::Owner(Some("a".into()))
    );
    let release = |owner: &str| LockOp::Release {
        key: key.clone(),
        owner: owner.into(),
    };
    assert_eq!(run(&plain, release("b"), &mut con), Outcome::Bool(false));
    assert_eq!(run(&plain, release("a"), &mut con), Outcome::Bool(true));
    assert_eq!(run(&plain, owner, &mut con), Outcome::Owner(None));
    assert_eq!(run(&plain, acquire("b"), &mut con), Outcome::Bool(true));
    let force = LockOp::ForceRelease { key: key.clone() };
    assert_eq!(run(&plain, force.clone(), &mut con), Outcome::Bool(true));
    assert_eq!(run(&plain, force, &mut con), Outcome::Bool(false));
}

#[test]
fn a_redis_lock_is_one_key_with_the_ttl_of_the_lock() {
    let mut con = redis_connection();
    let store = redis_store();
    let key = format!("ttl:{}", unique());
    let acquire = LockOp::Acquire {
        key: key.clone(),
        owner: "me".into(),
        ttl: LockTtl::from_ms(60_000).unwrap(),
    };
    assert_eq!(
        drive_ok(store.lock(acquire), |c| redis_answer(&mut con, c)),
        Outcome::Bool(true)
    );
    let redis_key = store.options().lock_key(&key);
    let pttl: i64 = redis::cmd("PTTL").arg(&redis_key).query(&mut con).unwrap();
    assert!((59_000..=60_000).contains(&pttl), "{pttl}");
    let value: String = redis::cmd("GET").arg(&redis_key).query(&mut con).unwrap();
    assert_eq!(value, "me");
    let force = LockOp::ForceRelease { key };
    assert_eq!(
        drive_ok(store.lock(force), |c| redis_answer(&mut con, c)),
        Outcome::Bool(true)
    );
}

// ---- PostgreSQL -------------------------------------------------------------------------------------

fn pg_answer(client: &mut postgres::Client, command: Command<'_>) -> Result<Fed, String> {
    servers::pg_answer(client, command)
}

/// A prefix of this test's own, its schema installed; dropped at the end.
struct PgSchema(Postgres);

impl PgSchema {
    fn install() -> PgSchema {
        let plans = Postgres::new(SqlNames::new(&format!("rwl_{}", unique())).unwrap());
        pg_connect().batch_execute(&plans.schema()).unwrap();
        PgSchema(plans)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let p = self.0.names().prefix();
        let _ = pg_connect().batch_execute(&format!(
            "DO $d$ DECLARE f text; BEGIN \
               FOR f IN SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE '{p}\\_%' LOOP \
                 EXECUTE 'DROP FUNCTION IF EXISTS ' || f; \
               END LOOP; END $d$; \
             DROP TABLE IF EXISTS {p}_log; DROP TABLE IF EXISTS {p}_calls; \
             DROP TABLE IF EXISTS {p}_windows; DROP TABLE IF EXISTS {p}_locks;"
        ));
    }
}

#[test]
fn vectors_on_postgres() {
    let schema = PgSchema::install();
    let mut client = pg_connect();
    run_cases("postgres", false, |op, _| {
        drive_ok(schema.0.lock(op), |c| pg_answer(&mut client, c))
    });
}

#[test]
fn the_postgres_lock_table_is_added_to_an_installed_schema_and_reinstalls() {
    let schema = PgSchema::install();
    let p = schema.0.names().prefix().to_owned();
    let mut client = pg_connect();
    client
        .batch_execute(&format!("DROP TABLE {p}_locks"))
        .unwrap();
    client.batch_execute(&schema.0.schema()).unwrap();
    client.batch_execute(&schema.0.schema()).unwrap();
    let acquire = LockOp::Acquire {
        key: "k".into(),
        owner: "o".into(),
        ttl: LockTtl::from_ms(1_000).unwrap(),
    };
    assert_eq!(
        drive_ok(schema.0.lock(acquire), |c| pg_answer(&mut client, c)),
        Outcome::Bool(true)
    );
}

// ---- Exactly one holder -----------------------------------------------------------------------------

/// `threads` x `per_thread` acquirers race for one key (each its own owner, a long TTL); exactly one
/// wins. `acquire(owner)` answers whether that owner took it.
fn race(
    store: &str,
    threads: usize,
    per_thread: usize,
    acquire: impl Fn(usize, String) -> bool + Sync,
) {
    let won = AtomicUsize::new(0);
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (won, barrier, acquire) = (&won, &barrier, &acquire);
            s.spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    if acquire(t, format!("owner-{t}-{i}")) {
                        won.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(
        won.load(Ordering::Relaxed),
        1,
        "{store}: exactly one holder"
    );
}

fn acquire_op(key: &str, owner: String) -> LockOp {
    LockOp::Acquire {
        key: key.to_owned(),
        owner,
        ttl: LockTtl::from_ms(60_000).unwrap(),
    }
}

#[test]
fn exactly_one_holder_on_memory() {
    let locks = Arc::new(MemoryLocks::new());
    let ttl = LockTtl::from_ms(60_000).unwrap();
    race("memory", 8, 64, |_, owner| {
        locks.acquire("one", &owner, ttl, 1_000)
    });
}

#[test]
fn exactly_one_holder_on_redis() {
    let store = redis_store();
    let key = format!("race:{}", unique());
    let cons: Vec<std::sync::Mutex<redis::Connection>> = (0..8)
        .map(|_| std::sync::Mutex::new(redis_connection()))
        .collect();
    race("redis", 8, 64, |t, owner| {
        let mut con = cons[t].lock().unwrap();
        drive_ok(store.lock(acquire_op(&key, owner)), |c| {
            redis_answer(&mut con, c)
        }) == Outcome::Bool(true)
    });
    let mut con = redis_connection();
    drive_ok(store.lock(LockOp::ForceRelease { key }), |c| {
        redis_answer(&mut con, c)
    });
}

#[test]
#[cfg(feature = "lock-commands")]
fn exactly_one_holder_on_redis_with_plain_commands() {
    let store = redis_plain_store();
    let key = format!("race:{}", unique());
    let cons: Vec<std::sync::Mutex<redis::Connection>> = (0..8)
        .map(|_| std::sync::Mutex::new(redis_connection()))
        .collect();
    race("redis (plain)", 8, 64, |t, owner| {
        let mut con = cons[t].lock().unwrap();
        drive_ok(store.lock(acquire_op(&key, owner)), |c| {
            redis_answer(&mut con, c)
        }) == Outcome::Bool(true)
    });
    let mut con = redis_connection();
    drive_ok(store.lock(LockOp::ForceRelease { key }), |c| {
        redis_answer(&mut con, c)
    });
}

#[test]
fn exactly_one_holder_on_postgres() {
    let schema = PgSchema::install();
    let clients: Vec<std::sync::Mutex<postgres::Client>> = (0..8)
        .map(|_| std::sync::Mutex::new(pg_connect()))
        .collect();
    race("postgres", 8, 64, |t, owner| {
        let mut client = clients[t].lock().unwrap();
        drive_ok(schema.0.lock(acquire_op("one", owner)), |c| {
            pg_answer(&mut client, c)
        }) == Outcome::Bool(true)
    });
}

#[test]
fn exactly_one_holder_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("rw_lock_race_{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("locks.db");
    drop(sqlite_open(&path));
    let dbs: Vec<std::sync::Mutex<rusqlite::Connection>> = (0..8)
        .map(|_| std::sync::Mutex::new(sqlite_open(&path)))
        .collect();
    let plans = Sqlite::default();
    race("sqlite", 8, 64, |t, owner| {
        let db = dbs[t].lock().unwrap();
        drive_ok(plans.lock(acquire_op("one", owner), 1_000), |c| {
            sqlite_answer(&db, c)
        }) == Outcome::Bool(true)
    });
    drop(dbs);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Conversations ----------------------------------------------------------------------------------

/// `tests/vectors/conversations/lock/redis.json`: the commands each lock call sends, the replies fed
/// back in each client's spelling, the outcome.
#[test]
#[cfg(feature = "lock-commands")]
fn lock_conversations() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/conversations/lock/redis.json"
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in file["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let o = &case["options"];
        let mut options = RedisOptions::default().with_prefix(o["prefix"].as_str().unwrap());
        if let Some(tag) = o["hash_tag"].as_str() {
            options = options.with_hash_tag_before(tag).unwrap();
        }
        let store = Redis::new(options)
            .evalsha(o["evalsha"] != false)
            .plain_commands(o["commands"] == true);
        for call in case["calls"].as_array().unwrap() {
            let mut steps = call["steps"].as_array().unwrap().iter();
            let (result, _) = store.lock(op(&call["op"], "")).drive(|command| {
                let step = steps
                    .next()
                    .unwrap_or_else(|| panic!("{name}: a step too many"));
                let sent = match command {
                    Command::Plain { args } => serde_json::json!({ "command": args }),
                    Command::Script {
                        script,
                        keys,
                        args,
                        by_sha1,
                    } => serde_json::json!({
                        "script": script.name, "by_sha1": by_sha1, "keys": keys, "args": args,
                    }),
                    Command::Sql { .. } => panic!("{name}: SQL"),
                };
                assert_eq!(sent, step["command"], "{name}");
                match step.get("fail") {
                    Some(message) => Err(message.as_str().unwrap().to_owned()),
                    None => Ok(Fed::Reply(reply(&step["reply"]))),
                }
            });
            assert!(steps.next().is_none(), "{name}: steps left");
            let outcome = &call["outcome"];
            match result {
                Ok(Outcome::Bool(b)) => assert_eq!(outcome["bool"], b, "{name}"),
                Ok(Outcome::Owner(o)) => {
                    assert_eq!(outcome["owner"], serde_json::json!(o), "{name}");
                    assert!(outcome.get("owner").is_some(), "{name}");
                }
                Ok(other) => panic!("{name}: {other:?}"),
                Err(e) => assert_eq!(outcome["error"], e.kind(), "{name}"),
            }
        }
    }
}

#[cfg(feature = "lock-commands")]
fn reply(v: &Value) -> ratewindow_core::redis::Reply {
    use ratewindow_core::redis::Reply;
    match v {
        Value::Null => Reply::Nil,
        Value::Number(n) => Reply::Int(n.as_i64().unwrap()),
        Value::String(s) => Reply::Text(s.clone()),
        Value::Array(items) => Reply::Array(items.iter().map(reply).collect()),
        other => panic!("not a reply: {other}"),
    }
}

// ---- Purge ------------------------------------------------------------------------------------------

/// The purge deletes the locks whose TTL ended, and only those: a live lock, and an expired one
/// replaced by a new acquire, stay.
#[test]
fn the_postgres_purge_deletes_expired_locks() {
    let schema = PgSchema::install();
    let p = schema.0.names().prefix().to_owned();
    let mut client = pg_connect();
    let acquire = |key: &str, ms: u64| LockOp::Acquire {
        key: key.into(),
        owner: "o".into(),
        ttl: LockTtl::from_ms(ms).unwrap(),
    };
    for (key, ms) in [
        ("short1", 1),
        ("short2", 1),
        ("replaced", 1),
        ("live", 60_000),
    ] {
        let call = schema.0.lock(acquire(key, ms));
        assert_eq!(
            drive_ok(call, |c| pg_answer(&mut client, c)),
            Outcome::Bool(true)
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    let call = schema.0.lock(acquire("replaced", 60_000));
    assert_eq!(
        drive_ok(call, |c| pg_answer(&mut client, c)),
        Outcome::Bool(true)
    );
    let rows = client
        .query(schema.0.plan_purge().sql.as_str(), &[])
        .unwrap();
    assert_eq!(rows.len(), 1, "one row: (calls, windows)");
    let left: Vec<String> = client
        .query(&format!("SELECT key FROM {p}_locks ORDER BY key"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["live", "replaced"]);
    let owner = LockOp::Owner { key: "live".into() };
    assert_eq!(
        drive_ok(schema.0.lock(owner), |c| pg_answer(&mut client, c)),
        Outcome::Owner(Some("o".into()))
    );
}

#[test]
fn the_sqlite_purge_deletes_expired_locks() {
    let dir = std::env::temp_dir().join(format!("rw_lock_purge_{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = sqlite_open(&dir.join("locks.db"));
    let plans = Sqlite::default();
    let acquire = |key: &str, ms: u64| LockOp::Acquire {
        key: key.into(),
        owner: "o".into(),
        ttl: LockTtl::from_ms(ms).unwrap(),
    };
    for (key, ms) in [("short1", 100), ("short2", 500), ("live", 60_000)] {
        let call = plans.lock(acquire(key, ms), 1_000);
        assert_eq!(
            drive_ok(call, |c| sqlite_answer(&db, c)),
            Outcome::Bool(true)
        );
    }
    let count = || -> i64 {
        db.query_row("SELECT count(*) FROM ratewindow_locks", [], |r| r.get(0))
            .unwrap()
    };
    // At 1,300 only short1 (ended at 1,100) is gone; at 1,500 short2 (ended at 1,500) too.
    for (now, left) in [(1_300, 2), (1_500, 1), (1_500, 1)] {
        for statement in plans.plan_purge(now) {
            let params: Vec<Box<dyn rusqlite::ToSql>> = statement
                .params
                .iter()
                .map(|p| -> Box<dyn rusqlite::ToSql> {
                    match p {
                        SqlValue::Int(i) => Box::new(*i),
                        other => panic!("{other:?}"),
                    }
                })
                .collect();
            db.execute(&statement.sql, rusqlite::params_from_iter(params.iter()))
                .unwrap();
        }
        assert_eq!(count(), left, "at {now}");
    }
    let owner = LockOp::Owner { key: "live".into() };
    assert_eq!(
        drive_ok(plans.lock(owner, 1_500), |c| sqlite_answer(&db, c)),
        Outcome::Owner(Some("o".into()))
    );
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}
