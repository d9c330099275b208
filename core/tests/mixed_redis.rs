//! Batches mixing algorithms on a real Redis (127.0.0.1:6379, or `REDIS_URL`) and a real Redis
//! Cluster (`RATEWINDOW_CLUSTER_PORTS`): a seeded walk on the server's clock equal to the memory
//! store's `consume_mixed` / `peek_mixed` field by field, the release of the sliding-log calls,
//! threads racing a batch whose global entry is the bottleneck (exactly its uses pass, all or nothing),
//! a write that lost its race read again, replies of the wrong shape, and the Cluster's one slot.

#![cfg(all(feature = "mixed", feature = "weights"))]

mod servers;
mod walk;
use walk::{cost_for, counter, gcra, seed, sliding, Rng};

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{
    CallError, Command, Fed, Next, Op, Outcome, RateOp, Redis, ReleaseToken, MIXED,
};
use ratewindow_core::redis::{RedisOptions, Reply};
use ratewindow_core::{BatchVerdict, Entry, MemoryStore, MixedEntry, Rule};
use servers::redis_connection as connection;

fn options(test: &str) -> RedisOptions {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    RedisOptions::default().with_prefix(format!("ratewindow-test:mixed:{test}:{nanos}:"))
}

fn forget(con: &mut redis::Connection, options: &RedisOptions) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", options.prefix()))
        .query(con)
        .unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(keys).query(con).unwrap();
    }
}

/// Runs a command as a host does; `clock` gets the server time (ms) of every read.
fn run_on(
    con: &mut impl redis::ConnectionLike,
    command: Command<'_>,
    clock: &Cell<u64>,
) -> Result<Fed, String> {
    let Command::Script { script, args, .. } = &command else {
        panic!("a Redis call asked for something else");
    };
    let release = script.name == "mixed" && args[0] == "r";
    let reply = servers::redis_reply(con, command)?;
    if release {
        if let Reply::Array(items) = &reply {
            let n = |r: &Reply| match r {
                Reply::Text(s) => s.parse::<u64>().unwrap(),
                Reply::Int(i) => *i as u64,
                _ => panic!("{r:?}"),
            };
            clock.set(n(&items[0]) * 1000 + n(&items[1]) / 1000);
        }
    }
    Ok(Fed::Reply(reply))
}

fn mixed(
    con: &mut impl redis::ConnectionLike,
    redis: &Redis,
    entries: &[MixedEntry],
    call_id: Option<&str>,
    clock: &Cell<u64>,
) -> Result<(BatchVerdict, Option<ReleaseToken>), CallError> {
    let (result, failures) = redis
        .mixed(entries.to_vec(), None, call_id)
        .drive(|c| run_on(con, c, clock));
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
    let mut con = connection();
    let options = options("walk");
    let redis = Redis::new(options.clone());
    let memory = MemoryStore::new();
    let rules = rules();
    let clock = Cell::new(0);
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
        let (got, release) =
            mixed(&mut con, &redis, &entries, (!peek).then_some(&id), &clock).unwrap();
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
        let sliding = entries.iter().any(|e| matches!(e.rule, Rule::Sliding(_)));
        assert_eq!(release.is_some(), got.allowed && !peek && sliding);
    }
    forget(&mut con, &options);
}

#[test]
fn a_release_gives_back_the_sliding_calls_and_keeps_the_gcra_uses() {
    let mut con = connection();
    let options = options("release");
    let redis = Redis::new(options.clone());
    let clock = Cell::new(0);
    let entries = [
        MixedEntry::new("u", gcra(2, 60_000, 2), 1),
        MixedEntry::new("all", sliding(2, 60_000), 2),
    ];
    let (v, release) = mixed(&mut con, &redis, &entries, Some("one"), &clock).unwrap();
    assert!(v.allowed);
    let token = release.expect("a release");
    let log = options.log_key("all");
    let members: u64 = redis::cmd("ZCARD").arg(&log).query(&mut con).unwrap();
    assert_eq!(members, 2, "a call costing 2 is two members");
    let ttl: i64 = redis::cmd("PTTL").arg(&log).query(&mut con).unwrap();
    assert!(
        (59_000..=60_000).contains(&ttl),
        "the log expires with its window: {ttl}"
    );
    // The global log is full: refused, and the refusal takes nothing of the GCRA key.
    let (v, _) = mixed(&mut con, &redis, &entries, Some("two"), &clock).unwrap();
    assert_eq!((v.allowed, v.blocked), (false, Some(1)));
    let (result, _) = redis
        .start(Op::Release { token })
        .drive(|c| run_on(&mut con, c, &clock));
    assert_eq!(result, Ok(Outcome::Unit));
    let members: u64 = redis::cmd("ZCARD").arg(&log).query(&mut con).unwrap();
    assert_eq!(members, 0);
    // The GCRA use stays taken: one of two left.
    let (v, _) = mixed(&mut con, &redis, &entries[..1], None, &clock).unwrap();
    assert!(v.allowed);
    let (v, _) = mixed(
        &mut con,
        &redis,
        &[MixedEntry::new("u", gcra(2, 60_000, 2), 2)],
        None,
        &clock,
    )
    .unwrap();
    assert!(!v.allowed, "the first call's GCRA use was not given back");
    forget(&mut con, &options);
}

/// 4 × 64 calls in flight at once (threads, each with its own connection), every call a user's GCRA,
/// the user's counter and one global log: exactly the global log's uses pass, and each user's keys
/// hold exactly the calls that passed (all or nothing).
#[test]
fn calls_racing_a_global_entry_let_exactly_its_uses_pass() {
    let options = options("race");
    let redis = Redis::new(options.clone());
    let global = 40u64;
    let threads = 16u64;
    let tries = 16u64;
    let allowed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (redis, allowed) = (&redis, &allowed);
            s.spawn(move || {
                let mut con = connection();
                let clock = Cell::new(0);
                for i in 0..tries {
                    let entries = [
                        MixedEntry::new(format!("user{}", t % 4), gcra(1_000, 60_000, 1_000), 1),
                        MixedEntry::new(format!("user{}", t % 4), counter(1_000, 3_600_000), 1),
                        MixedEntry::new("global", sliding(global, 3_600_000), 1),
                    ];
                    let id = format!("race-{t}-{i}");
                    let (v, _) = mixed(&mut con, redis, &entries, Some(&id), &clock).unwrap();
                    if v.allowed {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(allowed.into_inner(), global);
    let mut con = connection();
    let calls: u64 = redis::cmd("ZCOUNT")
        .arg(options.log_key("global"))
        .arg(0)
        .arg("+inf")
        .query(&mut con)
        .unwrap();
    assert_eq!(calls, global);
    let mut counted = 0;
    for u in 0..4 {
        let value: String = redis::cmd("GET")
            .arg(options.counter_key(&format!("user{u}")))
            .query(&mut con)
            .unwrap_or_default();
        let cur: u64 = value.split(':').nth(2).map_or(0, |c| c.parse().unwrap());
        counted += cur;
    }
    assert_eq!(counted, global, "each allowed call counted once per user");
    forget(&mut con, &options);
}

#[test]
fn a_write_that_lost_its_race_reads_again_and_bad_replies_are_typed() {
    let entries = vec![
        MixedEntry::new("u", gcra(2, 1_000, 2), 1),
        MixedEntry::new("all", sliding(3, 1_000), 1),
    ];
    let redis = Redis::new(RedisOptions::default());
    let read = Reply::Array(vec![
        Reply::Text("1800000000".into()),
        Reply::Text("5000".into()),
        Reply::Array(vec![Reply::Int(-2), Reply::Text("da39".into())]),
        Reply::Text(String::new()),
    ]);
    let mut call = redis.mixed(entries.clone(), None, Some("x"));
    let Next::Run(Command::Script {
        script,
        keys,
        args,
        by_sha1: true,
    }) = call.next()
    else {
        panic!("the read by SHA1")
    };
    assert_eq!(script, &MIXED);
    assert_eq!(keys, ["ratewindow:log:all", "ratewindow:gcr:u"]);
    assert_eq!(args, ["r", "1"]);
    call.fail("NOSCRIPT No matching script. Please use EVAL.");
    let Next::Run(Command::Script { by_sha1: false, .. }) = call.next() else {
        panic!("the read again, with the source")
    };
    call.feed(Fed::Reply(read.clone()));
    let Next::Run(Command::Script { args, .. }) = call.next() else {
        panic!("the write")
    };
    // 'w', one log, the id, what was found (the log's SHA1, no GCRA value), then the writes.
    assert_eq!(&args[..5], ["w", "1", "x", "da39", ""]);
    assert_eq!(
        &args[5..],
        [
            "x",
            "1800000000005",
            "1",
            "1800000001005",
            "501",
            "1800000000505"
        ]
    );
    call.feed(Fed::Reply(Reply::Int(0)));
    let Next::Run(Command::Script { args, .. }) = call.next() else {
        panic!("a lost race reads again")
    };
    assert_eq!(args, ["r", "1"]);
    call.feed(Fed::Reply(read.clone()));
    let _ = call.next();
    call.feed(Fed::Reply(Reply::Int(1)));
    let Next::Done(Ok(Outcome::Verdict {
        verdict,
        release: Some(_),
    })) = call.next()
    else {
        panic!("allowed")
    };
    assert!(verdict.allowed);
    for bad in [
        Reply::Int(1),
        Reply::Array(vec![Reply::Text("1800000000".into())]),
        Reply::Array(vec![
            Reply::Text("1800000000".into()),
            Reply::Text("5000".into()),
            Reply::Array(vec![Reply::Int(-2), Reply::Text("da39".into())]),
            Reply::Text("not a tat".into()),
        ]),
        Reply::Array(vec![
            Reply::Text("1800000000".into()),
            Reply::Text("5000".into()),
            Reply::Array(vec![
                Reply::Int(1_800_000_000_900),
                Reply::Text("da39".into()),
                Reply::Text("-5".into()),
            ]),
            Reply::Text(String::new()),
        ]),
    ] {
        let mut call = redis.mixed(entries.clone(), None, None);
        let _ = call.next();
        call.feed(Fed::Reply(bad.clone()));
        let Next::Done(Err(e)) = call.next() else {
            panic!("an error for {bad:?}")
        };
        assert_eq!(e.kind(), "reply", "{bad:?}");
    }
    // A write the client lost (it may have run): the failure, and the token that gives its
    // sliding-log calls back (Call::failed_release, which the failure guard runs).
    let mut call = redis.mixed(entries.clone(), None, Some("lost"));
    let _ = call.next();
    call.feed(Fed::Reply(read.clone()));
    let _ = call.next();
    call.fail("Connection reset");
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Store { .. }))
    ));
    let Some(ReleaseToken::Redis(token)) = call.take_failed_release() else {
        panic!("a failed write's release token")
    };
    assert_eq!(
        (token.keys, token.call_id),
        (vec!["ratewindow:log:all".to_owned()], "lost".to_owned())
    );
    // A failed read wrote nothing: no token.
    let mut call = redis.mixed(entries.clone(), None, Some("read"));
    let _ = call.next();
    call.fail("Connection reset");
    let _ = call.next();
    assert!(call.failed_release().is_none());
    let mut call = redis.mixed(entries.clone(), None, None);
    let _ = call.next();
    call.fail("CROSSSLOT Keys in request don't hash to the same slot");
    let Next::Done(Err(e)) = call.next() else {
        panic!("refused")
    };
    assert_eq!(e.kind(), "unsupported");
    let mut call = redis.mixed(entries, None, None);
    let _ = call.next();
    call.fail("Connection reset");
    assert!(matches!(
        call.next(),
        Next::Done(Err(CallError::Store { .. }))
    ));
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

/// On a Cluster a mixed batch is one script a step: its keys share a slot by a hash tag; keys across
/// slots are refused with nothing written.
#[test]
fn a_cluster_runs_a_batch_whose_keys_share_a_slot() {
    let Some(mut con) = cluster() else {
        eprintln!("skipped: RATEWINDOW_CLUSTER_PORTS is not set (scripts/test-core.sh sets it)");
        return;
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let clock = Cell::new(0);
    let tagged = RedisOptions::default()
        .with_prefix(format!("rwt-mixed-{nanos}:"))
        .with_hash_tag_before(":")
        .unwrap();
    let redis = Redis::new(tagged.clone());
    let entries = [
        MixedEntry::new("api:alice", gcra(5, 60_000, 5), 1),
        MixedEntry::new("api:alice", counter(5, 60_000), 1),
        MixedEntry::new("api", sliding(2, 60_000), 1),
    ];
    for (i, want) in [true, true, false].into_iter().enumerate() {
        let id = format!("c{i}");
        let (v, _) = mixed(&mut con, &redis, &entries, Some(&id), &clock).unwrap();
        assert_eq!(v.allowed, want, "call {i}");
    }
    let (v, _) = mixed(&mut con, &redis, &entries, None, &clock).unwrap();
    assert_eq!(v.blocked, Some(2));
    let plain = Redis::new(RedisOptions::default().with_prefix(format!("rwt-mixed-{nanos}:")));
    let spread = [
        MixedEntry::new("alice", gcra(5, 60_000, 5), 1),
        MixedEntry::new("bob", sliding(2, 60_000), 1),
    ];
    let err = mixed(&mut con, &plain, &spread, Some("s"), &clock).unwrap_err();
    assert_eq!(err.kind(), "unsupported", "{err}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(plain.options().gcra_key("alice"))
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "nothing written");
}

/// For measuring the server's cost (not a check), on `REDIS_URL`: a global log filled with
/// `RATEWINDOW_MIXED_LOG` calls (one call of that cost), then `RATEWINDOW_MIXED_CALLS` batches of
/// `RATEWINDOW_MIXED_ENTRIES` (2: a user's GCRA and the global log; 3: and the user's counter), each
/// an allowed consume (`RATEWINDOW_MIXED_MODE=consume`: the read and the write) or a peek (`peek`: the
/// read alone; `separate`: the same entries as single-algorithm calls, the reference). Run it against a redis-server of your own under callgrind, or read its `INFO
/// commandstats`: `cargo test -p ratewindow-core --test mixed_redis -- --ignored measure`.
#[test]
#[ignore]
fn measure_a_mixed_batch() {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (n, entries, log) = (
        var("RATEWINDOW_MIXED_CALLS", 1_000),
        var("RATEWINDOW_MIXED_ENTRIES", 3) as usize,
        var("RATEWINDOW_MIXED_LOG", 0),
    );
    let mode = std::env::var("RATEWINDOW_MIXED_MODE").unwrap_or_default();
    let (peek, separate) = (mode == "peek", mode == "separate");
    let mut con = connection();
    let options = options("measure");
    let redis = Redis::new(options.clone());
    let clock = Cell::new(0);
    let global = sliding(1_000_000, 3_600_000);
    if log > 0 {
        let fill = [
            MixedEntry::new("all", global, log),
            MixedEntry::new("u", gcra(1, 1, 1), 1),
        ];
        let (v, _) = mixed(&mut con, &redis, &fill, Some("fill"), &clock).unwrap();
        assert!(v.allowed);
    }
    for i in 0..n {
        let user = format!("u{}", i % 10);
        let all = [
            MixedEntry::new(user.clone(), gcra(1_000_000, 1_000, 1_000_000), 1),
            MixedEntry::new("all", global, 1),
            MixedEntry::new(user, counter(1_000_000, 3_600_000), 1),
        ];
        let id = format!("m{i}");
        if separate {
            // The same entries as single-algorithm calls (not all or nothing): the reference.
            for e in &all[..entries] {
                let call = match e.rule {
                    Rule::Gcra(gcra) => redis.rate(RateOp::GcraConsume {
                        key: e.key.clone(),
                        gcra,
                        cost: 1,
                    }),
                    Rule::Counter(counter) => redis.rate(RateOp::CounterConsume {
                        key: e.key.clone(),
                        counter,
                        cost: 1,
                    }),
                    Rule::Sliding(limit) => redis.start(Op::Consume {
                        entries: vec![Entry::new(e.key.clone(), limit)],
                        call_id: id.clone(),
                    }),
                };
                let (result, _) = call.drive(|c| run_on(&mut con, c, &clock));
                assert!(matches!(result, Ok(Outcome::Verdict { verdict, .. }) if verdict.allowed));
            }
            continue;
        }
        let (v, _) = mixed(
            &mut con,
            &redis,
            &all[..entries],
            (!peek).then_some(id.as_str()),
            &clock,
        )
        .unwrap();
        assert!(v.allowed);
    }
    forget(&mut con, &options);
}
