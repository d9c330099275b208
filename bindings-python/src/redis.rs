//! Redis values across the boundary: a reply as redis-py returns it, read into the core's `Reply`,
//! and the scripts' SHA1 and source as Python strings made once per interpreter.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};
use ratewindow_core::redis::{Reply, Script, FIXED, SLIDING};

static SLIDING_STRINGS: PyOnceLock<[Py<PyString>; 3]> = PyOnceLock::new();
static FIXED_STRINGS: PyOnceLock<[Py<PyString>; 3]> = PyOnceLock::new();

/// `[name, sha1, source]` of `script` as Python strings; made once for the core's two scripts.
pub(crate) fn script_strings(py: Python<'_>, script: &'static Script) -> [Py<PyString>; 3] {
    let make =
        || [script.name, script.sha1, script.source].map(|s| PyString::intern(py, s).unbind());
    let cached = if std::ptr::eq(script, &SLIDING) {
        SLIDING_STRINGS.get_or_init(py, make)
    } else if std::ptr::eq(script, &FIXED) {
        FIXED_STRINGS.get_or_init(py, make)
    } else {
        return make();
    };
    cached.each_ref().map(|s| s.clone_ref(py))
}

/// The client's reply as the core reads it. Objects no Redis reply converts to (floats, dicts, error
/// objects inside an array) become a text the machine refuses, so they end in `StoreReplyError` too.
pub(crate) fn reply(obj: &Bound<'_, PyAny>, depth: usize) -> Reply {
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

/// Every script a Redis store may run, as `(name, sha1, source)`: `sliding`, `fixed`, `lock`, `gcra`,
/// `counter`, `weighted`, `weighted_attempt` and `mixed`, e.g. for `SCRIPT LOAD` ahead of time.
#[pyfunction]
pub(crate) fn redis_scripts() -> Vec<(&'static str, &'static str, &'static str)> {
    use ratewindow_core::call::{COUNTER, GCRA, LOCK, MIXED};
    use ratewindow_core::redis::weighted::{WEIGHTED, WEIGHTED_ATTEMPT};
    [
        &SLIDING,
        &FIXED,
        &LOCK,
        &GCRA,
        &COUNTER,
        &WEIGHTED,
        &WEIGHTED_ATTEMPT,
        &MIXED,
    ]
    .into_iter()
    .map(|s| (s.name, s.sha1, s.source))
    .collect()
}
