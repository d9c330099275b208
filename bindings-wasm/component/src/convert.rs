//! Conversions between the WIT types and the core's. Every host value is checked here.

use ratewindow_core as core;

use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::{Gcra, RateError, RateField};

use crate::bindings::exports::ratewindow::engine::{
    errors::{Error, InvalidArgument, InvalidLimit, LimitField},
    types::{
        AttemptResult, BatchVerdict, Entry, GcraLimit, HitWindow, Limit, MixedEntry, MixedLimit,
        RateLimit, Verdict,
    },
};

impl From<core::LimitError> for Error {
    fn from(e: core::LimitError) -> Error {
        let field = match e.field {
            core::LimitField::Uses => LimitField::Uses,
            core::LimitField::WindowMs => LimitField::WindowMs,
        };
        Error::InvalidLimit(InvalidLimit {
            field,
            value: e.value,
        })
    }
}

impl From<core::Verdict> for Verdict {
    fn from(v: core::Verdict) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            limit: v.quota.limit,
            remaining: v.quota.remaining,
            refill_after_ms: v.quota.refill_after_ms,
            reset_after_ms: v.quota.reset_after_ms,
        }
    }
}

impl From<core::BatchVerdict> for BatchVerdict {
    fn from(v: core::BatchVerdict) -> BatchVerdict {
        BatchVerdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            // A batch cannot hold more than u32::MAX entries in a 32-bit memory; saturate rather than panic.
            blocked: v.blocked.map(|i| u32::try_from(i).unwrap_or(u32::MAX)),
            limit: v.quota.limit,
            remaining: v.quota.remaining,
            refill_after_ms: v.quota.refill_after_ms,
            reset_after_ms: v.quota.reset_after_ms,
        }
    }
}

/// A checked `now` (0 to 2^53 - 1): a wrapped clock's `-1`, which jco lowers to 2^64 - 1, is refused
/// before the store sees it, so it can never move the store's horizon.
#[inline]
pub fn now(now: u64) -> Result<u64, Error> {
    core::input::check_now(now).map_err(|e| {
        Error::InvalidArgument(InvalidArgument {
            field: "now".to_owned(),
            value: e.value,
        })
    })
}

/// A checked limit, or the error naming the refused field (`uses` first).
pub fn limit(l: &Limit) -> Result<core::Limit, Error> {
    Ok(core::Limit::from_f64(l.uses, l.window_ms)?)
}

/// A checked window (a fixed window's decay), or the error naming `window-ms`.
pub fn window(ms: f64) -> Result<core::Window, Error> {
    Ok(core::Window::from_f64(ms)?)
}

/// Checked entries: the first invalid limit or cost fails the whole batch, before anything is
/// counted (a cost is checked after its entry's limit).
pub fn entries(entries: Vec<Entry>) -> Result<Vec<core::Entry>, Error> {
    entries
        .into_iter()
        .map(|e| {
            let limit = limit(&e.limit)?;
            match e.cost {
                None => Ok(core::Entry::new(e.key, limit)),
                Some(c) => Ok(core::Entry::with_cost(
                    e.key,
                    limit,
                    u64::from(cost(c, limit)?),
                )?),
            }
        })
        .collect()
}

/// A checked sliding-log cost: a whole number from 1 to the limit's `uses`, else the error naming
/// `cost` with the value as given.
pub fn cost(cost: f64, limit: core::Limit) -> Result<u32, Error> {
    Ok(core::check_cost_f64(cost, limit)?)
}

/// A fixed window after a hit: `(count, ms until it ends)`.
pub fn hit_window((count, reset_after_ms): (i64, u64)) -> HitWindow {
    HitWindow {
        count,
        reset_after_ms,
    }
}

/// An attempt's answer: `(allowed, count, ms until the window ends)`.
pub fn attempt((allowed, count, reset_after_ms): (bool, i64, u64)) -> AttemptResult {
    AttemptResult {
        allowed,
        count,
        reset_after_ms,
    }
}

impl From<RateError> for Error {
    fn from(e: RateError) -> Error {
        let field = match e.field {
            RateField::Uses => LimitField::Uses,
            RateField::WindowMs => LimitField::WindowMs,
            RateField::Burst => LimitField::Burst,
            RateField::Cost => {
                return Error::InvalidArgument(InvalidArgument {
                    field: "cost".to_owned(),
                    value: e.value,
                })
            }
        };
        Error::InvalidLimit(InvalidLimit {
            field,
            value: e.value,
        })
    }
}

/// A host number as the error's text (`NaN`, `-1`, `1.5`), by the core's own formatter (reached through
/// `Window::from_f64`, which spells every refused number; a valid window is a whole number).
fn text(v: f64) -> String {
    core::Window::from_f64(v).map_or_else(|e| e.value, |w| w.as_ms().to_string())
}

/// A whole number from 0 to 2^53 - 1, or the refusal of `field` holding the value given.
fn whole(field: RateField, v: f64) -> Result<u64, Error> {
    if v.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&v) {
        Ok(v as u64)
    } else {
        Err(RateError::new(field, text(v)).into())
    }
}

/// A checked GCRA or counter limit and cost (`uses` first, then `window-ms`, `burst`, `cost`).
pub enum Rate {
    /// GCRA and the cost.
    Gcra(Gcra, u64),
    /// The counter and the cost.
    Counter(Counter, u64),
}

/// A checked GCRA limit (`burst` none: `uses`).
fn gcra(g: &GcraLimit) -> Result<Gcra, Error> {
    let base = core::Limit::from_f64(g.uses, g.window_ms)?;
    Ok(match g.burst {
        None => Gcra::from_limit(base)?,
        Some(b) => Gcra::new(
            u64::from(base.uses()),
            base.window_ms(),
            whole(RateField::Burst, b)?,
        )?,
    })
}

/// The limit and cost of a GCRA or counter call, checked: the first refused field is the error.
pub fn rate(l: &RateLimit, cost: f64) -> Result<Rate, Error> {
    Ok(match l {
        RateLimit::Gcra(g) => {
            let g = gcra(g)?;
            let cost = whole(RateField::Cost, cost)?;
            g.check_cost(cost)?;
            Rate::Gcra(g, cost)
        }
        RateLimit::Counter(c) => {
            let c = Counter::new(limit(c)?)?;
            let cost = whole(RateField::Cost, cost)?;
            c.check_cost(cost)?;
            Rate::Counter(c, cost)
        }
    })
}

/// Checked entries of a mixed batch: the first refused field fails the whole batch, before anything
/// is counted (costs are checked by the store, before it counts).
pub fn mixed(entries: Vec<MixedEntry>) -> Result<Vec<core::MixedEntry>, Error> {
    entries
        .into_iter()
        .map(|e| {
            let rule = match &e.limit {
                MixedLimit::Sliding(l) => core::Rule::Sliding(limit(l)?),
                MixedLimit::Gcra(g) => core::Rule::Gcra(gcra(g)?),
                MixedLimit::Counter(c) => core::Rule::Counter(Counter::new(limit(c)?)?),
            };
            let cost = whole(RateField::Cost, e.cost)?;
            Ok(core::MixedEntry::new(e.key, rule, cost))
        })
        .collect()
}
