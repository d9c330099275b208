//! The sliding-window counter: two fixed windows, the previous one weighted by how much of it the
//! sliding window still covers. O(1) per key (24 bytes of state), approximate.
//!
//! Fixed windows are aligned to the epoch: window `k` covers `[k·w, (k+1)·w)` with `w = window_ms`.
//! A key keeps the start of its current window, the uses counted in it (`cur`) and in the one
//! before (`prev`). At `now`, in window `k` at offset `e = now − k·w`:
//!
//! ```text
//! estimate = prev · (w − e) / w + cur
//! a call costing n (1 ≤ n ≤ uses) is allowed iff estimate + n ≤ uses,
//! decided without division:  cur + n ≤ uses  and  prev · (w − e) ≤ (uses − cur − n) · w
//! ```
//!
//! The key's windows roll on first: if its window is `k − 1`, `prev = cur, cur = 0`; if older, both
//! are 0. An allowed consume adds `n` to `cur`.
//!
//! - **remaining** = `floor(uses − estimate)` after the call (as it stands for a peek or a refusal),
//!   floored at 0: `floor(((uses − cur) · w − prev · (w − e)) / w)`.
//! - **retry_timestamp** = the first whole ms at which `n` uses fit (the previous window's weight
//!   falls as `e` grows, then the windows roll): in window `k`, `e' = max(e, w − floor(X / prev))`
//!   with `X = (uses − cur − n) · w` (when `cur + n ≤ uses`; `prev = 0`: now); else in window
//!   `k + 1`, `e' = w − floor((uses − n) · w / cur)`; else `(k + 2) · w`.
//! - **refill_after_ms** = ms until `remaining` grows by one (the same search for `remaining + 1`);
//!   0 when every use remains.
//! - **reset_after_ms** = ms until the estimate is 0: `(k + 2) · w − now` when `cur > 0`,
//!   `(k + 1) · w − now` when only `prev > 0`, else 0. The key expires then.
//! - **limit** = `uses`.
//!
//! **A clock that steps back** into a window before the key's is read at the start of the key's
//! window (`e = 0`, the previous window at full weight: the largest estimate the state can give), and
//! a call it allows is counted in the key's window: a step back never finds more uses. A key counted
//! under another `window_ms` carries its counts into the current window of the new one.
//!
//! **Error bound against the exact sliding log** (tested in `core/tests/counter.rs` by a randomized
//! comparison with the log). The counter assumes the previous window's uses were spread evenly.
//! - *It can over-admit*: the uses of window `k − 1` may all sit at its end, still inside the sliding
//!   window, while the estimate discounts them. At the last call admitted at `t = k·w + e`, the
//!   sliding window `(t − w, t]` holds at most `prev + cur ≤ uses + prev · e / w` uses: at most
//!   `uses + floor(prev · e / w)`, so **never more than `2 · uses − 1`** in any `window_ms`.
//! - *It can under-admit*: the uses of window `k − 1` may all sit at its start, already out of the
//!   sliding window, while the estimate still counts part of them. It refuses only when more than
//!   `uses − n` uses were admitted in windows `k − 1` and `k` together (a span under `2 · w`).
//!
//! **Ranges.** `uses · window_ms ≤ 2^53 − 1` (besides the [`Limit`] ranges): every product above is
//! at most that, exact in a Lua double and a PostgreSQL `bigint`; times stay `≤ now + 2 · w`.

use serde::{Deserialize, Serialize};

use crate::gcra::{GiveBack, RateError, RateField, MAX_EXACT};
use crate::{Limit, Quota, Verdict};

/// A sliding-window counter limit: about `uses` per any `window_ms` (see the module docs for the
/// bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Limit", into = "Limit")]
pub struct Counter {
    limit: Limit,
}

impl TryFrom<Limit> for Counter {
    type Error = RateError;
    fn try_from(limit: Limit) -> Result<Counter, RateError> {
        Counter::new(limit)
    }
}

impl From<Counter> for Limit {
    fn from(c: Counter) -> Limit {
        c.limit
    }
}

/// One key's counts. 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CounterState {
    /// Start of the key's current fixed window (ms, a multiple of `window_ms`).
    pub start: u64,
    /// The window length the counts were made under.
    pub window_ms: u64,
    /// Uses counted in the current window.
    pub cur: u32,
    /// Uses counted in the window before it.
    pub prev: u32,
}

impl CounterState {
    /// When the estimate reaches 0 and the key may be removed.
    #[inline]
    pub const fn expires_at(self) -> u64 {
        let windows = if self.cur > 0 { 2 } else { 1 };
        self.start
            .saturating_add(self.window_ms.saturating_mul(windows))
    }
}

/// What a counter call decides: the verdict, and after an allowed consume the key's new state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterDecision {
    /// The verdict.
    pub verdict: Verdict,
    /// The state to store: `Some` exactly when the call was allowed and recorded.
    pub store: Option<CounterState>,
}

/// The key's counts rolled to the window of the moment they are read at.
#[derive(Debug, Clone, Copy)]
struct Rolled {
    /// Start of the window read.
    base: u64,
    /// Offset into it.
    e: u64,
    cur: u64,
    prev: u64,
}

impl Counter {
    /// A counter under `limit`, if `uses · window_ms ≤ 2^53 − 1`.
    pub fn new(limit: Limit) -> Result<Counter, RateError> {
        if limit.uses() as u128 * limit.window_ms() as u128 > MAX_EXACT as u128 {
            return Err(RateError::new(RateField::Uses, limit.uses()));
        }
        Ok(Counter { limit })
    }

    /// The limit.
    pub const fn limit(self) -> Limit {
        self.limit
    }

    /// Checks a call's cost: `1 ≤ cost ≤ uses`.
    pub fn check_cost(self, cost: u64) -> Result<u32, RateError> {
        if cost == 0 || cost > self.limit.uses() as u64 {
            return Err(RateError::new(RateField::Cost, cost));
        }
        Ok(cost as u32)
    }

    #[inline]
    fn roll(self, state: Option<CounterState>, now: u64) -> Rolled {
        let w = self.limit.window_ms();
        let start = now - now % w;
        let fresh = Rolled {
            base: start,
            e: now - start,
            cur: 0,
            prev: 0,
        };
        let Some(s) = state else { return fresh };
        let (cur, prev) = (s.cur as u64, s.prev as u64);
        if s.window_ms != w {
            return Rolled { cur, prev, ..fresh };
        }
        if s.start == start {
            Rolled { cur, prev, ..fresh }
        } else if s.start > start {
            // The clock stepped back: read at the start of the key's window.
            Rolled {
                base: s.start,
                e: 0,
                cur,
                prev,
            }
        } else if s.start.saturating_add(w) == start {
            Rolled { prev: cur, ..fresh }
        } else {
            fresh
        }
    }

    /// The first time (ms) at which `n` uses fit, from the rolled state's moment on.
    fn available_at(self, r: Rolled, n: u64) -> u64 {
        let (uses, w) = (self.limit.uses() as u64, self.limit.window_ms());
        if r.cur + n <= uses {
            let x = (uses - r.cur - n) * w;
            // prev = 0: the previous window weighs nothing; fits now.
            let e = x
                .checked_div(r.prev)
                .map_or(r.e, |room| (w - room.min(w)).max(r.e));
            if e < w {
                return r.base + e;
            }
        }
        // Window k + 1: its previous window is this one's `cur`.
        let x = (uses - n) * w;
        let e = x.checked_div(r.cur).map_or(0, |room| w - room.min(w));
        if e < w {
            return r.base.saturating_add(w) + e;
        }
        r.base.saturating_add(2 * w)
    }

    /// The quota at `now` of the rolled state.
    fn quota(self, r: Rolled, now: u64) -> Quota {
        let (uses, w) = (self.limit.uses() as u64, self.limit.window_ms());
        let remaining = if r.cur >= uses {
            0
        } else {
            let room = (uses - r.cur) * w;
            let used = r.prev * (w - r.e);
            room.saturating_sub(used) / w
        };
        let refill_after_ms = if remaining >= uses {
            0
        } else {
            self.available_at(r, remaining + 1).saturating_sub(now)
        };
        let reset_after_ms = if r.cur > 0 {
            r.base.saturating_add(2 * w).saturating_sub(now)
        } else if r.prev > 0 {
            r.base.saturating_add(w).saturating_sub(now)
        } else {
            0
        };
        Quota {
            limit: uses as u32,
            remaining: remaining as u32,
            refill_after_ms,
            reset_after_ms,
        }
    }

    /// Gives back an allowed call that cost `cost` and was counted in the fixed window starting at
    /// `start` (the state's `start` it stored), on a key holding `current` now; `horizon` is the
    /// store's. The counts are sums, so the call's uses come off the window they were counted in:
    /// `cur` while the key is still in that window, `prev` once it rolled one window on (never below
    /// 0); two windows on, or under another `window_ms`, or with no key, nothing of the call counts
    /// any more and the key is left alone. A key left with no count is removed.
    pub fn give_back(
        self,
        current: Option<CounterState>,
        start: u64,
        cost: u32,
        horizon: u64,
    ) -> GiveBack<CounterState> {
        let Some(mut y) = current else {
            return GiveBack::Leave;
        };
        let w = self.limit.window_ms();
        if y.window_ms != w {
            return GiveBack::Leave;
        }
        if y.start == start {
            y.cur -= cost.min(y.cur);
        } else if y.start == start.saturating_add(w) {
            y.prev -= cost.min(y.prev);
        } else {
            return GiveBack::Leave;
        }
        let alive = y.expires_at() > horizon || y.expires_at() == u64::MAX;
        if (y.cur == 0 && y.prev == 0) || !alive {
            GiveBack::Remove
        } else {
            GiveBack::Store(y)
        }
    }

    /// Decides a call costing `cost` (checked with [`check_cost`](Self::check_cost)) at `now` on a key
    /// holding `state`. `record`: a consume; otherwise a peek (nothing stored, the quota as it stands).
    pub fn decide(
        self,
        state: Option<CounterState>,
        cost: u32,
        now: u64,
        record: bool,
    ) -> CounterDecision {
        let (uses, w) = (self.limit.uses() as u64, self.limit.window_ms());
        let r = self.roll(state, now);
        let n = cost as u64;
        let fits = r.cur + n <= uses && r.prev * (w - r.e) <= (uses - r.cur - n) * w;
        if !fits {
            let retry = self.available_at(r, n);
            return CounterDecision {
                verdict: Verdict::refused(now, retry).with_quota(self.quota(r, now)),
                store: None,
            };
        }
        let after = if record {
            Rolled {
                cur: r.cur + n,
                ..r
            }
        } else {
            r
        };
        CounterDecision {
            verdict: Verdict::ALLOWED.with_quota(self.quota(after, now)),
            store: record.then_some(CounterState {
                start: r.base,
                window_ms: w,
                cur: after.cur as u32,
                prev: after.prev as u32,
            }),
        }
    }
}
