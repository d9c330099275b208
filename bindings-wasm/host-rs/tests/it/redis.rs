//! The `redis` store of the `hosted` world against the real server (127.0.0.1:6379, or `REDIS_URL`):
//! the component plans and decodes, this host's runner ([`HostState::runner`]) runs each script with a
//! `redis::Connection`, EVALSHA or EVAL as the component asks. `scripts/services.sh` starts the server.

use std::time::{SystemTime, UNIX_EPOCH};

use ratewindow_host_rs::hosted::exports::ratewindow::engine::{
    redis::RedisOptions,
    types::{Entry, Limit},
};
use ratewindow_host_rs::{Error, HostedWorld, ScriptReply, ScriptRunner, ScriptValue};
use wasmtime::component::ResourceAny;

pub(crate) fn connection() -> redis::Connection {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    redis::Client::open(url)
        .expect("redis url")
        .get_connection()
        .expect("a Redis server on 127.0.0.1:6379 (scripts/services.sh starts one)")
}

fn value(v: redis::Value) -> ScriptValue {
    match v {
        redis::Value::Nil => ScriptValue::Nil,
        redis::Value::Int(i) => ScriptValue::Integer(i),
        redis::Value::BulkString(b) => ScriptValue::Bytes(b),
        redis::Value::SimpleString(s) => ScriptValue::Text(s),
        redis::Value::Double(f) => ScriptValue::Float(f),
        other => ScriptValue::Text(format!("{other:?}")),
    }
}

/// The host's runner: EVALSHA when the component sends no source, EVAL when it does; the client's
/// error text as the error (the server's `NOSCRIPT` code first, as Redis sends it).
pub(crate) fn redis_runner(mut con: redis::Connection) -> ScriptRunner {
    Box::new(move |script, sha1, keys, args| {
        let mut cmd = if script.is_empty() {
            redis::cmd("EVALSHA")
        } else {
            redis::cmd("EVAL")
        };
        cmd.arg(if script.is_empty() { sha1 } else { script })
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        match cmd.query::<redis::Value>(&mut con) {
            Ok(redis::Value::Array(items)) => {
                Ok(ScriptReply::Array(items.into_iter().map(value).collect()))
            }
            Ok(other) => Ok(ScriptReply::Value(value(other))),
            Err(e) => Err(match e.code() {
                Some(code) => format!("{code} {}", e.detail().unwrap_or_default()),
                None => e.to_string(),
            }),
        }
    })
}

/// A component instance with a Redis store under a prefix of this run's own.
struct Fixture {
    world: HostedWorld,
    store: ResourceAny,
    prefix: String,
}

impl Fixture {
    fn new(test: &str) -> Fixture {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let prefix = format!("ratewindow-wasm-test:{test}:{nanos}:");
        let mut world = HostedWorld::new().unwrap();
        world.store.data_mut().runner = Some(redis_runner(connection()));
        let handle = world
            .redis_store(&RedisOptions {
                prefix: Some(prefix.clone()),
                hash_tag_before: None,
                evalsha: None,
            })
            .unwrap();
        Fixture {
            world,
            store: handle,
            prefix,
        }
    }

    fn consume(&mut self, entries: &[Entry]) -> (Result<Verdict, Error>, Option<ResourceAny>) {
        let (store, redis) = self.world.split_redis();
        match redis
            .redis_store()
            .call_consume_many(&mut *store, self.store, entries)
            .unwrap()
        {
            Ok(c) => (Ok(c.verdict.into()), c.release),
            Err(e) => (Err(e.into()), None),
        }
    }

    fn peek(&mut self, entries: &[Entry]) -> Result<Verdict, Error> {
        let (store, redis) = self.world.split_redis();
        redis
            .redis_store()
            .call_peek_many(&mut *store, self.store, entries)
            .unwrap()
            .map(Into::into)
            .map_err(Into::into)
    }

    fn release(&mut self, token: ResourceAny) -> Result<bool, Error> {
        let (store, redis) = self.world.split_redis();
        redis
            .redis_store()
            .call_release(&mut *store, self.store, token)
            .unwrap()
            .map_err(Into::into)
    }

    fn hit(&mut self, key: &str, decay_ms: f64, amount: i64) -> Result<i64, Error> {
        let (store, redis) = self.world.split_redis();
        redis
            .redis_store()
            .call_hit(&mut *store, self.store, key, decay_ms, amount)
            .unwrap()
            .map_err(Into::into)
    }

    fn attempts(&mut self, key: &str) -> Result<i64, Error> {
        let (store, redis) = self.world.split_redis();
        redis
            .redis_store()
            .call_attempts(&mut *store, self.store, key)
            .unwrap()
            .map_err(Into::into)
    }

    fn key(&self, namespace: &str, key: &str) -> String {
        format!("{}{namespace}{key}", self.prefix)
    }
}

/// A batch verdict, comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verdict {
    allowed: bool,
    retry_after_ms: u64,
    retry_timestamp: Option<u64>,
    blocked: Option<u32>,
}

impl From<ratewindow_host_rs::hosted::exports::ratewindow::engine::types::BatchVerdict>
    for Verdict
{
    fn from(
        v: ratewindow_host_rs::hosted::exports::ratewindow::engine::types::BatchVerdict,
    ) -> Self {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: v.blocked,
        }
    }
}

fn entry(key: &str, uses: f64, window_ms: f64) -> Entry {
    Entry {
        key: key.to_owned(),
        limit: Limit { uses, window_ms },
        cost: None,
    }
}

fn server_ms(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1000 + micros / 1000
}

#[test]
fn consume_many_allows_uses_calls_then_refuses_with_the_server_clock_wait() {
    let mut f = Fixture::new("uses");
    let entries = [entry("k", 3.0, 60_000.0)];
    for _ in 0..3 {
        let (verdict, token) = f.consume(&entries);
        assert!(verdict.unwrap().allowed, "calls in one ms count apart");
        assert!(token.is_some(), "an allowed call carries its release");
    }
    let before = server_ms(&mut connection());
    let (refused, token) = f.consume(&entries);
    let refused = refused.unwrap();
    assert!(token.is_none());
    assert!(!refused.allowed);
    assert_eq!(refused.blocked, Some(0));
    assert!(
        refused.retry_after_ms > 59_000 && refused.retry_after_ms <= 60_000,
        "{refused:?}"
    );
    let ts = refused.retry_timestamp.unwrap();
    assert!(
        ts >= before + 59_000 && ts <= before + 61_000,
        "the wait is on the server's clock: {ts} vs TIME {before}"
    );
    assert_eq!(
        f.consume(&entries).0.unwrap().retry_timestamp,
        Some(ts),
        "one wait, one retry_timestamp"
    );
    // Each script went by SHA1 (the server has it after the first EVAL, if it was missing).
    assert!(f.world.store.data().evalsha_calls >= 5);
    assert!(f.world.store.data().eval_calls <= 1);
}

#[test]
fn a_batch_is_all_or_nothing() {
    let mut f = Fixture::new("batch");
    assert!(f.consume(&[entry("b", 1.0, 60_000.0)]).0.unwrap().allowed);
    let batch = [
        entry("a", 5.0, 60_000.0),
        entry("b", 1.0, 60_000.0),
        entry("c", 5.0, 60_000.0),
    ];
    let refused = f.consume(&batch).0.unwrap();
    assert_eq!((refused.allowed, refused.blocked), (false, Some(1)));
    let mut con = connection();
    for key in ["a", "c"] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(f.key("log:", key))
            .query(&mut con)
            .unwrap();
        assert_eq!(exists, 0, "a refused batch records nothing on {key}");
    }
    // The calls (ZCOUNT by score: a full log also holds its refusal marker, scored -inf).
    let card: i64 = redis::cmd("ZCOUNT")
        .arg(f.key("log:", "b"))
        .arg(0)
        .arg("+inf")
        .query(&mut con)
        .unwrap();
    assert_eq!(card, 1);
}

#[test]
fn peek_writes_nothing() {
    let mut f = Fixture::new("peek");
    let entries = [entry("p", 1.0, 60_000.0)];
    assert!(f.peek(&entries).unwrap().allowed);
    let mut con = connection();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(f.key("log:", "p"))
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "a peek creates no key");
    assert!(f.consume(&entries).0.unwrap().allowed);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(f.key("log:", "p"))
        .query(&mut con)
        .unwrap();
    let refused = f.peek(&entries).unwrap();
    assert_eq!((refused.allowed, refused.blocked), (false, Some(0)));
    let after: i64 = redis::cmd("PTTL")
        .arg(f.key("log:", "p"))
        .query(&mut con)
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 60_000 && after <= ttl,
        "a peek leaves the expiry alone: {ttl} then {after}"
    );
    let card: i64 = redis::cmd("ZCOUNT")
        .arg(f.key("log:", "p"))
        .arg(0)
        .arg("+inf")
        .query(&mut con)
        .unwrap();
    assert_eq!(card, 1, "a peek records nothing");
}

#[test]
fn release_gives_back_its_call_once() {
    let mut f = Fixture::new("release");
    let entries = [entry("r", 1.0, 60_000.0), entry("s", 1.0, 60_000.0)];
    let (verdict, token) = f.consume(&entries);
    assert!(verdict.unwrap().allowed);
    let token = token.unwrap();
    assert!(!f.consume(&entries).0.unwrap().allowed);
    assert_eq!(f.release(token), Ok(true));
    assert_eq!(f.release(token), Ok(false), "a second release does nothing");
    let (verdict, again) = f.consume(&entries);
    assert!(
        verdict.unwrap().allowed,
        "the released call no longer counts"
    );
    assert!(!f.consume(&entries).0.unwrap().allowed);
    token.resource_drop(&mut f.world.store).unwrap();
    again.unwrap().resource_drop(&mut f.world.store).unwrap();
}

#[test]
fn the_fixed_window_counts_hits_on_the_server() {
    let mut f = Fixture::new("fixed");
    assert_eq!(f.attempts("w"), Ok(0));
    assert_eq!(f.hit("w", 60_000.0, 1), Ok(1));
    assert_eq!(f.hit("w", 60_000.0, 2), Ok(3));
    assert_eq!(f.attempts("w"), Ok(3));
    let ttl: i64 = redis::cmd("PTTL")
        .arg(f.key("win:", "w"))
        .query(&mut connection())
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    assert!(matches!(
        f.hit("w", f64::NAN, 1),
        Err(Error::InvalidLimit { .. })
    ));
}

#[test]
fn a_script_flushed_from_the_server_is_resent_in_full() {
    let mut f = Fixture::new("noscript");
    let entries = [entry("n", 2.0, 60_000.0)];
    assert!(f.consume(&entries).0.unwrap().allowed);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut connection())
        .unwrap();
    let (evalsha, eval) = {
        let d = f.world.store.data();
        (d.evalsha_calls, d.eval_calls)
    };
    assert!(f.consume(&entries).0.unwrap().allowed);
    let d = f.world.store.data();
    assert_eq!(
        (d.evalsha_calls, d.eval_calls),
        (evalsha + 1, eval + 1),
        "EVALSHA answered NOSCRIPT, then EVAL"
    );
    assert!(
        !f.consume(&entries).0.unwrap().allowed,
        "counted once, not twice"
    );
    // Fixed-window scripts too.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut connection())
        .unwrap();
    assert_eq!(f.hit("m", 60_000.0, 1), Ok(1));
}

#[test]
fn a_reply_of_the_wrong_shape_is_malformed_reply() {
    let mut f = Fixture::new("malformed");
    let canned: Vec<ScriptReply> = vec![
        ScriptReply::Value(ScriptValue::Text("OK".to_owned())),
        ScriptReply::Array(vec![ScriptValue::Integer(1)]),
        ScriptReply::Array(vec![ScriptValue::Integer(7); 5]),
        ScriptReply::Rows(vec![vec![ScriptValue::Nil]]),
        ScriptReply::Array(vec![ScriptValue::Float(0.5); 5]),
        ScriptReply::Array(vec![ScriptValue::Bytes(vec![0xff]); 5]),
    ];
    for reply in canned {
        let r = reply.clone();
        f.world.store.data_mut().runner = Some(Box::new(move |_, _, _, _| Ok(r.clone())));
        let got = f.consume(&[entry("x", 1.0, 1000.0)]).0;
        assert!(
            matches!(&got, Err(Error::MalformedReply { expected, got }) if !expected.is_empty() && !got.is_empty()),
            "{reply:?} -> {got:?}"
        );
        assert!(matches!(
            f.peek(&[entry("x", 1.0, 1000.0)]),
            Err(Error::MalformedReply { .. })
        ));
        assert!(matches!(
            f.hit("x", 1000.0, 1),
            Err(Error::MalformedReply { .. })
        ));
        assert!(matches!(f.attempts("x"), Err(Error::MalformedReply { .. })));
    }
}

#[test]
fn a_failing_runner_is_store_failed_and_never_resent() {
    let mut f = Fixture::new("failed");
    f.world.store.data_mut().runner = Some(Box::new(|_, _, _, _| {
        Err("ERR connection reset by peer".to_owned())
    }));
    let (evalsha, eval) = {
        let d = f.world.store.data();
        (d.evalsha_calls, d.eval_calls)
    };
    assert_eq!(
        f.consume(&[entry("x", 1.0, 1000.0)]).0,
        Err(Error::StoreFailed(
            "ERR connection reset by peer".to_owned()
        ))
    );
    let d = f.world.store.data();
    assert_eq!((d.evalsha_calls, d.eval_calls), (evalsha + 1, eval));
    assert!(matches!(f.hit("x", 1000.0, 1), Err(Error::StoreFailed(_))));
    assert!(matches!(f.attempts("x"), Err(Error::StoreFailed(_))));

    // A release that fails keeps its token usable: it can be retried once the store is back.
    let mut f = Fixture::new("failed-release");
    let entries = [entry("y", 1.0, 60_000.0)];
    let token = f.consume(&entries).1.unwrap();
    let real = f.world.store.data_mut().runner.take();
    f.world.store.data_mut().runner = Some(Box::new(|_, _, _, _| Err("ERR down".to_owned())));
    assert_eq!(
        f.release(token),
        Err(Error::StoreFailed("ERR down".to_owned()))
    );
    f.world.store.data_mut().runner = real;
    assert_eq!(f.release(token), Ok(true));
    assert!(f.consume(&entries).0.unwrap().allowed);
}

#[test]
fn an_invalid_limit_runs_nothing() {
    let mut f = Fixture::new("invalid");
    let calls = f.world.store.data().evalsha_calls;
    assert!(matches!(
        f.consume(&[entry("x", 1.5, 1000.0)]).0,
        Err(Error::InvalidLimit { .. })
    ));
    assert!(matches!(
        f.peek(&[entry("x", 1.0, -1.0)]),
        Err(Error::InvalidLimit { .. })
    ));
    assert_eq!(f.world.store.data().evalsha_calls, calls);
}

/// The component's error as this host's comparable one (the outer `Result` is a trap: it fails).
fn ours<T>(
    r: wasmtime::Result<
        Result<T, ratewindow_host_rs::hosted::exports::ratewindow::engine::errors::Error>,
    >,
) -> Result<T, Error> {
    r.expect("the component trapped").map_err(Error::from)
}

#[test]
fn attempt_counts_exactly_max_and_every_fixed_window_read_runs_on_the_server() {
    let mut f = Fixture::new("attempt");
    let s = f.store;
    let (store, redis) = f.world.split_redis();
    let r = redis.redis_store();
    let mut allowed = 0;
    for _ in 0..5 {
        let a = r
            .call_attempt(&mut *store, s, "a", 3, 60_000.0)
            .unwrap()
            .unwrap();
        allowed += usize::from(a.allowed);
        assert!(a.count <= 3 && a.reset_after_ms > 0 && a.reset_after_ms <= 60_000);
    }
    assert_eq!(allowed, 3, "exactly max attempts are counted");
    assert_eq!(ours(r.call_attempts(&mut *store, s, "a")), Ok(3));
    assert_eq!(
        ours(r.call_too_many_attempts(&mut *store, s, "a", 3)),
        Ok(true)
    );
    assert_eq!(ours(r.call_remaining(&mut *store, s, "a", 5)), Ok(2));
    assert_eq!(ours(r.call_available_in(&mut *store, s, "a")), Ok(60));
    let ms = r
        .call_available_in_ms(&mut *store, s, "a")
        .unwrap()
        .unwrap();
    assert!(ms > 59_000 && ms <= 60_000, "{ms}");
    assert_eq!(ours(r.call_reset_attempts(&mut *store, s, "a")), Ok(()));
    assert_eq!(ours(r.call_attempts(&mut *store, s, "a")), Ok(0));
    let ms = r
        .call_available_in_ms(&mut *store, s, "a")
        .unwrap()
        .unwrap();
    assert!(ms > 0, "a reset keeps the window running");
    let h = r
        .call_hit_window(&mut *store, s, "a", 60_000.0, 2)
        .unwrap()
        .unwrap();
    assert_eq!(h.count, 2);
    assert!(h.reset_after_ms > 0 && h.reset_after_ms <= ms);
    assert_eq!(ours(r.call_clear(&mut *store, s, "a")), Ok(()));
    assert_eq!(ours(r.call_available_in_ms(&mut *store, s, "a")), Ok(0));
    assert!(matches!(
        r.call_attempt(&mut *store, s, "a", 3, 0.5).unwrap(),
        Err(
            ratewindow_host_rs::hosted::exports::ratewindow::engine::errors::Error::InvalidLimit(_)
        )
    ));
}

#[test]
fn consume_and_peek_of_one_key_carry_the_quota_and_a_release() {
    let mut f = Fixture::new("single");
    let s = f.store;
    let lim = Limit {
        uses: 2.0,
        window_ms: 60_000.0,
    };
    let (store, redis) = f.world.split_redis();
    let r = redis.redis_store();
    let first = r.call_consume(&mut *store, s, "q", lim).unwrap().unwrap();
    assert!(first.verdict.allowed && first.release.is_some());
    assert_eq!((first.verdict.limit, first.verdict.remaining), (2, 1));
    assert!(first.verdict.reset_after_ms > 59_000 && first.verdict.reset_after_ms <= 60_000);
    let peeked = r.call_peek(&mut *store, s, "q", lim).unwrap().unwrap();
    assert_eq!((peeked.allowed, peeked.remaining), (true, 1));
    let second = r.call_consume(&mut *store, s, "q", lim).unwrap().unwrap();
    assert_eq!(
        (second.verdict.allowed, second.verdict.remaining),
        (true, 0)
    );
    let refused = r.call_consume(&mut *store, s, "q", lim).unwrap().unwrap();
    assert!(!refused.verdict.allowed && refused.release.is_none());
    assert_eq!(
        refused.verdict.refill_after_ms,
        refused.verdict.retry_after_ms
    );
    let token = second.release.unwrap();
    assert_eq!(ours(r.call_release(&mut *store, s, token)), Ok(true));
    let again = r.call_consume(&mut *store, s, "q", lim).unwrap().unwrap();
    assert!(again.verdict.allowed, "the released call no longer counts");
}

#[test]
fn gcra_and_the_counter_run_their_scripts_on_the_server() {
    use ratewindow_host_rs::hosted::exports::ratewindow::engine::types::{
        GcraLimit, RateAlgorithm, RateLimit,
    };
    let mut f = Fixture::new("rates");
    let gcra = RateLimit::Gcra(GcraLimit {
        uses: 10.0,
        window_ms: 60_000.0,
        burst: Some(3.0),
    });
    let counter = RateLimit::Counter(Limit {
        uses: 2.0,
        window_ms: 60_000.0,
    });
    let (store, redis) = f.world.split_redis();
    let s = f.store;
    let r = redis.redis_store();
    let consume =
        |store: &mut wasmtime::Store<ratewindow_host_rs::HostState>, l: &RateLimit, cost: f64| {
            ours(r.call_consume_rate(store, s, "k", *l, cost))
        };
    // Three at once (the burst), then the wait for one more: 6 s a use, on the server's clock.
    let first = consume(&mut *store, &gcra, 3.0).unwrap();
    assert!(first.allowed);
    assert_eq!(first.remaining, 0);
    let refused = consume(&mut *store, &gcra, 1.0).unwrap();
    assert!(!refused.allowed);
    assert!(
        refused.retry_after_ms > 5_000 && refused.retry_after_ms <= 6_000,
        "{refused:?}"
    );
    let peeked = ours(r.call_peek_rate(&mut *store, s, "k", gcra, 1.0)).unwrap();
    assert!(!peeked.allowed);
    // The counter's key is apart from the bucket's.
    assert!(consume(&mut *store, &counter, 2.0).unwrap().allowed);
    assert!(!consume(&mut *store, &counter, 1.0).unwrap().allowed);
    ours(r.call_reset_rate(&mut *store, s, "k", RateAlgorithm::Gcra)).unwrap();
    assert!(consume(&mut *store, &gcra, 3.0).unwrap().allowed);
    assert!(
        !consume(&mut *store, &counter, 1.0).unwrap().allowed,
        "the counter kept its uses"
    );
    ours(r.call_reset_rate(&mut *store, s, "k", RateAlgorithm::Counter)).unwrap();
    assert!(consume(&mut *store, &counter, 1.0).unwrap().allowed);
    // A bad cost or burst runs nothing.
    let calls = store.data().evalsha_calls;
    assert!(matches!(
        consume(&mut *store, &gcra, 4.0),
        Err(Error::InvalidArgument { ref field, .. }) if field == "cost"
    ));
    let bad = RateLimit::Gcra(GcraLimit {
        uses: 10.0,
        window_ms: 60_000.0,
        burst: Some(0.5),
    });
    assert!(matches!(
        consume(&mut *store, &bad, 1.0),
        Err(Error::InvalidLimit { field: "burst", .. })
    ));
    assert_eq!(store.data().evalsha_calls, calls);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(f.key("gcr:", "k"))
        .query(&mut connection())
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "the bucket's key expires: {ttl}");
}

fn weighted(key: &str, uses: f64, window_ms: f64, cost: f64) -> Entry {
    Entry {
        cost: Some(cost),
        ..entry(key, uses, window_ms)
    }
}

/// Weighted calls on the real server: a call costing `n` is `n` members of the log (the weighted
/// script), refused while `n` more do not fit, and its release removes exactly those `n`; a bad cost is
/// `invalid-argument` naming `cost` with no command run.
#[test]
fn weighted_calls_take_their_cost_and_a_release_gives_back_exactly_it() {
    let mut f = Fixture::new("weighted");
    let mut con = connection();
    let log = f.key("log:", "k");
    let (allowed, token) = f.consume(&[weighted("k", 5.0, 60_000.0, 3.0)]);
    assert!(allowed.unwrap().allowed);
    let members: u64 = redis::cmd("ZCARD").arg(&log).query(&mut con).unwrap();
    assert_eq!(members, 3);
    let (refused, none) = f.consume(&[weighted("k", 5.0, 60_000.0, 3.0)]);
    assert!(!refused.unwrap().allowed && none.is_none());
    assert!(
        f.peek(&[weighted("k", 5.0, 60_000.0, 2.0)])
            .unwrap()
            .allowed
    );
    // A batch: the other key takes its own cost; all or nothing.
    let (batch, batch_token) = f.consume(&[
        weighted("k", 5.0, 60_000.0, 2.0),
        weighted("g", 10.0, 60_000.0, 4.0),
    ]);
    assert!(batch.unwrap().allowed);
    let g: u64 = redis::cmd("ZCARD")
        .arg(f.key("log:", "g"))
        .query(&mut con)
        .unwrap();
    assert_eq!(g, 4);
    assert!(f.release(batch_token.unwrap()).unwrap());
    let (k_left, g_left): (u64, u64) = (
        redis::cmd("ZCARD").arg(&log).query(&mut con).unwrap(),
        redis::cmd("ZCARD")
            .arg(f.key("log:", "g"))
            .query(&mut con)
            .unwrap(),
    );
    assert_eq!((k_left, g_left), (3, 0));
    assert!(f.release(token.unwrap()).unwrap());
    let members: u64 = redis::cmd("ZCARD").arg(&log).query(&mut con).unwrap();
    assert_eq!(members, 0);

    // consume-cost / peek-cost: the single calls, answered as a batch of one.
    let (store, redis) = f.world.split_redis();
    let limit = Limit {
        uses: 5.0,
        window_ms: 60_000.0,
    };
    let one = redis
        .redis_store()
        .call_consume_cost(&mut *store, f.store, "one", limit, 4.0)
        .unwrap()
        .unwrap();
    assert!(one.verdict.allowed && one.release.is_some());
    assert_eq!(one.verdict.remaining, 1);
    let peek = redis
        .redis_store()
        .call_peek_cost(&mut *store, f.store, "one", limit, 2.0)
        .unwrap()
        .unwrap();
    assert!(!peek.allowed && peek.remaining == 1 && peek.retry_after_ms > 0);
    let calls_before = store.data().evalsha_calls + store.data().eval_calls;
    for bad in [0.0, 6.0, 1.5, -1.0, f64::NAN] {
        let err = redis
            .redis_store()
            .call_consume_cost(&mut *store, f.store, "one", limit, bad)
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(Error::from(err), Error::InvalidArgument { ref field, .. } if field == "cost"),
            "cost {bad}"
        );
    }
    assert_eq!(
        store.data().evalsha_calls + store.data().eval_calls,
        calls_before,
        "a bad cost runs no command"
    );
}
