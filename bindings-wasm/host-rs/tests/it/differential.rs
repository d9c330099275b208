//! The component against the native core: long random sequences of every operation (times that jump
//! and step back, shared keys, batches, releases, fixed windows, invalid limits) must give identical
//! answers in wasmtime and natively.

use ratewindow_core::{Entry, Limit as CoreLimit, MemoryStore, Release, Window};
use ratewindow_host_rs::{EngineWorld, Error, HostedWorld, Limit, Ops, Verdict};

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const KEYS: [&str; 5] = ["a", "b", "c", "user:ü", ""];

fn limit(rng: &mut Rng) -> Limit {
    // Mostly valid; sometimes invalid in either field.
    match rng.below(20) {
        0 => Limit {
            uses: 0.0,
            window_ms: 100.0,
        },
        1 => Limit {
            uses: 1.0,
            window_ms: f64::NAN,
        },
        _ => Limit {
            uses: (1 + rng.below(4)) as f64,
            window_ms: (1 + rng.below(300)) as f64,
        },
    }
}

fn native_error(e: ratewindow_core::LimitError) -> Error {
    let field = match e.field {
        ratewindow_core::LimitField::Uses => "uses",
        ratewindow_core::LimitField::WindowMs => "window_ms",
    };
    Error::InvalidLimit {
        field,
        value: e.value,
    }
}

fn verdict(v: ratewindow_core::Verdict) -> Verdict {
    Verdict {
        allowed: v.allowed,
        retry_after_ms: v.retry_after_ms,
        retry_timestamp: v.retry_timestamp,
        blocked: None,
        limit: v.quota.limit,
        remaining: v.quota.remaining,
        refill_after_ms: v.quota.refill_after_ms,
        reset_after_ms: v.quota.reset_after_ms,
    }
}

fn batch(v: ratewindow_core::BatchVerdict) -> Verdict {
    Verdict {
        allowed: v.allowed,
        retry_after_ms: v.retry_after_ms,
        retry_timestamp: v.retry_timestamp,
        blocked: v.blocked.map(|b| b as u32),
        limit: v.quota.limit,
        remaining: v.quota.remaining,
        refill_after_ms: v.quota.refill_after_ms,
        reset_after_ms: v.quota.reset_after_ms,
    }
}

fn run(world: &mut dyn Ops, seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let native = MemoryStore::new();
    let mut releases: Vec<(String, Option<Release>)> = Vec::new();
    world.fresh_store().unwrap();
    let mut now: u64 = 1_000_000;
    for step in 0..steps {
        // Time mostly moves forward, sometimes jumps, sometimes steps back.
        match rng.below(10) {
            0 => now = now.saturating_sub(rng.below(500)),
            1 => now += rng.below(2_000),
            _ => now += rng.below(40),
        }
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        let ctx = format!("seed {seed} step {step} at {now}");
        match rng.below(12) {
            0..=2 => {
                let l = limit(&mut rng);
                let want = CoreLimit::from_f64(l.uses, l.window_ms)
                    .map(|cl| verdict(native.consume(key, cl, now)))
                    .map_err(native_error);
                assert_eq!(world.consume(key, l, now).unwrap(), want, "consume {ctx}");
            }
            3 => {
                let l = limit(&mut rng);
                let want = CoreLimit::from_f64(l.uses, l.window_ms)
                    .map(|cl| verdict(native.peek(key, cl, now)))
                    .map_err(native_error);
                assert_eq!(world.peek(key, l, now).unwrap(), want, "peek {ctx}");
            }
            4 | 5 => {
                let list: Vec<(String, Limit)> = (0..rng.below(4))
                    .map(|_| {
                        (
                            KEYS[rng.below(KEYS.len() as u64) as usize].to_owned(),
                            limit(&mut rng),
                        )
                    })
                    .collect();
                let entries: Result<Vec<Entry>, Error> = list
                    .iter()
                    .map(|(k, l)| {
                        CoreLimit::from_f64(l.uses, l.window_ms).map(|cl| Entry::new(k.clone(), cl))
                    })
                    .collect::<Result<_, _>>()
                    .map_err(native_error);
                let id = format!("r{step}");
                if rng.below(2) == 0 {
                    let want = entries.map(|e| {
                        let consumed = native.consume_many(&e, now);
                        releases.push((id.clone(), consumed.release));
                        batch(consumed.verdict)
                    });
                    assert_eq!(
                        world.consume_many(&list, now, Some(&id)).unwrap(),
                        want,
                        "consume-many {ctx}"
                    );
                } else {
                    let want = entries.map(|e| batch(native.peek_many(&e, now)));
                    assert_eq!(
                        world.peek_many(&list, now).unwrap(),
                        want,
                        "peek-many {ctx}"
                    );
                }
            }
            6 => {
                // Release one earlier batch (maybe again).
                if !releases.is_empty() {
                    let i = rng.below(releases.len() as u64) as usize;
                    if let Some(r) = releases[i].1.take() {
                        native.release(r, now);
                    }
                    world.release(&releases[i].0.clone(), now).unwrap();
                }
            }
            7 | 8 => {
                let decay = if rng.below(15) == 0 {
                    -1.0
                } else {
                    (1 + rng.below(400)) as f64
                };
                let amount = rng.below(5) as i64 - 1;
                let want = Window::from_f64(decay)
                    .map(|w| native.hit(key, w, amount, now))
                    .map_err(native_error);
                assert_eq!(
                    world.hit(key, decay, amount, now).unwrap(),
                    want,
                    "hit {ctx}"
                );
            }
            9 => {
                let max = rng.below(5) as i64;
                assert_eq!(
                    world.attempts(key, now).unwrap(),
                    native.attempts(key, now),
                    "attempts {ctx}"
                );
                assert_eq!(
                    world.remaining(key, max, now).unwrap(),
                    native.remaining(key, max, now),
                    "remaining {ctx}"
                );
                assert_eq!(
                    world.too_many_attempts(key, max, now).unwrap(),
                    native.too_many_attempts(key, max, now),
                    "too-many-attempts {ctx}"
                );
            }
            10 => {
                assert_eq!(
                    world.available_in(key, now).unwrap(),
                    native.available_in(key, now),
                    "available-in {ctx}"
                );
                assert_eq!(
                    world.available_in_ms(key, now).unwrap(),
                    native.available_in_ms(key, now),
                    "available-in-ms {ctx}"
                );
            }
            _ => {
                if rng.below(2) == 0 {
                    native.reset_attempts(key, now);
                    world.reset_attempts(key, now).unwrap();
                } else {
                    native.clear(key);
                    world.clear(key, now).unwrap();
                }
            }
        }
    }
}

#[test]
fn engine_world_matches_the_native_core() {
    let mut world = EngineWorld::new().unwrap();
    for seed in 1..=8 {
        run(&mut world, seed * 0x9e37_79b9_7f4a_7c15, 4_000);
    }
}

#[test]
fn hosted_world_matches_the_native_core() {
    let mut world = HostedWorld::new().unwrap();
    for seed in 11..=14 {
        run(&mut world, seed * 0x9e37_79b9_7f4a_7c15, 4_000);
    }
}
