//! What a Redis server answers, as a host hands it back, and the error for an answer of the wrong shape.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// A Redis reply in the shapes our scripts produce, converted by the host from its client's value.
///
/// In JSON (and with serde) it is untagged: `null`, an integer, a string, or an array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reply {
    /// A nil reply.
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk or status string.
    Text(String),
    /// An array reply.
    Array(Vec<Reply>),
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Nil => f.write_str("nil"),
            Reply::Int(i) => write!(f, "{i}"),
            // Quoted as is, not escaped: a short, readable rendering for an error message.
            Reply::Text(s) => {
                f.write_str("\"")?;
                for (i, c) in s.chars().enumerate() {
                    if i == 40 {
                        return f.write_str("\"…");
                    }
                    f.write_char(c)?;
                }
                f.write_str("\"")
            }
            Reply::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().take(8).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                if items.len() > 8 {
                    write!(f, ", … ({} items)", items.len())?;
                }
                f.write_str("]")
            }
        }
    }
}

/// A reply that is not what the script answers: never decoded into a verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("unexpected reply from the {script} script: expected {expected}, got {got}")]
pub struct ReplyError {
    /// Which script's reply.
    pub script: &'static str,
    /// What the reply should have been.
    pub expected: &'static str,
    /// What came, rendered briefly.
    pub got: String,
}

impl ReplyError {
    /// An error for `script`'s reply `got`, which should have been `expected` (hosts use it for a
    /// reply they could not even convert into a [`Reply`]).
    pub fn new(script: &'static str, expected: &'static str, got: &Reply) -> ReplyError {
        ReplyError {
            script,
            expected,
            got: got.to_string(),
        }
    }
}

/// The integers of an array reply of exactly `N` integers, or `None`.
pub(crate) fn ints<const N: usize>(reply: &Reply) -> Option<[i64; N]> {
    let Reply::Array(items) = reply else {
        return None;
    };
    if items.len() != N {
        return None;
    }
    let mut out = [0; N];
    for (slot, item) in out.iter_mut().zip(items) {
        *slot = match item {
            Reply::Int(i) => *i,
            // Some clients hand integers back as text; accept exact integer text only.
            Reply::Text(s) => s.parse().ok()?,
            _ => return None,
        };
    }
    Some(out)
}
