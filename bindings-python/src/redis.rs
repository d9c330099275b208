//! Redis plans and decoders for the Python `RedisStore`: thin wrappers over `ratewindow_core::redis`.
//!
//! No I/O here. A plan is `(sha1, source, keys, args)` as Python strings and lists, which the Python
//! layer hands to the user's client (`EVALSHA`, then `EVAL` only on `NOSCRIPT`); a decoder takes the
//! reply as redis-py returns it (ints, lists, `bytes` or `str`, `None`) and gives a `Verdict`, a count
//! or a window. A reply of the wrong shape raises `ratewindow.StoreReplyError` naming what was expected
//! and what came; it never becomes a verdict.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple, PyType};
use ratewindow_core::redis::{self as core, Plan, RedisOptions, RedisRelease, Reply, ReplyError};
use ratewindow_core::Entry;

use crate::errors::guard;
use crate::limit::{hit_args, Limit};
use crate::store::entries as read_entries;
use crate::verdict::Verdict;

/// A plan as Python sees it: `(sha1, source, keys, args)`.
type PyPlan = (Py<PyString>, Py<PyString>, Py<PyList>, Py<PyList>);

static SLIDING_SHA1: PyOnceLock<Py<PyString>> = PyOnceLock::new();
static SLIDING_SOURCE: PyOnceLock<Py<PyString>> = PyOnceLock::new();
static FIXED_SHA1: PyOnceLock<Py<PyString>> = PyOnceLock::new();
static FIXED_SOURCE: PyOnceLock<Py<PyString>> = PyOnceLock::new();
static REPLY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The script's SHA1 and source as Python strings, made once per interpreter.
fn script_strings(py: Python<'_>, plan: &Plan) -> (Py<PyString>, Py<PyString>) {
    let (sha, source) = if plan.script.name == core::FIXED.name {
        (&FIXED_SHA1, &FIXED_SOURCE)
    } else {
        (&SLIDING_SHA1, &SLIDING_SOURCE)
    };
    (
        sha.get_or_init(py, || PyString::new(py, plan.script.sha1).unbind())
            .clone_ref(py),
        source
            .get_or_init(py, || PyString::new(py, plan.script.source).unbind())
            .clone_ref(py),
    )
}

fn to_python(py: Python<'_>, plan: Plan) -> PyResult<PyPlan> {
    let (sha1, source) = script_strings(py, &plan);
    Ok((
        sha1,
        source,
        PyList::new(py, plan.keys)?.unbind(),
        PyList::new(py, plan.args)?.unbind(),
    ))
}

/// The client's reply as the core reads it. Objects no Redis reply converts to (floats, dicts, error
/// objects inside an array) become a text the decoders refuse, so they end in `StoreReplyError` too.
fn reply(obj: &Bound<'_, PyAny>, depth: usize) -> Reply {
    if obj.is_none() {
        return Reply::Nil;
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        if let Ok(v) = int.extract::<i64>() {
            return Reply::Int(v);
        }
    } else if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Reply::Text(String::from_utf8_lossy(bytes.as_bytes()).into_owned());
    } else if let Ok(text) = obj.cast::<PyString>() {
        return Reply::Text(text.to_string_lossy().into_owned());
    } else if depth < 4 {
        if let Ok(list) = obj.cast::<PyList>() {
            return Reply::Array(list.iter().map(|item| reply(&item, depth + 1)).collect());
        }
        if let Ok(tuple) = obj.cast::<PyTuple>() {
            return Reply::Array(tuple.iter().map(|item| reply(&item, depth + 1)).collect());
        }
    }
    let kind = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let shown = obj.repr().map(|r| r.to_string()).unwrap_or_default();
    Reply::Text(format!("<{kind} {shown}>"))
}

/// `StoreReplyError(message, script, expected, got)`.
fn reply_error(py: Python<'_>, error: &ReplyError) -> PyErr {
    match REPLY_ERROR.import(py, "ratewindow._errors", "StoreReplyError") {
        Ok(class) => match class.call1((
            error.to_string(),
            error.script,
            error.expected,
            error.got.as_str(),
        )) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// Where a store's keys live (prefix and hash tag) and the plans of every operation.
///
/// Immutable, so one planner serves any number of threads.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "RedisPlanner")]
pub(crate) struct RedisPlanner {
    options: RedisOptions,
}

#[pymethods]
impl RedisPlanner {
    /// Keys start with `prefix`; with `hash_tag` (a separator) the part of each key before it is the
    /// key's Cluster hash tag.
    #[new]
    #[pyo3(signature = (prefix = None, hash_tag = None))]
    fn new(prefix: Option<&str>, hash_tag: Option<&str>) -> PyResult<Self> {
        guard(|| {
            let mut options = RedisOptions::default();
            if let Some(prefix) = prefix {
                options = options.with_prefix(prefix);
            }
            if let Some(separator) = hash_tag {
                options = options
                    .with_hash_tag_before(separator)
                    .map_err(pyo3::exceptions::PyValueError::new_err)?;
            }
            Ok(RedisPlanner { options })
        })
    }

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.options.prefix()
    }

    /// The Redis key of `key`'s sliding log.
    fn log_key(&self, key: &str) -> String {
        self.options.log_key(key)
    }

    /// The Redis key of `key`'s fixed window.
    fn window_key(&self, key: &str) -> String {
        self.options.window_key(key)
    }

    /// Consume of one entry. The plan's keys are what `plan_release` needs to give the call back.
    fn consume(
        &self,
        py: Python<'_>,
        key: &str,
        limit: &Bound<'_, Limit>,
        call_id: &str,
    ) -> PyResult<PyPlan> {
        guard(|| {
            let entry = [Entry::new(key, limit.get().inner)];
            self.consume_entries(py, &entry, call_id)
        })
    }

    /// Consume of a batch, all or nothing, in one script.
    fn consume_many(
        &self,
        py: Python<'_>,
        entries: &Bound<'_, PyAny>,
        call_id: &str,
    ) -> PyResult<PyPlan> {
        guard(|| self.consume_entries(py, &read_entries(entries)?, call_id))
    }

    /// Peek of a batch: writes nothing.
    fn peek_many(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<PyPlan> {
        guard(|| {
            to_python(
                py,
                core::plan_peek_many(&read_entries(entries)?, &self.options),
            )
        })
    }

    /// Peek of one entry.
    fn peek(&self, py: Python<'_>, key: &str, limit: &Bound<'_, Limit>) -> PyResult<PyPlan> {
        guard(|| {
            let entry = [Entry::new(key, limit.get().inner)];
            to_python(py, core::plan_peek_many(&entry, &self.options))
        })
    }

    /// Gives back call `call_id` recorded under the Redis `keys` (a consume plan's keys).
    fn release(&self, py: Python<'_>, keys: Vec<String>, call_id: String) -> PyResult<PyPlan> {
        guard(|| to_python(py, core::plan_release(&RedisRelease { keys, call_id })))
    }

    /// Adds `amount` hits to `key`'s fixed window, opening one of `decay_ms` if none runs.
    #[pyo3(signature = (key, decay_ms, amount = None))]
    fn hit(
        &self,
        py: Python<'_>,
        key: &str,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyPlan> {
        guard(|| {
            let (decay, amount) = hit_args(decay_ms, amount)?;
            to_python(py, core::plan_hit(key, decay, amount, &self.options))
        })
    }

    /// Reads `key`'s fixed window.
    fn get_window(&self, py: Python<'_>, key: &str) -> PyResult<PyPlan> {
        guard(|| to_python(py, core::plan_get_window(key, &self.options)))
    }

    /// Sets `key`'s count to zero, keeping its window.
    fn reset_attempts(&self, py: Python<'_>, key: &str) -> PyResult<PyPlan> {
        guard(|| to_python(py, core::plan_reset_attempts(key, &self.options)))
    }

    /// Removes `key`'s count and window.
    fn clear(&self, py: Python<'_>, key: &str) -> PyResult<PyPlan> {
        guard(|| to_python(py, core::plan_clear(key, &self.options)))
    }
}

impl RedisPlanner {
    fn consume_entries(
        &self,
        py: Python<'_>,
        entries: &[Entry],
        call_id: &str,
    ) -> PyResult<PyPlan> {
        let (plan, _release) = core::plan_consume_many(entries, &self.options, call_id)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        to_python(py, plan)
    }
}

/// Decodes a consume or peek reply of a batch of `entries` entries (no release attached).
#[pyfunction]
pub(crate) fn redis_decode_batch(reply: &Bound<'_, PyAny>, entries: usize) -> PyResult<Verdict> {
    guard(|| {
        core::decode_batch_of(&self::reply(reply, 0), entries)
            .map(|v| Verdict::batch(v, None))
            .map_err(|e| reply_error(reply.py(), &e))
    })
}

/// Decodes a consume or peek reply of one entry, as a single call's verdict (`blocked` is `None`).
#[pyfunction]
pub(crate) fn redis_decode_single(reply: &Bound<'_, PyAny>) -> PyResult<Verdict> {
    guard(|| {
        core::decode_batch_of(&self::reply(reply, 0), 1)
            .map(|v| Verdict::single(v.verdict()))
            .map_err(|e| reply_error(reply.py(), &e))
    })
}

/// Decodes a release reply: how many of the call's members were removed.
#[pyfunction]
pub(crate) fn redis_decode_release(reply: &Bound<'_, PyAny>) -> PyResult<u64> {
    guard(|| core::decode_release(&self::reply(reply, 0)).map_err(|e| reply_error(reply.py(), &e)))
}

/// Decodes a fixed-window reply: `(count, ms_left)`, or `None` when the key has no window.
#[pyfunction]
pub(crate) fn redis_decode_window(reply: &Bound<'_, PyAny>) -> PyResult<Option<(i64, u64)>> {
    guard(|| {
        core::decode_window(&self::reply(reply, 0))
            .map(|w| w.map(|w| (w.count, w.ms_left)))
            .map_err(|e| reply_error(reply.py(), &e))
    })
}

/// The scripts as `(name, sha1, source)`: `sliding` and `fixed`, e.g. for `SCRIPT LOAD` ahead of time.
#[pyfunction]
pub(crate) fn redis_scripts() -> Vec<(&'static str, &'static str, &'static str)> {
    [&core::SLIDING, &core::FIXED]
        .into_iter()
        .map(|s| (s.name, s.sha1, s.source))
        .collect()
}
