//! The `lock` interface of the `hosted` world: the lock vectors (`tests/vectors/lock/lock.json`) on a
//! `clocked-memory` store (this host's clock set to each step's time) and on the real Redis (each
//! step at its offset on the real clock, the `exact` steps skipped), the refused arguments typed as
//! `invalid-argument` naming the field, `block`'s schedule through the imported `clock.sleep-ms`, its
//! `lock-timeout`, and exactly one holder among 4 instances (threads, a Redis connection each) x 64
//! acquirers.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratewindow_host_rs::hosted::exports::ratewindow::engine::redis::RedisOptions;
use ratewindow_host_rs::{Error, HostedWorld};
use serde_json::Value;
use wasmtime::component::ResourceAny;

use crate::redis::{connection, redis_runner};

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/lock/lock.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("lock.json")).expect("JSON")
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "NaN" => f64::NAN,
        Value::String(s) if s == "Infinity" => f64::INFINITY,
        other => other.as_f64().expect("a number"),
    }
}

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("ratewindow-wasm-lock:{}:{nanos}:", std::process::id())
}

/// One component instance and one store (memory or Redis) its locks are made on.
struct Host {
    world: HostedWorld,
    store: ResourceAny,
    redis: bool,
}

impl Host {
    fn memory() -> Host {
        let mut world = HostedWorld::new().unwrap();
        let (store, clocked) = world.split();
        let handle = clocked
            .memory_store()
            .call_constructor(&mut *store)
            .unwrap();
        Host {
            world,
            store: handle,
            redis: false,
        }
    }

    fn redis(prefix: &str) -> Host {
        let mut world = HostedWorld::new().unwrap();
        world.store.data_mut().runner = Some(redis_runner(connection()));
        world.store.data_mut().real_time = true;
        let handle = world
            .redis_store(&RedisOptions {
                prefix: Some(prefix.to_owned()),
                hash_tag_before: None,
                evalsha: None,
            })
            .unwrap();
        Host {
            world,
            store: handle,
            redis: true,
        }
    }

    /// `lock.on-memory` / `lock.on-redis`.
    fn lock(&mut self, key: &str, ttl: f64, owner: Option<&str>) -> Result<ResourceAny, Error> {
        let (store, lock) = self.world.split_lock();
        let l = lock.lock();
        let made = if self.redis {
            l.call_on_redis(&mut *store, self.store, key, ttl, owner)
        } else {
            l.call_on_memory(&mut *store, self.store, key, ttl, owner)
        };
        made.unwrap().map_err(Into::into)
    }

    fn acquire(&mut self, lock: ResourceAny) -> Result<bool, Error> {
        let (store, g) = self.world.split_lock();
        g.lock()
            .call_acquire(&mut *store, lock)
            .unwrap()
            .map_err(Into::into)
    }

    fn block(&mut self, lock: ResourceAny, seconds: f64, retry_ms: f64) -> Result<(), Error> {
        let (store, g) = self.world.split_lock();
        g.lock()
            .call_block(&mut *store, lock, seconds, retry_ms)
            .unwrap()
            .map_err(Into::into)
    }

    fn release(&mut self, lock: ResourceAny) -> Result<bool, Error> {
        let (store, g) = self.world.split_lock();
        g.lock()
            .call_release(&mut *store, lock)
            .unwrap()
            .map_err(Into::into)
    }

    fn force_release(&mut self, lock: ResourceAny) -> Result<bool, Error> {
        let (store, g) = self.world.split_lock();
        g.lock()
            .call_force_release(&mut *store, lock)
            .unwrap()
            .map_err(Into::into)
    }

    fn owner(&mut self, lock: ResourceAny) -> Result<Option<String>, Error> {
        let (store, g) = self.world.split_lock();
        g.lock()
            .call_owner(&mut *store, lock)
            .unwrap()
            .map_err(Into::into)
    }

    fn token(&mut self, lock: ResourceAny) -> String {
        let (store, g) = self.world.split_lock();
        g.lock().call_owner_token(&mut *store, lock).unwrap()
    }

    fn drop_lock(&mut self, lock: ResourceAny) {
        lock.resource_drop(&mut self.world.store).unwrap();
    }

    /// One vector step (`ttl` 1 s where the step carries none): what it answers, as JSON.
    fn step(&mut self, step: &Value, prefix: &str) -> Value {
        let key = format!("{prefix}{}", step["key"].as_str().unwrap());
        let owner = step["owner"].as_str();
        let ttl = if step["ttl"].is_null() {
            1.0
        } else {
            number(&step["ttl"])
        };
        let lock = self.lock(&key, ttl, owner.or(Some("someone"))).unwrap();
        let got = match step["op"].as_str().unwrap() {
            "acquire" => Value::Bool(self.acquire(lock).unwrap()),
            "release" => Value::Bool(self.release(lock).unwrap()),
            "force_release" => Value::Bool(self.force_release(lock).unwrap()),
            "owner" => self.owner(lock).unwrap().map_or(Value::Null, Value::String),
            other => panic!("unknown op {other}"),
        };
        self.drop_lock(lock);
        got
    }
}

/// Every case: on memory the host's clock is set to each step's time (`at` from a Unix-ms base); on
/// Redis each step runs at its offset from the case's start on the real clock, `exact` steps skipped.
fn run_cases(host: &mut Host) {
    for case in vectors()["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prefix = unique();
        let start = Instant::now();
        for step in case["steps"].as_array().unwrap() {
            let at = step["at"].as_u64().unwrap();
            if host.redis {
                if step["exact"] == true {
                    continue;
                }
                let due = start + Duration::from_millis(at);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            } else {
                host.world.store.data_mut().clock_ms = 1_700_000_000_000 + at;
            }
            let got = host.step(step, &prefix);
            assert_eq!(got, step["expect"], "{name}: {step}");
        }
    }
}

#[test]
fn lock_vectors_on_the_clocked_memory_store() {
    run_cases(&mut Host::memory());
}

#[test]
fn lock_vectors_on_redis() {
    run_cases(&mut Host::redis(&unique()));
}

#[test]
fn refused_arguments_are_invalid_argument_naming_the_field() {
    let mut host = Host::memory();
    let held = host.lock("job", 5.0, Some("holder")).unwrap();
    assert!(host.acquire(held).unwrap());
    for case in vectors()["errors"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let got = match case["op"].as_str().unwrap() {
            "acquire" => host
                .lock(
                    "job",
                    number(&case["ttl"]),
                    Some(case["owner"].as_str().unwrap()),
                )
                .map(|_| ())
                .unwrap_err(),
            "block" => {
                let lock = host.lock("job", 1.0, None).unwrap();
                let e = host
                    .block(lock, number(&case["seconds"]), number(&case["retry_ms"]))
                    .unwrap_err();
                host.drop_lock(lock);
                e
            }
            other => panic!("{other}"),
        };
        // WIT spells `retry_ms` as `retry-ms`.
        let want = case["error"].as_str().unwrap().replace('_', "-");
        match got {
            Error::InvalidArgument { field, .. } => assert_eq!(field, want, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    // Nothing changed: the holder still holds it, and no wait slept.
    assert_eq!(host.owner(held).unwrap().as_deref(), Some("holder"));
    assert!(host.world.store.data().slept_ms.is_empty());
}

/// `block`'s schedule, on this host's clock (`sleep-ms` moves it): the waits whose tries follow one
/// another exactly (no late wake-up) and end by giving up.
#[test]
fn block_sleeps_the_cores_schedule_then_times_out() {
    let mut host = Host::memory();
    let mut ran = 0;
    for case in vectors()["waits"].as_array().unwrap() {
        let Some(refusals) = case["refusals"].as_array() else {
            continue;
        };
        let sleeps: Vec<Option<u64>> = refusals.iter().map(|r| r["sleep"].as_u64()).collect();
        let ats: Vec<u64> = refusals.iter().map(|r| r["at"].as_u64().unwrap()).collect();
        let chained = ats
            .windows(2)
            .zip(&sleeps)
            .all(|(w, s)| Some(w[1] - w[0]) == *s);
        if !chained || sleeps.last() != Some(&None) {
            continue;
        }
        let key = format!("wait:{}", case["name"].as_str().unwrap());
        host.world.store.data_mut().clock_ms = case["start"].as_u64().unwrap();
        let held = host.lock(&key, 1e9, Some("holder")).unwrap();
        assert!(host.acquire(held).unwrap());
        let waiter = host.lock(&key, 1.0, None).unwrap();
        host.world.store.data_mut().slept_ms.clear();
        let got = host.block(waiter, number(&case["seconds"]), number(&case["retry_ms"]));
        assert_eq!(
            got,
            Err(Error::LockTimeout(key.clone())),
            "{}",
            case["name"]
        );
        let want: Vec<u64> = sleeps.iter().flatten().copied().collect();
        assert_eq!(host.world.store.data().slept_ms, want, "{}", case["name"]);
        ran += 1;
    }
    assert!(ran >= 2, "waits run: {ran}");

    // A lock that frees itself while waiting (at 5,500) is taken by the next try (5,600).
    host.world.store.data_mut().clock_ms = 5_000;
    let held = host.lock("frees", 0.5, Some("holder")).unwrap();
    assert!(host.acquire(held).unwrap());
    let waiter = host.lock("frees", 1.0, Some("waiter")).unwrap();
    assert_eq!(host.block(waiter, 2.0, 200.0), Ok(()));
    assert_eq!(host.owner(waiter).unwrap().as_deref(), Some("waiter"));
    assert_eq!(host.world.store.data().slept_ms, [200, 200, 200]);
}

#[test]
fn block_on_redis_waits_on_the_real_clock() {
    let mut host = Host::redis(&unique());
    let held = host.lock("job", 0.3, None).unwrap();
    let waiter = host.lock("job", 5.0, None).unwrap();
    assert!(host.acquire(held).unwrap());
    assert!(!host.acquire(waiter).unwrap());
    let start = Instant::now();
    assert_eq!(
        host.block(waiter, 0.1, 20.0),
        Err(Error::LockTimeout("job".into()))
    );
    assert_eq!(host.block(waiter, 3.0, 20.0), Ok(()));
    assert!(start.elapsed() >= Duration::from_millis(250));
    let token = host.token(waiter);
    assert_eq!(host.owner(held).unwrap(), Some(token.clone()));
    // Restored from its token by another lock object, and released by it.
    let restored = host.lock("job", 5.0, Some(&token)).unwrap();
    assert!(host.release(restored).unwrap());
    assert_eq!(host.owner(held).unwrap(), None);
}

/// 4 instances on 4 threads, each with its own Redis connection, race 64 locks each for one key:
/// exactly one holder.
#[test]
fn exactly_one_holder_among_4_instances_x_64_acquirers_on_redis() {
    let prefix = unique();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let prefix = prefix.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut host = Host::redis(&prefix);
                let locks: Vec<ResourceAny> = (0..64)
                    .map(|_| host.lock("race", 60.0, None).unwrap())
                    .collect();
                barrier.wait();
                let mut won = Vec::new();
                for lock in locks {
                    if host.acquire(lock).unwrap() {
                        won.push(host.token(lock));
                    }
                }
                won
            })
        })
        .collect();
    let won: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(won.len(), 1, "exactly one holder: {won:?}");
    let mut host = Host::redis(&prefix);
    let any = host.lock("race", 60.0, None).unwrap();
    assert_eq!(host.owner(any).unwrap(), Some(won[0].clone()));
    assert!(host.force_release(any).unwrap());
}

#[test]
fn a_redis_store_with_a_refused_prefix_refuses_every_lock_call() {
    let mut host = Host::redis("bad:lck:");
    let lock = host.lock("job", 1.0, None).unwrap();
    match host.acquire(lock) {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "prefix"),
        other => panic!("{other:?}"),
    }
}
