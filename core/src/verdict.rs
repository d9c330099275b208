//! What a call gets back: plain data, serialisable as the JSON vectors spell it.

use serde::{Deserialize, Serialize};

/// The answer to one call against one limit.
///
/// Allowed: `retry_after_ms == 0` and no `retry_timestamp`. Refused: `retry_after_ms >= 1`, and
/// `retry_timestamp` is when the next call is allowed, in milliseconds on the store's clock — the same for
/// every refusal in one wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the call was allowed (and, for a consume, recorded).
    pub allowed: bool,
    /// Milliseconds until the next call is allowed; 0 when allowed.
    pub retry_after_ms: u64,
    /// When the next call is allowed (store clock, ms); `None` when allowed.
    pub retry_timestamp: Option<u64>,
}

impl Verdict {
    /// The verdict of an allowed call.
    pub const ALLOWED: Verdict = Verdict {
        allowed: true,
        retry_after_ms: 0,
        retry_timestamp: None,
    };

    /// A refusal at `now` that lasts until `retry_timestamp` (at least 1 ms).
    pub const fn refused(now: u64, retry_timestamp: u64) -> Verdict {
        let wait = retry_timestamp.saturating_sub(now);
        Verdict {
            allowed: false,
            retry_after_ms: if wait == 0 { 1 } else { wait },
            retry_timestamp: Some(retry_timestamp),
        }
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
}

impl BatchVerdict {
    /// The verdict of an allowed batch.
    pub const ALLOWED: BatchVerdict = BatchVerdict {
        allowed: true,
        retry_after_ms: 0,
        retry_timestamp: None,
        blocked: None,
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
        }
    }
}

/// One entry of a batch: a key and the limit it is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// The key counted.
    pub key: String,
    /// Its limit.
    pub limit: crate::Limit,
}

impl Entry {
    /// An entry for `key` under `limit`.
    pub fn new(key: impl Into<String>, limit: crate::Limit) -> Entry {
        Entry {
            key: key.into(),
            limit,
        }
    }
}
