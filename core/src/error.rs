//! Errors of the engine. Every one is a value a caller can branch on, never a panic.

use serde::{Deserialize, Serialize};

/// The largest window the engine accepts, in milliseconds (50,000 days).
pub const MAX_WINDOW_MS: u64 = 4_320_000_000_000_000;

/// Which field of a limit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitField {
    /// `uses`: how many calls a window allows.
    Uses,
    /// `window_ms`: how long a window lasts, in milliseconds (also a fixed window's decay).
    WindowMs,
}

impl LimitField {
    /// The field's name as it appears in the JSON vectors and the Rust API.
    pub const fn name(self) -> &'static str {
        match self {
            LimitField::Uses => "uses",
            LimitField::WindowMs => "window_ms",
        }
    }

    /// The accepted range, in words.
    pub const fn range(self) -> &'static str {
        match self {
            LimitField::Uses => "a whole number from 1 to 4294967295",
            LimitField::WindowMs => "a whole number of milliseconds from 1 to 4320000000000000",
        }
    }
}

impl std::fmt::Display for LimitField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit (or a fixed window's decay) that cannot be held: the field, the value given, and the range.
///
/// `value` is the value as the caller gave it, rendered as text, so a binding can report `NaN`, `-1` or
/// `1.5` exactly as it came.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {field}: {value} (expected {})", field.range())]
pub struct LimitError {
    /// The refused field.
    pub field: LimitField,
    /// The refused value, as text.
    pub value: String,
}

impl LimitError {
    /// A refusal of `field` holding `value`.
    pub fn new(field: LimitField, value: impl ToString) -> Self {
        LimitError {
            field,
            value: value.to_string(),
        }
    }
}
