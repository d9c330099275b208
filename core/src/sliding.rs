//! The sliding window log, as pure functions over one key's sorted call times.
//!
//! A call at `t` is inside a window of `w` ms at `now` while `now - t < w`: it leaves at exactly `t + w`.
//! Times later than `now` (a clock that stepped back) are inside. Arithmetic never overflows: a
//! `retry_timestamp` past `u64::MAX` saturates there.

use std::collections::VecDeque;

use crate::Limit;

/// Whether a call recorded at `t` still counts at `now` in a window of `window_ms`.
#[inline]
pub fn in_window(t: u64, now: u64, window_ms: u64) -> bool {
    now < t || now - t < window_ms
}

/// How many of the sorted `times` count at `now`, and the index of the first that does.
#[inline]
fn first_in_window(times: &VecDeque<u64>, now: u64, window_ms: u64) -> usize {
    // Sorted ascending, so the calls inside the window are a suffix.
    times.partition_point(|&t| !in_window(t, now, window_ms))
}

/// The `retry_timestamp` a log imposes on `limit` at `now`, or `None` if a call is allowed.
///
/// Refused when `uses` or more calls are inside the window; the wait runs to the moment the oldest of
/// the newest `uses` calls leaves it, so a lowered limit waits on the right call.
#[inline]
pub fn wait_until(times: &VecDeque<u64>, limit: Limit, now: u64) -> Option<u64> {
    let uses = limit.uses() as usize;
    if times.len() < uses {
        return None; // fast path: not even the whole log reaches the limit
    }
    let first = first_in_window(times, now, limit.window_ms());
    let inside = times.len() - first;
    if inside < uses {
        return None;
    }
    Some(times[times.len() - uses].saturating_add(limit.window_ms()))
}

/// Drops the calls that have left a window of `window_ms` at `now`.
#[inline]
pub fn trim(times: &mut VecDeque<u64>, now: u64, window_ms: u64) {
    let first = first_in_window(times, now, window_ms);
    times.drain(..first);
}

/// The time a call at `now` is recorded at: `max(now, newest)`, so the log stays sorted when the clock
/// steps back.
#[inline]
pub fn record_time(times: &VecDeque<u64>, now: u64) -> u64 {
    times.back().map_or(now, |&newest| newest.max(now))
}

/// Removes one call recorded at `at`, if it is still there. Returns whether one was removed.
pub fn remove_one(times: &mut VecDeque<u64>, at: u64) -> bool {
    let i = times.partition_point(|&t| t < at);
    if times.get(i) == Some(&at) {
        times.remove(i);
        true
    } else {
        false
    }
}
