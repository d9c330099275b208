//! GCRA, the generic cell rate algorithm: a token bucket kept as one time per key.
//!
//! A [`Gcra`] allows `uses` per `window_ms` on average, and up to `burst` at once (by default
//! `burst = uses`, as governor's `Quota::per_minute(n)` does). A key keeps one value, its
//! *theoretical arrival time* (TAT): the moment at which its bucket is full again.
//!
//! ## The rule
//!
//! Let `T = window_ms / uses` (the emission interval: one use comes back every `T` ms) and
//! `τ = burst · T` (the bucket's capacity in time). A call at `now` costing `n` (1 ≤ n ≤ burst):
//!
//! ```text
//! S   = max(TAT, now)                      // a key that is absent or idle is full: S = now
//! new = S + n·T
//! allowed  iff  new ≤ now + τ              // then TAT := new (a peek stores nothing)
//! ```
//!
//! - **remaining** (after the call; as it stands for a peek or a refusal) =
//!   `min(burst, floor((now + τ − S') / T))`, where `S'` is `new` after an allowed consume and `S`
//!   otherwise; 0 when `S' > now + τ`. A refusal of a call costing more than what remains reports
//!   the uses that do remain (so a refusal can carry `remaining > 0`).
//! - **retry_timestamp** of a refusal = `ceil(S + n·T − τ)`: the first whole ms at which `n` uses are
//!   there; `retry_after_ms = retry_timestamp − now` (≥ 1).
//! - **refill_after_ms** = ms until `remaining` grows by one: `ceil(S' + (remaining + 1)·T − τ) − now`;
//!   0 when the bucket is full. (For a refusal of cost 1 it equals `retry_after_ms`; for a larger
//!   cost it is the wait for the next single use, shorter than the retry.)
//! - **reset_after_ms** = ms until the bucket is full: `ceil(S') − now`; 0 when full.
//! - **limit** = `burst` (the most a full bucket allows at once).
//!
//! A key whose TAT is `≤ now` is full, so it is the same as no key: the store removes it once its
//! TAT (rounded up to a whole ms) is behind the store's horizon. A clock that steps back (`now`
//! behind the stored TAT's past) never lowers the TAT: `S = max(TAT, now)` only grows, so a step back
//! can only find fewer uses, never more than `burst`. Nothing is recorded by a refusal.
//!
//! In any run of calls admitted within a span of `d` ms, at most `burst + d · uses / window_ms` are
//! admitted (the TAT grows by `T` per use from the first one's time, and may lead `now` by at most
//! `τ`): in a sliding window of `window_ms` (times `t − window_ms + 1 ..= t`) at most
//! `burst + uses − 1`.
//!
//! ## Exact integer arithmetic (copy this into Lua and SQL)
//!
//! `T` is rarely a whole ms, so no time is a float. A time is a pair `(ms, rem)` meaning
//! `ms + rem / uses`, with `0 ≤ rem < uses`. The limit's constants:
//!
//! ```text
//! (τq, τr) = divmod(burst · window_ms, uses)         // τ as a pair
//! ```
//!
//! Adding `n` uses to `(ms, rem)`: `(q, r) = divmod(n · window_ms, uses)`; `rem' = rem + r`;
//! `ms' = ms + q`; if `rem' ≥ uses` then `rem' −= uses, ms' += 1`.
//! Comparing pairs is lexicographic (`(ms, rem) ≤ (ms2, rem2)`). `now` is `(now, 0)`.
//! `remaining`: with `S' ≤ now + τ`, `slack = (now + τq − S'.ms) · uses + τr − S'.rem` (an integer
//! `≤ burst · window_ms`), `remaining = min(burst, floor(slack / window_ms))`.
//! `ceil(X − τ)` for a pair `X ≥ now + τ`: `(ms, rem) = (X.ms − τq, X.rem − τr)`, borrowing one ms
//! (`rem += uses`) when `X.rem < τr`; then `ms + (rem > 0 ? 1 : 0)`.
//!
//! A stored TAT also keeps the `uses` its `rem` is counted in. A key read under another `uses` rounds
//! its TAT up to the next whole ms (`rem > 0 ⇒ ms += 1, rem = 0`): never more uses, and no
//! multiplication that could leave the exact range.
//!
//! **Ranges.** A limit is accepted when `1 ≤ uses, burst ≤ 2^32 − 1`, `1 ≤ window_ms ≤
//! 4.32·10^15` ([`MAX_WINDOW_MS`]), `burst · window_ms ≤ 2^53 − 1` and
//! `τ ≤ MAX_WINDOW_MS`; a cost must be `1 ≤ n ≤ burst` (a cost above the burst could never be
//! allowed, so it is an error rather than a refusal with an endless wait). Then every product above
//! is `≤ burst · window_ms ≤ 2^53 − 1`, and every time is `≤ now + 2τ + 1`: exact in a Lua double
//! and in a PostgreSQL `bigint` for `now ≤ 2^53 − 1 − 2 · MAX_WINDOW_MS` (year 13,600). The Rust
//! code uses `u64` with saturation past that.

use serde::{Deserialize, Serialize};

use crate::error::MAX_WINDOW_MS;
use crate::{Limit, Quota, Verdict};

/// The largest integer a double holds exactly: every product of the arithmetic stays within it.
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// Division by a constant `d` (1 to 2^53 − 1) of any `x < 2^53`, by one widening multiply and a
/// shift (Granlund–Montgomery, round-up variant): `m = ceil(2^(53+ℓ) / d)` with `ℓ = ceil(log2 d)`
/// gives `floor(x / d) = (x · m) >> (53 + ℓ)` exactly for every `x < 2^53`, since
/// `m · d − 2^(53+ℓ) < d ≤ 2^ℓ`. `m < 2^54`, so `x · m < 2^107`. The shift is taken as the high
/// word of `(x · 2^11) · m` (`x · 2^11 < 2^64`), then `>> ℓ`: a multiply and two 64-bit shifts, where
/// a 128-bit shift by a variable amount needs a branch or a select. A hardware 64-bit division
/// costs 25 to 90 cycles; a call divides two or three times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Divisor {
    m: u64,
    /// ℓ = ceil(log2 d), 0 to 53.
    l: u32,
}

impl Divisor {
    fn new(d: u64) -> Divisor {
        debug_assert!((1..=MAX_EXACT).contains(&d));
        let l = 64 - (d - 1).leading_zeros(); // ceil(log2 d); 0 for d = 1
        let m = (1u128 << (53 + l)).div_ceil(d as u128) as u64;
        Divisor { m, l }
    }

    /// `floor(x / d)` for `x < 2^53`.
    #[inline]
    fn div(self, x: u64) -> u64 {
        debug_assert!(x <= MAX_EXACT);
        ((((x << 11) as u128 * self.m as u128) >> 64) as u64) >> self.l
    }
}

/// Which parameter of a GCRA, a sliding-window counter or a weighted call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateField {
    /// `uses`: uses per window.
    Uses,
    /// `window_ms`: the window, in ms.
    WindowMs,
    /// `burst`: the most uses at once (GCRA).
    Burst,
    /// `cost`: the uses one call takes.
    Cost,
}

impl RateField {
    /// The field's name as the vectors and the API spell it.
    pub const fn name(self) -> &'static str {
        match self {
            RateField::Uses => "uses",
            RateField::WindowMs => "window_ms",
            RateField::Burst => "burst",
            RateField::Cost => "cost",
        }
    }

    /// The accepted range, in words.
    pub const fn range(self) -> &'static str {
        match self {
            RateField::Uses => {
                "a whole number from 1 to 4294967295, with uses x window_ms at most 2^53 - 1 \
                 for a sliding-window counter"
            }
            RateField::WindowMs => "a whole number of milliseconds from 1 to 4320000000000000",
            RateField::Burst => {
                "a whole number from 1 to 4294967295, with burst x window_ms at most 2^53 - 1 and \
                 burst x window_ms / uses at most 4320000000000000"
            }
            RateField::Cost => "a whole number from 1 to the limit's burst (GCRA) or uses",
        }
    }
}

impl std::fmt::Display for RateField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A GCRA or counter limit, or a call's cost, that cannot be honoured exactly: the field, the value
/// given (as text), and the range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {field}: {value} (expected {})", field.range())]
pub struct RateError {
    /// The refused field.
    pub field: RateField,
    /// The refused value, as text.
    pub value: String,
}

impl RateError {
    /// A refusal of `field` holding `value`.
    pub fn new(field: RateField, value: impl ToString) -> RateError {
        RateError {
            field,
            value: value.to_string(),
        }
    }
}

/// A GCRA limit: `uses` per `window_ms` on average, up to `burst` at once. Checked on construction:
/// every limit that exists is exact in the arithmetic above.
///
/// ```
/// use ratewindow_core::gcra::Gcra;
/// let g = Gcra::new(10, 1_000, 10).unwrap(); // 10 a second, all 10 at once
/// assert_eq!((g.uses(), g.window_ms(), g.burst()), (10, 1_000, 10));
/// assert!(Gcra::new(1_000_000_000, 86_400_000, 1_000_000_000).is_err()); // past 2^53
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawGcra", into = "RawGcra")]
pub struct Gcra {
    uses: u32,
    burst: u32,
    window_ms: u64,
    /// τ = burst · T, as `tau_ms + tau_rem / uses`.
    tau_ms: u64,
    tau_rem: u64,
    /// T = window_ms / uses, as `t_ms + t_rem / uses`.
    t_ms: u64,
    t_rem: u64,
    by_uses: Divisor,
    by_window: Divisor,
}

/// The unchecked wire shape of a GCRA limit (`burst` omitted: `uses`).
#[derive(Serialize, Deserialize)]
struct RawGcra {
    uses: u64,
    window_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    burst: Option<u64>,
}

impl TryFrom<RawGcra> for Gcra {
    type Error = RateError;
    fn try_from(raw: RawGcra) -> Result<Gcra, RateError> {
        Gcra::new(raw.uses, raw.window_ms, raw.burst.unwrap_or(raw.uses))
    }
}

impl From<Gcra> for RawGcra {
    fn from(g: Gcra) -> RawGcra {
        RawGcra {
            uses: g.uses as u64,
            window_ms: g.window_ms,
            burst: Some(g.burst as u64),
        }
    }
}

/// One key's stored state: its theoretical arrival time `ms + rem / per`. 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tat {
    /// Whole ms.
    pub ms: u64,
    /// Fraction of a ms, in units of `1 / per` (`rem < per`).
    pub rem: u32,
    /// The `uses` the fraction is counted in.
    pub per: u32,
}

impl Tat {
    /// The first whole ms at or after this time: when the bucket is full and the key removable.
    #[inline]
    pub const fn expires_at(self) -> u64 {
        self.ms.saturating_add((self.rem > 0) as u64)
    }
}

/// What a GCRA call decides: the verdict, and after an allowed consume the key's new state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The verdict (its quota as described in the module docs).
    pub verdict: Verdict,
    /// The TAT to store: `Some` exactly when the call was allowed and recorded.
    pub store: Option<Tat>,
}

/// A time as `(ms, rem)`: `ms + rem / uses`.
type Pair = (u64, u64);

/// What giving back an allowed call does to its key ([`Gcra::give_back`],
/// [`Counter::give_back`](crate::counter::Counter::give_back)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack<S> {
    /// Leave the key as it is: nothing of the call is left in it.
    Leave,
    /// Store this state.
    Store(S),
    /// The key is empty (full bucket, no count) again: remove it.
    Remove,
}

impl Gcra {
    /// `uses` per `window_ms`, up to `burst` at once. The error names the first field out of range.
    pub fn new(uses: u64, window_ms: u64, burst: u64) -> Result<Gcra, RateError> {
        if uses == 0 || uses > u32::MAX as u64 {
            return Err(RateError::new(RateField::Uses, uses));
        }
        if window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(RateError::new(RateField::WindowMs, window_ms));
        }
        if burst == 0 || burst > u32::MAX as u64 {
            return Err(RateError::new(RateField::Burst, burst));
        }
        let tau = burst as u128 * window_ms as u128;
        if tau > MAX_EXACT as u128 || tau / uses as u128 > MAX_WINDOW_MS as u128 {
            return Err(RateError::new(RateField::Burst, burst));
        }
        let tau = tau as u64;
        Ok(Gcra {
            uses: uses as u32,
            burst: burst as u32,
            window_ms,
            tau_ms: tau / uses,
            tau_rem: tau % uses,
            t_ms: window_ms / uses,
            t_rem: window_ms % uses,
            by_uses: Divisor::new(uses),
            by_window: Divisor::new(window_ms),
        })
    }

    /// A GCRA with `limit`'s rate and `burst = limit.uses()`.
    pub fn from_limit(limit: Limit) -> Result<Gcra, RateError> {
        Gcra::new(limit.uses() as u64, limit.window_ms(), limit.uses() as u64)
    }

    /// Uses per window.
    pub const fn uses(self) -> u32 {
        self.uses
    }

    /// The window, in ms.
    pub const fn window_ms(self) -> u64 {
        self.window_ms
    }

    /// Most uses at once.
    pub const fn burst(self) -> u32 {
        self.burst
    }

    /// Checks a call's cost: `1 ≤ cost ≤ burst`.
    pub fn check_cost(self, cost: u64) -> Result<u32, RateError> {
        if cost == 0 || cost > self.burst as u64 {
            return Err(RateError::new(RateField::Cost, cost));
        }
        Ok(cost as u32)
    }

    /// A stored TAT as a pair in this limit's units (rounded up to a whole ms if it was counted
    /// under another `uses`).
    #[inline]
    fn pair(self, tat: Tat) -> Pair {
        if tat.per == self.uses {
            (tat.ms, tat.rem as u64)
        } else {
            (tat.expires_at(), 0)
        }
    }

    /// `t + n·T`.
    #[inline]
    fn add(self, t: Pair, n: u64) -> Pair {
        let uses = self.uses as u64;
        let (q, r) = if n == 1 {
            (self.t_ms, self.t_rem)
        } else {
            let inc = n * self.window_ms; // n <= burst: <= 2^53 - 1
            let q = self.by_uses.div(inc);
            (q, inc - q * uses)
        };
        let (mut ms, mut rem) = (t.0.saturating_add(q), t.1 + r);
        if rem >= uses {
            rem -= uses;
            ms = ms.saturating_add(1);
        }
        (ms, rem)
    }

    /// `now + τ`.
    #[inline]
    fn limit_at(self, now: u64) -> Pair {
        (now.saturating_add(self.tau_ms), self.tau_rem)
    }

    /// `ceil(x − τ)` for `x ≥ τ` (whole ms).
    #[inline]
    fn ceil_minus_tau(self, x: Pair) -> u64 {
        let (mut ms, mut rem) = (x.0.saturating_sub(self.tau_ms), x.1);
        if rem < self.tau_rem {
            rem += self.uses as u64;
            ms = ms.saturating_sub(1);
        }
        rem -= self.tau_rem;
        ms + (rem > 0) as u64
    }

    /// The quota at `now` of a key whose effective TAT is `s` (`s ≥ now`).
    #[inline(always)]
    fn quota(self, s: Pair, now: u64) -> Quota {
        let top = self.limit_at(now);
        let (remaining, refill_after_ms) = if s > top {
            // Behind a clock that stepped back: nothing remains until the TAT is within τ again.
            (0, self.ceil_minus_tau(self.add(s, 1)).saturating_sub(now))
        } else {
            // (now + τq − s.ms) ≤ τq since s ≥ now: the product is ≤ burst · window_ms.
            let slack = (top.0 - s.0) * self.uses as u64 + top.1 - s.1;
            let remaining = self.by_window.div(slack).min(self.burst as u64);
            let refill = if remaining >= self.burst as u64 {
                0
            } else {
                // The next use is back when the slack reaches (remaining + 1) · window_ms: after
                // ceil(deficit / uses) ms, deficit in (0, window_ms].
                let deficit = (remaining + 1) * self.window_ms - slack;
                self.by_uses.div(deficit + self.uses as u64 - 1)
            };
            (remaining as u32, refill)
        };
        let full_at = s.0 + (s.1 > 0) as u64;
        Quota {
            limit: self.burst,
            remaining,
            refill_after_ms,
            reset_after_ms: full_at - now,
        }
    }

    /// Decides a call costing `cost` (checked with [`check_cost`](Self::check_cost)) at `now` on a key
    /// holding `tat` (`None`: no key). `record`: a consume (an allowed call returns the TAT to
    /// store); otherwise a peek (nothing to store, the quota as it stands).
    #[inline(always)]
    pub fn decide(self, tat: Option<Tat>, cost: u32, now: u64, record: bool) -> Decision {
        let now_pair = (now, 0);
        let s = match tat.map(|t| self.pair(t)) {
            Some(t) if t > now_pair => t,
            _ => now_pair,
        };
        let new = self.add(s, cost as u64);
        if new > self.limit_at(now) {
            let retry = self.ceil_minus_tau(new);
            let refused = Verdict::refused(now, retry);
            let quota = if cost == 1 {
                // S + T > now + τ: less than one use remains, and the next one is the retry.
                Quota {
                    limit: self.burst,
                    remaining: 0,
                    refill_after_ms: refused.retry_after_ms,
                    reset_after_ms: s.0 + (s.1 > 0) as u64 - now,
                }
            } else {
                self.quota(s, now)
            };
            return Decision {
                verdict: refused.with_quota(quota),
                store: None,
            };
        }
        let after = if record { new } else { s };
        Decision {
            // A literal, not `Verdict::ALLOWED.with_quota(..)`: the constant's bytes (its padding
            // included) were copied through the stack by overlapping stores and loads that stall
            // store forwarding, ~9 % of an allowed call's time.
            verdict: Verdict {
                allowed: true,
                retry_after_ms: 0,
                retry_timestamp: None,
                quota: self.quota(after, now),
            },
            store: record.then_some(Tat {
                ms: new.0,
                rem: new.1 as u32,
                per: self.uses,
            }),
        }
    }

    /// Gives back an allowed call that cost `cost` and left the key's TAT at `after` (the state it
    /// stored), on a key holding `current` now, with the store's horizon `horizon` (the latest time
    /// any recorded call was made at).
    ///
    /// The call moved the TAT from `before = after − cost·T` to `after`. A give-back never lowers the
    /// TAT below `before`, and never returns more than the call still holds:
    /// - nothing recorded since (`current == after`): the TAT goes back to `before` exactly;
    /// - calls recorded since (`current > after`): those keep their uses, and the call's own come
    ///   back as far as they are still owed. Every later call was made at or before `horizon`, and
    ///   a bucket refills its oldest debt first, so the part of `[before, after]` behind
    ///   `max(horizon, before)` may have come back already: the TAT moves back by
    ///   `after − max(horizon, before)` (all of `cost·T` while the horizon is not past `before`,
    ///   nothing once it is past `after`). Never more than the call took, so the rule's bound holds;
    /// - `current < after`, no key, or a key counted under another `uses`: the key was reset or
    ///   emptied since (its uses came back) — left alone. A reset followed by calls that took the
    ///   TAT past `after` again looks like calls since (a TAT keeps no history).
    pub fn give_back(
        self,
        current: Option<Tat>,
        after: Tat,
        cost: u32,
        horizon: u64,
    ) -> GiveBack<Tat> {
        let Some(x) = current else {
            return GiveBack::Leave;
        };
        if x.per != self.uses || after.per != self.uses {
            return GiveBack::Leave;
        }
        let (x, end) = ((x.ms, x.rem as u64), (after.ms, after.rem as u64));
        if x < end {
            return GiveBack::Leave;
        }
        let before = self.sub(end, self.add((0, 0), cost as u64));
        let new = if x == end {
            before
        } else {
            let owed_from = before.max((horizon, 0));
            if end <= owed_from {
                return GiveBack::Leave;
            }
            self.sub(x, self.sub(end, owed_from))
        };
        let tat = Tat {
            ms: new.0,
            rem: new.1 as u32,
            per: self.uses,
        };
        if tat.expires_at() > horizon || tat.expires_at() == u64::MAX {
            GiveBack::Store(tat)
        } else {
            GiveBack::Remove
        }
    }

    /// `a − b` for `a ≥ b` (saturating at 0 otherwise).
    #[inline]
    fn sub(self, a: Pair, b: Pair) -> Pair {
        let (mut ms, mut rem) = (a.0, a.1);
        if rem < b.1 {
            rem += self.uses as u64;
            ms = ms.saturating_sub(1);
        }
        (ms.saturating_sub(b.0), rem - b.1)
    }

    /// Ms from `now` until `n` uses are available on a key holding `tat` (0: now).
    pub fn wait_ms(self, tat: Option<Tat>, cost: u32, now: u64) -> u64 {
        self.decide(tat, cost, now, false).verdict.retry_after_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_divisor_is_exact_below_2_pow_53() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut ds = vec![
            1,
            2,
            3,
            7,
            1000,
            3_600_000,
            u32::MAX as u64,
            MAX_EXACT,
            MAX_EXACT - 1,
        ];
        ds.extend((0..200).map(|_| next() % MAX_EXACT + 1));
        ds.extend((0..200).map(|_| next() % 100_000 + 1));
        for d in ds {
            let div = Divisor::new(d);
            let mut xs = vec![0, 1, d - 1, d, d + 1, MAX_EXACT, MAX_EXACT - 1];
            xs.extend((0..300).map(|_| next() & MAX_EXACT));
            xs.extend((0..50).map(|_| (next() % 1000) * d % (MAX_EXACT + 1)));
            for x in xs.into_iter().filter(|&x| x <= MAX_EXACT) {
                assert_eq!(div.div(x), x / d, "{x} / {d}");
            }
        }
    }

    #[test]
    fn a_third_of_a_ms_adds_up_exactly() {
        // 3 per 1000 ms: T = 333 1/3 ms, burst 1.
        let g = Gcra::new(3, 1_000, 1).unwrap();
        let d = g.decide(None, 1, 0, true);
        assert!(d.verdict.allowed);
        let tat = d.store.unwrap();
        assert_eq!((tat.ms, tat.rem), (333, 1));
        let refused = g.decide(Some(tat), 1, 333, true).verdict;
        assert_eq!(
            (refused.allowed, refused.retry_timestamp),
            (false, Some(334))
        );
        let d = g.decide(Some(tat), 1, 334, true);
        assert!(d.verdict.allowed);
        let tat = d.store.unwrap();
        assert_eq!((tat.ms, tat.rem), (667, 1));
        // Next use: 667 1/3 + 1/3 ms... the TAT 667 1/3 is behind 668 only.
        let refused = g.decide(Some(tat), 1, 667, true).verdict;
        assert_eq!(refused.retry_timestamp, Some(668));
        let d = g.decide(Some(tat), 1, 668, true);
        assert_eq!(d.store.map(|t| (t.ms, t.rem)), Some((1001, 1)));
    }
}
