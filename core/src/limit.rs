//! Validated limits. An invalid [`Limit`] or [`Window`] cannot be constructed.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::error::{LimitError, LimitField, MAX_WINDOW_MS};

/// A window length in whole milliseconds, from 1 to [`MAX_WINDOW_MS`].
///
/// Also the `decay` of a fixed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Window(u64);

impl Window {
    /// A window of `ms` milliseconds, or an error naming the value and the range.
    pub fn from_ms(ms: u64) -> Result<Window, LimitError> {
        if ms == 0 || ms > MAX_WINDOW_MS {
            return Err(LimitError::new(LimitField::WindowMs, ms));
        }
        Ok(Window(ms))
    }

    /// Checks a window given as a host-language number (JS `number`, Python `float`): it must be a whole
    /// number in range. NaN, infinities, fractions and negatives are refused with the value as given.
    pub fn from_f64(ms: f64) -> Result<Window, LimitError> {
        if ms.fract() == 0.0 && ms >= 1.0 && ms <= MAX_WINDOW_MS as f64 {
            Ok(Window(ms as u64))
        } else {
            Err(LimitError::new(LimitField::WindowMs, format_f64(ms)))
        }
    }

    /// The length in milliseconds.
    pub const fn as_ms(self) -> u64 {
        self.0
    }
}

impl TryFrom<u64> for Window {
    type Error = LimitError;
    fn try_from(ms: u64) -> Result<Self, LimitError> {
        Window::from_ms(ms)
    }
}

impl From<Window> for u64 {
    fn from(w: Window) -> u64 {
        w.0
    }
}

/// `uses` calls allowed within `window_ms` milliseconds.
///
/// ```
/// use ratewindow_core::Limit;
/// let limit = Limit::new(3, 10_000).unwrap();
/// assert_eq!(limit, Limit::per_second(3).unwrap().with_window(limit.window()));
/// assert!(Limit::new(0, 1000).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawLimit", into = "RawLimit")]
pub struct Limit {
    uses: NonZeroU32,
    window: Window,
}

/// The unchecked wire shape of a limit.
#[derive(Serialize, Deserialize)]
struct RawLimit {
    uses: u64,
    window_ms: u64,
}

impl TryFrom<RawLimit> for Limit {
    type Error = LimitError;
    fn try_from(raw: RawLimit) -> Result<Self, LimitError> {
        Limit::new(raw.uses, raw.window_ms)
    }
}

impl From<Limit> for RawLimit {
    fn from(l: Limit) -> RawLimit {
        RawLimit {
            uses: l.uses() as u64,
            window_ms: l.window_ms(),
        }
    }
}

fn format_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        format!("{v}")
    }
}

impl Limit {
    /// `uses` calls within `window_ms` milliseconds. `uses` must be 1 to `u32::MAX`, `window_ms` 1 to
    /// [`MAX_WINDOW_MS`]; the error names the field, the value and the range.
    pub fn new(uses: u64, window_ms: u64) -> Result<Limit, LimitError> {
        let uses = u32::try_from(uses)
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| LimitError::new(LimitField::Uses, uses))?;
        let window = Window::try_from(window_ms)?;
        Ok(Limit { uses, window })
    }

    /// Checks a limit given as host-language numbers (JS `number`, Python `float`): NaN, infinities,
    /// fractions, zero, negatives and values out of range are refused with the value as given.
    pub fn from_f64(uses: f64, window_ms: f64) -> Result<Limit, LimitError> {
        if !(uses.fract() == 0.0 && uses >= 1.0 && uses <= u32::MAX as f64) {
            return Err(LimitError::new(LimitField::Uses, format_f64(uses)));
        }
        let window = Window::from_f64(window_ms)?;
        Ok(Limit {
            uses: NonZeroU32::new(uses as u32).expect("checked >= 1"),
            window,
        })
    }

    /// A limit from already-checked parts.
    pub const fn from_parts(uses: NonZeroU32, window: Window) -> Limit {
        Limit { uses, window }
    }

    /// `uses` calls per second.
    pub fn per_second(uses: u64) -> Result<Limit, LimitError> {
        Limit::new(uses, 1_000)
    }

    /// `uses` calls per minute.
    pub fn per_minute(uses: u64) -> Result<Limit, LimitError> {
        Limit::new(uses, 60_000)
    }

    /// `uses` calls per hour.
    pub fn per_hour(uses: u64) -> Result<Limit, LimitError> {
        Limit::new(uses, 3_600_000)
    }

    /// `uses` calls per day.
    pub fn per_day(uses: u64) -> Result<Limit, LimitError> {
        Limit::new(uses, 86_400_000)
    }

    /// The same number of uses over another window.
    pub const fn with_window(self, window: Window) -> Limit {
        Limit {
            uses: self.uses,
            window,
        }
    }

    /// Calls allowed per window.
    pub const fn uses(self) -> u32 {
        self.uses.get()
    }

    /// The window.
    pub const fn window(self) -> Window {
        self.window
    }

    /// The window in milliseconds.
    pub const fn window_ms(self) -> u64 {
        self.window.0
    }
}
