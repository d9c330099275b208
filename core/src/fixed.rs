//! The fixed window, as one key's state: a counter and the moment its window ends.
//!
//! A window opens at a key's first hit and lasts `decay`; hits inside it do not move it. A window that
//! has ended counts from zero again.

use serde::{Deserialize, Serialize};

use crate::Window;

/// One key's fixed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedWindow {
    /// Hits counted in this window (negative amounts give hits back, so it can go below zero).
    pub count: i64,
    /// When the window ends (ms). The key is live while `now < ends_at`; an end that saturated at
    /// `u64::MAX` is past the end of time, so such a window never ends.
    pub ends_at: u64,
}

impl FixedWindow {
    /// A window opened at `now` lasting `decay`, with nothing counted.
    pub fn open(now: u64, decay: Window) -> FixedWindow {
        FixedWindow {
            count: 0,
            ends_at: now.saturating_add(decay.as_ms()),
        }
    }

    /// Whether the window still runs at `now`.
    #[inline]
    pub fn is_live(&self, now: u64) -> bool {
        now < self.ends_at || self.ends_at == u64::MAX
    }

    /// Whole seconds until the window ends, rounded up (the seed floors; we never say "0" while the
    /// window still runs).
    pub fn available_in_secs(&self, now: u64) -> u64 {
        self.available_in_ms(now).div_ceil(1000)
    }

    /// Milliseconds until the window ends; 0 when it has ended.
    pub fn available_in_ms(&self, now: u64) -> u64 {
        self.ends_at.saturating_sub(now)
    }
}

/// `max - attempts`, floored at 0.
#[inline]
pub fn remaining(attempts: i64, max: i64) -> i64 {
    max.saturating_sub(attempts).max(0)
}
