//! Batches mixing algorithms on a real PostgreSQL (the unix socket, user `postgres`, database
//! `test`, or `PGHOST`/`PGUSER`/`PGDATABASE`) through the core's one statement, `{p}_mixed`: a
//! seeded random walk on the server's clock equal to the memory store's `consume_mixed` /
//! `peek_mixed` field by field, the release of the sliding-log calls, connections racing a batch
//! whose global entry is the bottleneck (exactly its uses pass, every user's keys hold exactly the
//! calls that passed), batches locking the same keys in opposite entry orders (no deadlock), and bad
//! input refused with nothing run.

#![cfg(all(feature = "mixed", feature = "weights"))]

mod servers;
mod walk;
use walk::{cost_for, counter, gcra, seed, sliding, Rng};

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{CallError, Command, Fed, Op, Outcome, ReleaseToken};
use ratewindow_core::sql::{Postgres, SqlNames, SqlValue, Statement};
use ratewindow_core::{BatchVerdict, MemoryStore, MixedEntry, Rule};

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000
}

/// A schema of this test's own, dropped at the end.
struct Pg {
    plans: Postgres,
}

impl Pg {
    fn install(test: &str) -> Pg {
        let names =
            SqlNames::new(&format!("rwm_{test}_{}_{}", std::process::id(), nanos())).unwrap();
        let pg = Pg {
            plans: Postgres::new(names),
        };
        servers::pg_connect()
            .batch_execute(&pg.plans.schema())
            .unwrap();
        pg
    }

    fn p(&self) -> &str {
        self.plans.names().prefix()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let p = self.p();
        let _ = servers::pg_connect().batch_execute(&format!(
            "DO $d$ DECLARE f text; BEGIN \
               FOR f IN SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE '{p}\\_%' LOOP \
                 EXECUTE 'DROP FUNCTION IF EXISTS ' || f; \
               END LOOP; END $d$; \
             DROP TABLE IF EXISTS {p}_log, {p}_calls, {p}_windows, {p}_locks, {p}_gcra, {p}_counters;"
        ));
    }
}

fn run(client: &mut postgres::Client, statement: &Statement) -> Result<Vec<Vec<SqlValue>>, String> {
    servers::pg_rows(client, statement).map_err(|e| e.to_string())
}

/// Runs `command` on `client`; the clock the mixed statement answered (its last row) goes to `clock`.
fn answer(
    client: &mut postgres::Client,
    command: Command<'_>,
    clock: &Cell<u64>,
) -> Result<Fed, String> {
    let Command::Sql { statements } = command else {
        panic!("a SQL call asked for a script");
    };
    assert_eq!(statements.len(), 1, "one statement a call");
    let rows = run(client, &statements[0])?;
    if let Some(last) = rows.last() {
        if let [SqlValue::Int(-1), SqlValue::Null, SqlValue::Int(now), ..] = last.as_slice() {
            let newest = rows
                .iter()
                .filter_map(|r| match r.as_slice() {
                    [SqlValue::Int(0), _, SqlValue::Int(at), ..] => Some(*at),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            clock.set((*now).max(newest) as u64);
        }
    }
    Ok(Fed::Rows(rows))
}

fn mixed(
    client: &mut postgres::Client,
    plans: &Postgres,
    entries: &[MixedEntry],
    call_id: Option<&str>,
    clock: &Cell<u64>,
) -> Result<(BatchVerdict, Option<ReleaseToken>), CallError> {
    let (result, failures) = plans
        .mixed(entries.to_vec(), call_id)
        .drive(|c| answer(client, c, clock));
    assert!(failures.is_empty());
    match result? {
        Outcome::Verdict { verdict, release } => Ok((verdict, release)),
        other => panic!("expected a verdict, got {other:?}"),
    }
}

/// Short windows: the walk runs on the server's clock, so time passes by sleeping.
fn rules() -> Vec<(&'static str, Vec<Rule>)> {
    vec![
        ("a", vec![sliding(3, 120), sliding(5, 300)]),
        ("a", vec![gcra(3, 120, 2), gcra(3, 120, 3)]),
        ("b", vec![gcra(10, 120, 5), gcra(7, 360, 4)]),
        ("c", vec![counter(4, 120)]),
        ("d", vec![counter(9, 90), counter(9, 180)]),
        ("g", vec![sliding(6, 180)]),
    ]
}

#[test]
fn a_seeded_walk_on_the_server_clock_gives_the_memory_stores_verdicts() {
    let seed = seed();
    println!("RATEWINDOW_SEED={seed}");
    let mut rng = Rng(seed);
    let pg = Pg::install("walk");
    let mut client = servers::pg_connect();
    let memory = MemoryStore::new();
    let rules = rules();
    let clock = Cell::new(0);
    let mut allowed = 0;
    for step in 0..400 {
        let pause = rng.below(4) * rng.below(25);
        std::thread::sleep(std::time::Duration::from_millis(pause));
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
        let id = format!("walk-{step}");
        let (got, release) = mixed(
            &mut client,
            &pg.plans,
            &entries,
            (!peek).then_some(&id),
            &clock,
        )
        .unwrap();
        let now = clock.get();
        let want = if peek {
            memory.peek_mixed(&entries, now).unwrap()
        } else {
            memory.consume_mixed(&entries, now).unwrap().verdict
        };
        assert_eq!(
            got, want,
            "step {step} at {now}, entries {entries:?} (RATEWINDOW_SEED={seed})"
        );
        allowed += u32::from(got.allowed && !peek);
        let sliding = entries.iter().any(|e| matches!(e.rule, Rule::Sliding(_)));
        assert_eq!(release.is_some(), got.allowed && !peek && sliding);
    }
    assert!(allowed > 20, "the walk allowed {allowed} consumes");
}

#[test]
fn a_release_gives_back_the_sliding_calls_and_keeps_the_gcra_uses() {
    let pg = Pg::install("release");
    let p = pg.p().to_owned();
    let mut client = servers::pg_connect();
    let clock = Cell::new(0);
    let entries = [
        MixedEntry::new("u", gcra(2, 60_000, 2), 1),
        MixedEntry::new("all", sliding(2, 60_000), 2),
    ];
    let (v, release) = mixed(&mut client, &pg.plans, &entries, Some("one"), &clock).unwrap();
    assert!(v.allowed);
    let token = release.expect("a release");
    let row = client
        .query_one(
            &format!("SELECT cardinality(ats), expires_at - ats[1] FROM {p}_log WHERE key = 'all'"),
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2, "a call costing 2 is two times");
    assert_eq!(
        row.get::<_, i64>(1),
        60_000,
        "the log expires with its window"
    );
    // The global log is full: refused, and the refusal takes nothing of the GCRA key.
    let (v, _) = mixed(&mut client, &pg.plans, &entries, Some("two"), &clock).unwrap();
    assert_eq!((v.allowed, v.blocked), (false, Some(1)));
    let (result, _) = pg
        .plans
        .start(Op::Release { token })
        .drive(|c| answer(&mut client, c, &clock));
    assert_eq!(result, Ok(Outcome::Unit));
    let times: i32 = client
        .query_one(
            &format!("SELECT cardinality(ats) FROM {p}_log WHERE key = 'all'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(times, 0);
    // The GCRA use stays taken: one of two left.
    let (v, _) = mixed(&mut client, &pg.plans, &entries[..1], None, &clock).unwrap();
    assert!(v.allowed);
    let (v, _) = mixed(
        &mut client,
        &pg.plans,
        &[MixedEntry::new("u", gcra(2, 60_000, 2), 2)],
        None,
        &clock,
    )
    .unwrap();
    assert!(!v.allowed, "the first call's GCRA use was not given back");
    // A refused batch leaves no row behind for the keys it named first.
    let fresh = [
        MixedEntry::new("new-gcra", gcra(2, 60_000, 2), 1),
        MixedEntry::new("new-counter", counter(2, 60_000), 1),
        MixedEntry::new("all", sliding(2, 60_000), 2),
    ];
    let (v, _) = mixed(&mut client, &pg.plans, &fresh, Some("three"), &clock).unwrap();
    assert!(v.allowed, "the log was given back");
    let (v, _) = mixed(&mut client, &pg.plans, &fresh[..1], Some("four"), &clock).unwrap();
    assert!(v.allowed);
    let other = [
        MixedEntry::new("other-gcra", gcra(2, 60_000, 2), 1),
        MixedEntry::new("other-counter", counter(2, 60_000), 1),
        MixedEntry::new("all", sliding(2, 60_000), 1),
    ];
    let (v, release) = mixed(&mut client, &pg.plans, &other, Some("five"), &clock).unwrap();
    assert_eq!(
        (v.allowed, v.blocked, release.is_none()),
        (false, Some(2), true)
    );
    let rows: i64 = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {p}_gcra WHERE key = 'other-gcra') \
                 + (SELECT count(*) FROM {p}_counters WHERE key = 'other-counter')"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "nothing written by a refusal");
}

/// 16 threads × 16 calls, each thread its own connection (4 processes × 64 in flight are the Node and
/// Python tests'), every call a user's GCRA, the user's counter and one global log: exactly the
/// global log's uses pass, and each user's counter holds exactly the calls that passed.
#[test]
fn calls_racing_a_global_entry_let_exactly_its_uses_pass() {
    let pg = Pg::install("race");
    let p = pg.p().to_owned();
    let global = 40u64;
    let allowed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let (plans, allowed) = (&pg.plans, &allowed);
            s.spawn(move || {
                let mut client = servers::pg_connect();
                let clock = Cell::new(0);
                for i in 0..16 {
                    // Entries in varying orders: the statement locks in its own global order.
                    let mut entries = vec![
                        MixedEntry::new(format!("user{}", t % 4), gcra(1_000, 60_000, 1_000), 1),
                        MixedEntry::new(format!("user{}", t % 4), counter(1_000, 3_600_000), 1),
                        MixedEntry::new("global", sliding(global, 3_600_000), 1),
                        MixedEntry::new(
                            format!("user{}", (t + 1) % 4),
                            sliding(1_000, 3_600_000),
                            1,
                        ),
                    ];
                    entries.rotate_left((t + i) as usize % 4);
                    let id = format!("race-{t}-{i}");
                    let (v, _) = mixed(&mut client, plans, &entries, Some(&id), &clock).unwrap();
                    if v.allowed {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(allowed.into_inner(), global);
    let mut client = servers::pg_connect();
    let calls: i32 = client
        .query_one(
            &format!("SELECT cardinality(ats) FROM {p}_log WHERE key = 'global'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(calls as u64, global);
    let counted: i64 = client
        .query_one(
            &format!("SELECT coalesce(sum(cur), 0)::bigint FROM {p}_counters"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        counted as u64, global,
        "each allowed call counted once per user"
    );
    let users: i64 = client
        .query_one(
            &format!("SELECT coalesce(sum(cardinality(ats)), 0)::bigint FROM {p}_log WHERE key <> 'global'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        users as u64, global,
        "each allowed call recorded once in a user's log"
    );
}

#[test]
fn bad_input_ends_the_call_with_nothing_run() {
    let plans = Postgres::default();
    for (entries, id) in [
        (vec![MixedEntry::new("u", gcra(2, 1_000, 2), 3)], Some("x")),
        (vec![MixedEntry::new("u", sliding(2, 1_000), 3)], None),
        (vec![MixedEntry::new("u", counter(2, 1_000), 0)], Some("x")),
        (vec![MixedEntry::new("u", counter(2, 1_000), 1)], Some("")),
        (
            vec![MixedEntry::new("u", counter(2, 1_000), 1); Postgres::MAX_MIXED + 1],
            Some("x"),
        ),
    ] {
        let (result, _) = plans
            .mixed(entries, id)
            .drive(|_| -> Result<Fed, String> { panic!("nothing runs") });
        assert!(
            matches!(result, Err(CallError::Unsupported(_))),
            "{result:?}"
        );
    }
    // Rows of the wrong shape, or a verdict the state does not give, are typed errors.
    let entries = vec![
        MixedEntry::new("u", gcra(2, 1_000, 2), 1),
        MixedEntry::new("all", sliding(1, 1_000), 1),
    ];
    let now = 1_800_000_000_000i64;
    let header = |did: i64| {
        vec![
            SqlValue::Int(-1),
            SqlValue::Null,
            SqlValue::Int(now),
            SqlValue::Int(did),
            SqlValue::Int(0),
            SqlValue::Int(0),
        ]
    };
    let full = vec![
        SqlValue::Int(0),
        SqlValue::Text("all".into()),
        SqlValue::Int(now - 10),
        SqlValue::Int(now + 990),
        SqlValue::Int(0),
        SqlValue::Int(0),
    ];
    for rows in [
        vec![],
        vec![header(1)[..3].to_vec()],
        // Recorded, yet the log is full.
        vec![full.clone(), header(1)],
        // Refused, yet nothing refuses.
        vec![header(0)],
        vec![
            vec![SqlValue::Int(7), SqlValue::Text("all".into())],
            header(1),
        ],
    ] {
        let (result, _) = plans
            .mixed(entries.clone(), Some("x"))
            .drive(|_| Ok(Fed::Rows(rows.clone())));
        assert!(
            matches!(result, Err(CallError::Rows(_))),
            "{rows:?}: {result:?}"
        );
    }
    let (result, _) = plans
        .mixed(entries.clone(), Some("x"))
        .drive(|_| Ok(Fed::Rows(vec![full.clone(), header(0)])));
    let Ok(Outcome::Verdict {
        verdict,
        release: None,
    }) = result
    else {
        panic!("{result:?}")
    };
    assert_eq!((verdict.allowed, verdict.blocked), (false, Some(1)));
}
