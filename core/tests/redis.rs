//! The Redis call machine against a real server (127.0.0.1:6379, or `REDIS_URL`) and a real
//! three-master Redis Cluster (`RATEWINDOW_CLUSTER_PORTS`, started by `scripts/test-core.sh`): the
//! machine's commands run as a host runs them, and its outcomes are checked. `scripts/test-core.sh`
//! starts what is not running.

mod servers;
use servers::{redis_connection as connection, to_reply};

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::call::{
    Call, CallError, Command, Fed, GiveBackFailure, Op, Outcome, Redis, ReleaseToken, WindowQuery,
};
use ratewindow_core::redis::{self as rw, RedisOptions, RedisRelease, Reply};
use ratewindow_core::{BatchVerdict, Entry, Limit, Window, MAX_WINDOW_MS};

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

fn drive(
    con: &mut impl redis::ConnectionLike,
    call: Call,
) -> (Result<Outcome, CallError>, Vec<GiveBackFailure>) {
    call.drive(|command| run_on(con, command))
}

fn start(options: &RedisOptions, op: Op) -> Call {
    Redis::new(options.clone()).start(op)
}

static ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn consume(
    con: &mut impl redis::ConnectionLike,
    options: &RedisOptions,
    entries: &[Entry],
) -> (BatchVerdict, Option<ReleaseToken>) {
    let call_id = format!(
        "call-{}",
        ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let op = Op::Consume {
        entries: entries.to_vec(),
        call_id,
    };
    match drive(con, start(options, op)) {
        (Ok(Outcome::Verdict { verdict, release }), failures) if failures.is_empty() => {
            (verdict, release)
        }
        other => panic!("{other:?}"),
    }
}

fn peek(
    con: &mut impl redis::ConnectionLike,
    options: &RedisOptions,
    entries: &[Entry],
) -> BatchVerdict {
    match drive(
        con,
        start(
            options,
            Op::Peek {
                entries: entries.to_vec(),
            },
        ),
    )
    .0
    {
        Ok(Outcome::Verdict {
            verdict,
            release: None,
        }) => verdict,
        other => panic!("{other:?}"),
    }
}

fn op(con: &mut impl redis::ConnectionLike, options: &RedisOptions, op: Op) -> Outcome {
    drive(con, start(options, op)).0.expect("the call")
}

fn pttl(con: &mut impl redis::ConnectionLike, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

fn limit(uses: u64, window_ms: u64) -> Limit {
    Limit::new(uses, window_ms).unwrap()
}

#[test]
fn the_sha1_is_what_the_server_computes() {
    let mut con = connection();
    for script in [&rw::SLIDING, &rw::FIXED] {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.source)
            .query(&mut con)
            .unwrap();
        assert_eq!(sha, script.sha1, "{}", script.name);
    }
}

#[test]
fn a_key_allows_uses_calls_in_its_window_then_refuses_with_the_server_clock_wait() {
    let (mut con, options) = (connection(), options("uses"));
    let entries = [Entry::new("k", limit(3, 60_000))];
    for _ in 0..3 {
        assert!(
            consume(&mut con, &options, &entries).0.allowed,
            "calls in the same millisecond count apart"
        );
    }
    let refused = consume(&mut con, &options, &entries).0;
    assert!(!refused.allowed);
    assert_eq!(refused.blocked, Some(0));
    assert!(
        refused.retry_after_ms > 59_000 && refused.retry_after_ms <= 60_000,
        "{refused:?}"
    );
    let again = consume(&mut con, &options, &entries).0;
    assert_eq!(
        again.retry_timestamp, refused.retry_timestamp,
        "one wait, one retry_timestamp"
    );
}

#[test]
fn the_window_slides() {
    let (mut con, options) = (connection(), options("slides"));
    let entries = [Entry::new("k", limit(1, 300))];
    assert!(consume(&mut con, &options, &entries).0.allowed);
    assert!(!consume(&mut con, &options, &entries).0.allowed);
    std::thread::sleep(std::time::Duration::from_millis(320));
    assert!(consume(&mut con, &options, &entries).0.allowed);
}

#[test]
fn a_batch_is_all_or_nothing_and_names_the_longest_wait() {
    let (mut con, options) = (connection(), options("batch"));
    assert!(
        consume(&mut con, &options, &[Entry::new("b", limit(1, 60_000))])
            .0
            .allowed
    );
    assert!(
        consume(&mut con, &options, &[Entry::new("c", limit(1, 120_000))])
            .0
            .allowed
    );
    let batch = [
        Entry::new("a", limit(1, 60_000)),
        Entry::new("b", limit(1, 60_000)),
        Entry::new("c", limit(1, 120_000)),
    ];
    let refused = consume(&mut con, &options, &batch).0;
    assert_eq!(refused.blocked, Some(2));
    assert!(refused.retry_after_ms > 110_000);
    let a: i64 = redis::cmd("EXISTS")
        .arg(options.log_key("a"))
        .query(&mut con)
        .unwrap();
    assert_eq!(a, 0, "a refused batch records nothing, creates nothing");
    // A key named twice records the call once.
    let twice = [
        Entry::new("d", limit(2, 60_000)),
        Entry::new("d", limit(5, 60_000)),
    ];
    assert!(consume(&mut con, &options, &twice).0.allowed);
    let members: i64 = redis::cmd("ZCARD")
        .arg(options.log_key("d"))
        .query(&mut con)
        .unwrap();
    assert_eq!(members, 1);
}

#[test]
fn a_peek_answers_like_consume_and_writes_nothing() {
    let (mut con, options) = (connection(), options("peek"));
    let entries = [Entry::new("k", limit(1, 60_000))];
    assert!(peek(&mut con, &options, &entries).allowed);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(options.log_key("k"))
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "a peek creates no key");
    assert!(consume(&mut con, &options, &entries).0.allowed);
    let ttl_before = pttl(&mut con, &options.log_key("k"));
    let peeked = peek(&mut con, &options, &entries);
    let consumed = consume(&mut con, &options, &entries).0;
    assert!(!peeked.allowed && !consumed.allowed);
    assert_eq!(peeked.retry_timestamp, consumed.retry_timestamp);
    assert!(
        pttl(&mut con, &options.log_key("k")) <= ttl_before,
        "a peek changes no expiry"
    );
}

#[test]
fn every_key_written_expires_within_its_window() {
    let (mut con, options) = (connection(), options("ttl"));
    let batch = [
        Entry::new("short", limit(5, 2_000)),
        Entry::new("long", limit(5, 60_000)),
        Entry::new("huge", limit(5, MAX_WINDOW_MS)),
    ];
    assert!(consume(&mut con, &options, &batch).0.allowed);
    for (key, window) in [
        ("short", 2_000),
        ("long", 60_000),
        ("huge", MAX_WINDOW_MS as i64),
    ] {
        let ttl = pttl(&mut con, &options.log_key(key));
        assert!(
            ttl > 0 && ttl <= window,
            "{key}: PTTL {ttl} not in (0, {window}]"
        );
    }
}

#[test]
fn release_gives_back_exactly_its_own_call_once() {
    let (mut con, options) = (connection(), options("release"));
    let entries = [
        Entry::new("k", limit(2, 60_000)),
        Entry::new("j", limit(2, 60_000)),
    ];
    let (_, _first) = consume(&mut con, &options, &entries);
    let (second, release) = consume(&mut con, &options, &entries);
    assert!(second.allowed);
    assert!(!consume(&mut con, &options, &entries).0.allowed);
    let token = release.expect("allowed");
    let members = |con: &mut redis::Connection| -> i64 {
        redis::cmd("ZCARD")
            .arg(options.log_key("k"))
            .query(con)
            .unwrap()
    };
    assert_eq!(members(&mut con), 2);
    assert_eq!(
        op(
            &mut con,
            &options,
            Op::Release {
                token: token.clone()
            }
        ),
        Outcome::Unit
    );
    assert_eq!(members(&mut con), 1);
    assert_eq!(
        op(&mut con, &options, Op::Release { token }),
        Outcome::Unit,
        "idempotent"
    );
    assert_eq!(members(&mut con), 1);
    assert!(consume(&mut con, &options, &entries).0.allowed);
    assert!(
        !consume(&mut con, &options, &entries).0.allowed,
        "only its own call was given back"
    );
}

#[test]
fn the_fixed_window_opens_at_the_first_hit_and_is_not_moved() {
    let (mut con, options) = (connection(), options("fixed"));
    let decay = Window::from_ms(60_000).unwrap();
    let hit = |con: &mut redis::Connection, key: &str, decay: Window, amount: i64| match op(
        con,
        &options,
        Op::Hit {
            key: key.into(),
            decay,
            amount,
        },
    ) {
        Outcome::Hit {
            count,
            reset_after_ms,
        } => (count, reset_after_ms),
        other => panic!("{other:?}"),
    };
    let read = |con: &mut redis::Connection, query: WindowQuery| {
        op(
            con,
            &options,
            Op::Read {
                key: "k".into(),
                query,
            },
        )
    };
    assert_eq!(read(&mut con, WindowQuery::Attempts), Outcome::Int(0));
    assert_eq!(read(&mut con, WindowQuery::AvailableInMs), Outcome::Int(0));
    assert_eq!(hit(&mut con, "k", decay, 2), (2, 60_000));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (count, left) = hit(&mut con, "k", decay, -1);
    assert_eq!(count, 1);
    assert!(left < 60_000, "hits inside the window do not move it");
    assert_eq!(
        read(&mut con, WindowQuery::TooManyAttempts { max: 1 }),
        Outcome::Bool(true)
    );
    assert_eq!(
        read(&mut con, WindowQuery::TooManyAttempts { max: 2 }),
        Outcome::Bool(false)
    );
    assert_eq!(
        read(&mut con, WindowQuery::Remaining { max: 5 }),
        Outcome::Int(4)
    );
    assert_eq!(read(&mut con, WindowQuery::AvailableIn), Outcome::Int(60));
    assert_eq!(
        op(&mut con, &options, Op::ResetAttempts { key: "k".into() }),
        Outcome::Unit
    );
    assert_eq!(read(&mut con, WindowQuery::Attempts), Outcome::Int(0));
    let Outcome::Int(after_reset) = read(&mut con, WindowQuery::AvailableInMs) else {
        panic!()
    };
    assert!(
        after_reset > 0 && after_reset as u64 <= left,
        "reset keeps the window"
    );
    assert_eq!(
        op(&mut con, &options, Op::Clear { key: "k".into() }),
        Outcome::Unit
    );
    assert_eq!(read(&mut con, WindowQuery::AvailableInMs), Outcome::Int(0));
    let short = Window::from_ms(100).unwrap();
    hit(&mut con, "s", short, 5);
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(
        hit(&mut con, "s", short, 1).0,
        1,
        "a new window counts from zero"
    );
}

#[test]
fn attempt_counts_exactly_max_under_concurrency() {
    let options = options("attempt");
    let decay = Window::from_ms(60_000).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let options = options.clone();
            std::thread::spawn(move || {
                let mut con = connection();
                (0..20)
                    .filter(|_| {
                        let attempt = Op::Attempt {
                            key: "a".into(),
                            max: 5,
                            decay,
                        };
                        match op(&mut con, &options, attempt) {
                            Outcome::Attempt {
                                allowed,
                                count,
                                reset_after_ms,
                            } => {
                                assert!(
                                    count <= 5 && reset_after_ms > 0 && reset_after_ms <= 60_000
                                );
                                allowed
                            }
                            other => panic!("{other:?}"),
                        }
                    })
                    .count()
            })
        })
        .collect();
    let counted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(counted, 5);
    let mut con = connection();
    let zero = Op::Attempt {
        key: "z".into(),
        max: 0,
        decay,
    };
    assert_eq!(
        op(&mut con, &options, zero),
        Outcome::Attempt {
            allowed: false,
            count: 0,
            reset_after_ms: 0
        }
    );
}

/// Every reply of `attempt` is an array of integers (the window opened, a hit counted, a refusal, a
/// max of 0): what a host hands the core as numbers, its cheapest reply to cross (Node's call record),
/// never a count read by `GET` or the decay as sent as text.
#[test]
fn attempt_replies_are_integers_only() {
    let options = options("attempt-integers");
    let mut con = connection();
    let mut replies = Vec::new();
    for max in [2, 2, 2, 0] {
        let call = start(
            &options,
            Op::Attempt {
                key: "k".into(),
                max,
                decay: Window::from_ms(60_000).unwrap(),
            },
        );
        let (outcome, _) = call.drive(|command| {
            let fed = run_on(&mut con, command);
            if let Ok(Fed::Reply(reply)) = &fed {
                replies.push(reply.clone());
            }
            fed
        });
        assert!(
            matches!(outcome, Ok(Outcome::Attempt { .. })),
            "{outcome:?}"
        );
    }
    assert_eq!(replies.len(), 4, "{replies:?}");
    for reply in &replies {
        let Reply::Array(items) = reply else {
            panic!("not an array: {reply:?}");
        };
        assert!(
            items.len() == 3 && items.iter().all(|i| matches!(i, Reply::Int(_))),
            "{replies:?}"
        );
    }
}

#[test]
fn verdicts_carry_the_quota_of_the_tightest_entry() {
    let (mut con, options) = (connection(), options("quota"));
    let batch = [
        Entry::new("a", limit(3, 60_000)),
        Entry::new("b", limit(2, 10_000)),
        Entry::new("c", limit(2, 30_000)),
    ];
    let (first, _) = consume(&mut con, &options, &batch);
    // b and c both have 1 left: the longer window (c) is the tightest.
    assert_eq!((first.quota.limit, first.quota.remaining), (2, 1));
    assert_eq!(first.quota.refill_after_ms, 30_000);
    assert_eq!(first.quota.reset_after_ms, 30_000);
    std::thread::sleep(std::time::Duration::from_millis(10));
    let (second, _) = consume(&mut con, &options, &batch);
    assert_eq!((second.quota.limit, second.quota.remaining), (2, 0));
    assert!(second.quota.refill_after_ms < 30_000 && second.quota.reset_after_ms == 30_000);
    let refused = consume(&mut con, &options, &batch).0;
    assert!(!refused.allowed);
    assert_eq!(refused.blocked, Some(2));
    assert_eq!(refused.quota.remaining, 0);
    assert_eq!(refused.quota.refill_after_ms, refused.retry_after_ms);
    assert!(refused.quota.reset_after_ms > refused.retry_after_ms);
    let peeked = peek(&mut con, &options, &[Entry::new("a", limit(3, 60_000))]);
    assert_eq!((peeked.quota.limit, peeked.quota.remaining), (3, 1));
    let fresh = peek(&mut con, &options, &[Entry::new("new", limit(3, 60_000))]);
    assert_eq!(
        (
            fresh.quota.remaining,
            fresh.quota.refill_after_ms,
            fresh.quota.reset_after_ms
        ),
        (3, 0, 0)
    );
}

#[test]
fn a_refusal_under_a_large_limit_has_the_same_quota_shape() {
    // Limits above 16 uses read the wait and the newest call apart (two reads instead of one).
    let (mut con, options) = (connection(), options("large"));
    for uses in [16, 17, 40] {
        let entries = [Entry::new(format!("k{uses}"), limit(uses, 60_000))];
        for _ in 0..uses {
            assert!(consume(&mut con, &options, &entries).0.allowed);
        }
        let refused = consume(&mut con, &options, &entries).0;
        assert!(!refused.allowed, "{uses}");
        assert_eq!(
            (refused.quota.limit as u64, refused.quota.remaining),
            (uses, 0)
        );
        assert_eq!(refused.quota.refill_after_ms, refused.retry_after_ms);
        assert!(refused.quota.reset_after_ms >= refused.retry_after_ms);
        assert!(refused.quota.reset_after_ms <= 60_000);
    }
}

#[test]
fn a_flushed_script_is_sent_in_full_once() {
    let (mut con, options) = (connection(), options("noscript"));
    // The server is shared with the tests running beside this one: one of them may load the script
    // again between the flush and the call (then the EVALSHA finds it). A few tries give a flush that
    // holds; every try must still be answered.
    let mut tries = Vec::new();
    for i in 0..5 {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
        let mut commands = Vec::new();
        let entries = vec![Entry::new(format!("k{i}"), limit(1, 60_000))];
        let call = start(
            &options,
            Op::Consume {
                entries,
                call_id: "x".into(),
            },
        );
        let (outcome, _) = call.drive(|command| {
            let Command::Script { by_sha1, .. } = command else {
                panic!()
            };
            commands.push(by_sha1);
            run_on(&mut con, command)
        });
        assert!(matches!(outcome, Ok(Outcome::Verdict { verdict, .. }) if verdict.allowed));
        if commands == [true, false] {
            return;
        }
        tries.push(commands);
    }
    panic!("EVALSHA, NOSCRIPT, then EVAL: never seen in {tries:?}");
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

#[test]
fn a_cluster_counts_a_cross_slot_batch_key_by_key_and_gives_back_on_a_refusal() {
    let Some(mut con) = cluster() else {
        eprintln!("skipped: RATEWINDOW_CLUSTER_PORTS is not set (scripts/test-core.sh sets it)");
        return;
    };
    let options = options("cluster");
    let batch = [
        Entry::new("alice", limit(2, 60_000)),
        Entry::new("bob", limit(1, 60_000)),
        Entry::new("carol", limit(3, 120_000)),
    ];
    let keys: Vec<String> = ["alice", "bob", "carol"]
        .iter()
        .map(|k| options.log_key(k))
        .collect();
    assert!(
        rw::key_slot(&keys[0]) != rw::key_slot(&keys[1]),
        "the test needs keys in two slots"
    );
    let (allowed, token) = consume(&mut con, &options, &batch);
    assert!(allowed.allowed);
    assert_eq!(
        (allowed.quota.limit, allowed.quota.remaining),
        (1, 0),
        "bob is the tightest"
    );
    let Some(ReleaseToken::Redis(RedisRelease { keys: recorded, .. })) = token.clone() else {
        panic!()
    };
    assert_eq!(recorded, keys);
    // bob refuses: alice, counted first, is given back; carol is peeked for the longest wait.
    let refused = consume(&mut con, &options, &batch).0;
    assert_eq!(refused.blocked, Some(1));
    let zcard = |con: &mut redis::cluster::ClusterConnection, key: &str| -> i64 {
        redis::cmd("ZCARD").arg(key).query(con).unwrap()
    };
    assert_eq!(zcard(&mut con, &keys[0]), 1, "alice's count was given back");
    // Released key by key: every key loses the call.
    assert_eq!(
        op(
            &mut con,
            &options,
            Op::Release {
                token: token.unwrap()
            }
        ),
        Outcome::Unit
    );
    for key in &keys {
        assert_eq!(zcard(&mut con, key), 0, "{key}");
    }
    // A peek across slots answers like the consume would.
    assert!(peek(&mut con, &options, &batch).allowed);
    for _ in 0..3 {
        consume(
            &mut con,
            &options,
            &[Entry::new("carol", limit(3, 120_000))],
        );
    }
    let peeked = peek(&mut con, &options, &batch);
    assert_eq!(peeked.blocked, Some(2));
    assert!(peeked.retry_after_ms > 60_000);
}

#[test]
fn hash_tags_put_a_calls_keys_in_one_slot() {
    let options = RedisOptions::default().with_hash_tag_before(":").unwrap();
    assert_eq!(
        options.log_key("click:alice"),
        "ratewindow:log:{click}:alice"
    );
    assert_eq!(options.log_key("click"), "ratewindow:log:{click}");
    assert_eq!(
        rw::key_slot(&options.log_key("click:alice")),
        rw::key_slot(&options.log_key("click"))
    );
    let batch = [
        Entry::new("click:alice", limit(1, 1000)),
        Entry::new("click", limit(1, 1000)),
    ];
    assert!(rw::plan_peek_many(&batch, &options).single_slot());
    assert!(!rw::plan_peek_many(&batch, &RedisOptions::default()).single_slot());
}

#[test]
fn replies_of_the_wrong_shape_are_typed_errors_not_verdicts() {
    let ints = |v: &[i64]| Reply::Array(v.iter().map(|&i| Reply::Int(i)).collect());
    let limits = [limit(3, 1_000), limit(2, 1_000)];
    for bad in [
        Reply::Nil,
        Reply::Int(1),
        Reply::Text("OK".into()),
        ints(&[1, 0, -1, -1, 5]),
        ints(&[1, 0, -1, -1, 5, 0, 2, 100, 100, 7]),
        ints(&[2, 0, -1, -1, 5, 0, 2, 100, 100]),
        ints(&[0, 0, 10, 0, 5, 0, 0, 0, 10]), // refused with no wait
        ints(&[0, 5, 10, 3, 5, 3, 0, 5, 10]), // blocked index past the entries
        ints(&[1, 5, -1, -1, 5, 0, 2, 100, 100]), // allowed with a wait
        ints(&[0, 999, 100, 0, 95, 0, 0, 999, 999]), // a wait the timestamp contradicts
        ints(&[1, 0, -1, -1, 5, 0, 4, 100, 100]), // more remaining than the limit
        ints(&[1, 0, -1, -1, 5, 1, 1, 200, 100]), // refill after the reset
        ints(&[0, 5, 10, 0, 5, 1, 0, 5, 10]), // the tightest is not the blocked entry
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Nil,
            Reply::Int(-1),
            Reply::Int(-1),
            Reply::Int(5),
        ]),
    ] {
        let e = rw::decode_batch(&bad, &limits).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
    }
    assert!(rw::decode_window(&ints(&[3])).is_err());
    assert!(rw::decode_window(&ints(&[3, -2])).is_err());
    assert!(rw::decode_release(&Reply::Text("x".into())).is_err());
    let e = rw::decode_batch(&ints(&[9, 9]), &limits).unwrap_err();
    assert_eq!(e.got, "[9, 9]");
    assert!(rw::plan_consume_many(&[], &RedisOptions::default(), "").is_err());
}

/// Runs a plan as a host does and hands back the raw reply.
fn run_plan(con: &mut redis::Connection, plan: &rw::Plan) -> Reply {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(plan.script.source)
        .arg(plan.keys.len())
        .arg(&plan.keys)
        .arg(&plan.args);
    to_reply(cmd.query::<redis::Value>(con).expect("the script"))
}

/// The server's clock in a sliding reply: the fifth integer of the nine (and of a one-entry peek's
/// five when allowed), the third of a one-entry call's four when refused, the last of a one-entry
/// consume's allowed text ('count oldest newest now'), TIME's seconds and microseconds after the
/// marker in a refusal by the marker ('marker seconds microseconds').
fn server_now(reply: &Reply) -> u64 {
    if let Reply::Text(text) = reply {
        return match text.split(' ').collect::<Vec<_>>()[..] {
            [_, secs, micros] => {
                secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000
            }
            [_, _, _, now] => now.parse().unwrap(),
            _ => panic!("{reply:?}"),
        };
    }
    let Reply::Array(items) = reply else {
        panic!("{reply:?}")
    };
    let Reply::Int(now) = items[if items.len() == 4 { 2 } else { 4 }] else {
        panic!("{reply:?}")
    };
    now as u64
}

/// The script against the memory store, which defines the behaviour, on one key shared by changing
/// limits (small and large `uses`, short and long windows, one entry and several): consumes, peeks
/// and releases in a random order, the memory store fed the server's own clock from each reply. Every
/// verdict must agree to the last field, so the script's one-read path for a refusal, its trimming
/// and its quota are the memory store's.
#[test]
fn the_script_answers_as_the_memory_store_under_changing_limits() {
    let mut con = connection();
    let options = options("differential");
    let memory = ratewindow_core::MemoryStore::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut releases: Vec<(RedisRelease, ratewindow_core::Release)> = Vec::new();
    let mut refused = 0;
    for step in 0..220 {
        // Only a release made at once is compared: a late one is ignored by the memory store once
        // its call has left its window, and removed by the script anyway.
        let pending = std::mem::take(&mut releases);
        let shape = next(10);
        let mut entry = |key: &str| {
            let uses = [1, 2, 3, 5, 17][next(5) as usize];
            Entry::new(key, limit(uses, [40, 90, 200][next(3) as usize]))
        };
        let entries: Vec<Entry> = match shape {
            0 => vec![entry("k"), entry("k")],
            1 => vec![entry("k"), entry("j")],
            _ => vec![entry("k")],
        };
        let limits: Vec<Limit> = entries.iter().map(|e| e.limit).collect();
        let what = next(6);
        match what {
            0 => {
                let reply = run_plan(&mut con, &rw::plan_peek_many(&entries, &options));
                let (verdict, _) = rw::decode_batch(&reply, &limits).expect("a peek reply");
                let now = server_now(&reply);
                assert_eq!(
                    verdict,
                    memory.peek_many(&entries, now),
                    "step {step}: peek {entries:?}"
                );
            }
            1 if !pending.is_empty() => {
                let (release, in_memory) = pending.into_iter().next().unwrap();
                run_plan(&mut con, &rw::plan_release(&release));
                // At once, by the clock of a peek: both give the call back while it is inside.
                let reply = run_plan(&mut con, &rw::plan_peek_many(&entries, &options));
                let now = server_now(&reply);
                memory.release(in_memory, now);
                let (verdict, _) = rw::decode_batch(&reply, &limits).expect("a peek reply");
                assert_eq!(
                    verdict,
                    memory.peek_many(&entries, now),
                    "step {step}: after a release"
                );
            }
            _ => {
                let id = format!("d{step}");
                let (plan, release) = rw::plan_consume_many(&entries, &options, &id).unwrap();
                let reply = run_plan(&mut con, &plan);
                let (verdict, _) = rw::decode_batch(&reply, &limits).expect("a consume reply");
                let now = server_now(&reply);
                let consumed = memory.consume_many(&entries, now);
                assert_eq!(
                    verdict, consumed.verdict,
                    "step {step}: consume {entries:?}"
                );
                refused += usize::from(!verdict.allowed);
                if let Some(in_memory) = consumed.release {
                    releases.push((release, in_memory));
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(next(12)));
    }
    assert!(
        refused > 20,
        "the sequence must reach the limits ({refused} refusals)"
    );
}

/// Runs one consume or peek plan against Redis and the same entries against the memory store at the
/// server's clock of the reply, and checks that both agree to the last field. Returns the script's
/// release (and the memory store's) for an allowed consume.
fn both(
    con: &mut redis::Connection,
    memory: &ratewindow_core::MemoryStore,
    options: &RedisOptions,
    entries: &[Entry],
    consume: bool,
    what: &str,
) -> (
    BatchVerdict,
    Option<(RedisRelease, ratewindow_core::Release)>,
) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let limits: Vec<Limit> = entries.iter().map(|e| e.limit).collect();
    if !consume {
        let reply = run_plan(con, &rw::plan_peek_many(entries, options));
        let (verdict, _) = rw::decode_batch(&reply, &limits).expect("a peek reply");
        let now = server_now(&reply);
        assert_eq!(verdict, memory.peek_many(entries, now), "{what}: peek");
        return (verdict, None);
    }
    let id = format!("m{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (plan, release) = rw::plan_consume_many(entries, options, &id).unwrap();
    let reply = run_plan(con, &plan);
    let (verdict, _) = rw::decode_batch(&reply, &limits).expect("a consume reply");
    let now = server_now(&reply);
    let consumed = memory.consume_many(entries, now);
    assert_eq!(verdict, consumed.verdict, "{what}: consume");
    (verdict, consumed.release.map(|m| (release, m)))
}

/// Gives a call back on both sides, at the server's clock (read by a peek of `entries`), and checks
/// the peek.
fn release_both(
    con: &mut redis::Connection,
    memory: &ratewindow_core::MemoryStore,
    options: &RedisOptions,
    entries: &[Entry],
    release: (RedisRelease, ratewindow_core::Release),
    what: &str,
) {
    run_plan(con, &rw::plan_release(&release.0));
    let limits: Vec<Limit> = entries.iter().map(|e| e.limit).collect();
    let reply = run_plan(con, &rw::plan_peek_many(entries, options));
    let now = server_now(&reply);
    memory.release(release.1, now);
    let (verdict, _) = rw::decode_batch(&reply, &limits).expect("a peek reply");
    assert_eq!(
        verdict,
        memory.peek_many(entries, now),
        "{what}: peek after a release"
    );
}

/// The members of a log key scored -inf: the script's refusal markers.
fn markers(con: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("ZCOUNT")
        .arg(key)
        .arg("-inf")
        .arg("-inf")
        .query(con)
        .unwrap()
}

/// The one-entry consume that fills a log (or else a one-entry refusal of a full log) leaves a marker
/// in its key that answers the refusals under the same limit with one read, the first one included;
/// every change to the log removes it first, so each answer stays the memory store's: fill, refuse,
/// refuse again, peek, another limit on the key, a release, a consume after it, and a marker whose
/// wait has passed.
#[test]
fn the_refusal_marker_answers_as_the_memory_store() {
    let mut con = connection();
    let options = options("marker");
    let memory = ratewindow_core::MemoryStore::new();
    let key = options.log_key("m");
    let three = [Entry::new("m", limit(3, 60_000))];
    let mut releases = Vec::new();
    for i in 0..3 {
        let (v, r) = both(
            &mut con,
            &memory,
            &options,
            &three,
            true,
            &format!("fill {i}"),
        );
        assert!(v.allowed);
        releases.push(r.unwrap());
    }
    assert_eq!(
        markers(&mut con, &key),
        1,
        "the filling call left its marker"
    );
    let (v, _) = both(&mut con, &memory, &options, &three, true, "first refusal");
    assert!(!v.allowed);
    assert_eq!(
        markers(&mut con, &key),
        1,
        "the refusal wrote no second marker"
    );
    for i in 0..3 {
        let (v, _) = both(
            &mut con,
            &memory,
            &options,
            &three,
            true,
            &format!("marked {i}"),
        );
        assert!(!v.allowed);
        both(&mut con, &memory, &options, &three, false, "marked peek");
    }
    // Other limits on the same key: a peek ignores the marker; a consume trims it and counts.
    both(
        &mut con,
        &memory,
        &options,
        &[Entry::new("m", limit(2, 60_000))],
        false,
        "other peek",
    );
    assert_eq!(markers(&mut con, &key), 1, "a peek writes nothing");
    both(
        &mut con,
        &memory,
        &options,
        &[Entry::new("m", limit(2, 30_000))],
        true,
        "other refusal",
    );
    both(&mut con, &memory, &options, &three, true, "refusal again");
    assert_eq!(markers(&mut con, &key), 1);
    // A release frees a use at once.
    let last = releases.pop().unwrap();
    release_both(&mut con, &memory, &options, &three, last, "release");
    assert_eq!(markers(&mut con, &key), 0, "the release removed the marker");
    let (v, r) = both(
        &mut con,
        &memory,
        &options,
        &three,
        true,
        "after the release",
    );
    assert!(v.allowed);
    releases.push(r.unwrap());
    assert_eq!(markers(&mut con, &key), 1, "refilled: marked again");
    let (v, _) = both(&mut con, &memory, &options, &three, true, "refused again");
    assert!(!v.allowed);
    assert_eq!(markers(&mut con, &key), 1);
    // A larger limit records over the marker (removing it); the smaller one now sees a log longer
    // than its limit and leaves no marker.
    let (v, _) = both(
        &mut con,
        &memory,
        &options,
        &[Entry::new("m", limit(5, 60_000))],
        true,
        "larger",
    );
    assert!(v.allowed);
    assert_eq!(markers(&mut con, &key), 0);
    let (v, _) = both(&mut con, &memory, &options, &three, true, "longer log");
    assert!(!v.allowed);
    assert_eq!(markers(&mut con, &key), 0);
    both(
        &mut con,
        &memory,
        &options,
        &three,
        false,
        "longer log peek",
    );
    // A batch naming the key trims the marker too.
    let short = [Entry::new("s", limit(2, 150))];
    let short_key = options.log_key("s");
    both(&mut con, &memory, &options, &short, true, "short 1");
    assert_eq!(markers(&mut con, &short_key), 0);
    both(&mut con, &memory, &options, &short, true, "short 2");
    assert_eq!(markers(&mut con, &short_key), 1);
    let (v, _) = both(&mut con, &memory, &options, &short, true, "short refused");
    assert!(!v.allowed);
    assert_eq!(markers(&mut con, &short_key), 1);
    both(
        &mut con,
        &memory,
        &options,
        &[short[0].clone(), Entry::new("t", limit(1, 150))],
        false,
        "batch peek",
    );
    // Past the marker's wait: a peek ignores it, a consume trims it and is allowed.
    std::thread::sleep(std::time::Duration::from_millis(v.retry_after_ms + 5));
    both(
        &mut con,
        &memory,
        &options,
        &short,
        false,
        "stale marker peek",
    );
    let (v, _) = both(
        &mut con,
        &memory,
        &options,
        &short,
        true,
        "stale marker consume",
    );
    assert!(v.allowed);
    assert_eq!(markers(&mut con, &short_key), 0);
    both(&mut con, &memory, &options, &short, true, "short 4");
    both(
        &mut con,
        &memory,
        &options,
        &short,
        true,
        "short refused again",
    );
    assert_eq!(markers(&mut con, &short_key), 1);
    both(
        &mut con,
        &memory,
        &options,
        &[short[0].clone(), Entry::new("t", limit(1, 150))],
        true,
        "batch consume",
    );
    assert_eq!(
        markers(&mut con, &short_key),
        0,
        "a batch consume trims the marker"
    );
}

/// A clock that stepped back, as the script sees it: the log holds a call later than the server's
/// clock (written here as a host whose clock ran ahead would have). Recording, refusing (with and
/// without the marker), peeking and releasing all agree with the memory store fed the same times.
#[test]
fn a_log_ahead_of_the_clock_answers_as_the_memory_store() {
    let mut con = connection();
    let options = options("ahead");
    let memory = ratewindow_core::MemoryStore::new();
    let key = options.log_key("c");
    let three = [Entry::new("c", limit(3, 60_000))];
    let (_, first) = both(&mut con, &memory, &options, &three, true, "first");
    // The call ahead: 20 s after the server's clock, recorded under the same limit on both sides.
    let reply = run_plan(&mut con, &rw::plan_peek_many(&three, &options));
    let ahead = server_now(&reply) + 20_000;
    redis::cmd("ZADD")
        .arg(&key)
        .arg(ahead)
        .arg("ahead")
        .query::<i64>(&mut con)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(80_000)
        .query::<i64>(&mut con)
        .unwrap();
    assert!(memory.consume_many(&three, ahead).verdict.allowed);
    both(&mut con, &memory, &options, &three, false, "peek behind");
    let (v, _) = both(
        &mut con,
        &memory,
        &options,
        &three,
        true,
        "recorded at the newest",
    );
    assert!(v.allowed);
    assert!(v.quota.reset_after_ms > 60_000, "{v:?}");
    let (v, _) = both(&mut con, &memory, &options, &three, true, "refused behind");
    assert!(!v.allowed);
    assert_eq!(markers(&mut con, &key), 1);
    both(&mut con, &memory, &options, &three, true, "marked behind");
    both(
        &mut con,
        &memory,
        &options,
        &three,
        false,
        "marked peek behind",
    );
    release_both(
        &mut con,
        &memory,
        &options,
        &three,
        first.unwrap(),
        "release behind",
    );
    let (v, _) = both(
        &mut con,
        &memory,
        &options,
        &three,
        true,
        "after the release",
    );
    assert!(v.allowed);
    // One call in the log, ahead of the clock: recorded at it.
    let one = [Entry::new("d", limit(2, 60_000))];
    let reply = run_plan(&mut con, &rw::plan_peek_many(&one, &options));
    let ahead = server_now(&reply) + 5_000;
    redis::cmd("ZADD")
        .arg(options.log_key("d"))
        .arg(ahead)
        .arg("ahead")
        .query::<i64>(&mut con)
        .unwrap();
    assert!(memory.consume_many(&one, ahead).verdict.allowed);
    both(&mut con, &memory, &options, &one, true, "one ahead");
    both(
        &mut con,
        &memory,
        &options,
        &one,
        true,
        "one ahead, refused",
    );
    both(&mut con, &memory, &options, &one, true, "one ahead, marked");
}

/// A batch that fills a key named by one of its entries leaves that key's marker, as the one-entry
/// path does; a key named by two entries gets none. The refusals after answer as the memory store.
#[test]
fn a_batch_that_fills_a_key_leaves_its_marker() {
    let mut con = connection();
    let options = options("batchmarker");
    let memory = ratewindow_core::MemoryStore::new();
    let two = limit(2, 60_000);
    let batch = [Entry::new("a", two), Entry::new("b", limit(1, 60_000))];
    let (v, _) = both(&mut con, &memory, &options, &batch, true, "fills b");
    assert!(v.allowed);
    assert_eq!(markers(&mut con, &options.log_key("a")), 0);
    assert_eq!(markers(&mut con, &options.log_key("b")), 1);
    let (v, _) = both(
        &mut con,
        &memory,
        &options,
        &[Entry::new("a", two), Entry::new("c", two)],
        true,
        "fills a",
    );
    assert!(v.allowed);
    assert_eq!(markers(&mut con, &options.log_key("a")), 1);
    assert_eq!(markers(&mut con, &options.log_key("c")), 0);
    for key in ["a", "b"] {
        let one = [Entry::new(
            key,
            if key == "a" { two } else { limit(1, 60_000) },
        )];
        let (v, _) = both(
            &mut con,
            &memory,
            &options,
            &one,
            true,
            "refused by the marker",
        );
        assert!(!v.allowed);
        both(
            &mut con,
            &memory,
            &options,
            &one,
            false,
            "peek by the marker",
        );
    }
    // Two entries on one key: no marker, whichever fills.
    let same = [Entry::new("c", two), Entry::new("c", limit(3, 60_000))];
    let (v, _) = both(&mut con, &memory, &options, &same, true, "two entries on c");
    assert!(v.allowed);
    assert_eq!(markers(&mut con, &options.log_key("c")), 0);
    let (v, _) = both(
        &mut con,
        &memory,
        &options,
        &[Entry::new("c", two)],
        true,
        "c full",
    );
    assert!(!v.allowed);
}
