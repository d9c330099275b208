//! JS numbers into the core's types. A JS number is an `f64`; every one crossing is checked here (the
//! TypeScript layer checks types, the core checks limits, this names the field as JS spells it), so
//! the napi addon and the wasm package refuse the same values with the same messages.

use ratewindow_core::{Limit, LimitError, LimitField, Window};

use crate::{Failure, Res};

/// `Number.MAX_SAFE_INTEGER`.
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A numeric argument, named as JS spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A cooldown limit's `uses`.
    Uses,
    /// A cooldown limit's `windowMs`.
    WindowMs,
    /// A fixed window's `decayMs`.
    DecayMs,
    /// A fixed-window `amount`.
    Amount,
    /// A fixed-window `max`.
    Max,
    /// The clock's reading.
    Now,
}

impl Field {
    /// The name as JS spells it.
    pub const fn js_name(self) -> &'static str {
        match self {
            Field::Uses => "uses",
            Field::WindowMs => "windowMs",
            Field::DecayMs => "decayMs",
            Field::Amount => "amount",
            Field::Max => "max",
            Field::Now => "now",
        }
    }
}

/// The core's refusal of a limit field, given as `field`: code `invalid_limit:<engine field>` (stable,
/// what the TypeScript layer branches on), the core's message naming the JS field.
#[cold]
fn limit_failure(e: LimitError, field: Field) -> Failure {
    let (code, field) = match (e.field, field) {
        (LimitField::Uses, _) => ("invalid_limit:uses", Field::Uses),
        (LimitField::WindowMs, Field::DecayMs) => ("invalid_limit:window_ms", Field::DecayMs),
        (LimitField::WindowMs, _) => ("invalid_limit:window_ms", Field::WindowMs),
    };
    let message = format!(
        "invalid {}: {} (expected {})",
        field.js_name(),
        e.value,
        e.field.range()
    );
    Failure::new(code, message)
}

/// A cooldown limit from `uses` and `windowMs` as the user gave them.
#[inline(always)]
pub fn limit(uses: f64, window_ms: f64) -> Res<Limit> {
    Limit::from_f64(uses, window_ms).map_err(|e| limit_failure(e, Field::WindowMs))
}

/// A fixed window's `decayMs` as the user gave it.
#[inline(always)]
pub fn decay(decay_ms: f64) -> Res<Window> {
    Window::from_f64(decay_ms).map_err(|e| limit_failure(e, Field::DecayMs))
}

/// A count (`amount`, `max`) that must be a safe integer.
#[inline(always)]
pub fn int(field: Field, v: f64) -> Res<i64> {
    // Whole and in range, without `fract` (a libm call on baseline x86-64): the cast round-trips.
    if v.abs() <= MAX_SAFE_INTEGER && (v as i64) as f64 == v {
        Ok(v as i64)
    } else {
        Err(argument_failure(field, v, ""))
    }
}

/// The clock's reading: a safe integer >= 0, in whole milliseconds.
#[inline(always)]
pub fn now(v: f64) -> Res<u64> {
    if (0.0..=MAX_SAFE_INTEGER).contains(&v) && (v as u64) as f64 == v {
        Ok(v as u64)
    } else {
        Err(argument_failure(Field::Now, v, " >= 0"))
    }
}

/// A release handle: a positive integer this crate handed out; anything else names no handle (the
/// saturating cast maps it to 0, which is never handed out).
#[inline(always)]
pub fn handle(v: f64) -> u64 {
    v as u64
}

#[cold]
fn argument_failure(field: Field, v: f64, bound: &str) -> Failure {
    let name = field.js_name();
    Failure::new(
        format!("invalid_argument:{name}"),
        format!(
            "invalid {name}: {} (expected a safe integer{bound})",
            text(v)
        ),
    )
}

/// A refused number as text, written by the core's formatter of host numbers (as JS mostly spells
/// them: `NaN`, `-Infinity`, `1.5`, a whole number digit for digit; written by hand there, as the standard float formatter
/// would cost the wasm package ~16 KB). It is reached through `Window::from_f64`, which refuses every
/// value [`int`] and [`now`] refuse (NaN, infinities, fractions, negatives, anything past 2^53).
pub(crate) fn text(v: f64) -> String {
    Window::from_f64(v).map_or_else(|e| e.value, |w| w.as_ms().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_js_field_and_keep_the_engine_code() {
        let e = limit(f64::NAN, 1000.0).unwrap_err();
        assert_eq!(e.code, "invalid_limit:uses");
        assert!(
            e.message.starts_with("invalid uses: NaN (expected"),
            "{}",
            e.message
        );
        let e = limit(1.0, 1.5).unwrap_err();
        assert_eq!(e.code, "invalid_limit:window_ms");
        assert!(
            e.message.starts_with("invalid windowMs: 1.5 ("),
            "{}",
            e.message
        );
        let e = decay(-1.0).unwrap_err();
        assert_eq!(e.code, "invalid_limit:window_ms");
        assert!(
            e.message.starts_with("invalid decayMs: -1 ("),
            "{}",
            e.message
        );
        assert_eq!(limit(3.0, 1000.0).unwrap(), Limit::new(3, 1000).unwrap());
    }

    #[test]
    fn counts_and_times_must_be_safe_integers() {
        assert_eq!(int(Field::Amount, -5.0), Ok(-5));
        assert_eq!(int(Field::Max, MAX_SAFE_INTEGER), Ok(9_007_199_254_740_991));
        for bad in [f64::NAN, f64::INFINITY, 0.5, 9_007_199_254_740_992.0] {
            let e = int(Field::Amount, bad).unwrap_err();
            assert_eq!(e.code, "invalid_argument:amount");
        }
        assert_eq!(
            int(Field::Max, 1.5).unwrap_err().message,
            "invalid max: 1.5 (expected a safe integer)"
        );
        assert_eq!(now(-0.0), Ok(0));
        assert_eq!(
            now(-1.0).unwrap_err().message,
            "invalid now: -1 (expected a safe integer >= 0)"
        );
        assert_eq!(handle(f64::NAN), 0);
    }

    #[test]
    fn refused_numbers_read_as_js_writes_them() {
        for (v, expected) in [
            (
                1e21,
                "invalid amount: 1000000000000000000000 (expected a safe integer)",
            ),
            (1.5, "invalid amount: 1.5 (expected a safe integer)"),
            (
                f64::NEG_INFINITY,
                "invalid amount: -Infinity (expected a safe integer)",
            ),
            (
                9_007_199_254_740_992.0,
                "invalid amount: 9007199254740992 (expected a safe integer)",
            ),
        ] {
            assert_eq!(int(Field::Amount, v).unwrap_err().message, expected);
        }
    }
}
