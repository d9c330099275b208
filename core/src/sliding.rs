//! The sliding window log: one key's call times, sorted, with the rules that count them.
//!
//! A call at `t` is inside a window of `w` ms at `now` while `now - t < w`: it leaves at exactly `t + w`.
//! Times later than `now` (a clock that stepped back) are inside. Arithmetic never overflows: a
//! `retry_timestamp` past `u64::MAX` saturates there.

use crate::{Limit, Quota};

/// Whether a call recorded at `t` still counts at `now` in a window of `window_ms`.
#[inline]
pub fn in_window(t: u64, now: u64, window_ms: u64) -> bool {
    now < t || now - t < window_ms
}

/// Ms from `now` until a call recorded at `t` leaves a window of `window_ms` (saturating: a call
/// recorded after `now`, by a clock that stepped back, leaves more than a window later).
#[inline]
pub fn leaves_in(t: u64, window_ms: u64, now: u64) -> u64 {
    t.saturating_add(window_ms).saturating_sub(now)
}

/// Slots before the ring in a log's allocation: which life of the key this is.
const HEADER: usize = 1;

/// One key's calls in one allocation: a header (which life of the key this is), then a ring of call
/// times in ascending order. 24 bytes inline, `8 * (1 + capacity)` on the heap.
///
/// A key never holds more than `u32::MAX` calls: a call is recorded only while fewer than `uses`
/// (at most `u32::MAX`) are inside its window, and everything outside it is trimmed first.
#[derive(Debug, Clone)]
pub struct CallLog {
    buf: Box<[u64]>,
    head: u32,
    len: u32,
}

impl CallLog {
    /// An empty log with room for `capacity` calls (at least 1), in its `instance`-th life.
    pub fn new(capacity: usize, instance: u64) -> CallLog {
        let mut buf = vec![0; HEADER + capacity.max(1)].into_boxed_slice();
        buf[0] = instance;
        CallLog {
            buf,
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.buf.len() - HEADER
    }

    #[inline]
    fn slot(&self, i: usize) -> usize {
        let j = self.head as usize + i;
        HEADER
            + if j >= self.capacity() {
                j - self.capacity()
            } else {
                j
            }
    }

    /// The `i`-th oldest call time.
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        self.buf[self.slot(i)]
    }

    /// How many calls the log holds (some may have left their window, until trimmed).
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the log holds no call.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Which life of the key this log is: a release recorded in another life is ignored.
    #[inline]
    pub fn instance(&self) -> u64 {
        self.buf[0]
    }

    /// The newest call time.
    #[inline]
    pub fn newest(&self) -> Option<u64> {
        (self.len > 0).then(|| self.get(self.len() - 1))
    }

    /// The index of the first call that is `>= at` under `before` (a binary search: times are sorted).
    ///
    /// Galloping from the oldest call (1, 2, 4 … calls) before the binary search: the calls that left
    /// since the last one are usually few, so a long log is not searched whole on every call.
    #[cfg_attr(feature = "weights", inline(always))]
    fn partition_point(&self, before: impl Fn(u64) -> bool) -> usize {
        let len = self.len();
        let (mut lo, mut step) = (0, 1);
        while lo < len && before(self.get(lo)) {
            lo += step;
            step *= 2;
        }
        // Every call before `lo - step / 2 + 1` is known to be before; none from `lo` on need be.
        let mut hi = lo.min(len);
        lo = if step == 1 { 0 } else { lo - step / 2 + 1 };
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(self.get(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The `retry_timestamp` this log imposes on `limit` at `now`, or `None` if a call is allowed.
    ///
    /// Refused when `uses` or more calls are inside the window; the wait runs to the moment the oldest
    /// of the newest `uses` calls leaves it, so a lowered limit waits on the right call.
    #[cfg(not(feature = "weights"))]
    #[inline]
    pub fn wait_until(&self, limit: Limit, now: u64) -> Option<u64> {
        self.wait_until_weighted(limit, 1, now)
    }

    /// See above (with the weights feature: the body a cost of 1 takes, as before weights).
    #[cfg(feature = "weights")]
    #[inline]
    pub fn wait_until(&self, limit: Limit, now: u64) -> Option<u64> {
        let uses = limit.uses() as usize;
        if self.len() < uses {
            return None; // not even the whole log reaches the limit
        }
        // The calls inside the window are a suffix.
        let first = self.partition_point(|t| !in_window(t, now, limit.window_ms()));
        if self.len() - first < uses {
            return None;
        }
        Some(
            self.get(self.len() - uses)
                .saturating_add(limit.window_ms()),
        )
    }

    /// [`wait_until`](Self::wait_until) for a call costing `cost` uses (clamped to `1..=uses`): refused
    /// when more than `uses - cost` calls are inside the window; the wait runs until enough have left
    /// that `cost` more fit, i.e. until the oldest of the newest `uses - cost + 1` calls leaves.
    /// (A cost of 1 takes `wait_until` itself: the hot path as it was before weights.)
    #[inline(always)]
    pub fn wait_until_cost(&self, limit: Limit, cost: u32, now: u64) -> Option<u64> {
        if cfg!(feature = "weights") && cost <= 1 {
            return self.wait_until(limit, now);
        }
        self.wait_until_weighted(limit, cost, now)
    }

    #[cfg_attr(not(feature = "weights"), inline)]
    fn wait_until_weighted(&self, limit: Limit, cost: u32, now: u64) -> Option<u64> {
        let uses = limit.uses() as usize;
        let cost = (cost as usize).clamp(1, uses);
        if self.len() + cost <= uses {
            return None; // not even the whole log reaches the limit
        }
        // The calls inside the window are a suffix.
        let first = self.partition_point(|t| !in_window(t, now, limit.window_ms()));
        if self.len() - first + cost <= uses {
            return None;
        }
        Some(
            self.get(self.len() + cost - 1 - uses)
                .saturating_add(limit.window_ms()),
        )
    }

    /// The index of the first call still inside a window of `window_ms` at `now` (the calls inside
    /// are a suffix: times are sorted).
    #[inline]
    pub fn first_inside(&self, now: u64, window_ms: u64) -> usize {
        self.partition_point(|t| !in_window(t, now, window_ms))
    }

    /// The quota of this log under `limit` at `now`, as it stands: every call inside the window uses
    /// one of `uses`; a use comes back when the oldest of them leaves, and the window is empty when the
    /// newest leaves. Use it after recording for a consume, as is for a peek.
    #[inline]
    pub fn quota(&self, limit: Limit, now: u64) -> Quota {
        self.quota_from(self.first_inside(now, limit.window_ms()), limit, now)
    }

    /// [`quota`](Self::quota) when every call from index `first` on is known to be inside the window
    /// (after a [`trim`](Self::trim) to it: `first` is 0).
    #[inline]
    pub fn quota_from(&self, first: usize, limit: Limit, now: u64) -> Quota {
        let inside = self.len() - first;
        if inside == 0 {
            return Quota::unused(limit);
        }
        let window_ms = limit.window_ms();
        Quota {
            limit: limit.uses(),
            remaining: (limit.uses() as usize).saturating_sub(inside) as u32,
            refill_after_ms: leaves_in(self.get(first), window_ms, now),
            reset_after_ms: leaves_in(self.get(self.len() - 1), window_ms, now),
        }
    }

    /// The quota of a refusal under `limit` at `now` that waits `retry_after_ms`: nothing remains, a
    /// use comes back after the wait, and the window is empty when the newest call leaves.
    #[inline]
    pub fn refused_quota(&self, limit: Limit, now: u64, retry_after_ms: u64) -> Quota {
        let newest = self
            .newest()
            .map_or(0, |t| leaves_in(t, limit.window_ms(), now));
        Quota {
            limit: limit.uses(),
            remaining: 0,
            refill_after_ms: retry_after_ms,
            reset_after_ms: newest.max(retry_after_ms),
        }
    }

    /// The quota of a refusal of a call costing `cost` that waits `retry_after_ms`: the uses that do
    /// remain (a heavy call may be refused while lighter ones would pass), a use comes back when the
    /// oldest call holding one leaves (for a cost of 1, the wait), and the window is empty when the
    /// newest call leaves.
    #[inline(always)]
    pub fn refused_quota_cost(
        &self,
        limit: Limit,
        cost: u32,
        now: u64,
        retry_after_ms: u64,
    ) -> Quota {
        if cost <= 1 {
            return self.refused_quota(limit, now, retry_after_ms);
        }
        self.refused_quota_weighted(limit, now, retry_after_ms)
    }

    #[cfg_attr(not(feature = "weights"), inline)]
    fn refused_quota_weighted(&self, limit: Limit, now: u64, retry_after_ms: u64) -> Quota {
        let window_ms = limit.window_ms();
        let uses = limit.uses() as usize;
        let inside = self.len() - self.first_inside(now, window_ms);
        let newest = self.newest().map_or(0, |t| leaves_in(t, window_ms, now));
        // A refused call of cost > 1 finds at least one call inside (cost <= uses).
        let refill = match inside.min(uses) {
            0 => retry_after_ms,
            held => leaves_in(self.get(self.len() - held), window_ms, now),
        };
        Quota {
            limit: limit.uses(),
            remaining: uses.saturating_sub(inside) as u32,
            refill_after_ms: refill,
            reset_after_ms: newest.max(retry_after_ms),
        }
    }

    /// Drops the calls that have left a window of `window_ms` at `now`.
    #[inline]
    pub fn trim(&mut self, now: u64, window_ms: u64) {
        let gone = self.partition_point(|t| !in_window(t, now, window_ms));
        if gone == self.len() {
            self.clear();
        } else if gone > 0 {
            self.head = (self.slot(gone) - HEADER) as u32;
            self.len -= gone as u32;
        }
    }

    /// Drops every call.
    #[inline]
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Records a call at `now`, or at the newest call if the clock stepped back behind it (so the log
    /// stays sorted); returns the recorded time.
    #[inline]
    pub fn record(&mut self, now: u64) -> u64 {
        let at = self.newest().map_or(now, |newest| newest.max(now));
        if self.len() == self.capacity() {
            self.grow();
        }
        let slot = self.slot(self.len());
        self.buf[slot] = at;
        self.len += 1;
        at
    }

    /// Records a call costing `cost` uses: `cost` times at one moment (see [`record`](Self::record)),
    /// so the log holds one time per use and never more than `uses` times inside a window whatever
    /// the costs. Returns the recorded time.
    #[inline]
    pub fn record_cost(&mut self, now: u64, cost: u32) -> u64 {
        let at = self.record(now);
        if cfg!(feature = "weights") && cost > 1 {
            self.repeat(at, cost - 1);
        }
        at
    }

    /// Records `n` more times at `at` (the newest): the rest of a weighted call, out of the hot path
    /// of a call costing 1.
    #[cold]
    #[inline(never)]
    fn repeat(&mut self, at: u64, n: u32) {
        for _ in 0..n {
            if self.len() == self.capacity() {
                self.grow();
            }
            let slot = self.slot(self.len());
            self.buf[slot] = at;
            self.len += 1;
        }
    }

    #[cold]
    fn grow(&mut self) {
        let capacity = (self.capacity() * 2).max(4);
        let mut buf = vec![0; HEADER + capacity].into_boxed_slice();
        buf[..HEADER].copy_from_slice(&self.buf[..HEADER]);
        for i in 0..self.len() {
            buf[HEADER + i] = self.get(i);
        }
        self.buf = buf;
        self.head = 0;
    }

    /// Removes one call recorded at `at`, if there is one. Returns whether one was removed.
    pub fn remove_one(&mut self, at: u64) -> bool {
        self.remove(at, 1) == 1
    }

    /// Removes up to `cost` times recorded at `at` (the uses of one call); returns how many it removed.
    pub fn remove(&mut self, at: u64, cost: u32) -> usize {
        let i = self.partition_point(|t| t < at);
        let mut n = 0;
        while n < cost as usize && i + n < self.len() && self.get(i + n) == at {
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        for j in i..self.len() - n {
            let (to, from) = (self.slot(j), self.slot(j + n));
            self.buf[to] = self.buf[from];
        }
        self.len -= n as u32;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(log: &CallLog) -> Vec<u64> {
        (0..log.len()).map(|i| log.get(i)).collect()
    }

    #[test]
    fn the_galloping_search_finds_every_split_of_a_wrapped_log() {
        for len in 0..40u64 {
            let mut log = CallLog::new(4, 1);
            // A wrapped ring: record and trim past the start first.
            for t in 0..len + 7 {
                log.record(t);
            }
            log.trim(7 + 7, 7); // keeps the calls at 8 and later
            for at in 0..=len + 9 {
                let want = times(&log).iter().filter(|&&t| t < at).count();
                assert_eq!(log.partition_point(|t| t < at), want, "len {len}, at {at}");
            }
        }
    }

    #[test]
    fn the_ring_wraps_grows_and_keeps_order() {
        let mut log = CallLog::new(3, 7);
        for t in [1, 2, 3] {
            log.record(t);
        }
        log.trim(1002, 1000); // drops 1 and 2
        log.record(1005);
        log.record(1006); // wraps, then grows
        log.record(1007);
        assert_eq!(times(&log), vec![3, 1005, 1006, 1007]);
        assert!(log.remove_one(1005));
        assert!(!log.remove_one(1005));
        assert_eq!(times(&log), vec![3, 1006, 1007]);
        assert_eq!((log.instance(), log.newest()), (7, Some(1007)));
    }

    #[test]
    fn a_clock_that_steps_back_records_the_newest_time() {
        let mut log = CallLog::new(2, 1);
        assert_eq!(log.record(100), 100);
        assert_eq!(log.record(50), 100);
        assert_eq!(times(&log), vec![100, 100]);
    }
}
