//! GCRA and the sliding-window counter on a real Redis (127.0.0.1:6379, or `REDIS_URL`) and a real
//! three-master Redis Cluster (`RATEWINDOW_CLUSTER_PORTS`, started by `scripts/test-core.sh`): every
//! GCRA and counter vector, a random walk against the memory store, exactly-once under concurrency,
//! and the server's clock.
#![cfg(feature = "rates")]

mod rates;
mod servers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{Call, CallError, Command, Fed, Outcome, RateOp, Redis};
use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::Gcra;
use ratewindow_core::redis::{RedisOptions, Reply};
use ratewindow_core::{BatchVerdict, Limit, MemoryStore};
use servers::redis_connection as connection;

/// A prefix of this run's own, so runs never see each other's keys.
fn options(test: &str) -> RedisOptions {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    RedisOptions::default().with_prefix(format!("ratewindow-test:{test}:{nanos}:"))
}

/// Runs a machine's command as a host does: EVALSHA or EVAL, the server's error as its message.
fn run_on(con: &mut impl redis::ConnectionLike, command: Command<'_>) -> Result<Fed, String> {
    servers::redis_answer(con, command)
}

fn drive(con: &mut impl redis::ConnectionLike, call: Call) -> Result<Outcome, CallError> {
    let (result, failures) = call.drive(|command| run_on(con, command));
    assert!(failures.is_empty());
    result
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

/// Removes the keys under `options`' prefix (keys timed by a host's clock far from the server's
/// live long on the server: see the scripts).
fn forget(con: &mut redis::Connection, options: &RedisOptions) {
    let pattern = format!("{}*", options.prefix());
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(con).unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(keys).query(con).unwrap();
    }
}

#[test]
fn every_gcra_and_counter_vector_runs_on_redis() {
    let mut con = connection();
    let base = options("vectors");
    let mut used = Vec::new();
    let (ran, skipped) = rates::run_vectors(|case, op, now| {
        // A fresh store per case: a prefix per case.
        let options = base
            .clone()
            .with_prefix(format!("{}{case}:", base.prefix()));
        if used.last() != Some(&case) {
            used.push(case);
        }
        drive(&mut con, Redis::new(options).rate_at(op, now))
    });
    forget(&mut con, &base);
    assert!(ran >= 10, "only {ran} cases ran ({skipped} skipped)");
    eprintln!("{ran} cases ran, {skipped} skipped (mixed batches)");
}

#[test]
fn a_random_walk_answers_as_the_memory_store() {
    let mut con = connection();
    for seed in [1, 0x9e37_79b9, 0xdead_beef] {
        let options = options("walk");
        let memory = MemoryStore::new();
        let (mut refused, mut allowed) = (0, 0);
        for (step, (op, now)) in rates::walk(600, seed, 60).into_iter().enumerate() {
            let want = rates::memory(&memory, &op, now);
            let got = rates::spelled(drive(
                &mut con,
                Redis::new(options.clone()).rate_at(op.clone(), now),
            ));
            assert_eq!(got, want, "seed {seed} step {step}: {op:?} at {now}");
            match got["allowed"].as_bool() {
                Some(true) => allowed += 1,
                Some(false) => refused += 1,
                None => {}
            }
        }
        forget(&mut con, &options);
        assert!(
            refused > 50 && allowed > 50,
            "{refused} refused, {allowed} allowed"
        );
    }
}

#[test]
fn the_server_clock_times_a_bucket_and_its_key_expires_when_full() {
    let mut con = connection();
    let options = options("clock");
    let redis = Redis::new(options.clone());
    // 10 a second, a burst of 5.
    let gcra = Gcra::new(10, 1_000, 5).unwrap();
    let consume = |cost| RateOp::GcraConsume {
        key: "k".into(),
        gcra,
        cost,
    };
    let first = verdict(drive(&mut con, redis.rate(consume(3))));
    assert!(first.allowed);
    assert_eq!(first.quota.remaining, 2);
    assert_eq!(first.quota.reset_after_ms, 300);
    let second = verdict(drive(&mut con, redis.rate(consume(3))));
    assert!(!second.allowed);
    assert!((1..=100).contains(&second.retry_after_ms), "{second:?}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(options.gcra_key("k"))
        .query(&mut con)
        .unwrap();
    assert!(
        (1..=500).contains(&ttl),
        "the key lives until the bucket is full at most (ceil(tau) = 500 ms): {ttl}"
    );
    let peek = verdict(drive(
        &mut con,
        redis.rate(RateOp::GcraPeek {
            key: "k".into(),
            gcra,
            cost: 1,
        }),
    ));
    assert!(peek.allowed);
    assert_eq!(
        drive(&mut con, redis.rate(RateOp::GcraReset { key: "k".into() })),
        Ok(Outcome::Unit)
    );
    let after = verdict(drive(&mut con, redis.rate(consume(5))));
    assert!(after.allowed && after.quota.remaining == 0);

    // The counter: 4 an hour.
    let counter = Counter::new(Limit::new(4, 3_600_000).unwrap()).unwrap();
    let take = |cost| RateOp::CounterConsume {
        key: "k".into(),
        counter,
        cost,
    };
    assert!(verdict(drive(&mut con, redis.rate(take(4)))).allowed);
    let refused = verdict(drive(&mut con, redis.rate(take(1))));
    assert!(!refused.allowed && refused.retry_after_ms > 0);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(options.counter_key("k"))
        .query(&mut con)
        .unwrap();
    assert!(
        ttl > 3_600_000 && ttl <= 7_200_000,
        "two windows at most: {ttl}"
    );
    drive(
        &mut con,
        redis.rate(RateOp::CounterReset { key: "k".into() }),
    )
    .unwrap();
    assert!(verdict(drive(&mut con, redis.rate(take(4)))).allowed);
    forget(&mut con, &options);
}

/// A limit whose times are whole ms sends no `uses`; a key holding a fraction (counted under a
/// limit with fractions, the same `uses`) makes the script ask for them, and the call runs again.
#[test]
fn a_fraction_found_by_a_whole_limit_is_counted_exactly() {
    let mut con = connection();
    let options = options("fraction");
    let redis = Redis::new(options.clone());
    // 3 a second: T = 333 1/3 ms; then 3 in 3 s: T = 1,000 ms, tau 3,000 ms, no fractions.
    let thirds = Gcra::new(3, 1_000, 3).unwrap();
    let whole = Gcra::new(3, 3_000, 3).unwrap();
    let take = |gcra, cost| RateOp::GcraConsume {
        key: "k".into(),
        gcra,
        cost,
    };
    assert!(verdict(drive(&mut con, redis.rate(take(thirds, 1)))).allowed);
    let key = options.gcra_key("k");
    let text: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert!(text.len() > 17 && text.ends_with(":1:3"), "{text}");
    let mut sent = Vec::new();
    let (result, _) = redis.rate(take(whole, 1)).drive(|command| {
        if let Command::Script { args, .. } = &command {
            sent.push(args.len());
        }
        run_on(&mut con, command)
    });
    assert_eq!(sent, [3, 6], "asked for uses once");
    let v = verdict(result);
    // 333 1/3 + 1,000 ms of debt, within tau: allowed, 1 use left (1 of the 3 comes back by
    // 1,333 1/3 ms, reset when all are back).
    assert!(v.allowed && v.quota.remaining == 1, "{v:?}");
    assert!((1_200..=1_334).contains(&v.quota.reset_after_ms), "{v:?}");
    let text: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert!(text.len() > 17 && text.ends_with(":1:3"), "{text}");
    // Under other uses the fraction rounds up: 4 in 4 s (T = 1,000) finds 1,334 ms of debt.
    let other = Gcra::new(4, 4_000, 4).unwrap();
    let v = verdict(drive(
        &mut con,
        redis.rate(RateOp::GcraPeek {
            key: "k".into(),
            gcra: other,
            cost: 1,
        }),
    ));
    assert!(v.allowed && v.quota.remaining == 2, "{v:?}");
    forget(&mut con, &options);
}

/// `Redis::rate_answered` (a host that keeps the planned command) decides each first reply as the
/// call does: every GCRA and counter shape on the server's clock (a full bucket, a TAT ahead, a
/// refusal, a peek, a fraction, a reset), and leaves the script's asking (`-1`) and a reply of
/// another shape to the call.
#[test]
fn a_first_reply_is_decided_at_once_as_the_call_decides_it() {
    let mut con = connection();
    let options = options("answered");
    let redis = Redis::new(options.clone());
    let five = Gcra::new(5, 60_000, 5).unwrap();
    let thirds = Gcra::new(3, 1_000, 3).unwrap();
    let whole = Gcra::new(3, 3_000, 3).unwrap();
    let counter = Counter::new(Limit::new(2, 3_600_000).unwrap()).unwrap();
    let gcra = |key: &str, gcra, cost| RateOp::GcraConsume {
        key: key.into(),
        gcra,
        cost,
    };
    let mut ops = vec![gcra("a", five, 1), gcra("a", five, 3), gcra("a", five, 2)];
    ops.push(RateOp::GcraPeek {
        key: "a".into(),
        gcra: five,
        cost: 1,
    });
    ops.push(RateOp::GcraPeek {
        key: "b".into(),
        gcra: five,
        cost: 5,
    });
    ops.extend([
        gcra("t", thirds, 1),
        gcra("t", thirds, 1),
        gcra("t", whole, 1),
    ]);
    ops.push(RateOp::GcraReset { key: "a".into() });
    ops.extend((0..3).map(|_| RateOp::CounterConsume {
        key: "c".into(),
        counter,
        cost: 1,
    }));
    ops.push(RateOp::CounterReset { key: "c".into() });
    let (mut decided, mut asked) = (0, 0);
    for op in ops {
        let mut first = None;
        let (result, _) = redis.rate(op.clone()).drive(|command| {
            let fed = run_on(&mut con, command);
            // The first reply the script gave: on a server that has not loaded the script yet (or
            // flushed it), the EVALSHA answers NOSCRIPT and the call sends the source.
            if let (None, Ok(reply)) = (&first, &fed) {
                first = Some(reply.clone());
            }
            fed
        });
        let Some(Fed::Reply(reply)) = first else {
            panic!("no reply");
        };
        match redis.rate_answered(&op, &reply) {
            Some(outcome) => {
                assert_eq!(Ok(outcome), result, "{op:?} {reply:?}");
                decided += 1;
            }
            None => {
                assert_eq!(reply, Reply::Int(-1), "{op:?}");
                assert!(result.is_ok());
                asked += 1;
            }
        }
    }
    // The key with a fraction asks unless it expired first (a second and more between calls).
    assert!(decided + asked == 13 && asked <= 1, "{decided} {asked}");
    let other = RateOp::GcraPeek {
        key: "a".into(),
        gcra: five,
        cost: 1,
    };
    for reply in [Reply::Text("2 1 2 3".into()), Reply::Int(-5), Reply::Nil] {
        assert_eq!(redis.rate_answered(&other, &reply), None, "{reply:?}");
    }
    forget(&mut con, &options);
}

/// 8 threads x 64 calls at a limit of 64 (costs 1 to 3): the uses taken add up to exactly the
/// limit, on the server's clock (GCRA: 64 an hour) and at one moment (the counter).
#[test]
fn exactly_the_limit_is_taken_under_concurrency() {
    let options = options("concurrency");
    let gcra = Gcra::new(64, 3_600_000, 64).unwrap();
    let counter = Counter::new(Limit::new(64, 3_600_000).unwrap()).unwrap();
    let now = 1_800_000_000_000 + 1_000; // inside one counter window
    for algorithm in ["gcra", "counter"] {
        let taken = AtomicU64::new(0);
        let refused = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (options, taken, refused) = (&options, &taken, &refused);
                s.spawn(move || {
                    let mut con = connection();
                    let redis = Redis::new(options.clone());
                    for i in 0..64u64 {
                        let cost = 1 + (t + i) % 3;
                        let call = if algorithm == "gcra" {
                            redis.rate(RateOp::GcraConsume {
                                key: "hot".into(),
                                gcra,
                                cost,
                            })
                        } else {
                            redis.rate_at(
                                RateOp::CounterConsume {
                                    key: "hot".into(),
                                    counter,
                                    cost,
                                },
                                now,
                            )
                        };
                        if verdict(drive(&mut con, call)).allowed {
                            taken.fetch_add(cost, Ordering::Relaxed);
                        } else {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = taken.into_inner();
        // Refusals of cost 2 or 3 may leave 1 or 2 uses; a last single use then takes them.
        assert!(
            (62..=64).contains(&taken),
            "{algorithm}: {taken} uses taken"
        );
        let mut con = connection();
        let redis = Redis::new(options.clone());
        let peek = if algorithm == "gcra" {
            redis.rate(RateOp::GcraPeek {
                key: "hot".into(),
                gcra,
                cost: 1,
            })
        } else {
            redis.rate_at(
                RateOp::CounterPeek {
                    key: "hot".into(),
                    counter,
                    cost: 1,
                },
                now,
            )
        };
        let left = verdict(drive(&mut con, peek)).quota.remaining as u64;
        assert_eq!(taken + left, 64, "{algorithm}: {taken} taken, {left} left");
        assert!(refused.into_inner() > 300);
    }
    forget(&mut connection(), &options);
}

fn cluster() -> Option<redis::cluster::ClusterConnection> {
    let ports = std::env::var("RATEWINDOW_CLUSTER_PORTS").ok()?;
    let nodes: Vec<String> = ports
        .split_whitespace()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let client = redis::cluster::ClusterClient::new(nodes).expect("cluster nodes");
    Some(
        client
            .get_connection()
            .expect("the Redis Cluster of RATEWINDOW_CLUSTER_PORTS"),
    )
}

/// One key, one slot: keys spread over every master count as on one server.
#[test]
fn a_cluster_runs_every_key_on_its_own_slot() {
    let Some(mut con) = cluster() else {
        eprintln!("skipped: RATEWINDOW_CLUSTER_PORTS is not set (scripts/test-core.sh sets it)");
        return;
    };
    let options = options("cluster");
    let redis = Redis::new(options.clone());
    let memory = MemoryStore::new();
    let gcra = Gcra::new(3, 60_000, 3).unwrap();
    let counter = Counter::new(Limit::new(3, 60_000).unwrap()).unwrap();
    let now = 1_800_000_000_000;
    let mut slots = std::collections::HashSet::new();
    for i in 0..30 {
        let key = format!("user{i}");
        slots.insert(ratewindow_core::redis::key_slot(&options.gcra_key(&key)) * 3 / 16384);
        for cost in [1, 2, 1] {
            for op in [
                RateOp::GcraConsume {
                    key: key.clone(),
                    gcra,
                    cost,
                },
                RateOp::CounterConsume {
                    key: key.clone(),
                    counter,
                    cost,
                },
            ] {
                let want = rates::memory(&memory, &op, now);
                let got = rates::spelled(drive(&mut con, redis.rate_at(op, now)));
                assert_eq!(got, want);
            }
        }
    }
    assert_eq!(slots.len(), 3, "keys on every master");
    // On the cluster's own clock too.
    let v = verdict(drive(
        &mut con,
        redis.rate(RateOp::GcraConsume {
            key: "clocked".into(),
            gcra,
            cost: 3,
        }),
    ));
    assert!(v.allowed && v.quota.remaining == 0);
    let v = verdict(drive(
        &mut con,
        redis.rate(RateOp::GcraConsume {
            key: "clocked".into(),
            gcra,
            cost: 1,
        }),
    ));
    assert!(!v.allowed && v.retry_after_ms > 19_000);
}

/// The walk on the server's own clock (`TIME`, real time passing, keys expiring on the server): the
/// memory store is fed the clock each reply carries, and must agree to the last field.
#[test]
fn a_walk_on_the_server_clock_answers_as_the_memory_store() {
    let mut con = connection();
    let options = options("server-clock");
    let redis = Redis::new(options.clone());
    let memory = MemoryStore::new();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut refused, mut steps) = (0, 0);
    // The walk's ops, their times ignored: windows of 40 to 300 ms, so real time crosses them.
    for (op, _) in rates::walk(300, 0xfeed, 1) {
        let op = match op {
            RateOp::GcraConsume { key, gcra, cost } | RateOp::GcraPeek { key, gcra, cost }
                if gcra.window_ms() > 300 =>
            {
                let g = Gcra::new(gcra.uses() as u64, 40 + next(260), gcra.burst() as u64).unwrap();
                RateOp::GcraConsume { key, gcra: g, cost }
            }
            RateOp::CounterConsume { key, counter, cost } if counter.limit().window_ms() > 300 => {
                let l = Limit::new(counter.limit().uses() as u64, 40 + next(260)).unwrap();
                RateOp::CounterConsume {
                    key,
                    counter: Counter::new(l).unwrap(),
                    cost,
                }
            }
            other => other,
        };
        let mut now = None;
        let reset = matches!(op, RateOp::GcraReset { .. } | RateOp::CounterReset { .. });
        let (result, _) = redis.rate(op.clone()).drive(|command| {
            let fed = run_on(&mut con, command);
            now = match &fed {
                _ if reset => None,
                // GCRA: a full bucket's now, or 'allowed TAT sec usec'.
                Ok(Fed::Reply(Reply::Int(n))) if *n >= 0 => Some(*n as u64),
                Ok(Fed::Reply(Reply::Text(text))) => {
                    let f: Vec<u64> = text
                        .split(' ')
                        .skip(2)
                        .map(|x| x.parse().unwrap())
                        .collect();
                    Some(f[0] * 1_000 + f[1] / 1_000)
                }
                // The counter: {allowed, now, ...}.
                Ok(Fed::Reply(Reply::Array(items))) => match items.get(1) {
                    Some(Reply::Int(n)) => Some(*n as u64),
                    _ => None,
                },
                _ => None,
            };
            fed
        });
        let got = rates::spelled(result);
        if let Some(now) = now {
            let want = rates::memory(&memory, &op, now);
            assert_eq!(got, want, "{op:?} at {now}");
            refused += usize::from(got["allowed"] == false);
            steps += 1;
        } else {
            // A reset answers no clock.
            assert_eq!(rates::memory(&memory, &op, 0), serde_json::Value::Null);
        }
        std::thread::sleep(std::time::Duration::from_millis(next(15)));
    }
    forget(&mut con, &options);
    assert!(
        steps > 200 && refused > 20,
        "{steps} steps, {refused} refused"
    );
}
