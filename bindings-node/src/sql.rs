//! The SQL half of the addon: statements from `ratewindow_core::sql` (PostgreSQL and SQLite) and
//! decoders of the rows the TypeScript layer got from the user's driver. No I/O here: TypeScript runs
//! every statement with the user's driver and hands the rows back.
//!
//! Encodings (see `ts/sql-backend.ts`, which documents the interface this implements):
//! - a statement crosses as JSON `{"sql": "...", "params": [...]}` (parameters: `null`, booleans,
//!   integers, strings, arrays of integers or of strings); a list of them as a JSON array;
//! - rows cross back as JSON, an array of rows each an array of column values, exactly as the driver
//!   gave them (node-postgres gives `bigint` as strings; the decoders accept both);
//! - a batch verdict is `[]` when allowed, else `[retry_timestamp, retry_after_ms, blocked]`; a window
//!   `[]` when the key has none, else `[count, ms_left, available_in_secs]`;
//! - rows of the wrong shape throw code `store_reply` whose message is the core's `RowError` as JSON
//!   (`{"statement", "expected", "got"}`); an invalid prefix throws `invalid_argument:prefix`.

use napi::bindgen_prelude::Result;
use napi_derive::napi;
use ratewindow_core::redis::WindowState;
use ratewindow_core::sql::{
    Postgres, RowError, SqlNames, SqlRelease, SqlValue, Sqlite, SqliteCall, SqliteWindowCall,
    Statement,
};
use ratewindow_core::{BatchVerdict, Entry, Window};
use serde::Serialize;

use crate::{coded, guard, limit, limit_error, Res};

/// The entries of a call, given as three parallel arrays, validated by the core.
fn entries(keys: Vec<String>, uses: Vec<f64>, windows: Vec<f64>) -> Res<Vec<Entry>> {
    if keys.len() != uses.len() || keys.len() != windows.len() {
        return Err(coded(
            "invalid_argument:entries",
            "keys, uses and windows differ in length".to_owned(),
        ));
    }
    keys.into_iter()
        .zip(uses.into_iter().zip(windows))
        .map(|(key, (uses, window_ms))| Ok(Entry::new(key, limit(uses, window_ms)?)))
        .collect()
}

fn names(prefix: &str) -> Res<SqlNames> {
    SqlNames::new(prefix).map_err(|message| coded("invalid_argument:prefix", message))
}

fn json<T: Serialize + ?Sized>(value: &T) -> Res<String> {
    serde_json::to_string(value).map_err(|e| coded("panic", format!("ratewindow: {e}")))
}

/// Rows as JSON (an array of arrays of column values), or a `store_reply` error naming what came.
fn rows(
    statement: &'static str,
    expected: &'static str,
    rows_json: &str,
) -> Res<Vec<Vec<SqlValue>>> {
    serde_json::from_str(rows_json).map_err(|_| {
        let mut got = rows_json.chars().take(200).collect::<String>();
        if got.len() < rows_json.len() {
            got.push('…');
        }
        row_error(RowError {
            statement,
            expected,
            got,
        })
    })
}

fn row_error(e: RowError) -> napi::Error<String> {
    let message = serde_json::to_string(&e).unwrap_or_else(|_| e.to_string());
    coded("store_reply", message)
}

fn batch(verdict: BatchVerdict) -> Vec<f64> {
    if verdict.allowed {
        return Vec::new();
    }
    vec![
        verdict.retry_timestamp.unwrap_or(1) as f64,
        verdict.retry_after_ms as f64,
        verdict.blocked.unwrap_or(0) as f64,
    ]
}

fn window(state: Option<WindowState>) -> Vec<f64> {
    state.map_or_else(Vec::new, |w| {
        vec![
            w.count as f64,
            w.ms_left as f64,
            w.available_in_secs() as f64,
        ]
    })
}

/// A fixed-window op's decay: validated for `hit` only.
fn decay(op: &str, decay_ms: f64) -> Res<Window> {
    if op == "hit" {
        Window::from_f64(decay_ms).map_err(limit_error)
    } else {
        Window::from_f64(1.0).map_err(limit_error)
    }
}

fn release_of(release_json: &str) -> Res<SqlRelease> {
    serde_json::from_str(release_json)
        .map_err(|e| coded("invalid_argument:release", format!("not a release: {e}")))
}

/// PostgreSQL plans and decoders under one name prefix.
#[napi]
pub struct NativePostgres {
    pg: Postgres,
}

#[napi]
impl NativePostgres {
    /// Plans for the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters).
    #[napi(constructor)]
    pub fn new(prefix: String, durable: Option<bool>) -> Result<Self, String> {
        guard(|| {
            Ok(NativePostgres {
                pg: Postgres::new(names(&prefix)?).durable(durable.unwrap_or(false)),
            })
        })
    }

    /// The schema (idempotent; several statements, run without parameters).
    #[napi]
    pub fn schema(&self) -> Result<String, String> {
        guard(|| Ok(self.pg.schema()))
    }

    /// `plan_consume_many`: JSON `[statement, release]`.
    #[napi]
    pub fn plan_consume(
        &self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
    ) -> Result<String, String> {
        guard(|| {
            let entries = entries(keys, uses, windows)?;
            let (statement, release) = self
                .pg
                .plan_consume_many(&entries, &call_id)
                .map_err(|e| coded("invalid_argument:call_id", e.to_string()))?;
            json(&(statement, release))
        })
    }

    /// `plan_peek_many`: JSON statement.
    #[napi]
    pub fn plan_peek(
        &self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
    ) -> Result<String, String> {
        guard(|| json(&self.pg.plan_peek_many(&entries(keys, uses, windows)?)))
    }

    /// `plan_release` of a release as [`plan_consume`](Self::plan_consume) gave it: JSON statement.
    #[napi]
    pub fn plan_release(&self, release_json: String) -> Result<String, String> {
        guard(|| json(&self.pg.plan_release(&release_of(&release_json)?)))
    }

    /// A fixed-window op (`hit` with `decayMs` and `amount`, `get`, `reset`, `clear`): JSON statement.
    #[napi]
    pub fn plan_window(
        &self,
        op: String,
        key: String,
        decay_ms: f64,
        amount: f64,
    ) -> Result<String, String> {
        guard(|| {
            let statement = match op.as_str() {
                "hit" => self.pg.plan_hit(&key, decay(&op, decay_ms)?, amount as i64),
                "get" => self.pg.plan_get_window(&key),
                "reset" => self.pg.plan_reset_attempts(&key),
                "clear" => self.pg.plan_clear(&key),
                _ => return Err(coded("invalid_argument:op", format!("unknown op {op:?}"))),
            };
            json(&statement)
        })
    }

    /// `plan_purge`: JSON statement.
    #[napi]
    pub fn plan_purge(&self) -> Result<String, String> {
        guard(|| json(&self.pg.plan_purge()))
    }

    /// `decode_batch` of the rows (JSON) of a consume or peek of `entries` entries: `[]` when allowed,
    /// else `[retry_timestamp, retry_after_ms, blocked]` by the server's clock.
    #[napi]
    pub fn decode_batch(&self, rows_json: String, entries: u32) -> Result<Vec<f64>, String> {
        guard(|| {
            let rows = rows("consume", "rows as JSON", &rows_json)?;
            Postgres::decode_batch(&rows, entries as usize)
                .map(batch)
                .map_err(row_error)
        })
    }

    /// `decode_window`: `[]` without a window, else `[count, ms_left, available_in_secs]`.
    #[napi]
    pub fn decode_window(&self, rows_json: String) -> Result<Vec<f64>, String> {
        guard(|| {
            let rows = rows("window", "rows as JSON", &rows_json)?;
            Postgres::decode_window(&rows)
                .map(window)
                .map_err(row_error)
        })
    }

    /// `decode_purge`: `[calls deleted, windows deleted]`.
    #[napi]
    pub fn decode_purge(&self, rows_json: String) -> Result<Vec<f64>, String> {
        guard(|| {
            let rows = rows("purge", "rows as JSON", &rows_json)?;
            Postgres::decode_purge(&rows)
                .map(|(c, w)| vec![c as f64, w as f64])
                .map_err(row_error)
        })
    }
}

/// A SQLite call's decision, as JSON.
#[derive(Serialize)]
struct DecidedJson {
    verdict: Vec<f64>,
    statements: Vec<Statement>,
    release: Option<SqlRelease>,
}

/// A SQLite fixed-window call's decision, as JSON.
#[derive(Serialize)]
struct WindowJson {
    window: Vec<f64>,
    statements: Vec<Statement>,
}

/// SQLite plans and decoders under one name prefix, with the one call under way (the TypeScript layer
/// runs a call's statements synchronously, so one slot suffices).
#[napi]
pub struct NativeSqlite {
    sqlite: Sqlite,
    call: Option<SqliteCall>,
    window_call: Option<SqliteWindowCall>,
}

#[napi]
impl NativeSqlite {
    /// Plans for the tables named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters).
    #[napi(constructor)]
    pub fn new(prefix: String) -> Result<Self, String> {
        guard(|| {
            Ok(NativeSqlite {
                sqlite: Sqlite::new(names(&prefix)?),
                call: None,
                window_call: None,
            })
        })
    }

    /// The schema (idempotent; several statements, for `exec`).
    #[napi]
    pub fn schema(&self) -> Result<String, String> {
        guard(|| Ok(self.sqlite.schema()))
    }

    /// `Sqlite::CONNECTION_SETUP` (the busy timeout), for `exec` on every connection.
    #[napi]
    pub fn connection_setup(&self) -> String {
        Sqlite::CONNECTION_SETUP.to_owned()
    }

    /// `begin_consume` at `now`: the statements to run first (JSON array); the call waits for
    /// [`decide`](Self::decide).
    #[napi]
    pub fn begin_consume(
        &mut self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: f64,
    ) -> Result<String, String> {
        guard(|| {
            self.call = None;
            let entries = entries(keys, uses, windows)?;
            let call = self
                .sqlite
                .begin_consume(&entries, now as u64, &call_id)
                .map_err(|e| coded("invalid_argument:call_id", e.to_string()))?;
            let statements = json(call.statements())?;
            self.call = Some(call);
            Ok(statements)
        })
    }

    /// `begin_peek` at `now`: the statements (JSON array, one `SELECT`); then [`decide`](Self::decide).
    #[napi]
    pub fn begin_peek(
        &mut self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: f64,
    ) -> Result<String, String> {
        guard(|| {
            self.call = None;
            let call = self
                .sqlite
                .begin_peek(&entries(keys, uses, windows)?, now as u64);
            let statements = json(call.statements())?;
            self.call = Some(call);
            Ok(statements)
        })
    }

    /// `decide` of the call under way from the rows (JSON) of its last statement: JSON
    /// `{verdict, statements, release}` (`verdict` as [`NativePostgres::decode_batch`] encodes it).
    #[napi]
    pub fn decide(&mut self, rows_json: String) -> Result<String, String> {
        guard(|| {
            let call = self
                .call
                .take()
                .ok_or_else(|| coded("panic", "ratewindow: no SQLite call under way".to_owned()))?;
            let rows = rows("the calls select", "rows as JSON", &rows_json)?;
            let decided = call.decide(&rows).map_err(row_error)?;
            json(&DecidedJson {
                verdict: batch(decided.verdict),
                statements: decided.statements,
                release: decided.release,
            })
        })
    }

    /// `plan_release` of a release as [`decide`](Self::decide) gave it: JSON statement.
    #[napi]
    pub fn plan_release(&self, release_json: String) -> Result<String, String> {
        guard(|| json(&self.sqlite.plan_release(&release_of(&release_json)?)))
    }

    /// Starts a fixed-window op at `now` (`hit` with `decayMs` and `amount`, `get`, `reset`): the
    /// statements to run first (JSON array); then [`decide_window`](Self::decide_window).
    #[napi]
    pub fn begin_window(
        &mut self,
        op: String,
        key: String,
        decay_ms: f64,
        amount: f64,
        now: f64,
    ) -> Result<String, String> {
        guard(|| {
            self.window_call = None;
            let now = now as u64;
            let call = match op.as_str() {
                "hit" => self
                    .sqlite
                    .begin_hit(&key, decay(&op, decay_ms)?, amount as i64, now),
                "get" => self.sqlite.begin_get_window(&key, now),
                "reset" => self.sqlite.begin_reset_attempts(&key, now),
                _ => return Err(coded("invalid_argument:op", format!("unknown op {op:?}"))),
            };
            let statements = json(call.statements())?;
            self.window_call = Some(call);
            Ok(statements)
        })
    }

    /// `decide` of the fixed-window call under way: JSON `{window, statements}` (`window` as
    /// [`NativePostgres::decode_window`] encodes it).
    #[napi]
    pub fn decide_window(&mut self, rows_json: String) -> Result<String, String> {
        guard(|| {
            let call = self.window_call.take().ok_or_else(|| {
                coded(
                    "panic",
                    "ratewindow: no SQLite window call under way".to_owned(),
                )
            })?;
            let rows = rows("the window select", "rows as JSON", &rows_json)?;
            let (state, statements) = call.decide(&rows).map_err(row_error)?;
            json(&WindowJson {
                window: window(state),
                statements,
            })
        })
    }

    /// `plan_clear`: JSON statement.
    #[napi]
    pub fn plan_clear(&self, key: String) -> Result<String, String> {
        guard(|| json(&self.sqlite.plan_clear(&key)))
    }

    /// `plan_purge` at `now`: JSON array of statements (each deletes; `changes` counts the rows).
    #[napi]
    pub fn plan_purge(&self, now: f64) -> Result<String, String> {
        guard(|| json(&self.sqlite.plan_purge(now as u64)))
    }
}
