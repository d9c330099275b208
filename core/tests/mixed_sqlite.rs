//! Batches mixing algorithms on SQLite through the core's call machine, on real database files: a
//! seeded random walk equal to the memory store's `consume_mixed` / `peek_mixed` field by field, the
//! release of the sliding-log calls, processes' worth of connections racing a batch whose global
//! entry is the bottleneck (exactly its uses pass), and bad input refused with nothing written.

#![cfg(all(feature = "mixed", feature = "weights"))]

mod servers;
mod walk;
use walk::{cost_for, counter, gcra, seed, sliding, Rng};

use ratewindow_core::call::{
    check_mixed, CallError, Command, Fed, Next, Op, Outcome, ReleaseToken,
};
use ratewindow_core::sql::{SqlValue, Sqlite, Statement};
use ratewindow_core::{BatchVerdict, MemoryStore, MixedEntry, Rule};

struct Lite {
    db: rusqlite::Connection,
    plans: Sqlite,
}

impl Lite {
    fn open(path: &std::path::Path) -> Lite {
        let db = rusqlite::Connection::open(path).unwrap();
        db.execute_batch(Sqlite::CONNECTION_SETUP).unwrap();
        let plans = Sqlite::default();
        db.execute_batch(&plans.schema()).unwrap();
        Lite { db, plans }
    }

    fn run(&self, statement: &Statement) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
        servers::sqlite_rows(&self.db, statement)
    }

    fn answer(&self, command: Command<'_>) -> Result<Fed, String> {
        servers::sqlite_answer(&self.db, command)
    }

    fn mixed(
        &self,
        entries: &[MixedEntry],
        now: u64,
        call_id: Option<&str>,
    ) -> Result<(BatchVerdict, Option<ReleaseToken>), CallError> {
        let (result, _) = self
            .plans
            .mixed(entries.to_vec(), now, call_id)
            .drive(|c| self.answer(c));
        match result? {
            Outcome::Verdict { verdict, release } => Ok((verdict, release)),
            other => panic!("expected a verdict, got {other:?}"),
        }
    }

    fn count(&self, sql: &str) -> i64 {
        self.db.query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

/// The walk's keys: each with the rules it may be counted under (one key name under two
/// algorithms is two keys; a sliding key under two windows, a GCRA key under two rates).
fn rules() -> Vec<(&'static str, Vec<Rule>)> {
    vec![
        ("a", vec![sliding(3, 1_000), sliding(5, 2_500)]),
        ("a", vec![gcra(3, 1_000, 2), gcra(3, 1_000, 3)]),
        ("b", vec![gcra(10, 1_000, 5), gcra(7, 3_000, 4)]),
        ("c", vec![counter(4, 1_000)]),
        ("d", vec![counter(9, 700), counter(9, 1_400)]),
        ("g", vec![sliding(6, 1_500)]),
    ]
}

#[test]
fn a_seeded_walk_gives_the_memory_stores_verdicts() {
    let seed = seed();
    println!("RATEWINDOW_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile_dir("walk");
    let lite = Lite::open(&dir.join("walk.db"));
    let memory = MemoryStore::new();
    let rules = rules();
    let mut now = 1_000_000u64;
    for step in 0..1_500 {
        now += rng.below(4) * rng.below(160);
        let n = 1 + rng.below(4) as usize;
        let entries: Vec<MixedEntry> = (0..n)
            .map(|_| {
                let (key, choices) = &rules[rng.below(rules.len() as u64) as usize];
                let rule = choices[rng.below(choices.len() as u64) as usize];
                let cost = cost_for(&mut rng, &rule);
                MixedEntry::new(*key, rule, cost)
            })
            .collect();
        let peek = rng.below(4) == 0;
        let want = if peek {
            memory.peek_mixed(&entries, now).unwrap()
        } else {
            memory.consume_mixed(&entries, now).unwrap().verdict
        };
        let id = format!("walk-{step}");
        let (got, release) = lite
            .mixed(&entries, now, (!peek).then_some(id.as_str()))
            .unwrap();
        if got != want {
            for table in ["calls", "gcra", "counters"] {
                let st = Statement {
                    sql: format!("SELECT * FROM ratewindow_{table}"),
                    params: vec![],
                };
                println!("{table}: {:?}", lite.run(&st).unwrap());
            }
        }
        assert_eq!(
            got, want,
            "step {step} at {now}, entries {entries:?} (RATEWINDOW_SEED={seed})"
        );
        let sliding = entries.iter().any(|e| matches!(e.rule, Rule::Sliding(_)));
        assert_eq!(
            release.is_some(),
            got.allowed && !peek && sliding,
            "a release for an allowed consume with sliding entries"
        );
    }
}

#[test]
fn a_release_gives_back_the_sliding_calls_and_keeps_the_gcra_uses() {
    let dir = tempfile_dir("release");
    let lite = Lite::open(&dir.join("release.db"));
    let entries = [
        MixedEntry::new("u", gcra(2, 1_000, 2), 1),
        MixedEntry::new("all", sliding(1, 10_000), 1),
    ];
    let (v, release) = lite.mixed(&entries, 5_000, Some("one")).unwrap();
    assert!(v.allowed);
    let token = release.expect("a release");
    // The global log is full: refused, and nothing of the GCRA key is taken by the refusal.
    let (v, _) = lite.mixed(&entries, 5_001, Some("two")).unwrap();
    assert_eq!((v.allowed, v.blocked), (false, Some(1)));
    let (result, _) = lite
        .plans
        .start(Op::Release { token }, 5_002)
        .drive(|c| lite.answer(c));
    assert_eq!(result, Ok(Outcome::Unit));
    assert_eq!(lite.count("SELECT count(*) FROM ratewindow_calls"), 0);
    // The GCRA use stays taken: one of two left (a burst of 2, 500 ms a use).
    let (v, _) = lite.mixed(&entries, 5_002, None).unwrap();
    assert!(v.allowed);
    let (v, _) = lite
        .mixed(&[MixedEntry::new("u", gcra(2, 1_000, 2), 2)], 5_002, None)
        .unwrap();
    assert!(!v.allowed, "the first call's GCRA use was not given back");
}

#[test]
fn connections_racing_a_global_entry_let_exactly_its_uses_pass() {
    let dir = tempfile_dir("race");
    let path = dir.join("race.db");
    drop(Lite::open(&path));
    let global = 25u64;
    let threads = 6;
    let tries = 12;
    let allowed: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let path = path.clone();
                s.spawn(move || {
                    let lite = Lite::open(&path);
                    let mut ok = 0;
                    for i in 0..tries {
                        let entries = [
                            MixedEntry::new(format!("user{t}"), gcra(100, 1_000, 100), 1),
                            MixedEntry::new(format!("user{t}"), counter(100, 60_000), 1),
                            MixedEntry::new("global", sliding(global, 60_000), 1),
                        ];
                        let id = format!("race-{t}-{i}");
                        let (v, _) = lite.mixed(&entries, 1_000 + i, Some(&id)).unwrap();
                        ok += u64::from(v.allowed);
                    }
                    ok
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(allowed, global);
    let lite = Lite::open(&path);
    assert_eq!(
        lite.count("SELECT count(*) FROM ratewindow_calls"),
        global as i64
    );
    // All or nothing: each user's counter holds exactly the calls its global entry let pass.
    assert_eq!(
        lite.count("SELECT coalesce(sum(cur), 0) FROM ratewindow_counters"),
        global as i64
    );
}

#[test]
fn bad_input_is_refused_before_any_statement() {
    let bad = vec![
        MixedEntry::new("u", gcra(2, 1_000, 2), 1),
        MixedEntry::new("all", sliding(3, 1_000), 4),
    ];
    let (at, e) = check_mixed(&bad).unwrap_err();
    assert_eq!((at, e.field), (1, ratewindow_core::gcra::RateField::Cost));
    let mut call = Sqlite::default().mixed(bad, 0, Some("x"));
    let Next::Done(Err(e)) = call.next() else {
        panic!("no statement")
    };
    assert_eq!(e.kind(), "unsupported");
    let mut call =
        Sqlite::default().mixed(vec![MixedEntry::new("u", counter(2, 1_000), 3)], 0, None);
    assert!(matches!(call.next(), Next::Done(Err(_))));
}

#[test]
fn rows_of_the_wrong_shape_or_a_failure_roll_back() {
    let entries = vec![
        MixedEntry::new("u", gcra(2, 1_000, 2), 1),
        MixedEntry::new("all", sliding(3, 1_000), 1),
    ];
    for bad in [
        vec![vec![
            SqlValue::Int(1),
            SqlValue::Text("u".into()),
            SqlValue::Int(5),
        ]],
        vec![vec![
            SqlValue::Int(1),
            SqlValue::Text("other".into()),
            SqlValue::Int(5),
            SqlValue::Int(0),
            SqlValue::Int(2),
            SqlValue::Int(0),
        ]],
        vec![vec![
            SqlValue::Int(1),
            SqlValue::Text("u".into()),
            SqlValue::Int(5),
            SqlValue::Int(2),
            SqlValue::Int(2),
            SqlValue::Int(0),
        ]],
    ] {
        let mut call = Sqlite::default().mixed(entries.clone(), 0, Some("x"));
        let Next::Run(Command::Sql { statements }) = call.next() else {
            panic!("statements")
        };
        assert_eq!(statements[0].sql, "BEGIN IMMEDIATE");
        call.feed(Fed::Rows(bad));
        let Next::Run(Command::Sql { statements }) = call.next() else {
            panic!("a rollback")
        };
        assert_eq!(statements[0].sql, "ROLLBACK");
        call.feed(Fed::Rows(vec![]));
        let Next::Done(Err(e)) = call.next() else {
            panic!("an error")
        };
        assert_eq!(e.kind(), "reply");
    }
    let mut call = Sqlite::default().mixed(entries.clone(), 0, Some("x"));
    let _ = call.next();
    call.feed(Fed::Rows(vec![]));
    let Next::Run(Command::Sql { statements }) = call.next() else {
        panic!("the writes")
    };
    assert_eq!(statements.last().unwrap().sql, "COMMIT");
    call.fail("disk I/O error");
    let Next::Run(Command::Sql { statements }) = call.next() else {
        panic!("a rollback")
    };
    assert_eq!(statements[0].sql, "ROLLBACK");
    call.fail("cannot rollback");
    let Next::Done(Err(CallError::Store { message })) = call.next() else {
        panic!("the failure stands")
    };
    assert_eq!(message, "disk I/O error");
    // A peek is one read, no transaction: its failure is the call's.
    let mut call = Sqlite::default().mixed(entries, 0, None);
    let Next::Run(Command::Sql { statements }) = call.next() else {
        panic!("the read")
    };
    assert_eq!(statements.len(), 1);
    call.fail("no such table");
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Store { .. }))
    ));
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ratewindow-mixed-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
