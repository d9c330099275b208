//! PostgreSQL and SQLite plans and decoders for the Python `PostgresStore` and `SqliteStore`: thin
//! wrappers over `ratewindow_core::sql`.
//!
//! No I/O here. A statement is `(sql, params)`: the SQL text (`$1` placeholders for PostgreSQL, run
//! through psycopg's `RawCursor`; `?` for SQLite) and a list of Python values (`int`, `str`,
//! `list[int]`, `list[str]`, `None`). Decoders take the rows as the driver returns them (a sequence of
//! tuples of `bool`/`int`/`str`/`bytes`/`None`). Rows of the wrong shape raise
//! `ratewindow.StoreReplyError` naming what was expected and what came; they never become a verdict.

use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple, PyType};
use ratewindow_core::sql::{
    Postgres, RowError, SqlNames, SqlRelease, SqlValue, Sqlite, SqliteCall, SqliteWindowCall,
    Statement,
};
use ratewindow_core::Entry;

use crate::errors::guard;
use crate::limit::{hit_args, Limit};
use crate::store::entries;
use crate::verdict::Verdict;

/// A statement as Python sees it: `(sql, params)`.
type PyStatement = (Py<PyString>, Py<PyList>);
/// A consume of a batch: `(sql, params, entries, keys to release)`.
type PyConsume = (Py<PyString>, Py<PyList>, usize, Py<PyList>);

static REPLY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `StoreReplyError(message, source, expected, got)`.
fn row_error(py: Python<'_>, error: &RowError) -> PyErr {
    match REPLY_ERROR.import(py, "ratewindow._errors", "StoreReplyError") {
        Ok(class) => match class.call1((
            error.to_string(),
            error.statement,
            error.expected,
            error.got.as_str(),
        )) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

fn names(prefix: Option<&str>) -> PyResult<SqlNames> {
    match prefix {
        None => Ok(SqlNames::default()),
        Some(p) => SqlNames::new(p).map_err(PyValueError::new_err),
    }
}

fn value(py: Python<'_>, v: &SqlValue) -> PyResult<Py<PyAny>> {
    Ok(match v {
        SqlValue::Null => py.None(),
        SqlValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        SqlValue::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        SqlValue::Text(s) => PyString::new(py, s).into_any().unbind(),
        SqlValue::Ints(v) => PyList::new(py, v)?.into_any().unbind(),
        SqlValue::Texts(v) => PyList::new(py, v)?.into_any().unbind(),
    })
}

fn params(py: Python<'_>, values: &[SqlValue]) -> PyResult<Py<PyList>> {
    let list = PyList::empty(py);
    for v in values {
        list.append(value(py, v)?)?;
    }
    Ok(list.unbind())
}

fn statement(py: Python<'_>, st: &Statement) -> PyResult<PyStatement> {
    Ok((PyString::new(py, &st.sql).unbind(), params(py, &st.params)?))
}

fn statements(py: Python<'_>, sts: &[Statement]) -> PyResult<Vec<PyStatement>> {
    sts.iter().map(|st| statement(py, st)).collect()
}

/// One column value as the decoders read it. Objects no driver returns for these statements (floats,
/// lists, …) become a text the decoders refuse, so they end in `StoreReplyError` too.
fn column(obj: &Bound<'_, PyAny>) -> SqlValue {
    if obj.is_none() {
        return SqlValue::Null;
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return SqlValue::Bool(b.is_true());
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        if let Ok(v) = int.extract::<i64>() {
            return SqlValue::Int(v);
        }
    } else if let Ok(text) = obj.cast::<PyString>() {
        return SqlValue::Text(text.to_string_lossy().into_owned());
    } else if let Ok(bytes) = obj.cast::<PyBytes>() {
        return SqlValue::Text(String::from_utf8_lossy(bytes.as_bytes()).into_owned());
    }
    let kind = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let shown = obj.repr().map(|r| r.to_string()).unwrap_or_default();
    SqlValue::Text(format!("<{kind} {shown}>"))
}

/// The rows as the core reads them: any iterable of rows, each an iterable of column values (tuples,
/// lists, `sqlite3.Row`, …). A row that is not iterable becomes a one-column row the decoders refuse.
fn rows(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<SqlValue>>> {
    let mut out = Vec::new();
    for row in obj.try_iter()? {
        let row = row?;
        if let Ok(tuple) = row.cast::<PyTuple>() {
            out.push(tuple.iter().map(|c| column(&c)).collect());
        } else if row.is_instance_of::<PyString>() || row.is_instance_of::<PyBytes>() {
            out.push(vec![column(&row)]);
        } else {
            match row.try_iter() {
                Ok(columns) => out.push(
                    columns
                        .map(|c| c.map(|c| column(&c)))
                        .collect::<PyResult<_>>()?,
                ),
                Err(_) => out.push(vec![column(&row)]),
            }
        }
    }
    Ok(out)
}

fn empty_call_id<E: std::fmt::Display>(e: E) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Plans and decoders for PostgreSQL under one name prefix (`{prefix}_calls`, `{prefix}_windows`,
/// `{prefix}_consume`, `{prefix}_window`). Every call is one statement: one round trip, one
/// transaction, timed by the server's clock. Immutable, so one planner serves any number of threads.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "PostgresPlanner")]
pub(crate) struct PostgresPlanner {
    plans: Postgres,
    consume_sql: Py<PyString>,
    window_sql: Py<PyString>,
}

impl PostgresPlanner {
    /// A statement whose SQL is one of the two cached strings.
    fn cached(&self, py: Python<'_>, sql: &Py<PyString>, st: &Statement) -> PyResult<PyStatement> {
        Ok((sql.clone_ref(py), params(py, &st.params)?))
    }

    fn sliding(&self, py: Python<'_>, st: &Statement) -> PyResult<PyStatement> {
        self.cached(py, &self.consume_sql, st)
    }

    fn window(&self, py: Python<'_>, st: &Statement) -> PyResult<PyStatement> {
        self.cached(py, &self.window_sql, st)
    }
}

#[pymethods]
impl PostgresPlanner {
    /// Objects named `{prefix}_…`; `prefix` is `[a-z_][a-z0-9_]*`, at most 40 characters
    /// (`ValueError` otherwise), default `ratewindow`. With `durable`, every call keeps the server's
    /// `synchronous_commit` (waits for its commit to be flushed) instead of `off` for its transaction.
    #[new]
    #[pyo3(signature = (prefix = None, durable = false))]
    fn new(py: Python<'_>, prefix: Option<&str>, durable: bool) -> PyResult<Self> {
        guard(|| {
            let plans = Postgres::new(names(prefix)?).durable(durable);
            let consume = plans.plan_peek_many(&[]).sql;
            let window = plans.plan_get_window("").sql;
            Ok(PostgresPlanner {
                consume_sql: PyString::new(py, &consume).unbind(),
                window_sql: PyString::new(py, &window).unbind(),
                plans,
            })
        })
    }

    /// The name prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.plans.names().prefix()
    }

    /// The schema (tables, indexes, the two functions) as one script in one transaction. Idempotent.
    fn schema(&self) -> String {
        self.plans.schema()
    }

    /// Consume of one entry, recorded under `call_id`.
    fn consume(
        &self,
        py: Python<'_>,
        key: &str,
        limit: &Bound<'_, Limit>,
        call_id: &str,
    ) -> PyResult<PyStatement> {
        guard(|| {
            let entry = [Entry::new(key, limit.get().inner)];
            let (st, _) = self
                .plans
                .plan_consume_many(&entry, call_id)
                .map_err(empty_call_id)?;
            self.sliding(py, &st)
        })
    }

    /// Consume of a batch, all or nothing: `(sql, params, entries, keys)`, where `keys` (with the call
    /// id) is what `release` needs to give the call back.
    fn consume_many(
        &self,
        py: Python<'_>,
        entries: &Bound<'_, PyAny>,
        call_id: &str,
    ) -> PyResult<PyConsume> {
        guard(|| {
            let entries = self::entries(entries)?;
            let (st, release) = self
                .plans
                .plan_consume_many(&entries, call_id)
                .map_err(empty_call_id)?;
            let (sql, params) = self.sliding(py, &st)?;
            Ok((
                sql,
                params,
                entries.len(),
                PyList::new(py, release.keys)?.unbind(),
            ))
        })
    }

    /// Peek of one entry: writes nothing.
    fn peek(&self, py: Python<'_>, key: &str, limit: &Bound<'_, Limit>) -> PyResult<PyStatement> {
        guard(|| {
            let entry = [Entry::new(key, limit.get().inner)];
            self.sliding(py, &self.plans.plan_peek_many(&entry))
        })
    }

    /// Peek of a batch: `(sql, params, entries)`; writes nothing.
    fn peek_many(
        &self,
        py: Python<'_>,
        entries: &Bound<'_, PyAny>,
    ) -> PyResult<(Py<PyString>, Py<PyList>, usize)> {
        guard(|| {
            let entries = self::entries(entries)?;
            let (sql, params) = self.sliding(py, &self.plans.plan_peek_many(&entries))?;
            Ok((sql, params, entries.len()))
        })
    }

    /// Removes exactly the rows call `call_id` recorded under `keys`.
    fn release(&self, py: Python<'_>, keys: Vec<String>, call_id: String) -> PyResult<PyStatement> {
        guard(|| statement(py, &self.plans.plan_release(&SqlRelease { keys, call_id })))
    }

    /// Adds `amount` hits to `key`'s fixed window, opening one of `decay_ms` if none runs.
    #[pyo3(signature = (key, decay_ms, amount = None))]
    fn hit(
        &self,
        py: Python<'_>,
        key: &str,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyStatement> {
        guard(|| {
            let (decay, amount) = hit_args(decay_ms, amount)?;
            self.window(py, &self.plans.plan_hit(key, decay, amount))
        })
    }

    /// Reads `key`'s fixed window.
    fn get_window(&self, py: Python<'_>, key: &str) -> PyResult<PyStatement> {
        guard(|| self.window(py, &self.plans.plan_get_window(key)))
    }

    /// Sets `key`'s count to zero, keeping its window.
    fn reset_attempts(&self, py: Python<'_>, key: &str) -> PyResult<PyStatement> {
        guard(|| self.window(py, &self.plans.plan_reset_attempts(key)))
    }

    /// Removes `key`'s count and window.
    fn clear(&self, py: Python<'_>, key: &str) -> PyResult<PyStatement> {
        guard(|| self.window(py, &self.plans.plan_clear(key)))
    }

    /// Deletes every call that has left its windows and every ended window, by the server's clock.
    fn purge(&self, py: Python<'_>) -> PyResult<PyStatement> {
        guard(|| statement(py, &self.plans.plan_purge()))
    }

    /// Decodes the rows of a consume or peek of a batch of `entries` entries (no release attached).
    #[staticmethod]
    fn decode_batch(rows: &Bound<'_, PyAny>, entries: usize) -> PyResult<Verdict> {
        guard(|| {
            Postgres::decode_batch(&self::rows(rows)?, entries)
                .map(|v| Verdict::batch(v, None))
                .map_err(|e| row_error(rows.py(), &e))
        })
    }

    /// Decodes the rows of a consume or peek of one entry, as a single call's verdict (`blocked` is
    /// `None`).
    #[staticmethod]
    fn decode_single(rows: &Bound<'_, PyAny>) -> PyResult<Verdict> {
        guard(|| {
            Postgres::decode_batch(&self::rows(rows)?, 1)
                .map(|v| Verdict::single(v.verdict()))
                .map_err(|e| row_error(rows.py(), &e))
        })
    }

    /// Decodes the rows of any fixed-window statement: `(count, ms_left)`, or `None` without a window.
    #[staticmethod]
    fn decode_window(rows: &Bound<'_, PyAny>) -> PyResult<Option<(i64, u64)>> {
        guard(|| {
            Postgres::decode_window(&self::rows(rows)?)
                .map(|w| w.map(|w| (w.count, w.ms_left)))
                .map_err(|e| row_error(rows.py(), &e))
        })
    }

    /// Decodes the row of a purge: `(calls deleted, windows deleted)`.
    #[staticmethod]
    fn decode_purge(rows: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        guard(|| Postgres::decode_purge(&self::rows(rows)?).map_err(|e| row_error(rows.py(), &e)))
    }
}

/// Plans for SQLite under one name prefix (`{prefix}_calls`, `{prefix}_windows`), timed by the
/// host's clock (`now`, Unix ms). Immutable.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "SqlitePlanner")]
pub(crate) struct SqlitePlanner {
    plans: Sqlite,
}

#[pymethods]
impl SqlitePlanner {
    /// Run on every connection: waits up to 5 s for another connection's write.
    #[classattr]
    const CONNECTION_SETUP: &'static str = Sqlite::CONNECTION_SETUP;

    /// Undoes a call whose statements failed after `BEGIN IMMEDIATE`.
    #[classattr]
    const ROLLBACK: &'static str = SqliteCall::ROLLBACK;

    /// The connection setup with a busy timeout of `busy_timeout_ms`.
    #[staticmethod]
    fn connection_setup(busy_timeout_ms: u32) -> String {
        Sqlite::connection_setup(busy_timeout_ms)
    }

    /// Tables named `{prefix}_…`; see `PostgresPlanner`.
    #[new]
    #[pyo3(signature = (prefix = None))]
    fn new(prefix: Option<&str>) -> PyResult<Self> {
        guard(|| {
            Ok(SqlitePlanner {
                plans: Sqlite::new(names(prefix)?),
            })
        })
    }

    /// The name prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.plans.names().prefix()
    }

    /// The schema (tables and indexes). Idempotent.
    fn schema(&self) -> String {
        self.plans.schema()
    }

    /// Starts a consume of one entry at `now`, recorded under `call_id`.
    fn begin_consume(
        &self,
        key: &str,
        limit: &Bound<'_, Limit>,
        now: u64,
        call_id: &str,
    ) -> PyResult<PySqliteCall> {
        guard(|| {
            let entry = [Entry::new(key, limit.get().inner)];
            let call = self
                .plans
                .begin_consume(&entry, now, call_id)
                .map_err(empty_call_id)?;
            Ok(PySqliteCall::new(call, true))
        })
    }

    /// Starts a consume of a batch at `now`, all or nothing.
    fn begin_consume_many(
        &self,
        entries: &Bound<'_, PyAny>,
        now: u64,
        call_id: &str,
    ) -> PyResult<PySqliteCall> {
        guard(|| {
            let call = self
                .plans
                .begin_consume(&self::entries(entries)?, now, call_id)
                .map_err(empty_call_id)?;
            Ok(PySqliteCall::new(call, false))
        })
    }

    /// Starts a peek of one entry: one `SELECT`, writing nothing.
    fn begin_peek(&self, key: &str, limit: &Bound<'_, Limit>, now: u64) -> PyResult<PySqliteCall> {
        guard(|| {
            let entry = [Entry::new(key, limit.get().inner)];
            Ok(PySqliteCall::new(self.plans.begin_peek(&entry, now), true))
        })
    }

    /// Starts a peek of a batch.
    fn begin_peek_many(&self, entries: &Bound<'_, PyAny>, now: u64) -> PyResult<PySqliteCall> {
        guard(|| {
            Ok(PySqliteCall::new(
                self.plans.begin_peek(&self::entries(entries)?, now),
                false,
            ))
        })
    }

    /// Removes exactly the rows call `call_id` recorded under `keys`.
    fn release(&self, py: Python<'_>, keys: Vec<String>, call_id: String) -> PyResult<PyStatement> {
        guard(|| statement(py, &self.plans.plan_release(&SqlRelease { keys, call_id })))
    }

    /// Starts adding `amount` hits to `key`'s fixed window at `now`.
    #[pyo3(signature = (key, decay_ms, amount, now))]
    fn begin_hit(
        &self,
        key: &str,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
        now: u64,
    ) -> PyResult<PySqliteWindowCall> {
        guard(|| {
            let (decay, amount) = hit_args(decay_ms, amount)?;
            Ok(PySqliteWindowCall::new(
                self.plans.begin_hit(key, decay, amount, now),
            ))
        })
    }

    /// Starts reading `key`'s fixed window at `now`.
    fn begin_get_window(&self, key: &str, now: u64) -> PyResult<PySqliteWindowCall> {
        guard(|| {
            Ok(PySqliteWindowCall::new(
                self.plans.begin_get_window(key, now),
            ))
        })
    }

    /// Starts setting `key`'s count to zero at `now`, keeping its window.
    fn begin_reset_attempts(&self, key: &str, now: u64) -> PyResult<PySqliteWindowCall> {
        guard(|| {
            Ok(PySqliteWindowCall::new(
                self.plans.begin_reset_attempts(key, now),
            ))
        })
    }

    /// Removes `key`'s count and window.
    fn clear(&self, py: Python<'_>, key: &str) -> PyResult<PyStatement> {
        guard(|| statement(py, &self.plans.plan_clear(key)))
    }

    /// Deletes every call that has left its windows at `now`, and every window ended by then: two
    /// statements (calls, then windows).
    fn purge(&self, py: Python<'_>, now: u64) -> PyResult<Vec<PyStatement>> {
        guard(|| statements(py, &self.plans.plan_purge(now)))
    }
}

fn taken() -> PyErr {
    PyRuntimeError::new_err("this call has already been decided")
}

/// One sliding-log call on SQLite: run `statements()` in order on one connection, hand the rows of the
/// last to `decide`, run the statements it returns; `ROLLBACK` on any error after `BEGIN IMMEDIATE`.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "SqliteCall")]
pub(crate) struct PySqliteCall {
    call: Mutex<Option<SqliteCall>>,
    single: bool,
    in_transaction: bool,
}

impl PySqliteCall {
    fn new(call: SqliteCall, single: bool) -> PySqliteCall {
        PySqliteCall {
            in_transaction: call.in_transaction(),
            call: Mutex::new(Some(call)),
            single,
        }
    }
}

#[pymethods]
impl PySqliteCall {
    /// The statements to run first, in order; the last one's rows go to `decide`.
    fn statements(&self, py: Python<'_>) -> PyResult<Vec<PyStatement>> {
        guard(|| {
            let held = self.call.lock().unwrap_or_else(|e| e.into_inner());
            statements(py, held.as_ref().ok_or_else(taken)?.statements())
        })
    }

    /// Whether the statements open a transaction (a consume does; a peek does not).
    #[getter]
    fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Decides from the rows (`key, at`) of the last statement: `(verdict, statements still to run,
    /// keys to release or None)`. A verdict of a batch carries no release; attach one from the keys.
    fn decide(
        &self,
        py: Python<'_>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<(Verdict, Vec<PyStatement>, Option<Vec<String>>)> {
        guard(|| {
            let call = self
                .call
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(taken)?;
            let decided = call
                .decide(&self::rows(rows)?)
                .map_err(|e| row_error(py, &e))?;
            let verdict = if self.single {
                Verdict::single(decided.verdict.verdict())
            } else {
                Verdict::batch(decided.verdict, None)
            };
            Ok((
                verdict,
                statements(py, &decided.statements)?,
                decided.release.map(|r| r.keys),
            ))
        })
    }
}

/// One fixed-window call on SQLite: as `SqliteCall`, deciding `(count, ms_left)` or `None`.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "SqliteWindowCall")]
pub(crate) struct PySqliteWindowCall {
    call: Mutex<Option<SqliteWindowCall>>,
    in_transaction: bool,
}

impl PySqliteWindowCall {
    fn new(call: SqliteWindowCall) -> PySqliteWindowCall {
        PySqliteWindowCall {
            in_transaction: call.in_transaction(),
            call: Mutex::new(Some(call)),
        }
    }
}

#[pymethods]
impl PySqliteWindowCall {
    /// The statements to run first, in order; the last one's rows go to `decide`.
    fn statements(&self, py: Python<'_>) -> PyResult<Vec<PyStatement>> {
        guard(|| {
            let held = self.call.lock().unwrap_or_else(|e| e.into_inner());
            statements(py, held.as_ref().ok_or_else(taken)?.statements())
        })
    }

    /// Whether the statements open a transaction (everything but a read does).
    #[getter]
    fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Decides from the rows (`hits, ends_at`) of the last statement: `((count, ms_left) or None,
    /// statements still to run)`.
    #[allow(clippy::type_complexity)]
    fn decide(
        &self,
        py: Python<'_>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<(Option<(i64, u64)>, Vec<PyStatement>)> {
        guard(|| {
            let call = self
                .call
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(taken)?;
            let (state, rest) = call
                .decide(&self::rows(rows)?)
                .map_err(|e| row_error(py, &e))?;
            Ok((state.map(|w| (w.count, w.ms_left)), statements(py, &rest)?))
        })
    }
}
