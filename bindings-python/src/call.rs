//! Call machines for Python: a `Machine` starts each store operation as a core `Call`; Python drives
//! it (`ratewindow/_sansio.py`): `next()` gives a command (`Script`, `RedisCommand`, `Sql`) or the outcome, or raises the
//! call's typed error; `feed_reply`, `feed_rows` and `fail` hand back what the client did.
//!
//! Everything that decides is the core's. This module converts values, and is the one place where a
//! `CallError` kind becomes a Python exception and a failed give-back becomes a report.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyList, PyString, PyType};
use pyo3::PyTraverseError;
use ratewindow_core::call::{
    self as core, CallError, Command, Fed, Next, Op, Outcome, WindowQuery,
};
use ratewindow_core::redis::RedisOptions;
use ratewindow_core::sql::{Postgres, SqlNames, Sqlite};
use ratewindow_core::{Entry, Window};

use crate::entry::Key;
use crate::errors::guard;
use crate::limit::{attempt_cost, hit_args, whole, Limit};
use crate::store::read_clock;
use crate::verdict::{AttemptResult, HitResult, PyReleaseToken, Verdict};

/// Redis: run `script_name` with `keys` and `args`, by `EVALSHA sha1` when `by_sha1`, else
/// `EVAL source`. Feed back the reply, or fail with the client's error.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Script")]
pub(crate) struct Script {
    #[pyo3(get)]
    script_name: Py<PyString>,
    #[pyo3(get)]
    sha1: Py<PyString>,
    #[pyo3(get)]
    source: Py<PyString>,
    #[pyo3(get)]
    keys: Py<PyList>,
    #[pyo3(get)]
    args: Py<PyList>,
    #[pyo3(get)]
    by_sha1: bool,
}

/// Redis: run one plain command, `args` as is (its name, its one key, its arguments: the lock's
/// `SET key owner NX PX ttl`, `DEL key`, `GET key`). Feed back the reply, or fail with the client's
/// error. Asked for only by a machine made with `commands=True`.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "RedisCommand")]
pub(crate) struct RedisCommand {
    #[pyo3(get)]
    args: Py<PyList>,
}

/// SQL: run `statements` (`[(sql, params), …]`) in order on one connection; feed back the rows of the
/// last, or fail with the driver's error as soon as one fails (running none after it).
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Sql")]
pub(crate) struct Sql {
    #[pyo3(get)]
    statements: Py<PyList>,
}

/// What a call's outcome becomes in Python.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// A single-entry consume or peek: a verdict without `blocked`.
    Single,
    /// A batch: the verdict as it is.
    Batch,
    /// A hit answered by its count.
    Count,
    /// Everything else as the outcome says (`HitResult`, `AttemptResult`, int, bool, None).
    Plain,
}

static STORE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static REPLY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INTERNAL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static GIVE_BACK_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn instance<'py, A: pyo3::call::PyCallArgs<'py>>(
    py: Python<'py>,
    class: &'static PyOnceLock<Py<PyType>>,
    module: &str,
    name: &str,
    args: A,
) -> PyResult<Bound<'py, PyAny>> {
    class.import(py, module, name)?.call1(args)
}

fn raised(made: PyResult<Bound<'_, PyAny>>) -> PyErr {
    match made {
        Ok(error) => PyErr::from_value(error),
        Err(e) => e,
    }
}

/// A fresh id for one consume: the core's [`ratewindow_core::call::CallIds`] (a random prefix of this process,
/// then a counter), drawn again in a forked child so it never repeats its parent's ids.
fn call_id() -> String {
    static IDS: Mutex<Option<(u32, Arc<ratewindow_core::call::CallIds>)>> = Mutex::new(None);
    let pid = std::process::id();
    let ids = {
        let mut ids = IDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match &*ids {
            Some((of, ids)) if *of == pid => Arc::clone(ids),
            _ => {
                let seed = RandomState::new().hash_one((std::time::SystemTime::now(), pid));
                let fresh = Arc::new(ratewindow_core::call::CallIds::new(seed));
                *ids = Some((pid, Arc::clone(&fresh)));
                fresh
            }
        }
    };
    ids.next()
}

/// One store operation in progress. Drive it: `next()`, then `feed_reply`/`feed_rows`/`fail`, until
/// `next()` gives the outcome (or raises the call's error).
#[pyclass(module = "ratewindow._ratewindow", name = "Call")]
pub(crate) struct Call {
    call: core::Call,
    shape: Shape,
    /// The store's `release(token)`, for an allowed consume's verdict.
    release: Option<Py<PyAny>>,
    /// The store's reporter of failed give-backs.
    report: Option<Py<PyAny>>,
    /// The client's exceptions fed as failures, with the message each was fed as: the `__cause__` of
    /// the error they lead to.
    causes: Vec<(String, Py<PyAny>)>,
    /// The `algorithm` of the `UnsupportedError` a running call's `unsupported` raises: `"sliding"`,
    /// or a mixed batch's GCRA or counter algorithm (as PostgreSQL's refusal of the batch names it).
    algorithm: &'static str,
}

impl Call {
    fn cause(&self, py: Python<'_>, message: &str) -> Option<PyErr> {
        self.causes
            .iter()
            .rev()
            .find(|(m, _)| m == message)
            .map(|(_, e)| PyErr::from_value(e.bind(py).clone()))
    }

    /// The one place where a call's error kind becomes the package's exception.
    fn error(&self, py: Python<'_>, error: CallError) -> PyErr {
        let text = error.to_string();
        match error {
            CallError::Store { message } => {
                let made = instance(
                    py,
                    &STORE_ERROR,
                    "ratewindow._errors",
                    "StoreError",
                    (text,),
                );
                let err = raised(made);
                err.set_cause(py, self.cause(py, &message));
                err
            }
            CallError::Reply(e) => raised(instance(
                py,
                &REPLY_ERROR,
                "ratewindow._errors",
                "StoreReplyError",
                (text, e.script, e.expected, e.got),
            )),
            CallError::Rows(e) => raised(instance(
                py,
                &REPLY_ERROR,
                "ratewindow._errors",
                "StoreReplyError",
                (text, e.statement, e.expected, e.got),
            )),
            CallError::Unsupported(_) => {
                crate::errors::unsupported_because(py, self.algorithm, &text)
            }
            CallError::Protocol { .. } => raised(instance(
                py,
                &INTERNAL_ERROR,
                "ratewindow._errors",
                "InternalError",
                (format!("internal error in ratewindow: {text}"),),
            )),
        }
    }

    /// A failed consume that may have counted (its reply lost after the script ran, a statement that
    /// committed): its error gets `release()`, the store's release of the call by its id (idempotent:
    /// the core's `Call::failed_release`). The failure guard calls it when it refused the call.
    fn give_release(&mut self, py: Python<'_>, error: &PyErr) -> PyResult<()> {
        let (Some(token), Some(release)) = (self.call.take_failed_release(), &self.release) else {
            return Ok(());
        };
        let partial = py
            .import("functools")?
            .getattr("partial")?
            .call1((release.clone_ref(py), PyReleaseToken(token)))?;
        error.value(py).setattr("release", partial)
    }

    /// Hands each failed give-back to the store's reporter as a `GiveBackError`.
    fn report(&mut self, py: Python<'_>) -> PyResult<()> {
        let failures = self.call.take_give_back_failures();
        let Some(report) = &self.report else {
            return Ok(());
        };
        for f in failures {
            let message = format!(
                "could not give back call {} on {:?}: {}",
                f.call_id, f.keys, f.message
            );
            let error = instance(
                py,
                &GIVE_BACK_ERROR,
                "ratewindow._redis",
                "GiveBackError",
                (message, f.keys, f.call_id),
            )?;
            if let Some(cause) = self.cause(py, &f.message) {
                error.setattr("__cause__", cause.value(py))?;
            }
            report.bind(py).call1((error,))?;
        }
        Ok(())
    }

    fn outcome(&self, py: Python<'_>, outcome: Outcome) -> PyResult<Py<PyAny>> {
        Ok(match outcome {
            Outcome::Verdict { verdict, release } => {
                let single = matches!(self.shape, Shape::Single);
                let release = match (release, &self.release) {
                    (Some(token), Some(f)) => Some((f.clone_ref(py), token)),
                    _ => None,
                };
                Py::new(py, Verdict::called(verdict, single, release))?.into_any()
            }
            Outcome::Hit { count, .. } if matches!(self.shape, Shape::Count) => {
                count.into_pyobject(py)?.into_any().unbind()
            }
            Outcome::Hit {
                count,
                reset_after_ms,
            } => Py::new(py, HitResult::new(count, reset_after_ms))?.into_any(),
            Outcome::Attempt {
                allowed,
                count,
                reset_after_ms,
            } => Py::new(py, AttemptResult::new(allowed, count, reset_after_ms))?.into_any(),
            Outcome::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
            Outcome::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
            Outcome::Unit => py.None(),
            Outcome::Owner(Some(owner)) => owner.into_pyobject(py)?.into_any().unbind(),
            Outcome::Owner(None) => py.None(),
        })
    }
}

fn command(py: Python<'_>, command: Command<'_>) -> PyResult<Py<PyAny>> {
    Ok(match command {
        Command::Script {
            script,
            keys,
            args,
            by_sha1,
        } => {
            let [script_name, sha1, source] = crate::redis::script_strings(py, script);
            Py::new(
                py,
                Script {
                    script_name,
                    sha1,
                    source,
                    keys: PyList::new(py, keys)?.unbind(),
                    args: PyList::new(py, args)?.unbind(),
                    by_sha1,
                },
            )?
            .into_any()
        }
        Command::Plain { args } => Py::new(
            py,
            RedisCommand {
                args: PyList::new(py, args)?.unbind(),
            },
        )?
        .into_any(),
        Command::Sql { statements } => Py::new(
            py,
            Sql {
                statements: crate::sql::statements(py, statements)?.unbind(),
            },
        )?
        .into_any(),
    })
}

#[pymethods]
impl Call {
    /// The command to run next (`Script` or `Sql`), or the outcome; raises the call's error.
    fn next(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let result = match self.call.next() {
                Next::Run(step) => return command(py, step),
                Next::Done(result) => result,
            };
            self.report(py)?;
            match result {
                Ok(outcome) => self.outcome(py, outcome),
                Err(error) => {
                    let error = self.error(py, error);
                    self.give_release(py, &error)?;
                    Err(error)
                }
            }
        })
    }

    /// Feeds the client's reply to a `Script` or a `RedisCommand` (ints and bools, `bytes`/`str`,
    /// lists, `None`).
    fn feed_reply(&mut self, reply: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            self.call.feed(Fed::Reply(crate::redis::reply(reply, 0)));
            Ok(())
        })
    }

    /// Feeds the rows of a `Sql` command's last statement.
    fn feed_rows(&mut self, rows: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            self.call.feed(Fed::Rows(crate::sql::rows(rows)?));
            Ok(())
        })
    }

    /// Feeds the client's failure: `message` as the client gives it (Python hosts:
    /// `f"{type(e).__name__}: {e}"`); `cause`, the exception, becomes the store error's `__cause__`.
    #[pyo3(signature = (message, cause = None))]
    fn fail(&mut self, message: String, cause: Option<Py<PyAny>>) -> PyResult<()> {
        guard(|| {
            if let Some(cause) = cause {
                self.causes.push((message.clone(), cause));
            }
            self.call.fail(message);
            Ok(())
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.release)?;
        visit.call(&self.report)?;
        for (_, cause) in &self.causes {
            visit.call(cause)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.release = None;
        self.report = None;
        self.causes.clear();
    }
}

enum Store {
    Redis(core::Redis),
    Postgres(Postgres),
    /// SQLite and its clock (`None`: the system clock).
    Sqlite(Sqlite, Option<Py<PyAny>>),
}

/// Starts a store's calls: every operation of both algorithms, on Redis, PostgreSQL or SQLite.
///
/// `release(token)` is the store's own release (what an allowed consume's verdict calls); `report`
/// receives each failed give-back (Redis Cluster) as a `GiveBackError`. Immutable: one machine serves
/// any number of threads.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Machine")]
pub(crate) struct Machine {
    store: Store,
    release: Option<Py<PyAny>>,
    report: Option<Py<PyAny>>,
}

fn names(prefix: Option<&str>) -> PyResult<SqlNames> {
    prefix.map_or(Ok(SqlNames::default()), |p| {
        SqlNames::new(p).map_err(PyValueError::new_err)
    })
}

/// The algorithm a mixed batch's `UnsupportedError` names: its first GCRA or counter entry's.
fn mixed_algorithm(entries: &[ratewindow_core::MixedEntry]) -> &'static str {
    entries
        .iter()
        .find_map(|e| match e.rule {
            ratewindow_core::Rule::Gcra(_) => Some("gcra"),
            ratewindow_core::Rule::Counter(_) => Some("counter"),
            ratewindow_core::Rule::Sliding(_) => None,
        })
        .unwrap_or("gcra")
}

impl Machine {
    fn start(&self, py: Python<'_>, op: Op, shape: Shape) -> PyResult<Call> {
        let call = match &self.store {
            Store::Redis(store) => store.start(op),
            Store::Postgres(store) => store.start(op),
            Store::Sqlite(store, clock) => store.start(op, read_clock(py, clock.as_ref())?),
        };
        let keeps = matches!(shape, Shape::Single | Shape::Batch);
        Ok(Call {
            call,
            shape,
            release: self
                .release
                .as_ref()
                .filter(|_| keeps)
                .map(|f| f.clone_ref(py)),
            report: self.report.as_ref().map(|f| f.clone_ref(py)),
            causes: Vec::new(),
            algorithm: "sliding",
        })
    }

    /// Starts a batch mixing algorithms (`consume`, else a peek): SQLite's `Sqlite::mixed` at its
    /// clock, Redis' `Redis::mixed` and PostgreSQL's `Postgres::mixed` (one statement) on the
    /// server's.
    fn start_mixed(
        &self,
        py: Python<'_>,
        entries: Vec<ratewindow_core::MixedEntry>,
        consume: bool,
    ) -> PyResult<Call> {
        let (call, algorithm) = match &self.store {
            // The server's clock (`TIME`): read, decided in the core, written if nothing changed.
            Store::Redis(store) => {
                let algorithm = mixed_algorithm(&entries);
                let id = consume.then(call_id);
                (store.mixed(entries, None, id.as_deref()), algorithm)
            }
            // One statement on the server's clock: locked, decided and written all or nothing.
            Store::Postgres(store) => {
                let algorithm = mixed_algorithm(&entries);
                let id = consume.then(call_id);
                (store.mixed(entries, id.as_deref()), algorithm)
            }
            Store::Sqlite(store, clock) => {
                let now = read_clock(py, clock.as_ref())?;
                let id = consume.then(call_id);
                (store.mixed(entries, now, id.as_deref()), "sliding")
            }
        };
        Ok(Call {
            call,
            shape: Shape::Batch,
            release: self
                .release
                .as_ref()
                .filter(|_| consume)
                .map(|f| f.clone_ref(py)),
            report: self.report.as_ref().map(|f| f.clone_ref(py)),
            causes: Vec::new(),
            algorithm,
        })
    }

    /// Starts a weighted sliding-log consume (`consume`) or peek of one entry (its cost checked): a
    /// single verdict, an allowed consume's `release()` giving back exactly its cost.
    pub(crate) fn start_weighted(
        &self,
        py: Python<'_>,
        consume: bool,
        entry: Entry,
    ) -> PyResult<Call> {
        let entries = vec![entry];
        let op = if consume {
            Op::Consume {
                entries,
                call_id: call_id(),
            }
        } else {
            Op::Peek { entries }
        };
        self.start(py, op, Shape::Single)
    }

    /// Starts a lock operation (`src/lock.rs`): its outcome a `bool`, or the holder's token.
    pub(crate) fn start_lock(
        &self,
        py: Python<'_>,
        op: ratewindow_core::lock::LockOp,
    ) -> PyResult<Call> {
        let call = match &self.store {
            Store::Redis(store) => store.lock(op),
            Store::Postgres(store) => store.lock(op),
            Store::Sqlite(store, clock) => store.lock(op, read_clock(py, clock.as_ref())?),
        };
        Ok(Call {
            call,
            shape: Shape::Plain,
            release: None,
            report: None,
            causes: Vec::new(),
            algorithm: "sliding",
        })
    }

    /// Starts a GCRA or counter operation (`src/rates.rs`), on the server's clock (SQLite: the store's)
    /// or at `now`: a verdict (never released), or `None` for a reset.
    pub(crate) fn start_rate(
        &self,
        py: Python<'_>,
        op: ratewindow_core::call::RateOp,
        now: Option<u64>,
    ) -> PyResult<Call> {
        use ratewindow_core::call::RateOp;
        let shape = match op {
            RateOp::GcraReset { .. } | RateOp::CounterReset { .. } => Shape::Plain,
            _ => Shape::Single,
        };
        let call = match (&self.store, now) {
            (Store::Redis(store), None) => store.rate(op),
            (Store::Redis(store), Some(now)) => store.rate_at(op, now),
            (Store::Postgres(store), None) => store.rate(op),
            (Store::Postgres(store), Some(now)) => store.rate_at(op, now),
            (Store::Sqlite(store, clock), now) => {
                let now = match now {
                    Some(now) => now,
                    None => read_clock(py, clock.as_ref())?,
                };
                store.rate(op, now)
            }
        };
        Ok(Call {
            call,
            shape,
            release: None,
            report: None,
            causes: Vec::new(),
            algorithm: "sliding",
        })
    }

    /// The Redis store's planner, or `None` on another store.
    pub(crate) fn redis_planner(&self) -> Option<&core::Redis> {
        match &self.store {
            Store::Redis(store) => Some(store),
            _ => None,
        }
    }

    fn redis(&self) -> PyResult<&RedisOptions> {
        match &self.store {
            Store::Redis(store) => Ok(store.options()),
            _ => Err(PyTypeError::new_err("not a Redis store")),
        }
    }

    fn hit_as(
        &self,
        py: Python<'_>,
        key: &str,
        (decay, amount): (Window, i64),
        shape: Shape,
    ) -> PyResult<Call> {
        let key = key.to_owned();
        self.start(py, Op::Hit { key, decay, amount }, shape)
    }

    fn read(&self, py: Python<'_>, key: &str, query: WindowQuery) -> PyResult<Call> {
        let key = key.to_owned();
        self.start(py, Op::Read { key, query }, Shape::Plain)
    }
}

#[pymethods]
impl Machine {
    /// Calls on Redis: keys start with `prefix`; with `hash_tag` (a separator) the part of each key
    /// before it is the key's Cluster hash tag; `evalsha`: whether the host runs scripts by SHA1;
    /// `commands`: whether it runs plain commands (`RedisCommand`: the lock's `SET NX PX`).
    #[staticmethod]
    #[pyo3(signature = (prefix = None, hash_tag = None, evalsha = true, *, release = None, report = None, commands = false))]
    fn redis_store(
        py: Python<'_>,
        prefix: Option<&str>,
        hash_tag: Option<&str>,
        evalsha: bool,
        release: Option<Py<PyAny>>,
        report: Option<Py<PyAny>>,
        commands: bool,
    ) -> PyResult<Machine> {
        guard(|| {
            let mut options = RedisOptions::default();
            if let Some(prefix) = prefix {
                // No prefix may name another prefix's keys: InvalidArgumentError naming `prefix`.
                if let Err(e) = ratewindow_core::input::check_redis_prefix(prefix) {
                    return Err(crate::errors::invalid_argument(
                        "prefix",
                        pyo3::types::PyString::new(py, prefix).as_any(),
                        &e.to_string(),
                    ));
                }
                options = options.with_prefix(prefix);
            }
            if let Some(separator) = hash_tag {
                options = options
                    .with_hash_tag_before(separator)
                    .map_err(PyValueError::new_err)?;
            }
            Ok(Machine {
                store: Store::Redis(
                    core::Redis::new(options)
                        .evalsha(evalsha)
                        .plain_commands(commands),
                ),
                release,
                report,
            })
        })
    }

    /// Calls on PostgreSQL, objects named `{prefix}_…`; `durable` plans every call to wait for its
    /// commit's flush.
    #[staticmethod]
    #[pyo3(signature = (prefix = None, durable = false, *, release = None))]
    fn postgres_store(
        prefix: Option<&str>,
        durable: bool,
        release: Option<Py<PyAny>>,
    ) -> PyResult<Machine> {
        guard(|| {
            Ok(Machine {
                store: Store::Postgres(Postgres::new(names(prefix)?).durable(durable)),
                release,
                report: None,
            })
        })
    }

    /// Calls on SQLite, tables named `{prefix}_…`, timed by `clock` (Unix ms; default: the system's).
    #[staticmethod]
    #[pyo3(signature = (prefix = None, clock = None, *, release = None))]
    fn sqlite_store(
        prefix: Option<&str>,
        clock: Option<Py<PyAny>>,
        release: Option<Py<PyAny>>,
    ) -> PyResult<Machine> {
        guard(|| {
            Ok(Machine {
                store: Store::Sqlite(Sqlite::new(names(prefix)?), clock),
                release,
                report: None,
            })
        })
    }

    /// SQLite's per-connection setup (`PRAGMA busy_timeout`).
    #[staticmethod]
    fn sqlite_connection_setup(busy_timeout_ms: u32) -> String {
        Sqlite::connection_setup(busy_timeout_ms)
    }

    /// The key prefix (Redis) or the name prefix (SQL).
    #[getter]
    fn prefix(&self) -> String {
        match &self.store {
            Store::Redis(store) => store.options().prefix().to_owned(),
            Store::Postgres(store) => store.names().prefix().to_owned(),
            Store::Sqlite(store, _) => store.names().prefix().to_owned(),
        }
    }

    /// The store's clock now (SQLite), in Unix ms.
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        guard(|| match &self.store {
            Store::Sqlite(_, clock) => read_clock(py, clock.as_ref()),
            _ => Err(PyTypeError::new_err(
                "the store times calls by the server's clock",
            )),
        })
    }

    /// Redis: the key of `key`'s sliding log.
    fn log_key(&self, key: Key<'_>) -> PyResult<String> {
        Ok(self.redis()?.log_key(key.0))
    }

    /// Redis: the key of `key`'s fixed window.
    fn window_key(&self, key: Key<'_>) -> PyResult<String> {
        Ok(self.redis()?.window_key(key.0))
    }

    /// SQL: the schema (idempotent).
    fn schema(&self) -> PyResult<String> {
        match &self.store {
            Store::Postgres(store) => Ok(store.schema()),
            Store::Sqlite(store, _) => Ok(store.schema()),
            Store::Redis(_) => Err(PyTypeError::new_err("a Redis store has no schema")),
        }
    }

    /// SQL: the purge's statements (`[(sql, params), …]`; SQLite's timed by its clock now).
    fn purge<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        guard(|| match &self.store {
            Store::Postgres(store) => crate::sql::statements(py, &[store.plan_purge()]),
            Store::Sqlite(store, clock) => {
                crate::sql::statements(py, &store.plan_purge(read_clock(py, clock.as_ref())?))
            }
            Store::Redis(_) => Err(PyTypeError::new_err("a Redis store has no purge")),
        })
    }

    /// PostgreSQL: the purge's rows as `(calls deleted, windows deleted)`.
    #[staticmethod]
    fn decode_purge(py: Python<'_>, rows: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        guard(|| {
            Postgres::decode_purge(&crate::sql::rows(rows)?).map_err(|e| {
                raised(instance(
                    py,
                    &REPLY_ERROR,
                    "ratewindow._errors",
                    "StoreReplyError",
                    (e.to_string(), e.statement, e.expected, e.got),
                ))
            })
        })
    }

    /// Consume of one entry (its verdict has no `blocked`).
    fn consume(&self, py: Python<'_>, key: Key<'_>, limit: &Bound<'_, Limit>) -> PyResult<Call> {
        guard(|| {
            let entries = vec![Entry::new(key.0, limit.get().inner)];
            let op = Op::Consume {
                entries,
                call_id: call_id(),
            };
            self.start(py, op, Shape::Single)
        })
    }

    /// Peek of one entry.
    fn peek(&self, py: Python<'_>, key: Key<'_>, limit: &Bound<'_, Limit>) -> PyResult<Call> {
        guard(|| {
            let entries = vec![Entry::new(key.0, limit.get().inner)];
            self.start(py, Op::Peek { entries }, Shape::Single)
        })
    }

    /// Consume of a batch, all or nothing.
    fn consume_many(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<Call> {
        guard(|| {
            let entries = match crate::rates::sliding_or_mixed(entries)? {
                Ok(entries) => entries,
                Err(mixed) => return self.start_mixed(py, mixed, true),
            };
            let op = Op::Consume {
                entries,
                call_id: call_id(),
            };
            self.start(py, op, Shape::Batch)
        })
    }

    /// Peek of a batch.
    fn peek_many(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<Call> {
        guard(|| {
            let entries = match crate::rates::sliding_or_mixed(entries)? {
                Ok(entries) => entries,
                Err(mixed) => return self.start_mixed(py, mixed, false),
            };
            self.start(py, Op::Peek { entries }, Shape::Batch)
        })
    }

    /// Gives back the call an allowed consume recorded.
    fn release(&self, py: Python<'_>, token: &Bound<'_, PyReleaseToken>) -> PyResult<Call> {
        guard(|| {
            let token = token.get().0.clone();
            self.start(py, Op::Release { token }, Shape::Plain)
        })
    }

    /// Adds `amount` hits to `key`'s fixed window; the outcome is the count.
    #[pyo3(signature = (key, decay_ms, amount = None))]
    fn hit(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Call> {
        guard(|| self.hit_as(py, key.0, hit_args(decay_ms, amount)?, Shape::Count))
    }

    /// `hit`, the outcome a `HitResult` (the count and the ms until the window ends).
    #[pyo3(signature = (key, decay_ms, amount = None))]
    fn hit_window(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Call> {
        guard(|| self.hit_as(py, key.0, hit_args(decay_ms, amount)?, Shape::Plain))
    }

    /// Atomically, one hit if `key` has fewer than `max`; the outcome an `AttemptResult`. With `cost`,
    /// `cost` hits, counted only when the count plus `cost` is at most `max` (`Op::AttemptCost`).
    #[pyo3(signature = (key, max, decay_ms, cost = None))]
    fn attempt(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        max: &Bound<'_, PyAny>,
        decay_ms: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Call> {
        guard(|| {
            let max = whole("max", max)?;
            let (decay, _) = hit_args(decay_ms, None)?;
            let cost = attempt_cost(cost)?;
            let key = key.0.to_owned();
            let op = if cost == 1 {
                Op::Attempt { key, max, decay }
            } else {
                Op::AttemptCost {
                    key,
                    max,
                    decay,
                    cost,
                }
            };
            self.start(py, op, Shape::Plain)
        })
    }

    /// Hits in `key`'s window (int).
    fn attempts(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Call> {
        guard(|| self.read(py, key.0, WindowQuery::Attempts))
    }

    /// Whether `key` has `max` or more hits (bool).
    fn too_many_attempts(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        max: &Bound<'_, PyAny>,
    ) -> PyResult<Call> {
        guard(|| {
            let max = whole("max", max)?;
            self.read(py, key.0, WindowQuery::TooManyAttempts { max })
        })
    }

    /// `max` minus the hits, floored at 0 (int).
    fn remaining(&self, py: Python<'_>, key: Key<'_>, max: &Bound<'_, PyAny>) -> PyResult<Call> {
        guard(|| {
            let max = whole("max", max)?;
            self.read(py, key.0, WindowQuery::Remaining { max })
        })
    }

    /// Whole seconds until `key`'s window ends, rounded up (int).
    fn available_in(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Call> {
        guard(|| self.read(py, key.0, WindowQuery::AvailableIn))
    }

    /// Milliseconds until `key`'s window ends (int).
    fn available_in_ms(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Call> {
        guard(|| self.read(py, key.0, WindowQuery::AvailableInMs))
    }

    /// Sets `key`'s count to zero, keeping its window.
    fn reset_attempts(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Call> {
        guard(|| {
            let key = key.0.to_owned();
            self.start(py, Op::ResetAttempts { key }, Shape::Plain)
        })
    }

    /// Removes `key`'s count and window.
    fn clear(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Call> {
        guard(|| {
            let key = key.0.to_owned();
            self.start(py, Op::Clear { key }, Shape::Plain)
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.release)?;
        visit.call(&self.report)?;
        if let Store::Sqlite(_, clock) = &self.store {
            visit.call(clock)?;
        }
        Ok(())
    }
}
