//! PostgreSQL and SQLite: schemas, the statements that count, and the decoders of the rows that come
//! back. Still no I/O: the host runs each [`Statement`] with its own driver and hands the rows back.
//!
//! - [`Postgres`]: one statement, one round trip, one transaction per call, however many entries —
//!   functions installed by the schema keep one row per key (its recent call times), answer refusals
//!   from a read without locks or writes, record a single entry by a compare-and-set of its row and a
//!   batch under its keys' row locks taken in ascending key order (two batches never deadlock), and
//!   time the call by the server's `clock_timestamp()`.
//! - [`Sqlite`]: `BEGIN IMMEDIATE` takes the write lock before reading, so processes sharing one file
//!   cannot both take the last use; the host's clock (one host, one clock). The host runs the
//!   statements of [`SqliteCall`] in order and hands the rows of the last one back.
//!
//! Hosts start a [`Call`](crate::call::Call) with [`Postgres::start`] or [`Sqlite::start`] and drive
//! it; the plan and decide functions below remain for hosts that drive the steps themselves.
//!
//! Rows leave as keys are used; [`Postgres::plan_purge`] and [`Sqlite::plan_purge`] clear the rest
//! (schedule one, e.g. every hour).
//!
//! Without the `sql` feature (default on) only the value types remain: `Command::Sql` and
//! `Fed::Rows` still exist, but nothing plans or starts a SQL call.
// The helpers below serve the machines the `sql` feature brings.
#![cfg_attr(not(feature = "sql"), allow(dead_code))]

#[cfg(feature = "sql")]
mod call;
#[cfg(feature = "sql")]
mod postgres;
#[cfg(feature = "sql")]
mod sqlite;

#[cfg(feature = "sql")]
pub(crate) use call::SqlCall;
#[cfg(feature = "sql")]
pub use postgres::Postgres;
#[cfg(all(feature = "sql", feature = "rates"))]
pub(crate) use postgres::NOW_MS;
#[cfg(feature = "sql")]
pub use sqlite::{Decided, Sqlite, SqliteCall, SqliteWindowCall};

use serde::{Deserialize, Serialize};

use crate::redis::WindowState;

/// A parameter or a column value, as the host's driver gives and takes it.
///
/// Untagged in JSON: `null`, a boolean, an integer, a string, an array of integers or of strings.
/// Integers may come back as text (node-postgres returns `bigint` as a string); decoders accept both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Text.
    Text(String),
    /// An array of integers (PostgreSQL `bigint[]`).
    Ints(Vec<i64>),
    /// An array of text (PostgreSQL `text[]`).
    Texts(Vec<String>),
}

impl SqlValue {
    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            SqlValue::Int(i) => Some(*i),
            SqlValue::Text(s) => s.parse().ok(),
            _ => None,
        }
    }

    fn bool(&self) -> Option<bool> {
        match self {
            SqlValue::Bool(b) => Some(*b),
            SqlValue::Int(0) => Some(false),
            SqlValue::Int(1) => Some(true),
            SqlValue::Text(s) if s == "t" || s == "true" => Some(true),
            SqlValue::Text(s) if s == "f" || s == "false" => Some(false),
            _ => None,
        }
    }
}

impl std::fmt::Display for SqlValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SqlValue::Null => f.write_str("NULL"),
            SqlValue::Bool(b) => write!(f, "{b}"),
            SqlValue::Int(i) => write!(f, "{i}"),
            SqlValue::Text(s) => write!(f, "{s:?}"),
            SqlValue::Ints(v) => write!(f, "{v:?}"),
            SqlValue::Texts(v) => write!(f, "{v:?}"),
        }
    }
}

/// A statement and its parameters, in the dialect's placeholder style (`$1` for PostgreSQL, `?` for
/// SQLite).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "a statement does nothing until the host runs it"]
pub struct Statement {
    /// The SQL text.
    pub sql: String,
    /// Its parameters, in order.
    pub params: Vec<SqlValue>,
}

impl Statement {
    fn new(sql: impl Into<String>, params: Vec<SqlValue>) -> Statement {
        Statement {
            sql: sql.into(),
            params,
        }
    }
}

/// Rows of the wrong shape: never decoded into a verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("unexpected rows from {statement}: expected {expected}, got {got}")]
pub struct RowError {
    /// Which statement's rows.
    pub statement: &'static str,
    /// What the rows should have been.
    pub expected: &'static str,
    /// What came, rendered briefly.
    pub got: String,
}

impl RowError {
    pub(crate) fn new(
        statement: &'static str,
        expected: &'static str,
        rows: &[Vec<SqlValue>],
    ) -> RowError {
        let shown: Vec<String> = rows
            .iter()
            .take(4)
            .map(|row| {
                format!(
                    "({})",
                    row.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        let more = if rows.len() > 4 {
            format!(", … ({} rows)", rows.len())
        } else {
            String::new()
        };
        RowError {
            statement,
            expected,
            got: format!("[{}{more}]", shown.join(", ")),
        }
    }
}

/// A name prefix for the tables and functions: `[a-z_][a-z0-9_]*`, at most 40 characters. The
/// objects are `{prefix}_windows` and, on SQLite, `{prefix}_calls`; on PostgreSQL `{prefix}_log` and
/// the functions `{prefix}_sliding`, `{prefix}_consume`, `{prefix}_window`, `{prefix}_attempt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlNames(String);

impl Default for SqlNames {
    /// `ratewindow`.
    fn default() -> Self {
        SqlNames("ratewindow".to_owned())
    }
}

impl SqlNames {
    /// A prefix, checked so it can be spliced into SQL safely.
    pub fn new(prefix: &str) -> Result<SqlNames, String> {
        let mut chars = prefix.chars();
        let ok = matches!(chars.next(), Some('a'..='z' | '_'))
            && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
            && prefix.len() <= 40;
        if ok {
            Ok(SqlNames(prefix.to_owned()))
        } else {
            Err(format!(
                "invalid name prefix {prefix:?}: expected [a-z_][a-z0-9_]*, at most 40 characters"
            ))
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.0
    }

    fn apply(&self, sql: &str) -> String {
        sql.replace("{p}", &self.0)
    }
}

/// What an allowed consume needs to give its call back: the keys it recorded and its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlRelease {
    /// The keys the call was recorded under.
    pub keys: Vec<String>,
    /// The call's id, in each of its rows.
    pub call_id: String,
}

/// The distinct keys of a call, in first-seen order, with the longest window each is counted under:
/// one hash lookup per entry (a batch of any size plans in linear time).
fn distinct_keys(entries: &[crate::Entry]) -> Vec<(&str, u64)> {
    let mut keys: Vec<(&str, u64)> = Vec::new();
    // Short batches scan (no allocation); longer ones index the keys seen.
    if entries.len() <= SCAN_UP_TO {
        for entry in entries {
            match keys.iter_mut().find(|(k, _)| *k == entry.key) {
                Some((_, w)) => *w = (*w).max(entry.limit.window_ms()),
                None => keys.push((&entry.key, entry.limit.window_ms())),
            }
        }
        return keys;
    }
    let mut index: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(entries.len());
    for entry in entries {
        let window = entry.limit.window_ms();
        match index.entry(&entry.key) {
            std::collections::hash_map::Entry::Occupied(at) => {
                let w = &mut keys[*at.get()].1;
                *w = (*w).max(window);
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(keys.len());
                keys.push((&entry.key, window));
            }
        }
    }
    keys
}

/// Batches up to this many entries find their distinct keys by scanning; longer ones by hashing.
const SCAN_UP_TO: usize = 16;

fn window_state(hits: i64, ms_left: i64) -> Option<WindowState> {
    (ms_left > 0).then_some(WindowState {
        count: hits,
        ms_left: ms_left as u64,
    })
}

/// The length of `sql` without its comment lines (a line whose first non-blank characters are `--`,
/// its newline included): see [`strip_comment_lines`].
pub(crate) const fn stripped_len(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    let (mut i, mut len) = (0, 0);
    while i < bytes.len() {
        let end = line_end(bytes, i);
        if !is_comment_line(bytes, i, end) {
            len += end - i;
        }
        i = end;
    }
    len
}

/// `sql` without its comment lines, at compile time: the schema texts keep their comments in the
/// source and ship without them (7 KB of the PostgreSQL schema, which every build carrying the SQL
/// stores holds, the wasm-bindgen package's included), and so do the Redis Lua scripts (`--` starts
/// a Lua comment too; every build, the component's included, holds them). `N` is [`stripped_len`]`(sql)`.
pub(crate) const fn strip_comment_lines<const N: usize>(sql: &str) -> [u8; N] {
    let bytes = sql.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut o) = (0, 0);
    while i < bytes.len() {
        let end = line_end(bytes, i);
        if !is_comment_line(bytes, i, end) {
            let mut j = i;
            while j < end {
                out[o] = bytes[j];
                o += 1;
                j += 1;
            }
        }
        i = end;
    }
    out
}

/// The end of the line starting at `i`: after its newline, or the end of the text.
const fn line_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        i += 1;
        if bytes[i - 1] == b'\n' {
            break;
        }
    }
    i
}

const fn is_comment_line(bytes: &[u8], mut i: usize, end: usize) -> bool {
    while i < end && (bytes[i] == b' ' || bytes[i] == b'\t') {
        i += 1;
    }
    i + 1 < end && bytes[i] == b'-' && bytes[i + 1] == b'-'
}

/// `schema_text!(NAME = "text")`: a `&'static str` constant of the text without its comment lines.
macro_rules! schema_text {
    ($name:ident = $text:expr) => {
        const $name: &str = {
            const RAW: &str = $text;
            const BYTES: [u8; $crate::sql::stripped_len(RAW)] =
                $crate::sql::strip_comment_lines::<{ $crate::sql::stripped_len(RAW) }>(RAW);
            match ::core::str::from_utf8(&BYTES) {
                Ok(text) => text,
                Err(_) => panic!("a schema text is not UTF-8 after its comment lines went"),
            }
        };
    };
}
pub(crate) use schema_text;

#[cfg(test)]
mod strip_tests {
    schema_text!(STRIPPED = "-- a\nSELECT 1; -- kept\n  -- indented\n\t--tab\nSELECT '--';\n--");
    schema_text!(NOTHING = "");

    #[test]
    fn comment_lines_go_and_the_rest_stays_byte_for_byte() {
        assert_eq!(STRIPPED, "SELECT 1; -- kept\nSELECT '--';\n");
        assert_eq!(NOTHING, "");
    }
}
