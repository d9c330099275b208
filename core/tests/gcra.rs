//! GCRA: the core's pair arithmetic (ms plus a remainder in 1/uses ms) against a naive model in
//! 128-bit scaled time (every time multiplied by `uses`), random costs and clocks that step back; the
//! burst bound in any window; the memory store against the pure rule; typed errors.
#![cfg(feature = "rates")]

use proptest::prelude::*;
use ratewindow_core::gcra::{Gcra, RateField, Tat};
use ratewindow_core::{MemoryStore, Quota, Verdict, MAX_WINDOW_MS};

/// The model: times scaled by `uses`, so the emission interval is `window_ms` exactly.
#[derive(Debug, Clone, Copy)]
struct Model {
    uses: u128,
    window: u128,
    burst: u128,
}

impl Model {
    fn of(g: Gcra) -> Model {
        Model {
            uses: g.uses() as u128,
            window: g.window_ms() as u128,
            burst: g.burst() as u128,
        }
    }

    fn ceil_ms(&self, scaled: u128) -> u128 {
        scaled.div_ceil(self.uses)
    }

    /// (verdict, new scaled TAT if stored).
    fn decide(
        &self,
        tat: Option<u128>,
        n: u128,
        now: u64,
        record: bool,
    ) -> (Verdict, Option<u128>) {
        let now_s = now as u128 * self.uses;
        let tau = self.burst * self.window;
        let s = tat.unwrap_or(0).max(now_s);
        let new = s + n * self.window;
        let quota = |after: u128| {
            let remaining = if after > now_s + tau {
                0
            } else {
                ((now_s + tau - after) / self.window).min(self.burst)
            };
            let refill = if remaining == self.burst {
                0
            } else {
                self.ceil_ms(after + (remaining + 1) * self.window - tau) - now as u128
            };
            Quota {
                limit: self.burst as u32,
                remaining: remaining as u32,
                refill_after_ms: refill as u64,
                reset_after_ms: (self.ceil_ms(after) - now as u128) as u64,
            }
        };
        if new > now_s + tau {
            let retry = self.ceil_ms(new - tau) as u64;
            let v = Verdict {
                allowed: false,
                retry_after_ms: retry - now,
                retry_timestamp: Some(retry),
                quota: quota(s),
            };
            return (v, None);
        }
        let after = if record { new } else { s };
        (
            Verdict::ALLOWED.with_quota(quota(after)),
            record.then_some(new),
        )
    }
}

fn scaled(t: Tat, uses: u32) -> u128 {
    assert_eq!(t.per, uses);
    assert!(t.rem < uses, "remainder {} of {}", t.rem, uses);
    t.ms as u128 * uses as u128 + t.rem as u128
}

fn limits() -> impl Strategy<Value = Gcra> {
    prop_oneof![
        (1u64..12, 1u64..5_000, 1u64..15),
        (1u64..1_000_000, 1u64..100_000_000, 1u64..100),
        (1u64..4, 1u64..MAX_WINDOW_MS / 2, 1u64..2),
    ]
    .prop_filter_map("exact range", |(u, w, b)| Gcra::new(u, w, b).ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Random calls (costs within the burst, times that jump ahead or step back): the same verdict and
    /// the same stored time as the model, every field.
    #[test]
    fn the_pair_arithmetic_is_the_scaled_model(
        g in limits(),
        steps in prop::collection::vec((0u64..3_000, any::<bool>(), 1u64..20, any::<bool>()), 1..60),
    ) {
        let m = Model::of(g);
        let (mut tat, mut mtat): (Option<Tat>, Option<u128>) = (None, None);
        let mut now = 1_700_000_000_000u64;
        for (dt, back, cost, record) in steps {
            now = if back { now.saturating_sub(dt) } else { now + dt * (g.window_ms() / 100 + 1) };
            let cost = (cost % g.burst() as u64) + 1;
            let d = g.decide(tat, cost as u32, now, record);
            let (want, stored) = m.decide(mtat, cost as u128, now, record);
            prop_assert_eq!(d.verdict, want, "at {} cost {}", now, cost);
            prop_assert_eq!(d.store.map(|t| scaled(t, g.uses())), stored);
            if let Some(t) = d.store {
                tat = Some(t);
                mtat = stored;
            }
        }
    }

    /// However calls arrive (costs, steps back), the uses admitted with times in any window of
    /// `window_ms` (`t - window_ms + 1 ..= t`) never pass `burst + uses - 1`, nor `burst` at one time.
    #[test]
    fn no_window_admits_more_than_burst_plus_uses_minus_one(
        (uses, window, burst) in (1u64..8, 1u64..400, 1u64..8),
        steps in prop::collection::vec((0u64..60, 0u8..4, 1u64..4), 1..300),
    ) {
        let g = Gcra::new(uses, window, burst).unwrap();
        let mut tat = None;
        let mut now = 10_000u64;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (dt, kind, cost) in steps {
            now = if kind == 0 { now.saturating_sub(dt) } else { now + dt };
            let cost = cost.min(burst);
            let d = g.decide(tat, cost as u32, now, true);
            if let Some(t) = d.store {
                tat = Some(t);
                admitted.push((now, cost));
            }
        }
        for &(t, _) in &admitted {
            let inside: u64 = admitted
                .iter()
                .filter(|&&(a, _)| a <= t && t - a < window)
                .map(|&(_, c)| c)
                .sum();
            prop_assert!(inside < burst + uses, "{} uses in the window ending at {}", inside, t);
            let at_once: u64 = admitted.iter().filter(|&&(a, _)| a == t).map(|&(_, c)| c).sum();
            prop_assert!(at_once <= burst);
        }
    }

    /// The memory store on a moving clock gives the pure rule's verdicts, key by key.
    #[test]
    fn the_store_is_the_rule(
        g in limits(),
        steps in prop::collection::vec((0u64..2_000, 0usize..3, 1u64..6, any::<bool>()), 1..80),
    ) {
        let store = MemoryStore::with_shards(2);
        let mut tats: [Option<Tat>; 3] = [None; 3];
        let mut now = 1_000u64;
        for (dt, k, cost, peek) in steps {
            now += dt;
            let cost = (cost - 1) % g.burst() as u64 + 1;
            let key = format!("g{k}");
            let d = g.decide(tats[k], cost as u32, now, !peek);
            let got = if peek {
                store.gcra_peek(&key, g, cost, now).unwrap()
            } else {
                store.gcra_consume(&key, g, cost, now).unwrap()
            };
            prop_assert_eq!(got, d.verdict);
            if let Some(t) = d.store {
                tats[k] = Some(t);
            }
        }
    }
}

#[test]
fn limits_and_costs_out_of_range_are_typed_errors() {
    let cases = [
        (Gcra::new(0, 1_000, 1), RateField::Uses),
        (Gcra::new(1 << 32, 1_000, 1), RateField::Uses),
        (Gcra::new(1, 0, 1), RateField::WindowMs),
        (Gcra::new(1, MAX_WINDOW_MS + 1, 1), RateField::WindowMs),
        (Gcra::new(1, 1_000, 0), RateField::Burst),
        // burst x window_ms past 2^53 - 1: 10^9 a day with the default burst.
        (
            Gcra::new(1_000_000_000, 86_400_000, 1_000_000_000),
            RateField::Burst,
        ),
        // τ = burst x T past the longest window.
        (Gcra::new(1, MAX_WINDOW_MS, 2), RateField::Burst),
    ];
    for (got, field) in cases {
        assert_eq!(got.unwrap_err().field, field);
    }
    assert!(Gcra::new(100_000_000, 86_400_000, 100_000_000).is_ok());
    let g = Gcra::new(5, 1_000, 3).unwrap();
    let store = MemoryStore::new();
    for cost in [0, 4, u64::MAX] {
        assert_eq!(
            store.gcra_consume("k", g, cost, 0).unwrap_err().field,
            RateField::Cost
        );
        assert_eq!(
            store.gcra_peek("k", g, cost, 0).unwrap_err().field,
            RateField::Cost
        );
    }
    assert!(store.is_empty(), "an error changes nothing");
    let err = store.gcra_consume("k", g, 4, 0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid cost: 4 (expected a whole number from 1 to the limit's burst (GCRA) or uses)"
    );
}

#[test]
fn a_full_bucket_is_no_key_and_is_swept() {
    let store = MemoryStore::with_shards(1);
    let g = Gcra::new(10, 1_000, 10).unwrap(); // T = 100 ms
    for i in 0..100u64 {
        let v = store
            .gcra_consume(&format!("k{i}"), g, 3, 1_000_000)
            .unwrap();
        assert_eq!(
            (v.allowed, v.quota.remaining, v.quota.reset_after_ms),
            (true, 7, 300)
        );
    }
    assert_eq!(store.len(), 100);
    // One ms before the TAT the keys live; at the TAT they are full and go.
    assert_eq!(
        store
            .gcra_peek("k0", g, 1, 1_000_299)
            .unwrap()
            .quota
            .remaining,
        9
    );
    store.purge(1_000_299);
    assert_eq!(store.len(), 100);
    store.purge(1_000_300);
    assert_eq!(store.len(), 0);
    // The incremental sweep also removes them as the store is used.
    for i in 0..100u64 {
        let _ = store
            .gcra_consume(&format!("k{i}"), g, 1, 2_000_000)
            .unwrap();
    }
    for _ in 0..200 {
        let _ = store.gcra_consume("hot", g, 1, 3_000_000).unwrap();
    }
    assert!(store.len() <= 2, "{} keys left", store.len());
}

#[test]
fn a_clock_behind_the_horizon_finds_no_more_than_the_burst() {
    let store = MemoryStore::with_shards(1);
    let g = Gcra::new(1, 1_000, 2).unwrap();
    // Two uses at 0; the horizon moves to 5,000 with another key (the bucket is full again there).
    assert!(store.gcra_consume("a", g, 2, 0).unwrap().allowed);
    assert!(store.gcra_consume("b", g, 1, 5_000).unwrap().allowed);
    store.purge(5_000);
    // The clock steps back to 1: "a" is gone (full at the horizon); a call there counts from the
    // horizon, so the key is not dead on arrival and the bucket gives at most its burst.
    assert!(store.gcra_consume("a", g, 2, 1).unwrap().allowed);
    let refused = store.gcra_consume("a", g, 1, 2).unwrap();
    assert!(!refused.allowed);
    assert!(refused.retry_timestamp.unwrap() > 5_000);
}

#[test]
fn reset_and_a_changed_rate() {
    let store = MemoryStore::new();
    let g = Gcra::new(3, 1_000, 1).unwrap();
    assert!(store.gcra_consume("k", g, 1, 0).unwrap().allowed);
    assert!(!store.gcra_consume("k", g, 1, 1).unwrap().allowed);
    store.gcra_reset("k");
    assert!(store.gcra_consume("k", g, 1, 1).unwrap().allowed); // TAT 334 1/3
                                                                // Read under another `uses`, the TAT rounds up to the whole ms: 335 (never more uses).
    let h = Gcra::new(2, 1_000, 1).unwrap();
    let v = store.gcra_peek("k", h, 1, 2).unwrap();
    assert_eq!(v.retry_timestamp, Some(335));
}
