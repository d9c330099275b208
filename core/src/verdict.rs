//! What a call gets back: plain data, serialisable as the JSON vectors spell it.

use serde::{Deserialize, Serialize};

/// What an HTTP answer needs of a verdict (`RateLimit`, `RateLimit-Policy`, `X-RateLimit-*`): the
/// state of the call's **tightest** entry after the call, in the same round trip as the verdict.
///
/// The tightest entry is the one with the fewest uses remaining (ties: the one with the longer window,
/// then the first); on a refusal it is the blocked entry. For the sliding log:
/// - `remaining`: uses left after this call (an allowed consume counts itself; a peek counts nothing;
///   0 on a refusal, never negative);
/// - `refill_after_ms`: ms until the entry gets a use back, when its oldest call still in the window
///   leaves (equal to `retry_after_ms` on a refusal); 0 when no call is in its window;
/// - `reset_after_ms`: ms until its window is empty, when its newest call leaves; 0 when empty.
///
/// A batch without entries has a zero quota (`limit` 0: no limit applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Quota {
    /// The tightest entry's `uses`.
    pub limit: u32,
    /// Uses the tightest entry has left after this call.
    pub remaining: u32,
    /// Ms until the tightest entry gets a use back; 0 when none is used.
    pub refill_after_ms: u64,
    /// Ms until the tightest entry's window is empty; 0 when it is.
    pub reset_after_ms: u64,
}

impl Quota {
    /// A zero quota: no entry, no limit.
    pub const NONE: Quota = Quota {
        limit: 0,
        remaining: 0,
        refill_after_ms: 0,
        reset_after_ms: 0,
    };

    /// The quota of an entry under `limit` with no call in its window: every use remains.
    #[inline]
    pub const fn unused(limit: crate::Limit) -> Quota {
        Quota {
            limit: limit.uses(),
            remaining: limit.uses(),
            refill_after_ms: 0,
            reset_after_ms: 0,
        }
    }

    /// The tightest of a batch's entries, each given with its window in ms: the fewest uses remaining,
    /// ties the longer window, then the first. [`Quota::NONE`] for no entry.
    pub fn tightest(quotas: impl IntoIterator<Item = (Quota, u64)>) -> Quota {
        let mut best: Option<(Quota, u64)> = None;
        for (quota, window_ms) in quotas {
            let tighter = best.is_none_or(|(b, w)| {
                quota.remaining < b.remaining || (quota.remaining == b.remaining && window_ms > w)
            });
            if tighter {
                best = Some((quota, window_ms));
            }
        }
        best.map_or(Quota::NONE, |(quota, _)| quota)
    }
}

/// The answer to one call against one limit.
///
/// Allowed: `retry_after_ms == 0` and no `retry_timestamp`. Refused: `retry_after_ms >= 1`, and
/// `retry_timestamp` is when the next call is allowed, in milliseconds on the store's clock — the same for
/// every refusal in one wait. `quota` says what an HTTP answer needs (see [`Quota`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the call was allowed (and, for a consume, recorded).
    pub allowed: bool,
    /// Milliseconds until the next call is allowed; 0 when allowed.
    pub retry_after_ms: u64,
    /// When the next call is allowed (store clock, ms); `None` when allowed.
    pub retry_timestamp: Option<u64>,
    /// Limit, remaining and reset of the key after the call.
    #[serde(flatten)]
    pub quota: Quota,
}

impl Verdict {
    /// The verdict of an allowed call (with a zero quota: set it).
    pub const ALLOWED: Verdict = Verdict {
        allowed: true,
        retry_after_ms: 0,
        retry_timestamp: None,
        quota: Quota::NONE,
    };

    /// A refusal at `now` that lasts until `retry_timestamp` (at least 1 ms), with a zero quota.
    pub const fn refused(now: u64, retry_timestamp: u64) -> Verdict {
        let wait = retry_timestamp.saturating_sub(now);
        Verdict {
            allowed: false,
            retry_after_ms: if wait == 0 { 1 } else { wait },
            retry_timestamp: Some(retry_timestamp),
            quota: Quota::NONE,
        }
    }

    /// The same verdict with `quota`.
    pub const fn with_quota(mut self, quota: Quota) -> Verdict {
        self.quota = quota;
        self
    }
}

/// The answer to a batch: every entry at once, all or nothing.
///
/// A refusal names `blocked`, the index of the entry with the longest wait (ties keep the first), and
/// that entry's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BatchVerdict {
    /// Whether every entry allowed the call (and, for a consume, it was recorded against all of them).
    pub allowed: bool,
    /// The longest wait among the refusing entries; 0 when allowed.
    pub retry_after_ms: u64,
    /// When the blocking entry allows the next call (store clock, ms); `None` when allowed.
    pub retry_timestamp: Option<u64>,
    /// Index of the entry with the longest wait; `None` when allowed.
    pub blocked: Option<usize>,
    /// Limit, remaining and reset of the tightest entry after the call (see [`Quota`]).
    #[serde(flatten)]
    pub quota: Quota,
}

impl BatchVerdict {
    /// The verdict of an allowed batch.
    pub const ALLOWED: BatchVerdict = BatchVerdict {
        allowed: true,
        retry_after_ms: 0,
        retry_timestamp: None,
        blocked: None,
        quota: Quota::NONE,
    };

    /// The verdict of a batch at `now`: allowed when no entry waits, else refused until the longest
    /// wait `(entry index, retry_timestamp)` ends.
    pub const fn at(now: u64, longest_wait: Option<(usize, u64)>) -> BatchVerdict {
        match longest_wait {
            None => BatchVerdict::ALLOWED,
            Some((index, until)) => {
                let v = Verdict::refused(now, until);
                BatchVerdict {
                    allowed: false,
                    retry_after_ms: v.retry_after_ms,
                    retry_timestamp: v.retry_timestamp,
                    blocked: Some(index),
                    quota: Quota::NONE,
                }
            }
        }
    }

    /// The single-call view of this verdict (drops `blocked`).
    pub const fn verdict(self) -> Verdict {
        Verdict {
            allowed: self.allowed,
            retry_after_ms: self.retry_after_ms,
            retry_timestamp: self.retry_timestamp,
            quota: self.quota,
        }
    }

    /// The same verdict with `quota`.
    pub const fn with_quota(mut self, quota: Quota) -> BatchVerdict {
        self.quota = quota;
        self
    }
}

/// One entry of a batch: a key, the limit it is counted against, and what the call costs it (1 use
/// unless built by [`Entry::with_cost`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// The key counted.
    pub key: String,
    /// Its limit.
    pub limit: crate::Limit,
    /// Uses the call takes, `1..=limit.uses()` when built (read it by [`cost`](Self::cost)).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub(crate) cost: u32,
}

fn one() -> u32 {
    1
}

fn is_one(cost: &u32) -> bool {
    *cost == 1
}

impl Entry {
    /// An entry for `key` under `limit`, costing 1 use.
    pub fn new(key: impl Into<String>, limit: crate::Limit) -> Entry {
        Entry {
            key: key.into(),
            limit,
            cost: 1,
        }
    }

    /// An entry for `key` under `limit` costing `cost` uses: a whole number from 1 to the limit's
    /// `uses` (a call costing more could never pass), else an error naming `cost`. (Cargo feature
    /// `weights`, default on.)
    ///
    /// ```
    /// use ratewindow_core::{Entry, Limit};
    /// let limit = Limit::new(10, 1_000).unwrap();
    /// assert_eq!(Entry::with_cost("k", limit, 4).unwrap().cost(), 4);
    /// assert!(Entry::with_cost("k", limit, 0).is_err());
    /// assert!(Entry::with_cost("k", limit, 11).is_err());
    /// ```
    #[cfg(feature = "weights")]
    pub fn with_cost(
        key: impl Into<String>,
        limit: crate::Limit,
        cost: u64,
    ) -> Result<Entry, crate::gcra::RateError> {
        Ok(Entry {
            key: key.into(),
            limit,
            cost: check_cost(cost, limit)?,
        })
    }

    /// Uses the call takes on this entry's key. Read within `1..=limit.uses()`: an entry whose limit
    /// was lowered below its cost after it was built counts as costing the whole limit.
    #[inline]
    pub fn cost(&self) -> u32 {
        #[cfg(feature = "weights")]
        return self.cost.clamp(1, self.limit.uses());
        #[cfg(not(feature = "weights"))]
        1
    }
}

/// [`check_cost`] of a host's number (a JS `number`, a Python `float`): a whole number from 1 to the
/// limit's `uses`; `1.5`, `-1`, `NaN` are the error naming `cost`, holding the value as given.
#[cfg(feature = "weights")]
pub fn check_cost_f64(cost: f64, limit: crate::Limit) -> Result<u32, crate::gcra::RateError> {
    if cost.fract() == 0.0 && cost >= 1.0 && cost <= limit.uses() as f64 {
        return Ok(cost as u32);
    }
    Err(crate::gcra::RateError::new(
        crate::gcra::RateField::Cost,
        crate::limit::format_f64(cost),
    ))
}

/// `cost` if a call costing it can pass `limit` (a whole number from 1 to `uses`), else the error
/// naming `cost`: the check of a weighted call on the sliding log or a batch entry.
#[cfg(feature = "weights")]
#[inline]
pub fn check_cost(cost: u64, limit: crate::Limit) -> Result<u32, crate::gcra::RateError> {
    if cost == 0 || cost > limit.uses() as u64 {
        return Err(crate::gcra::RateError::new(
            crate::gcra::RateField::Cost,
            cost,
        ));
    }
    Ok(cost as u32)
}

/// The algorithm an entry of a mixed batch is counted by, with its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The exact sliding window log.
    Sliding(crate::Limit),
    /// GCRA: a rate and a burst, one time per key (see [`crate::gcra`]).
    Gcra(crate::gcra::Gcra),
    /// The sliding-window counter: two fixed windows weighted (see [`crate::counter`]).
    Counter(crate::counter::Counter),
}

/// One entry of a batch mixing algorithms: a key, the rule it is counted by, and what the call
/// costs it. Keys of different algorithms are different keys, even when spelled alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MixedEntry {
    /// The key counted.
    pub key: String,
    /// Its algorithm and limit.
    pub rule: Rule,
    /// Uses the call takes (1 for the sliding log).
    pub cost: u64,
}

impl MixedEntry {
    /// An entry for `key` under `rule`, costing `cost` uses.
    pub fn new(key: impl Into<String>, rule: Rule, cost: u64) -> MixedEntry {
        MixedEntry {
            key: key.into(),
            rule,
            cost,
        }
    }
}
