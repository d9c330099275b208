//! Weighted calls on the Redis sliding log (`weighted.lua`) against a real server (127.0.0.1:6379, or
//! `REDIS_URL`) and a real Redis Cluster (`RATEWINDOW_CLUSTER_PORTS`): the weight vectors at their own
//! times (the script takes a host's clock), a seeded random walk against the memory store at the same
//! times, the same walk on the server's clock through the call machine mixing costs 1 (sliding.lua)
//! and more (weighted.lua) on shared keys, exact totals under concurrency, and a cross-slot batch.

#![cfg(feature = "weights")]

mod common;
mod servers;
mod walk;
use walk::{weight_seeds, weighted_entries, Rng};

use common::Engine;
use servers::{redis_connection as connection, to_reply};

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{Call, Op, Outcome, Redis, ReleaseToken};
use ratewindow_core::redis::weighted::{self, decode_weighted};
use ratewindow_core::redis::{self as rw, RedisOptions, RedisRelease, Reply};
use ratewindow_core::{BatchVerdict, Entry, Limit, MemoryStore, Window};
use serde_json::{json, Value};

fn options(test: &str) -> RedisOptions {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    RedisOptions::default().with_prefix(format!("ratewindow-test:w:{test}:{nanos}:"))
}

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

fn run_plan(con: &mut impl redis::ConnectionLike, plan: &rw::Plan) -> Reply {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(plan.script.source)
        .arg(plan.keys.len())
        .arg(&plan.keys)
        .arg(&plan.args);
    to_reply(cmd.query::<redis::Value>(con).expect("the script"))
}

/// Deletes every key under the test's prefix (the explicit clock stretches their expiry).
fn forget(con: &mut redis::Connection, options: &RedisOptions) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", options.prefix()))
        .query(con)
        .unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(keys).query(con).unwrap();
    }
}

/// The weighted script at the vectors' times.
struct At {
    con: redis::Connection,
    options: RedisOptions,
    n: u64,
}

impl At {
    fn batch(
        &mut self,
        entries: &[Entry],
        now: u64,
        consume: bool,
    ) -> (BatchVerdict, RedisRelease) {
        self.n += 1;
        let id = format!("v{}", self.n);
        let mode = if consume { "c" } else { "p" };
        let plan = weighted::plan_weighted(mode, entries, &self.options, &id, Some(now));
        let limits: Vec<Limit> = entries.iter().map(|e| e.limit).collect();
        let reply = run_plan(&mut self.con, &plan);
        let (verdict, _) = decode_weighted(&reply, &limits, consume)
            .unwrap_or_else(|e| panic!("{e} (entries {entries:?} at {now})"));
        let max = entries.iter().map(Entry::cost).max().unwrap_or(1);
        let token = RedisRelease {
            keys: plan.keys,
            call_id: weighted::token_id(&id, max),
        };
        (verdict, token)
    }
}

impl Engine for At {
    type Release = RedisRelease;
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        self.consume_cost(key, limit, 1, now)
    }
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Value {
        self.peek_cost(key, limit, 1, now)
    }
    fn consume_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        let entry = Entry::with_cost(key, limit, cost.into()).unwrap();
        json!(self.batch(&[entry], now, true).0.verdict())
    }
    fn peek_cost(&mut self, key: &str, limit: Limit, cost: u32, now: u64) -> Value {
        let entry = Entry::with_cost(key, limit, cost.into()).unwrap();
        json!(self.batch(&[entry], now, false).0.verdict())
    }
    fn consume_many(&mut self, entries: &[Entry], now: u64) -> (Value, Option<RedisRelease>) {
        let (verdict, token) = self.batch(entries, now, true);
        (json!(verdict), verdict.allowed.then_some(token))
    }
    fn peek_many(&mut self, entries: &[Entry], now: u64) -> Value {
        json!(self.batch(entries, now, false).0)
    }
    fn release(&mut self, release: RedisRelease, _now: u64) {
        let plan = weighted::plan_release(&release).expect("a weighted token");
        let reply = run_plan(&mut self.con, &plan);
        weighted::decode_release_of(&reply, plan.keys.len()).expect("a release reply");
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

#[test]
fn every_weight_vector_runs_on_redis() {
    let cases = common::cases_in("weights");
    assert!(cases.len() >= 8, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut engine = At {
            con: connection(),
            options: options(&format!("vector{i}")),
            n: 0,
        };
        failures.extend(common::run_case(&mut engine, case));
        forget(&mut engine.con, &engine.options);
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The weighted script against the memory store at the same explicit (monotonic) times: consumes,
/// peeks and releases at once of the call just made, every verdict equal to the last field.
#[test]
fn a_seeded_walk_answers_as_the_memory_store() {
    let mut con = connection();
    for seed in weight_seeds() {
        eprintln!("weighted walk seed {seed} (replay: RATEWINDOW_WEIGHT_SEED={seed})");
        let options = options(&format!("walk{seed}"));
        let mut at = At {
            con: connection(),
            options: options.clone(),
            n: 0,
        };
        let memory = MemoryStore::new();
        let mut rng = Rng(seed.max(1));
        let windows = [
            [40, 90, 200][rng.below(3) as usize],
            [40, 90, 200][rng.below(3) as usize],
        ];
        let (mut now, mut refused, mut pending) = (1_000u64, 0, None);
        for step in 0..400 {
            let entries = weighted_entries(&mut rng, windows, false);
            let what = rng.below(6);
            if what == 1 {
                if let Some((token, in_memory)) = pending.take() {
                    at.release(token, now);
                    memory.release(in_memory, now);
                }
            } else {
                pending = None;
            }
            let consume = what >= 2;
            let (got, token) = at.batch(&entries, now, consume);
            let want = if consume {
                let consumed = memory.consume_many(&entries, now);
                if let Some(in_memory) = consumed.release {
                    pending = Some((token, in_memory));
                }
                consumed.verdict
            } else {
                memory.peek_many(&entries, now)
            };
            assert_eq!(got, want, "seed {seed} step {step} at {now}: {entries:?}");
            refused += usize::from(!got.allowed);
            now += rng.below(25);
        }
        assert!(refused > 40, "seed {seed}: only {refused} refusals");
        forget(&mut con, &options);
    }
}

fn drive(con: &mut impl redis::ConnectionLike, call: Call) -> Outcome {
    let (result, failures) = call.drive(|command| servers::redis_answer(con, command));
    assert!(failures.is_empty(), "{failures:?}");
    result.expect("the call")
}

fn consume(
    con: &mut impl redis::ConnectionLike,
    options: &RedisOptions,
    entries: &[Entry],
    id: String,
) -> (BatchVerdict, Option<ReleaseToken>) {
    let op = Op::Consume {
        entries: entries.to_vec(),
        call_id: id,
    };
    match drive(con, Redis::new(options.clone()).start(op)) {
        Outcome::Verdict { verdict, release } => (verdict, release),
        other => panic!("{other:?}"),
    }
}

fn peek(
    con: &mut impl redis::ConnectionLike,
    options: &RedisOptions,
    entries: &[Entry],
) -> BatchVerdict {
    let op = Op::Peek {
        entries: entries.to_vec(),
    };
    match drive(con, Redis::new(options.clone()).start(op)) {
        Outcome::Verdict { verdict, .. } => verdict,
        other => panic!("{other:?}"),
    }
}

/// The server's clock through the call machine: calls costing 1 (sliding.lua, with its refusal
/// markers) and more (weighted.lua) on the same keys, releases now and then. After every allowed call
/// costing `c` under `uses`, a peek finds at most `uses` held (it found at most `uses - c`, and calls only
/// leave since); a refused call costing more than 1 reports the uses that do remain, fewer than its
/// cost. Deterministic given its seed but for the server's clock.
#[test]
fn both_scripts_share_a_log_on_the_server_clock() {
    let mut con = connection();
    for seed in weight_seeds() {
        eprintln!("server-clock walk seed {seed} (replay: RATEWINDOW_WEIGHT_SEED={seed})");
        let options = options(&format!("server{seed}"));
        let mut rng = Rng(seed.max(1));
        let (mut light, mut heavy_refused) = (0, 0);
        for step in 0..200 {
            let entries: Vec<Entry> = weighted_entries(&mut rng, [90, 200], false)
                .into_iter()
                .map(|e| match rng.below(3) {
                    0 => Entry::new(e.key.clone(), e.limit),
                    _ => e,
                })
                .collect();
            let (verdict, token) = consume(&mut con, &options, &entries, format!("s{step}"));
            let cost = entries.iter().map(Entry::cost).max().unwrap();
            light += usize::from(cost == 1);
            if verdict.allowed {
                for e in &entries {
                    let all = limit(1_000, e.limit.window_ms());
                    let held = 1_000
                        - peek(&mut con, &options, &[Entry::new(e.key.clone(), all)])
                            .quota
                            .remaining;
                    assert!(
                        held <= e.limit.uses().max(cost),
                        "seed {seed} step {step}: {held} held after an allowed {entries:?}"
                    );
                }
            } else if entries.len() == 1 && cost > 1 {
                heavy_refused += 1;
                assert!(
                    verdict.quota.remaining < cost,
                    "seed {seed} step {step}: {verdict:?}"
                );
            }
            if rng.below(4) == 0 {
                if let Some(token) = token {
                    let op = Op::Release { token };
                    assert_eq!(
                        drive(&mut con, Redis::new(options.clone()).start(op)),
                        Outcome::Unit
                    );
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(rng.below(8)));
        }
        assert!(
            light > 20 && heavy_refused > 5,
            "seed {seed}: {light} light calls, {heavy_refused} heavy refusals"
        );
        forget(&mut con, &options);
    }
}

/// 8 threads x 64 calls costing 3 on one key of 100 uses in a minute: exactly 33 are admitted (99
/// uses), on the server's clock through the call machine; then a call costing 1 (sliding.lua) takes
/// the last use and one more is refused.
#[test]
fn concurrent_weighted_calls_admit_exactly_what_fits() {
    let options = options("race");
    let l = limit(100, 60_000);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let options = options.clone();
            std::thread::spawn(move || {
                let mut con = connection();
                (0..64)
                    .filter(|i| {
                        let e = [Entry::with_cost("hot", l, 3).unwrap()];
                        consume(&mut con, &options, &e, format!("r{t}-{i}"))
                            .0
                            .allowed
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(admitted, 33);
    let mut con = connection();
    let zcard: i64 = redis::cmd("ZCARD")
        .arg(options.log_key("hot"))
        .query(&mut con)
        .unwrap();
    assert_eq!(zcard, 99, "one member a use");
    let one = [Entry::new("hot", l)];
    assert!(consume(&mut con, &options, &one, "last".into()).0.allowed);
    let refused = consume(&mut con, &options, &one, "over".into()).0;
    assert!(!refused.allowed && refused.quota.remaining == 0);
    let p = peek(
        &mut con,
        &options,
        &[Entry::with_cost("hot", l, 2).unwrap()],
    );
    assert!(!p.allowed);
    forget(&mut con, &options);
}

/// A release gives back exactly the call's cost, once, even when a call costing 1 shares the key.
#[test]
fn a_release_gives_back_exactly_its_cost_once() {
    let mut con = connection();
    let options = options("release");
    let l = limit(10, 60_000);
    let heavy = [Entry::with_cost("a", l, 4).unwrap()];
    let (v, token) = consume(&mut con, &options, &heavy, "h".into());
    assert!(v.allowed && v.quota.remaining == 6);
    let (v, light) = consume(&mut con, &options, &[Entry::new("a", l)], "l".into());
    assert!(v.allowed && v.quota.remaining == 5);
    let Some(ReleaseToken::Redis(t)) = &token else {
        panic!("{token:?}")
    };
    assert_eq!(t.call_id, weighted::token_id("h", 4));
    for _ in 0..2 {
        let op = Op::Release {
            token: token.clone().unwrap(),
        };
        assert_eq!(
            drive(&mut con, Redis::new(options.clone()).start(op)),
            Outcome::Unit
        );
        assert_eq!(
            peek(&mut con, &options, &[Entry::new("a", l)])
                .quota
                .remaining,
            9
        );
    }
    let op = Op::Release {
        token: light.unwrap(),
    };
    assert_eq!(
        drive(&mut con, Redis::new(options.clone()).start(op)),
        Outcome::Unit
    );
    assert_eq!(
        peek(&mut con, &options, &[Entry::new("a", l)])
            .quota
            .remaining,
        10
    );
    forget(&mut con, &options);
}

fn cluster() -> Option<redis::cluster::ClusterConnection> {
    let ports = std::env::var("RATEWINDOW_CLUSTER_PORTS").ok()?;
    let nodes: Vec<String> = ports
        .split_whitespace()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let client = redis::cluster::ClusterClient::new(nodes).expect("cluster nodes");
    Some(client.get_connection().expect("the Redis Cluster"))
}

/// A weighted batch across slots is counted key by key, given back on a refusal (exactly its cost),
/// and released key by key; with a hash tag it is one script.
#[test]
fn a_cluster_counts_a_weighted_cross_slot_batch_key_by_key() {
    let Some(mut con) = cluster() else {
        eprintln!("skipped: RATEWINDOW_CLUSTER_PORTS is not set (scripts/test-core.sh sets it)");
        return;
    };
    let options = options("cluster");
    let batch = [
        Entry::with_cost("alice", limit(5, 60_000), 3).unwrap(),
        Entry::with_cost("bob", limit(4, 60_000), 2).unwrap(),
    ];
    let keys: Vec<String> = ["alice", "bob"]
        .iter()
        .map(|k| options.log_key(k))
        .collect();
    assert_ne!(rw::key_slot(&keys[0]), rw::key_slot(&keys[1]));
    let zcard = |con: &mut redis::cluster::ClusterConnection, key: &str| -> i64 {
        redis::cmd("ZCARD").arg(key).query(con).unwrap()
    };
    let (v, token) = consume(&mut con, &options, &batch, "c1".into());
    assert!(v.allowed);
    assert_eq!((v.quota.limit, v.quota.remaining), (5, 2));
    assert_eq!(
        (zcard(&mut con, &keys[0]), zcard(&mut con, &keys[1])),
        (3, 2)
    );
    // alice has 2 left: refused (alice was counted first? no: alice refuses, bob is not counted).
    let refused = consume(&mut con, &options, &batch, "c2".into()).0;
    assert_eq!((refused.allowed, refused.blocked), (false, Some(0)));
    assert_eq!(refused.quota.remaining, 2);
    assert_eq!(
        (zcard(&mut con, &keys[0]), zcard(&mut con, &keys[1])),
        (3, 2)
    );
    // Bob refuses after alice is counted: alice's 2 given back exactly.
    let second = [
        Entry::with_cost("alice", limit(5, 60_000), 2).unwrap(),
        Entry::with_cost("bob", limit(4, 60_000), 3).unwrap(),
    ];
    let refused = consume(&mut con, &options, &second, "c3".into()).0;
    assert_eq!((refused.allowed, refused.blocked), (false, Some(1)));
    assert_eq!(
        (zcard(&mut con, &keys[0]), zcard(&mut con, &keys[1])),
        (3, 2)
    );
    let p = peek(&mut con, &options, &second);
    assert_eq!(p.blocked, Some(1));
    let op = Op::Release {
        token: token.unwrap(),
    };
    assert_eq!(
        drive(&mut con, Redis::new(options.clone()).start(op)),
        Outcome::Unit
    );
    assert_eq!(
        (zcard(&mut con, &keys[0]), zcard(&mut con, &keys[1])),
        (0, 0)
    );
    // One slot by a hash tag: one script, the same counts.
    let tagged = options.clone().with_hash_tag_before(":").unwrap();
    let batch = [
        Entry::with_cost("u1:a", limit(5, 60_000), 3).unwrap(),
        Entry::with_cost("u1:b", limit(4, 60_000), 4).unwrap(),
    ];
    let (v, _) = consume(&mut con, &tagged, &batch, "t1".into());
    assert_eq!((v.allowed, v.quota.remaining), (true, 0));
    assert!(!consume(&mut con, &tagged, &batch, "t2".into()).0.allowed);
    for k in ["u1:a", "u1:b"] {
        let _: i64 = redis::cmd("DEL")
            .arg(tagged.log_key(k))
            .query(&mut con)
            .unwrap();
    }
}
