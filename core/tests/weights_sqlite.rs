//! Weighted calls on SQLite through the core's call machine, on a real database file: every
//! `tests/vectors/weights` case, a seeded random walk equal to the memory store field by field, one row
//! a use (a release deletes exactly its call's), and two connections racing for the last uses.

#![cfg(feature = "weights")]

mod common;
mod servers;
mod walk;
use walk::{weight_seeds, weighted_entries, Rng};

use common::Engine;
use ratewindow_core::call::{CallError, Command, Fed, Op, Outcome, ReleaseToken};
use ratewindow_core::sql::{SqlValue, Sqlite, Statement};
use ratewindow_core::{BatchVerdict, Entry, Limit, MemoryStore, Window};
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
}

impl Engine for Lite {
    type Release = ReleaseToken;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(self.batch(&[Entry::new(key, limit)], now).0.verdict())
    }
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        self.peek_cost(key, limit, 1, now)
    }
    fn consume_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        let entry = Entry::with_cost(key, limit, cost.into()).unwrap();
        json!(self.batch(&[entry], now).0.verdict())
    }
    fn peek_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        let op = Op::Peek {
            entries: vec![Entry::with_cost(key, limit, cost.into()).unwrap()],
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
    fn hit(&mut self, _: &str, _: Window, _: i64, _: u64) -> i64 {
        unreachable!("no fixed window in the weight vectors")
    }
    fn attempts(&mut self, _: &str, _: u64) -> i64 {
        unreachable!()
    }
    fn too_many_attempts(&mut self, _: &str, _: i64, _: u64) -> bool {
        unreachable!()
    }
    fn remaining(&mut self, _: &str, _: i64, _: u64) -> i64 {
        unreachable!()
    }
    fn available_in(&mut self, _: &str, _: u64) -> u64 {
        unreachable!()
    }
    fn available_in_ms(&mut self, _: &str, _: u64) -> u64 {
        unreachable!()
    }
    fn reset_attempts(&mut self, _: &str, _: u64) {
        unreachable!()
    }
    fn clear(&mut self, _: &str) {
        unreachable!()
    }
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ratewindow-weights-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("db.sqlite")
}

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

#[test]
fn every_weight_vector_runs_on_sqlite() {
    let cases = common::cases_in("weights");
    assert!(cases.len() >= 8, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut lite = Lite::open(&temp(&format!("v{i}")));
        failures.extend(common::run_case(&mut lite, case));
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// SQLite against the memory store at the same (monotonic) times: consumes, peeks, releases of the
/// call just made; every verdict equal to the last field, and one row a use held.
#[test]
fn a_seeded_walk_answers_as_the_memory_store() {
    for seed in weight_seeds() {
        eprintln!("weighted SQLite walk seed {seed} (replay: RATEWINDOW_WEIGHT_SEED={seed})");
        let mut lite = Lite::open(&temp(&format!("walk{seed}")));
        let memory = MemoryStore::new();
        let mut rng = Rng(seed.max(1));
        let windows = [
            [40, 90, 200][rng.below(3) as usize],
            [40, 90, 200][rng.below(3) as usize],
        ];
        let (mut now, mut refused, mut pending) = (1_000u64, 0, None);
        for step in 0..500 {
            let entries = weighted_entries(&mut rng, windows, true);
            let what = rng.below(6);
            if what == 1 {
                if let Some((token, in_memory)) = pending.take() {
                    lite.release(token, now);
                    memory.release(in_memory, now);
                }
            } else {
                pending = None;
            }
            let (got, want) = if what >= 2 {
                let (got, token) = lite.batch(&entries, now);
                let consumed = memory.consume_many(&entries, now);
                if let (Some(token), Some(in_memory)) = (token, consumed.release) {
                    pending = Some((token, in_memory));
                }
                (got, consumed.verdict)
            } else {
                let op = Op::Peek {
                    entries: entries.clone(),
                };
                (lite.verdict(op, now).0, memory.peek_many(&entries, now))
            };
            assert_eq!(got, want, "seed {seed} step {step} at {now}: {entries:?}");
            refused += usize::from(!got.allowed);
            now += rng.below(25);
        }
        assert!(refused > 40, "seed {seed}: only {refused} refusals");
    }
}

fn rows(lite: &Lite) -> i64 {
    let st = Statement {
        sql: "SELECT count(*) FROM ratewindow_calls".into(),
        params: vec![],
    };
    match lite.run(&st).unwrap()[0][0] {
        SqlValue::Int(n) => n,
        ref other => panic!("{other:?}"),
    }
}

#[test]
fn a_call_costing_n_holds_n_rows_and_its_release_deletes_exactly_them() {
    let mut lite = Lite::open(&temp("rows"));
    let l = limit(10, 60_000);
    let (v, heavy) = lite.batch(&[Entry::with_cost("a", l, 4).unwrap()], 0);
    assert_eq!((v.allowed, v.quota.remaining, rows(&lite)), (true, 6, 4));
    let (v, _) = lite.batch(&[Entry::new("a", l)], 1);
    assert_eq!((v.quota.remaining, rows(&lite)), (5, 5));
    // Two entries on one key: one call costing the larger, recorded once.
    let (v, _) = lite.batch(
        &[
            Entry::with_cost("a", l, 2).unwrap(),
            Entry::with_cost("a", limit(20, 1_000), 3).unwrap(),
        ],
        2,
    );
    assert_eq!((v.allowed, rows(&lite)), (true, 8));
    lite.release(heavy.unwrap(), 3);
    assert_eq!(rows(&lite), 4);
    let refused = lite.batch(&[Entry::with_cost("a", l, 7).unwrap()], 4).0;
    assert_eq!((refused.allowed, refused.quota.remaining), (false, 6));
}

/// Two connections, 2 x 40 calls costing 3 on one key of 50 uses: exactly 16 pass (48 rows).
#[test]
fn two_connections_admit_exactly_what_fits() {
    let path = temp("race");
    Lite::open(&path);
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut lite = Lite::open(&path);
                lite.next_id = 1_000 * (t + 1);
                (0..40)
                    .filter(|&i| {
                        let e = [Entry::with_cost("hot", limit(50, 600_000), 3).unwrap()];
                        lite.batch(&e, 1_000 + i).0.allowed
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(admitted, 16);
    assert_eq!(rows(&Lite::open(&path)), 48);
}
