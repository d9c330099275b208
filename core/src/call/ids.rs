//! Call ids: a random prefix drawn once a process, then a counter — no randomness per call.

use std::sync::atomic::{AtomicU64, Ordering};

/// The ids of one process's consumes (the `call_id` of [`Op::Consume`](super::Op::Consume)).
///
/// An id is the call's member in every key it is counted under, so it only has to differ from the
/// other calls in the same key's log while they are inside a window. Within a process the counter
/// never repeats (2^64 calls). Across processes the 64-bit random prefix does the work: two processes
/// clash only if they drew the same prefix (for a million processes on one store, a chance of about
/// 3 in 10^8) *and* reach the same count on the same key within one window. So the host draws the
/// prefix once from its random source — and again in a forked child, which would otherwise repeat its
/// parent's ids (`CallIds::new` is cheap; hosts keep one per process id).
///
/// An id is the prefix in 16 hex digits, then the counter in hex: `"9f3c0a7e5b21d4c80"`,
/// `"9f3c0a7e5b21d4c81"` … (17 to 32 characters, fewer bytes in every log than a UUID).
///
/// ```
/// use ratewindow_core::call::CallIds;
///
/// let ids = CallIds::new(0x9f3c_0a7e_5b21_d4c8);
/// assert_eq!(ids.next(), "9f3c0a7e5b21d4c80");
/// assert_eq!(ids.next(), "9f3c0a7e5b21d4c81");
/// ```
#[derive(Debug)]
pub struct CallIds {
    prefix: u64,
    counter: AtomicU64,
}

impl CallIds {
    /// Ids under `random`, 64 bits from the host's random source, drawn once a process.
    pub const fn new(random: u64) -> CallIds {
        CallIds {
            prefix: random,
            counter: AtomicU64::new(0),
        }
    }

    /// The next id (thread-safe: the counter is atomic).
    pub fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}{n:x}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::CallIds;

    #[test]
    fn ids_never_repeat_within_a_process_and_differ_by_prefix() {
        let ids = CallIds::new(1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            assert!(seen.insert(ids.next()));
        }
        // The prefix is fixed-width, so a prefix and a counter are never read as another pair.
        assert_eq!(CallIds::new(1).next().len(), 17);
        assert_ne!(CallIds::new(2).next(), CallIds::new(1).next());
    }
}
