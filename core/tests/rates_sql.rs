//! GCRA and the sliding-window counter on a real PostgreSQL (the unix socket, user `postgres`,
//! database `test`, or `PGHOST`/`PGUSER`/`PGDATABASE`) and on SQLite files: every GCRA and counter
//! vector, a random walk against the memory store, exactly-once under concurrency, the server's
//! clock, and the upgrade of a schema that had no such tables.
#![cfg(all(feature = "rates", feature = "sql"))]

mod rates;
mod servers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{Call, CallError, Outcome, RateOp};
use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::Gcra;
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Sqlite, Statement};
use ratewindow_core::{BatchVerdict, Limit, MemoryStore};

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000
}

/// `op` on the key `{prefix}{key}`.
fn prefixed(op: RateOp, prefix: &str) -> RateOp {
    let k = |key: String| format!("{prefix}{key}");
    match op {
        RateOp::GcraConsume { key, gcra, cost } => RateOp::GcraConsume {
            key: k(key),
            gcra,
            cost,
        },
        RateOp::GcraPeek { key, gcra, cost } => RateOp::GcraPeek {
            key: k(key),
            gcra,
            cost,
        },
        RateOp::GcraReset { key } => RateOp::GcraReset { key: k(key) },
        RateOp::CounterConsume { key, counter, cost } => RateOp::CounterConsume {
            key: k(key),
            counter,
            cost,
        },
        RateOp::CounterPeek { key, counter, cost } => RateOp::CounterPeek {
            key: k(key),
            counter,
            cost,
        },
        RateOp::CounterReset { key } => RateOp::CounterReset { key: k(key) },
    }
}

fn verdict(result: Result<Outcome, CallError>) -> BatchVerdict {
    match result {
        Ok(Outcome::Verdict {
            verdict,
            release: None,
        }) => verdict,
        other => panic!("{other:?}"),
    }
}

// ---- PostgreSQL ----------------------------------------------------------------------------------

/// A schema of this test's own, dropped at the end.
struct Pg {
    plans: Postgres,
}

impl Pg {
    fn named(test: &str) -> Pg {
        let names =
            SqlNames::new(&format!("rwr_{test}_{}_{}", std::process::id(), nanos())).unwrap();
        Pg {
            plans: Postgres::new(names),
        }
    }

    fn install(test: &str) -> Pg {
        let pg = Pg::named(test);
        servers::pg_connect()
            .batch_execute(&pg.plans.schema())
            .unwrap();
        pg
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let p = self.plans.names().prefix();
        let _ = servers::pg_connect().batch_execute(&format!(
            "DO $d$ DECLARE f text; BEGIN \
               FOR f IN SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE '{p}\\_%' LOOP \
                 EXECUTE 'DROP FUNCTION IF EXISTS ' || f; \
               END LOOP; END $d$; \
             DROP TABLE IF EXISTS {p}_log, {p}_calls, {p}_windows, {p}_locks, {p}_gcra, {p}_counters;"
        ));
    }
}

fn pg_run(
    client: &mut postgres::Client,
    statement: &Statement,
) -> Result<Vec<Vec<SqlValue>>, String> {
    servers::pg_rows(client, statement).map_err(|e| e.to_string())
}

fn pg_drive(client: &mut postgres::Client, call: Call) -> Result<Outcome, CallError> {
    call.drive(|command| servers::pg_answer(client, command)).0
}

#[test]
fn every_gcra_and_counter_vector_runs_on_postgres() {
    let pg = Pg::install("vectors");
    let mut client = servers::pg_connect();
    let (ran, skipped) = rates::run_vectors(|case, op, now| {
        let op = prefixed(op, &format!("{case}:"));
        pg_drive(&mut client, pg.plans.rate_at(op, now))
    });
    assert!(ran >= 10, "only {ran} cases ran ({skipped} skipped)");
}

#[test]
fn a_random_walk_on_postgres_answers_as_the_memory_store() {
    let pg = Pg::install("walk");
    let mut client = servers::pg_connect();
    for seed in [3, 0x9e37_79b9] {
        let memory = MemoryStore::new();
        let prefix = format!("{seed}:");
        for (step, (op, now)) in rates::walk(400, seed, 60).into_iter().enumerate() {
            let op = prefixed(op, &prefix);
            let want = rates::memory(&memory, &op, now);
            let got = rates::spelled(pg_drive(&mut client, pg.plans.rate_at(op.clone(), now)));
            assert_eq!(got, want, "seed {seed} step {step}: {op:?} at {now}");
        }
    }
}

#[test]
fn postgres_times_a_bucket_by_its_own_clock() {
    let pg = Pg::install("clock");
    let mut client = servers::pg_connect();
    let gcra = Gcra::new(10, 1_000, 5).unwrap();
    let consume = |cost| RateOp::GcraConsume {
        key: "k".into(),
        gcra,
        cost,
    };
    let first = verdict(pg_drive(&mut client, pg.plans.rate(consume(3))));
    assert!(first.allowed && first.quota.remaining == 2 && first.quota.reset_after_ms == 300);
    let second = verdict(pg_drive(&mut client, pg.plans.rate(consume(3))));
    assert!(
        !second.allowed && (1..=100).contains(&second.retry_after_ms),
        "{second:?}"
    );
    let reset = pg_drive(
        &mut client,
        pg.plans.rate(RateOp::GcraReset { key: "k".into() }),
    );
    assert_eq!(reset, Ok(Outcome::Unit));
    assert!(verdict(pg_drive(&mut client, pg.plans.rate(consume(5)))).allowed);
    // Durable calls keep the server's commit setting; the verdicts are the same.
    let durable = pg.plans.clone().durable(true);
    let v = verdict(pg_drive(&mut client, durable.rate(consume(1))));
    assert!(!v.allowed);
}

/// 8 threads x 64 calls (costs 1 to 3) at a limit of 64: exactly the limit is taken, under the rows'
/// locks (GCRA on the server's clock, 64 an hour; the counter at one moment).
#[test]
fn postgres_takes_exactly_the_limit_under_concurrency() {
    let pg = Pg::install("concurrency");
    let gcra = Gcra::new(64, 3_600_000, 64).unwrap();
    let counter = Counter::new(Limit::new(64, 3_600_000).unwrap()).unwrap();
    let now = 1_800_000_000_000 + 1_000;
    for algorithm in ["gcra", "counter"] {
        let taken = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (plans, taken) = (&pg.plans, &taken);
                s.spawn(move || {
                    let mut client = servers::pg_connect();
                    for i in 0..64u64 {
                        let cost = 1 + (t + i) % 3;
                        let call = if algorithm == "gcra" {
                            plans.rate(RateOp::GcraConsume {
                                key: "hot".into(),
                                gcra,
                                cost,
                            })
                        } else {
                            plans.rate_at(
                                RateOp::CounterConsume {
                                    key: "hot".into(),
                                    counter,
                                    cost,
                                },
                                now,
                            )
                        };
                        if verdict(pg_drive(&mut client, call)).allowed {
                            taken.fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = taken.into_inner();
        let mut client = servers::pg_connect();
        let peek = if algorithm == "gcra" {
            pg.plans.rate(RateOp::GcraPeek {
                key: "hot".into(),
                gcra,
                cost: 1,
            })
        } else {
            pg.plans.rate_at(
                RateOp::CounterPeek {
                    key: "hot".into(),
                    counter,
                    cost: 1,
                },
                now,
            )
        };
        let left = verdict(pg_drive(&mut client, peek)).quota.remaining as u64;
        assert!((62..=64).contains(&taken), "{algorithm}: {taken} taken");
        assert_eq!(taken + left, 64, "{algorithm}: {taken} taken, {left} left");
    }
}

/// A database installed by an earlier version (no GCRA or counter tables) gains them by installing
/// the schema again; its calls still count.
#[test]
fn an_earlier_postgres_schema_gains_the_rates_tables() {
    let pg = Pg::named("upgrade");
    let p = pg.plans.names().prefix().to_owned();
    let mut client = servers::pg_connect();
    client
        .batch_execute(&include_str!("data/postgres_schema_0_1_main.sql").replace("{p}", &p))
        .unwrap();
    let gcra = Gcra::new(2, 60_000, 2).unwrap();
    let op = RateOp::GcraConsume {
        key: "k".into(),
        gcra,
        cost: 2,
    };
    let before = pg_drive(&mut client, pg.plans.rate(op.clone()));
    assert_eq!(before.unwrap_err().kind(), "store", "no such function yet");
    client.batch_execute(&pg.plans.schema()).unwrap();
    client.batch_execute(&pg.plans.schema()).unwrap();
    assert!(verdict(pg_drive(&mut client, pg.plans.rate(op.clone()))).allowed);
    assert!(!verdict(pg_drive(&mut client, pg.plans.rate(op))).allowed);
    let old: bool = client
        .query_one(
            &format!("SELECT allowed FROM {p}_sliding('c', 'id', ARRAY['s'], ARRAY[1::bigint], ARRAY[60000::bigint], true)"),
            &[],
        )
        .unwrap()
        .get(0);
    assert!(old, "the earlier functions still count");
}

// ---- SQLite --------------------------------------------------------------------------------------

struct Lite {
    db: rusqlite::Connection,
}

impl Lite {
    fn open(path: &std::path::Path, schema: bool) -> Lite {
        let db = rusqlite::Connection::open(path).unwrap();
        db.execute_batch(Sqlite::CONNECTION_SETUP).unwrap();
        if schema {
            db.execute_batch(&Sqlite::default().schema()).unwrap();
        }
        Lite { db }
    }

    fn run(&self, statement: &Statement) -> Result<Vec<Vec<SqlValue>>, String> {
        servers::sqlite_rows(&self.db, statement).map_err(|e| e.to_string())
    }

    fn drive(&self, call: Call) -> Result<Outcome, CallError> {
        call.drive(|command| servers::sqlite_answer(&self.db, command))
            .0
    }
}

fn temp_file(test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "ratewindow-rates-{test}-{}-{}.db",
        std::process::id(),
        nanos()
    ))
}

#[test]
fn every_gcra_and_counter_vector_runs_on_sqlite() {
    let path = temp_file("vectors");
    let lite = Lite::open(&path, true);
    let plans = Sqlite::default();
    let (ran, skipped) = rates::run_vectors(|case, op, now| {
        lite.drive(plans.rate(prefixed(op, &format!("{case}:")), now))
    });
    assert!(ran >= 10, "only {ran} cases ran ({skipped} skipped)");
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_random_walk_on_sqlite_answers_as_the_memory_store() {
    let path = temp_file("walk");
    let lite = Lite::open(&path, true);
    let plans = Sqlite::default();
    for seed in [5, 0xdead_beef] {
        let memory = MemoryStore::new();
        let prefix = format!("{seed}:");
        for (step, (op, now)) in rates::walk(600, seed, 60).into_iter().enumerate() {
            let op = prefixed(op, &prefix);
            let want = rates::memory(&memory, &op, now);
            let got = rates::spelled(lite.drive(plans.rate(op.clone(), now)));
            assert_eq!(got, want, "seed {seed} step {step}: {op:?} at {now}");
        }
    }
    let _ = std::fs::remove_file(path);
}

/// 8 threads, each with its own connection to one file, x 64 calls at a limit of 64: BEGIN
/// IMMEDIATE lets exactly the limit through.
#[test]
fn sqlite_takes_exactly_the_limit_under_concurrency() {
    let path = temp_file("concurrency");
    drop(Lite::open(&path, true));
    let gcra = Gcra::new(64, 3_600_000, 64).unwrap();
    let counter = Counter::new(Limit::new(64, 3_600_000).unwrap()).unwrap();
    let now = 1_800_000_000_000 + 1_000;
    for algorithm in ["gcra", "counter"] {
        let taken = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (path, taken) = (&path, &taken);
                s.spawn(move || {
                    let lite = Lite::open(path, false);
                    let plans = Sqlite::default();
                    for i in 0..64u64 {
                        let cost = 1 + (t + i) % 3;
                        let op = if algorithm == "gcra" {
                            RateOp::GcraConsume {
                                key: "hot".into(),
                                gcra,
                                cost,
                            }
                        } else {
                            RateOp::CounterConsume {
                                key: "hot".into(),
                                counter,
                                cost,
                            }
                        };
                        if verdict(lite.drive(plans.rate(op, now + i))).allowed {
                            taken.fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = taken.into_inner();
        let lite = Lite::open(&path, false);
        let peek = if algorithm == "gcra" {
            RateOp::GcraPeek {
                key: "hot".into(),
                gcra,
                cost: 1,
            }
        } else {
            RateOp::CounterPeek {
                key: "hot".into(),
                counter,
                cost: 1,
            }
        };
        // GCRA refills one use a minute: within 64 ms none comes back.
        let left = verdict(lite.drive(Sqlite::default().rate(peek, now + 64)))
            .quota
            .remaining as u64;
        assert!((62..=64).contains(&taken), "{algorithm}: {taken} taken");
        assert_eq!(taken + left, 64, "{algorithm}: {taken} taken, {left} left");
    }
    let _ = std::fs::remove_file(path);
}

/// A file installed by an earlier version (no GCRA or counter tables) gains them by installing the
/// schema again.
#[test]
fn an_earlier_sqlite_file_gains_the_rates_tables() {
    let path = temp_file("upgrade");
    let lite = Lite::open(&path, false);
    let schema = Sqlite::default().schema();
    let earlier = &schema[..schema
        .find("CREATE TABLE IF NOT EXISTS ratewindow_gcra")
        .unwrap()];
    lite.db.execute_batch(earlier).unwrap();
    let op = RateOp::CounterConsume {
        key: "k".into(),
        counter: Counter::new(Limit::new(2, 60_000).unwrap()).unwrap(),
        cost: 2,
    };
    let plans = Sqlite::default();
    assert_eq!(
        lite.drive(plans.rate(op.clone(), 1_000))
            .unwrap_err()
            .kind(),
        "store",
        "no such table yet"
    );
    // The failed read rolled its transaction back: the connection is usable.
    lite.db.execute_batch(&schema).unwrap();
    lite.db.execute_batch(&schema).unwrap();
    assert!(verdict(lite.drive(plans.rate(op.clone(), 1_000))).allowed);
    assert!(!verdict(lite.drive(plans.rate(op, 1_001))).allowed);
    let _ = std::fs::remove_file(path);
}

/// The purge removes the rows that no longer count and keeps the others, on both stores.
#[test]
fn the_purge_removes_full_buckets_and_spent_counters_only() {
    let gcra = Gcra::new(10, 1_000, 10).unwrap(); // a use back every 100 ms
    let counter = Counter::new(Limit::new(10, 1_000).unwrap()).unwrap();
    let ops = |key: &str| {
        [
            RateOp::GcraConsume {
                key: key.into(),
                gcra,
                cost: 5,
            },
            RateOp::CounterConsume {
                key: key.into(),
                counter,
                cost: 5,
            },
        ]
    };
    // PostgreSQL, on its own clock: "old" rows made an hour ago, "new" ones now.
    let pg = Pg::install("purge");
    let mut client = servers::pg_connect();
    let server_now = verdict(pg_drive(
        &mut client,
        pg.plans.rate(ops("probe")[0].clone()),
    ));
    assert!(server_now.allowed);
    let hour_ago = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 3_600_000;
    for op in ops("old") {
        assert!(verdict(pg_drive(&mut client, pg.plans.rate_at(op, hour_ago))).allowed);
    }
    for op in ops("new") {
        assert!(verdict(pg_drive(&mut client, pg.plans.rate(op))).allowed);
    }
    let rows = pg_run(&mut client, &pg.plans.plan_rates_purge()).unwrap();
    assert_eq!(Postgres::decode_rates_purge(&rows), Ok((1, 1)));
    let p = pg.plans.names().prefix();
    let left: i64 = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {p}_gcra) + (SELECT count(*) FROM {p}_counters)"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 3, "probe's bucket, new's bucket and counter");
    // The store's own purge (the one the bindings run) deletes them too.
    for op in ops("old again") {
        assert!(verdict(pg_drive(&mut client, pg.plans.rate_at(op, hour_ago))).allowed);
    }
    let rows = pg_run(&mut client, &pg.plans.plan_purge()).unwrap();
    assert!(Postgres::decode_purge(&rows).is_ok(), "{rows:?}");
    let left: i64 = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {p}_gcra) + (SELECT count(*) FROM {p}_counters)"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        left, 3,
        "the store's purge deleted the old bucket and counter"
    );

    // SQLite, on the host's clock: at 10,000 ms, the bucket of 5 uses made at 9,600 is full at
    // 10,100; the counter of window 9 is spent at 11,000.
    let path = temp_file("purge");
    let lite = Lite::open(&path, true);
    let plans = Sqlite::default();
    for op in ops("a") {
        assert!(verdict(lite.drive(plans.rate(op, 9_600))).allowed);
    }
    let count = |lite: &Lite| -> i64 {
        lite.db
            .query_row(
                "SELECT (SELECT count(*) FROM ratewindow_gcra) + (SELECT count(*) FROM ratewindow_counters)",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    // The rates purge alone, then the store's purge (which the bindings run, and which holds it).
    for (now, left, whole) in [
        (10_099, 2, false),
        (10_100, 1, false),
        (10_999, 1, true),
        (11_000, 0, true),
    ] {
        let statements = if whole {
            plans.plan_purge(now)
        } else {
            plans.plan_rates_purge(now)
        };
        for statement in statements {
            lite.run(&statement).unwrap();
        }
        assert_eq!(count(&lite), left, "at {now}");
    }
    let _ = std::fs::remove_file(path);
}
