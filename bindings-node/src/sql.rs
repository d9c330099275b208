//! The SQL half of the addon: [`NativePostgres`] and [`NativeSqlite`] start the core's SQL call
//! machines (`Postgres::start`, `Sqlite::start`) for each operation; `src/call.rs` drives the boundary.
//! No I/O here: TypeScript runs each command's statements with the user's driver and feeds the rows of
//! the last one back. Besides the calls: the schema, the connection setup and the purge (not a call).

use napi::bindgen_prelude::Unknown;
use napi::bindgen_prelude::{JsValue, Result};
use napi_derive::napi;
use ratewindow_core::call::{Call, Op};
use ratewindow_core::sql::{Postgres, SqlNames, Sqlite, Statement};

use crate::call::{NativeCall, NativeRelease, NativeStatement, Starter};
use crate::{coded, guard, Res};

fn names(prefix: &str) -> Res<SqlNames> {
    SqlNames::new(prefix).map_err(|message| coded("invalid_argument:prefix", message))
}

fn statement(s: Statement) -> NativeStatement {
    crate::call::statement(&s)
}

/// What a purge deleted.
#[napi(object, object_from_js = false)]
pub struct NativePurged {
    /// Rows of calls that had left their windows.
    pub calls: f64,
    /// Fixed windows that had ended.
    pub windows: f64,
}

/// One PostgreSQL store's call machines, under one name prefix.
#[napi]
pub struct NativePostgres {
    pg: Postgres,
}

impl Starter for NativePostgres {
    fn begin(&self, op: Op, _now: f64) -> Call {
        self.pg.start(op)
    }
}

/// One SQLite store's call machines, under one name prefix (the host's clock: `now` in each start).
#[napi]
pub struct NativeSqlite {
    sqlite: Sqlite,
}

impl Starter for NativeSqlite {
    fn begin(&self, op: Op, now: f64) -> Call {
        self.sqlite.start(op, now as u64)
    }
}

#[napi]
impl NativePostgres {
    /// Calls on the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters); `durable`:
    /// every call waits for its commit's WAL flush.
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

    /// The purge: one statement answering one row (calls deleted, windows deleted).
    #[napi]
    pub fn purge(&self) -> Result<NativeStatement, String> {
        guard(|| Ok(statement(self.pg.plan_purge())))
    }

    /// The purge's counts from its rows (a `store_reply` error for rows of the wrong shape).
    #[napi]
    pub fn purged(&self, rows: Unknown<'_>) -> Result<NativePurged, String> {
        guard(|| {
            let value = rows.value();
            // SAFETY: the value and its env come from this call's arguments.
            let rows = unsafe { crate::call::rows_of(value.env, value.value)? };
            let (calls, windows) =
                Postgres::decode_purge(&rows).map_err(|e| coded("store_reply", e.to_string()))?;
            Ok(NativePurged {
                calls: calls as f64,
                windows: windows as f64,
            })
        })
    }

    /// `Op::Consume` (see `NativeRedis::consume`).
    #[napi]
    pub fn consume(
        &self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
    ) -> Result<NativeCall, String> {
        Starter::consume(self, call_id, keys, uses, windows, release, 0.0)
    }

    /// `Op::Peek`.
    #[napi]
    pub fn peek(
        &self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
    ) -> Result<NativeCall, String> {
        Starter::peek(self, keys, uses, windows, 0.0)
    }

    /// `Op::Release`.
    #[napi]
    pub fn release(&self, token: &NativeRelease) -> Result<NativeCall, String> {
        Starter::release(self, token, 0.0)
    }

    /// `Op::Hit`.
    #[napi]
    pub fn hit(&self, key: String, decay_ms: f64, amount: f64) -> Result<NativeCall, String> {
        Starter::hit(self, key, decay_ms, amount, 0.0)
    }

    /// `Op::Attempt`.
    #[napi]
    pub fn attempt(&self, key: String, max: f64, decay_ms: f64) -> Result<NativeCall, String> {
        Starter::attempt(self, key, max, decay_ms, 0.0)
    }

    /// `Op::Read` (see `NativeRedis::read`).
    #[napi]
    pub fn read(&self, key: String, query: String, max: f64) -> Result<NativeCall, String> {
        Starter::read(self, key, query, max, 0.0)
    }

    /// `Op::ResetAttempts`.
    #[napi]
    pub fn reset_attempts(&self, key: String) -> Result<NativeCall, String> {
        Starter::reset_attempts(self, key, 0.0)
    }

    /// `Op::Clear`.
    #[napi]
    pub fn clear(&self, key: String) -> Result<NativeCall, String> {
        Starter::clear(self, key, 0.0)
    }
}

#[napi]
impl NativeSqlite {
    /// Calls on the tables named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters).
    #[napi(constructor)]
    pub fn new(prefix: String) -> Result<Self, String> {
        guard(|| {
            Ok(NativeSqlite {
                sqlite: Sqlite::new(names(&prefix)?),
            })
        })
    }

    /// The schema (idempotent; several statements, for `exec`).
    #[napi]
    pub fn schema(&self) -> Result<String, String> {
        guard(|| Ok(self.sqlite.schema()))
    }

    /// What to `exec` on every connection: the busy timeout (`Sqlite::CONNECTION_SETUP` by default).
    #[napi]
    pub fn connection_setup(&self, busy_timeout_ms: Option<u32>) -> String {
        busy_timeout_ms.map_or_else(
            || Sqlite::CONNECTION_SETUP.to_owned(),
            Sqlite::connection_setup,
        )
    }

    /// The purge at `now`: statements each deleting rows (their `changes` count them).
    #[napi]
    pub fn purge(&self, now: f64) -> Result<Vec<NativeStatement>, String> {
        guard(|| {
            Ok(self
                .sqlite
                .plan_purge(now as u64)
                .into_iter()
                .map(statement)
                .collect())
        })
    }

    /// `Op::Consume` at `now` (see `NativeRedis::consume`).
    #[napi]
    pub fn consume(
        &self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
        now: f64,
    ) -> Result<NativeCall, String> {
        Starter::consume(self, call_id, keys, uses, windows, release, now)
    }

    /// `Op::Peek` at `now`.
    #[napi]
    pub fn peek(
        &self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: f64,
    ) -> Result<NativeCall, String> {
        Starter::peek(self, keys, uses, windows, now)
    }

    /// `Op::Release` at `now`.
    #[napi]
    pub fn release(&self, token: &NativeRelease, now: f64) -> Result<NativeCall, String> {
        Starter::release(self, token, now)
    }

    /// `Op::Hit` at `now`.
    #[napi]
    pub fn hit(
        &self,
        key: String,
        decay_ms: f64,
        amount: f64,
        now: f64,
    ) -> Result<NativeCall, String> {
        Starter::hit(self, key, decay_ms, amount, now)
    }

    /// `Op::Attempt` at `now`.
    #[napi]
    pub fn attempt(
        &self,
        key: String,
        max: f64,
        decay_ms: f64,
        now: f64,
    ) -> Result<NativeCall, String> {
        Starter::attempt(self, key, max, decay_ms, now)
    }

    /// `Op::Read` at `now`.
    #[napi]
    pub fn read(
        &self,
        key: String,
        query: String,
        max: f64,
        now: f64,
    ) -> Result<NativeCall, String> {
        Starter::read(self, key, query, max, now)
    }

    /// `Op::ResetAttempts` at `now`.
    #[napi]
    pub fn reset_attempts(&self, key: String, now: f64) -> Result<NativeCall, String> {
        Starter::reset_attempts(self, key, now)
    }

    /// `Op::Clear` at `now`.
    #[napi]
    pub fn clear(&self, key: String, now: f64) -> Result<NativeCall, String> {
        Starter::clear(self, key, now)
    }
}
