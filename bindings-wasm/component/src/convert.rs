//! Conversions between the WIT types and the core's. Every host value is checked here.

use ratewindow_core as core;

use crate::bindings::exports::ratewindow::engine::{
    errors::{Error, InvalidArgument, InvalidLimit, LimitField},
    types::{AttemptResult, BatchVerdict, Entry, HitWindow, Limit, Verdict},
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

/// Checked entries: the first invalid limit fails the whole batch, before anything is counted.
pub fn entries(entries: Vec<Entry>) -> Result<Vec<core::Entry>, Error> {
    entries
        .into_iter()
        .map(|e| {
            let limit = limit(&e.limit)?;
            Ok(core::Entry::new(e.key, limit))
        })
        .collect()
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
