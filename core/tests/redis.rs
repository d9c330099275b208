//! The Redis scripts against a real server (127.0.0.1:6379, or `REDIS_URL`): the plans run as a host
//! would run them, and the decoders read what the server answered. `scripts/test-core.sh` starts the
//! server if it is not running.

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_core::redis::{self as rw, Plan, RedisOptions, Reply};
use ratewindow_core::{BatchVerdict, Entry, Limit, Window, MAX_WINDOW_MS};

fn connection() -> redis::Connection {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    redis::Client::open(url)
        .expect("redis url")
        .get_connection()
        .expect("a Redis server (scripts/test-core.sh starts one)")
}

/// A prefix of this run's own, so runs never see each other's keys.
fn options(test: &str) -> RedisOptions {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    RedisOptions::default().with_prefix(format!("ratewindow-test:{test}:{nanos}:"))
}

fn to_reply(value: redis::Value) -> Reply {
    match value {
        redis::Value::Nil => Reply::Nil,
        redis::Value::Int(i) => Reply::Int(i),
        redis::Value::BulkString(b) => Reply::Text(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::SimpleString(s) => Reply::Text(s),
        redis::Value::Array(items) => Reply::Array(items.into_iter().map(to_reply).collect()),
        other => panic!("unexpected value {other:?}"),
    }
}

/// Runs a plan as a host does: EVALSHA, and EVAL only when the server lacks the script.
fn run(con: &mut redis::Connection, plan: &Plan) -> Reply {
    let evalsha = redis::cmd("EVALSHA")
        .arg(plan.script.sha1)
        .arg(plan.keys.len())
        .arg(&plan.keys)
        .arg(&plan.args)
        .query(con);
    match evalsha {
        Ok(value) => to_reply(value),
        Err(e) if e.code() == Some("NOSCRIPT") => to_reply(
            redis::cmd("EVAL")
                .arg(plan.script.source)
                .arg(plan.keys.len())
                .arg(&plan.keys)
                .arg(&plan.args)
                .query(con)
                .expect("EVAL"),
        ),
        Err(e) => panic!("{e}"),
    }
}

static ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn consume(
    con: &mut redis::Connection,
    options: &RedisOptions,
    entries: &[Entry],
) -> (BatchVerdict, rw::RedisRelease) {
    let id = format!(
        "call-{}",
        ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (plan, release) = rw::plan_consume_many(entries, options, &id).unwrap();
    (
        rw::decode_batch(&run(con, &plan), entries.len()).unwrap(),
        release,
    )
}

fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
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
    let peek = rw::plan_peek_many(&entries, &options);
    assert!(rw::decode_batch(&run(&mut con, &peek), 1).unwrap().allowed);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(options.log_key("k"))
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "a peek creates no key");
    assert!(consume(&mut con, &options, &entries).0.allowed);
    let ttl_before = pttl(&mut con, &options.log_key("k"));
    let peeked = rw::decode_batch(&run(&mut con, &peek), 1).unwrap();
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
    let plan = rw::plan_release(&release);
    assert_eq!(rw::decode_release(&run(&mut con, &plan)).unwrap(), 2);
    assert_eq!(
        rw::decode_release(&run(&mut con, &plan)).unwrap(),
        0,
        "idempotent"
    );
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
    let window =
        |con: &mut redis::Connection, plan: Plan| rw::decode_window(&run(con, &plan)).unwrap();
    assert_eq!(window(&mut con, rw::plan_get_window("k", &options)), None);
    let first = window(&mut con, rw::plan_hit("k", decay, 2, &options)).unwrap();
    assert_eq!((first.count, first.ms_left), (2, 60_000));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = window(&mut con, rw::plan_hit("k", decay, -1, &options)).unwrap();
    assert_eq!(second.count, 1);
    assert!(
        second.ms_left < 60_000,
        "hits inside the window do not move it"
    );
    let reset = window(&mut con, rw::plan_reset_attempts("k", &options)).unwrap();
    assert_eq!(reset.count, 0);
    assert!(reset.ms_left <= second.ms_left, "reset keeps the window");
    assert_eq!(window(&mut con, rw::plan_clear("k", &options)), None);
    assert_eq!(window(&mut con, rw::plan_get_window("k", &options)), None);
    let short = Window::from_ms(100).unwrap();
    window(&mut con, rw::plan_hit("s", short, 5, &options));
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(
        window(&mut con, rw::plan_hit("s", short, 1, &options))
            .unwrap()
            .count,
        1,
        "a new window counts from zero"
    );
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
    for bad in [
        Reply::Nil,
        Reply::Int(1),
        Reply::Text("OK".into()),
        ints(&[1, 0, -1, -1]),
        ints(&[1, 0, -1, -1, 5, 6]),
        ints(&[2, 0, -1, -1, 5]),
        ints(&[0, 0, 10, 0, 5]),  // refused with no wait
        ints(&[0, 5, 10, 3, 5]),  // blocked index past the entries
        ints(&[1, 5, -1, -1, 5]), // allowed with a wait
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Nil,
            Reply::Int(-1),
            Reply::Int(-1),
            Reply::Int(5),
        ]),
    ] {
        let e = rw::decode_batch(&bad, 2).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
    }
    assert!(rw::decode_window(&ints(&[3])).is_err());
    assert!(rw::decode_window(&ints(&[3, -2])).is_err());
    assert!(rw::decode_release(&Reply::Text("x".into())).is_err());
    let e = rw::decode_batch(&ints(&[9, 9]), 1).unwrap_err();
    assert_eq!(e.got, "[9, 9]");
    assert!(rw::plan_consume_many(&[], &RedisOptions::default(), "").is_err());
}
