//! SQLite through the core's plans, on a real database file: every conformance vector (but the memory
//! store's horizon rules), and two processes' worth of connections racing for the last use.

mod common;

use common::Engine;
use ratewindow_core::redis::WindowState;
use ratewindow_core::sql::{
    Decided, SqlRelease, SqlValue, Sqlite, SqliteCall, SqliteWindowCall, Statement,
};
use ratewindow_core::{Entry, Limit, Window};
use rusqlite::types::{Value as Lv, ValueRef};
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
        let mut st = self.db.prepare(&statement.sql)?;
        let params: Vec<Lv> = statement
            .params
            .iter()
            .map(|p| match p {
                SqlValue::Int(i) => Lv::Integer(*i),
                SqlValue::Text(s) => Lv::Text(s.clone()),
                SqlValue::Null => Lv::Null,
                other => panic!("SQLite takes no {other:?}"),
            })
            .collect();
        let columns = st.column_count();
        let rows = st.query_map(rusqlite::params_from_iter(params), |row| {
            (0..columns)
                .map(|i| {
                    Ok(match row.get_ref(i)? {
                        ValueRef::Integer(v) => SqlValue::Int(v),
                        ValueRef::Text(t) => {
                            SqlValue::Text(String::from_utf8_lossy(t).into_owned())
                        }
                        ValueRef::Null => SqlValue::Null,
                        other => panic!("unexpected column {other:?}"),
                    })
                })
                .collect()
        })?;
        rows.collect()
    }

    /// Runs a call's statements, decides, and runs the rest; rolls back on any error.
    fn call(&self, call: SqliteCall) -> Decided {
        let mut rows = Vec::new();
        for statement in call.statements() {
            rows = self.run(statement).unwrap();
        }
        let decided = call.decide(&rows).unwrap();
        for statement in &decided.statements {
            self.run(statement).unwrap();
        }
        decided
    }

    fn window(&self, call: SqliteWindowCall) -> Option<WindowState> {
        let mut rows = Vec::new();
        for statement in call.statements() {
            rows = self.run(statement).unwrap();
        }
        let (state, rest) = call.decide(&rows).unwrap();
        for statement in &rest {
            self.run(statement).unwrap();
        }
        state
    }

    fn batch(&mut self, entries: &[Entry], now: u64) -> Decided {
        self.next_id += 1;
        let call = self
            .plans
            .begin_consume(entries, now, &format!("call-{}", self.next_id))
            .unwrap();
        self.call(call)
    }
}

impl Engine for Lite {
    type Release = SqlRelease;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(self.batch(&[Entry::new(key, limit)], now).verdict.verdict())
    }
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(self
            .call(self.plans.begin_peek(&[Entry::new(key, limit)], now))
            .verdict
            .verdict())
    }
    fn consume_many(&mut self, entries: &[Entry], now: u64) -> (Value, Option<SqlRelease>) {
        let decided = self.batch(entries, now);
        (json!(decided.verdict), decided.release)
    }
    fn peek_many(&mut self, entries: &[Entry], now: u64) -> Value {
        json!(self.call(self.plans.begin_peek(entries, now)).verdict)
    }
    fn release(&mut self, release: SqlRelease, _now: u64) {
        self.run(&self.plans.plan_release(&release)).unwrap();
    }
    fn hit(&mut self, key: &str, decay: Window, amount: i64, now: u64) -> i64 {
        self.window(self.plans.begin_hit(key, decay, amount, now))
            .map_or(0, |w| w.count)
    }
    fn attempts(&mut self, key: &str, now: u64) -> i64 {
        self.window(self.plans.begin_get_window(key, now))
            .map_or(0, |w| w.count)
    }
    fn too_many_attempts(&mut self, key: &str, max: i64, now: u64) -> bool {
        self.window(self.plans.begin_get_window(key, now))
            .is_some_and(|w| w.count >= max)
    }
    fn remaining(&mut self, key: &str, max: i64, now: u64) -> i64 {
        ratewindow_core::fixed::remaining(self.attempts(key, now), max)
    }
    fn available_in(&mut self, key: &str, now: u64) -> u64 {
        self.window(self.plans.begin_get_window(key, now))
            .map_or(0, |w| w.available_in_secs())
    }
    fn available_in_ms(&mut self, key: &str, now: u64) -> u64 {
        self.window(self.plans.begin_get_window(key, now))
            .map_or(0, |w| w.ms_left)
    }
    fn reset_attempts(&mut self, key: &str, now: u64) {
        self.window(self.plans.begin_reset_attempts(key, now));
    }
    fn clear(&mut self, key: &str) {
        self.run(&self.plans.plan_clear(key)).unwrap();
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

#[test]
fn every_vector_matches_on_sqlite() {
    let path = temp_db("vectors");
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in common::cases()
        .iter()
        .filter(|c| !MEMORY_ONLY.contains(&c.file.as_str()))
    {
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
                            .verdict
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
