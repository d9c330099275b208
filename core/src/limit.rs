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

/// A host number as text for an error message, as JavaScript would mostly spell it (`NaN`,
/// `Infinity`, `-0`, `1.5`, `1e+300`-like for huge values). Written by hand rather than with `{v}`:
/// the standard float formatter is ~16 KB of code, most of a WebAssembly component's budget.
pub(crate) fn format_f64(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    let sign = if v.is_sign_negative() { "-" } else { "" };
    let a = v.abs();
    if a.is_infinite() {
        return format!("{sign}Infinity");
    }
    if a.fract() == 0.0 && a < 3.4e38 {
        // Whole (every float from 2^53 up is): its exact value, digit for digit.
        return format!("{sign}{}", a as u128);
    }
    if a >= 1e17 {
        // Past u128: scientific, one digit, up to 16 more, the exponent.
        let (mut m, mut e) = (a, 0u32);
        while m >= 10.0 {
            m /= 10.0;
            e += 1;
        }
        return format!("{sign}{}e+{e}", decimal(m, 17));
    }
    format!("{sign}{}", decimal(a, 17))
}

/// `a` (finite, `0 <= a < 1e17`) in decimal with at most `digits` significant digits, trailing
/// zeros trimmed.
fn decimal(a: f64, digits: usize) -> String {
    let whole = a.trunc();
    let mut out = (whole as u64).to_string();
    let significant = if whole == 0.0 { 0 } else { out.len() };
    let mut frac = a - whole;
    if frac > 0.0 && significant < digits {
        out.push('.');
        let mut leading = whole == 0.0;
        let mut budget = digits - significant;
        while frac > 0.0 && budget > 0 {
            frac *= 10.0;
            let d = frac.trunc();
            frac -= d;
            out.push(char::from(b'0' + d as u8));
            if !(leading && d == 0.0) {
                leading = false;
                budget -= 1;
            }
        }
        let trimmed = out.trim_end_matches('0').trim_end_matches('.').len();
        out.truncate(trimmed);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::format_f64;

    #[test]
    fn host_numbers_are_spelled_for_people() {
        let cases = [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (-0.0, "-0"),
            (0.0, "0"),
            (-1.0, "-1"),
            (1.5, "1.5"),
            (2.5, "2.5"),
            (-0.5, "-0.5"),
            (0.1, "0.1"),
            (1.25, "1.25"),
            (4294967296.0, "4294967296"),
            (4320000000000001.0, "4320000000000001"),
            (1.1, "1.1"),
            (123.456, "123.456"),
        ];
        for (v, want) in cases {
            assert_eq!(format_f64(v), want, "{v}");
        }
        // Long expansions are cut at 17 significant digits: the text is the number to 1e-15.
        assert_eq!(format_f64(2f64.powi(80)), "1208925819614629174706176");
        for v in [1e300, 0.000123, 1e-7] {
            let got: f64 = format_f64(v).replace("e+", "e").parse().unwrap();
            assert!((got - v).abs() / v < 1e-15, "{v}: {}", format_f64(v));
        }
    }
}
