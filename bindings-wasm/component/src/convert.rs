//! Conversions between the WIT types and the core's. Every host value is checked here.

use ratewindow_core as core;

use crate::bindings::exports::ratewindow::engine::{
    errors::{Error, InvalidLimit, LimitField},
    types::{BatchVerdict, Entry, Limit, Verdict},
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
        }
    }
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
            Ok(core::Entry {
                limit: limit(&e.limit)?,
                key: e.key,
            })
        })
        .collect()
}
