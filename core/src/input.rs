//! What a binding checks before it hands a value to the engine: the clock's reading, a key read from a
//! host string, a Redis key prefix. Each check is written once here, with its error, so every binding
//! refuses the same values with the same words.

use serde::{Deserialize, Serialize};

/// The latest time the engine accepts, in Unix milliseconds: 2^53 − 1, JavaScript's largest safe
/// integer (the year 287,396). A `now` past it is refused before any store sees it, so no reading can
/// move a store's horizon to the end of time.
pub const MAX_NOW_MS: u64 = (1 << 53) - 1;

/// The range of `now`, in words.
pub const NOW_RANGE: &str = "whole Unix milliseconds from 0 to 9007199254740991";

/// A `now` outside `0..=`[`MAX_NOW_MS`] (or not a whole number): the value as the host gave it, as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid now: {value} (expected {NOW_RANGE})")]
pub struct NowError {
    /// The refused value, as text (`-1`, `18446744073709551615`, `1.5` ...).
    pub value: String,
}

/// A host number as text, as JavaScript mostly writes it (`NaN`, `-Infinity`, `1.5`, a whole number
/// digit for digit, at most 17 significant digits, which read back as the same number): what a binding
/// writes for a number it cannot take as an integer. Not `{v}`: the standard float formatter is ~16 KB
/// of code in a WebAssembly module.
///
/// ```
/// use ratewindow_core::input::number_text;
/// assert_eq!(number_text(1.5), "1.5");
/// assert_eq!(number_text(f64::NEG_INFINITY), "-Infinity");
/// assert_eq!(number_text(1e19), "10000000000000000000");
/// assert_eq!(number_text(0.3).parse::<f64>(), Ok(0.3));
/// ```
pub fn number_text(v: f64) -> String {
    crate::limit::format_f64(v)
}

/// `now` if it is in range, else the error naming it.
///
/// ```
/// use ratewindow_core::input::{check_now, MAX_NOW_MS};
/// assert_eq!(check_now(1_700_000_000_000), Ok(1_700_000_000_000));
/// assert!(check_now(MAX_NOW_MS).is_ok());
/// assert_eq!(
///     check_now(u64::MAX).unwrap_err().to_string(),
///     "invalid now: 18446744073709551615 (expected whole Unix milliseconds from 0 to 9007199254740991)"
/// );
/// ```
#[inline]
pub fn check_now(now: u64) -> Result<u64, NowError> {
    if now <= MAX_NOW_MS {
        Ok(now)
    } else {
        Err(now_error(now))
    }
}

/// `now` given as a signed host integer (Python's `int` read as `i128`, a component host's `s64`).
#[inline]
pub fn check_now_i128(now: i128) -> Result<u64, NowError> {
    if (0..=MAX_NOW_MS as i128).contains(&now) {
        Ok(now as u64)
    } else {
        Err(NowError {
            value: now.to_string(),
        })
    }
}

#[cold]
fn now_error(now: u64) -> NowError {
    NowError {
        value: now.to_string(),
    }
}

/// Where a refused key was given: the key argument of a single call, or entry `index` of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPosition {
    /// The `key` argument.
    Key,
    /// The key of a batch's entry at this index (from 0).
    Entry(usize),
}

impl std::fmt::Display for KeyPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyPosition::Key => f.write_str("key"),
            KeyPosition::Entry(i) => write!(f, "entries[{i}].key"),
        }
    }
}

/// A key that is not valid Unicode (a JavaScript string with a lone surrogate, a Python `str` with
/// one): refused, never replaced, so two different strings can never count as one key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {position}: not valid Unicode (a lone surrogate at UTF-16 index {at}); keys are compared as exact UTF-8 and a lone surrogate has none")]
pub struct KeyError {
    /// Which key.
    pub position: KeyPosition,
    /// The index of the first lone surrogate, in UTF-16 code units (JS) or code points (Python).
    pub at: usize,
}

impl KeyError {
    /// The field as the error names it: `key` or `entries[3].key`.
    pub fn field(&self) -> String {
        self.position.to_string()
    }
}

/// The UTF-8 of a UTF-16 string, or the index of its first lone surrogate (the one check every JS
/// host makes: `TextEncoder` and V8's UTF-8 writer both replace such a surrogate with U+FFFD).
pub fn utf16_to_utf8(units: &[u16]) -> Result<String, usize> {
    let mut out = String::with_capacity(units.len());
    let mut index = 0;
    for c in char::decode_utf16(units.iter().copied()) {
        match c {
            Ok(c) => {
                out.push(c);
                index += c.len_utf16();
            }
            Err(_) => return Err(index),
        }
    }
    Ok(out)
}

/// Markers the Redis store puts between its prefix and a key (`log:`, `win:`, `lck:` for locks,
/// `gcr:` and `ctr:` for GCRA buckets and sliding-window counters).
pub const REDIS_NAMESPACES: [&str; 5] = ["log:", "win:", "lck:", "gcr:", "ctr:"];

/// A Redis key prefix that could make two stores share a key: one containing `log:` or `win:`.
///
/// The store writes `prefix + "log:" + key` (or `"win:"`). If one prefix is `p:` and another `p:log:`,
/// the keys `log:x` of the first and `x` of the second are one Redis key. A prefix that contains
/// neither marker cannot collide with another such prefix: when one prefix extends another, the
/// extension would have to begin with a marker (or a marker would have to begin with part of itself
/// followed by another, which neither does).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid prefix {prefix:?}: a Redis key prefix must not contain \"log:\", \"win:\", \"lck:\", \"gcr:\" or \"ctr:\" (the store's own markers), so that no two prefixes can name one key")]
pub struct PrefixError {
    /// The refused prefix.
    pub prefix: String,
}

/// `prefix` if no key of a store using it can be a key of a store using another prefix.
///
/// ```
/// use ratewindow_core::input::check_redis_prefix;
/// assert!(check_redis_prefix("ratewindow:").is_ok());
/// assert!(check_redis_prefix("").is_ok());
/// assert!(check_redis_prefix("p:log:").is_err());
/// assert!(check_redis_prefix("plog:").is_err());
/// ```
pub fn check_redis_prefix(prefix: &str) -> Result<(), PrefixError> {
    // A byte window, not `str::contains`: its substring searcher costs the component kilobytes.
    let marked = prefix
        .as_bytes()
        .windows(4)
        .any(|w| REDIS_NAMESPACES.iter().any(|ns| w == ns.as_bytes()));
    if marked {
        Err(PrefixError {
            prefix: prefix.to_owned(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_refused_past_the_safe_integers() {
        assert_eq!(check_now(0), Ok(0));
        assert_eq!(check_now(MAX_NOW_MS), Ok(MAX_NOW_MS));
        assert_eq!(
            check_now(MAX_NOW_MS + 1).unwrap_err().value,
            "9007199254740992"
        );
        assert_eq!(check_now_i128(-1).unwrap_err().value, "-1");
        assert_eq!(
            check_now_i128(1 << 64).unwrap_err().value,
            "18446744073709551616"
        );
        assert_eq!(check_now_i128(5), Ok(5));
    }

    #[test]
    fn lone_surrogates_are_found_at_their_utf16_index() {
        let units: Vec<u16> = "s\u{1F600}x".encode_utf16().collect();
        assert_eq!(utf16_to_utf8(&units).as_deref(), Ok("s\u{1F600}x"));
        assert_eq!(utf16_to_utf8(&[0x73, 0xD800]), Err(1));
        assert_eq!(utf16_to_utf8(&[0x73, 0xD83D, 0xDE00, 0xDC00]), Err(3));
        assert_eq!(utf16_to_utf8(&[0xDC00]), Err(0));
        let e = KeyError {
            position: KeyPosition::Entry(2),
            at: 1,
        };
        assert!(e
            .to_string()
            .starts_with("invalid entries[2].key: not valid Unicode"));
    }

    #[test]
    fn prefixes_with_a_marker_are_refused_and_the_rest_never_collide() {
        let ok = [
            "", "p", "p:", "p:l", "p:lo", "p:log", "a:", "a:w", "a:wi", "a:win", "x{y}",
        ];
        for p in ok {
            assert!(check_redis_prefix(p).is_ok(), "{p}");
        }
        for p in [
            "p:log:", "plog:", "win:", "a:win:b", "p:gcr:", "ctr:", "xlck:",
        ] {
            assert!(check_redis_prefix(p).is_err(), "{p}");
        }
        // Exhaustively over short keys: no two accepted prefixes name one key.
        let keys = [
            "", "x", "log:x", "win:x", "gcr:x", "ctr:x", ":", "l", "og:", "g:x", "in:x", "r:x",
        ];
        let mut seen = std::collections::HashMap::new();
        for p in ok {
            for ns in REDIS_NAMESPACES {
                for k in keys {
                    let full = format!("{p}{ns}{k}");
                    if let Some(other) = seen.insert(full.clone(), (p, ns, k)) {
                        assert_eq!(other, (p, ns, k), "{full}");
                    }
                }
            }
        }
    }
}
