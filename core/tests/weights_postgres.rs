//! Weighted calls on PostgreSQL through the core's call machine, on the real server (`PGHOST`/
//! `PGUSER`/`PGDATABASE`, default the unix socket, user `postgres`, database `test`): every
//! `tests/vectors/weights` case and a seeded random walk equal to the memory store field by field (on a
//! pinned clock: each test's schema holds a `clock_timestamp()` that PostgreSQL finds before
//! `pg_catalog`'s, reading the time the test set), one array element a use (a release removes exactly
//! its call's), and 8 connections x 64 weighted calls racing on one key.

#![cfg(feature = "weights")]

mod common;
mod servers;
mod walk;
use walk::{weight_seeds, weighted_entries, Rng};

use common::Engine;
use ratewindow_core::call::{CallError, Command, Fed, Op, Outcome, ReleaseToken};
use ratewindow_core::sql::{Postgres, SqlNames};
use ratewindow_core::{BatchVerdict, Entry, Limit, MemoryStore, Window};
use serde_json::{json, Value};

/// A schema of the test's own (its tables, functions and clock), dropped at the end.
struct Pg {
    client: postgres::Client,
    plans: Postgres,
    schema: String,
    next_id: u64,
    owner: bool,
}

impl Pg {
    fn open(test: &str) -> Pg {
        let schema = format!("rwj_{test}_{}", std::process::id());
        let mut client = servers::pg_connect();
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
                 CREATE FUNCTION {schema}.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS \
                 $c$ SELECT coalesce(to_timestamp(nullif(current_setting('rwj.now', true), '')::numeric / 1000), \
                 pg_catalog.clock_timestamp()) $c$;"
            ))
            .unwrap();
        let mut pg = Pg::join(&schema);
        pg.client.batch_execute(&pg.plans.schema()).unwrap();
        pg.owner = true;
        pg
    }

    /// Another connection to `schema`'s objects.
    fn join(schema: &str) -> Pg {
        let mut client = servers::pg_connect();
        client
            .batch_execute(&format!("SET search_path = {schema}, pg_catalog"))
            .unwrap();
        Pg {
            client,
            plans: Postgres::new(SqlNames::new("rw").unwrap()),
            schema: schema.to_owned(),
            next_id: 0,
            owner: false,
        }
    }

    fn answer(&mut self, command: Command<'_>) -> Result<Fed, String> {
        servers::pg_answer(&mut self.client, command)
    }

    /// Runs `op` with the server's clock pinned at `now` (None: the real clock).
    fn go(&mut self, op: Op, now: Option<u64>) -> Result<Outcome, CallError> {
        let at = now.map_or(String::new(), |n| n.to_string());
        self.client
            .execute("SELECT set_config('rwj.now', $1, false)", &[&at])
            .unwrap();
        let call = self.plans.start(op);
        let (result, give_backs) = call.drive(|c| self.answer(c));
        assert!(give_backs.is_empty());
        result
    }

    fn verdict(&mut self, op: Op, now: Option<u64>) -> (BatchVerdict, Option<ReleaseToken>) {
        match self.go(op, now) {
            Ok(Outcome::Verdict { verdict, release }) => (verdict, release),
            other => panic!("expected a verdict, got {other:?}"),
        }
    }

    fn batch(
        &mut self,
        entries: &[Entry],
        now: Option<u64>,
    ) -> (BatchVerdict, Option<ReleaseToken>) {
        self.next_id += 1;
        let op = Op::Consume {
            entries: entries.to_vec(),
            call_id: format!("call-{}", self.next_id),
        };
        self.verdict(op, now)
    }

    /// The uses a key's row holds (times and ids alike).
    fn held(&mut self, key: &str) -> i64 {
        let row = self
            .client
            .query_one(
                "SELECT coalesce(sum(cardinality(ats)), 0)::bigint, coalesce(sum(cardinality(ids)), 0)::bigint \
                 FROM rw_log WHERE key = $1",
                &[&key],
            )
            .unwrap();
        let (ats, ids): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!(ats, ids, "{key}: as many ids as times");
        ats
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if self.owner {
            let _ = self
                .client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

impl Engine for Pg {
    type Release = ReleaseToken;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        json!(self.batch(&[Entry::new(key, limit)], Some(now)).0.verdict())
    }
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        self.peek_cost(key, limit, 1, now)
    }
    fn consume_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        let entry = Entry::with_cost(key, limit, cost.into()).unwrap();
        json!(self.batch(&[entry], Some(now)).0.verdict())
    }
    fn peek_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        let op = Op::Peek {
            entries: vec![Entry::with_cost(key, limit, cost.into()).unwrap()],
        };
        json!(self.verdict(op, Some(now)).0.verdict())
    }
    fn consume_many(&mut self, entries: &[Entry], now: u64) -> (Value, Option<ReleaseToken>) {
        let (verdict, release) = self.batch(entries, Some(now));
        (json!(verdict), release)
    }
    fn peek_many(&mut self, entries: &[Entry], now: u64) -> Value {
        let op = Op::Peek {
            entries: entries.to_vec(),
        };
        json!(self.verdict(op, Some(now)).0)
    }
    fn release(&mut self, token: ReleaseToken, now: u64) {
        assert_eq!(self.go(Op::Release { token }, Some(now)), Ok(Outcome::Unit));
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

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

#[test]
fn every_weight_vector_runs_on_postgres() {
    // A clock that steps back is the host's in the vectors (memory, SQLite, Redis with the host's
    // clock answer times from it); PostgreSQL reads its own clock and takes a call's time as the later
    // of it and the newest call it reads (as every PostgreSQL statement does), so no time it answers
    // exceeds the window: that case is not PostgreSQL's to run.
    let cases: Vec<_> = common::cases_in("weights")
        .into_iter()
        .filter(|c| !c.name.contains("clock that steps back"))
        .collect();
    assert!(cases.len() >= 7, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut pg = Pg::open(&format!("v{i}"));
        failures.extend(common::run_case(&mut pg, case));
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// PostgreSQL against the memory store at the same (monotonic, pinned) times: consumes, peeks,
/// releases of the call just made; every verdict equal to the last field. Calls costing 1 take the
/// usual statements, the others `{p}_take_n`, on the same rows.
#[test]
fn a_seeded_walk_answers_as_the_memory_store() {
    for seed in weight_seeds() {
        eprintln!("weighted PostgreSQL walk seed {seed} (replay: RATEWINDOW_WEIGHT_SEED={seed})");
        let mut pg = Pg::open(&format!("walk{}", seed % 1000));
        let memory = MemoryStore::new();
        let mut rng = Rng(seed.max(1));
        let windows = [
            [40, 90, 200][rng.below(3) as usize],
            [40, 90, 200][rng.below(3) as usize],
        ];
        let (mut now, mut refused, mut pending) = (1_000u64, 0, None);
        for step in 0..400 {
            let entries = weighted_entries(&mut rng, windows, true);
            let what = rng.below(6);
            if what == 1 {
                if let Some((token, in_memory)) = pending.take() {
                    pg.release(token, now);
                    memory.release(in_memory, now);
                }
            } else {
                pending = None;
            }
            let (got, want) = if what >= 2 {
                let (got, token) = pg.batch(&entries, Some(now));
                let consumed = memory.consume_many(&entries, now);
                if let (Some(token), Some(in_memory)) = (token, consumed.release) {
                    pending = Some((token, in_memory));
                }
                (got, consumed.verdict)
            } else {
                let op = Op::Peek {
                    entries: entries.clone(),
                };
                (pg.verdict(op, Some(now)).0, memory.peek_many(&entries, now))
            };
            assert_eq!(got, want, "seed {seed} step {step} at {now}: {entries:?}");
            refused += usize::from(!got.allowed);
            now += rng.below(25);
        }
        assert!(refused > 30, "seed {seed}: only {refused} refusals");
    }
}

#[test]
fn a_call_costing_n_holds_n_uses_and_its_release_removes_exactly_them() {
    let mut pg = Pg::open("held");
    let l = limit(10, 60_000);
    let (v, heavy) = pg.batch(&[Entry::with_cost("a", l, 4).unwrap()], None);
    assert_eq!((v.allowed, v.quota.remaining, pg.held("a")), (true, 6, 4));
    let (v, light) = pg.batch(&[Entry::new("a", l)], None);
    assert_eq!((v.quota.remaining, pg.held("a")), (5, 5));
    // Two entries on one key: one call costing the larger, recorded once.
    let (v, pair) = pg.batch(
        &[
            Entry::with_cost("a", l, 2).unwrap(),
            Entry::with_cost("a", limit(20, 1_000), 3).unwrap(),
        ],
        None,
    );
    assert_eq!((v.allowed, pg.held("a")), (true, 8));
    assert_eq!(
        pg.go(
            Op::Release {
                token: heavy.unwrap()
            },
            None
        ),
        Ok(Outcome::Unit)
    );
    assert_eq!(pg.held("a"), 4);
    let refused = pg.batch(&[Entry::with_cost("a", l, 7).unwrap()], None).0;
    assert_eq!((refused.allowed, refused.quota.remaining), (false, 6));
    // A cost-1 call's release removes its one use; the pair's, its three; again, nothing.
    pg.go(
        Op::Release {
            token: light.unwrap(),
        },
        None,
    )
    .unwrap();
    assert_eq!(pg.held("a"), 3);
    let pair = pair.unwrap();
    pg.go(
        Op::Release {
            token: pair.clone(),
        },
        None,
    )
    .unwrap();
    assert_eq!(pg.held("a"), 0);
    pg.go(Op::Release { token: pair }, None).unwrap();
    assert_eq!(pg.held("a"), 0);
    // The peek of a call costing n: what a consume would answer, writing nothing.
    let (v, _) = pg.verdict(
        Op::Peek {
            entries: vec![Entry::with_cost("a", l, 10).unwrap()],
        },
        None,
    );
    assert_eq!((v.allowed, v.quota.remaining, pg.held("a")), (true, 10, 0));
}

/// 8 connections x 64 calls costing 3 on one key of 100 uses: exactly 33 pass (99 uses held), and
/// releasing every admitted call gives back every use.
#[test]
fn eight_connections_admit_exactly_what_fits() {
    let owner = Pg::open("race");
    let schema = owner.schema.clone();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let schema = schema.clone();
            std::thread::spawn(move || {
                let mut pg = Pg::join(&schema);
                pg.next_id = 1_000 * (t + 1);
                (0..64)
                    .filter_map(|_| {
                        let e = [Entry::with_cost("hot", limit(100, 600_000), 3).unwrap()];
                        let (v, token) = pg.batch(&e, None);
                        v.allowed.then(|| token.unwrap())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let tokens: Vec<ReleaseToken> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(tokens.len(), 33);
    let mut pg = Pg::join(&schema);
    assert_eq!(pg.held("hot"), 99);
    for token in tokens {
        pg.go(Op::Release { token }, None).unwrap();
    }
    assert_eq!(pg.held("hot"), 0);
    drop(owner);
}

fn attempt(
    pg: &mut Pg,
    key: &str,
    max: i64,
    cost: u32,
    decay: u64,
    now: Option<u64>,
) -> (bool, i64, u64) {
    let op = Op::AttemptCost {
        key: key.to_owned(),
        max,
        decay: Window::from_ms(decay).unwrap(),
        cost,
    };
    match pg.go(op, now) {
        Ok(Outcome::Attempt {
            allowed,
            count,
            reset_after_ms,
        }) => (allowed, count, reset_after_ms),
        other => panic!("expected an attempt, got {other:?}"),
    }
}

/// The fixed window's attempt costing `cost`, against the memory store at the same pinned times:
/// random maxima (0 included), costs and decays on two keys; a cost of 0 is refused before any
/// statement.
#[test]
fn a_weighted_attempt_answers_as_the_memory_store() {
    for seed in weight_seeds() {
        eprintln!(
            "weighted PostgreSQL attempt seed {seed} (replay: RATEWINDOW_WEIGHT_SEED={seed})"
        );
        let mut pg = Pg::open(&format!("att{}", seed % 1000));
        let memory = MemoryStore::new();
        let mut rng = Rng(seed.max(1));
        let decays = [
            [50, 120][rng.below(2) as usize],
            [50, 120][rng.below(2) as usize],
        ];
        let (mut now, mut refused) = (1_000u64, 0);
        for step in 0..300 {
            let k = rng.below(2) as usize;
            let key = ["k", "j"][k];
            let max = rng.below(9) as i64;
            let cost = 1 + rng.below(4) as u32;
            let got = attempt(&mut pg, key, max, cost, decays[k], Some(now));
            let want = memory
                .attempt_cost(key, max, cost, Window::from_ms(decays[k]).unwrap(), now)
                .unwrap();
            assert_eq!(
                got, want,
                "seed {seed} step {step} at {now}: {key} max {max} cost {cost}"
            );
            refused += usize::from(!got.0);
            now += rng.below(20);
        }
        assert!(refused > 30, "seed {seed}: only {refused} refusals");
    }
    let mut pg = Pg::open("att0");
    let op = Op::AttemptCost {
        key: "k".into(),
        max: 5,
        decay: Window::from_ms(1_000).unwrap(),
        cost: 0,
    };
    assert!(matches!(pg.go(op, None), Err(CallError::Unsupported(_))));
}

/// 8 connections x 64 attempts costing 3 on one window of max 100: exactly 33 counted (99 hits).
#[test]
fn eight_connections_attempting_count_exactly_what_fits() {
    let owner = Pg::open("attrace");
    let schema = owner.schema.clone();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let schema = schema.clone();
            std::thread::spawn(move || {
                let mut pg = Pg::join(&schema);
                (0..64)
                    .filter(|_| attempt(&mut pg, "hot", 100, 3, 600_000, None).0)
                    .count()
            })
        })
        .collect();
    let counted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(counted, 33);
    let mut pg = Pg::join(&schema);
    assert_eq!(attempt(&mut pg, "hot", 100, 1, 600_000, None).1, 100);
    drop(owner);
}
