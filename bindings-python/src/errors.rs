//! Errors crossing into Python: the classes are defined in `ratewindow/_errors.py` (so they are real,
//! typed Python classes with several bases) and raised from here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use ratewindow_core::LimitError;

static INVALID_LIMIT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INTERNAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNSUPPORTED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `InvalidLimitError(message, field, value)`: `value` is the Python object the caller gave; the message
/// names the core's field, which Python spells the same (`uses`, `window_ms`).
pub(crate) fn invalid_limit(py: Python<'_>, error: &LimitError, given: &Bound<'_, PyAny>) -> PyErr {
    invalid_limit_as(py, error, error.field.name(), given)
}

/// `InvalidLimitError(message, field, value, argument)`: the message names `argument`, the name the
/// caller gave the number (`decay_ms` for a store's `hit`); `field` stays the core's.
pub(crate) fn invalid_limit_as(
    py: Python<'_>,
    error: &LimitError,
    argument: &str,
    given: &Bound<'_, PyAny>,
) -> PyErr {
    let message = format!(
        "invalid {argument}: {} (expected {})",
        error.value,
        error.field.range()
    );
    match INVALID_LIMIT.import(py, "ratewindow._errors", "InvalidLimitError") {
        Ok(class) => match class.call1((message, error.field.name(), given, argument)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `InvalidLimitError(message, field, value, argument)` for a GCRA or counter limit the core refused
/// (`uses`, `window_ms`, `burst`): the message names `argument`, `value` is the object given.
pub(crate) fn invalid_rate_limit(
    py: Python<'_>,
    error: &ratewindow_core::gcra::RateError,
    argument: &str,
    given: &Bound<'_, PyAny>,
) -> PyErr {
    let message = format!(
        "invalid {argument}: {} (expected {})",
        error.value,
        error.field.range()
    );
    match INVALID_LIMIT.import(py, "ratewindow._errors", "InvalidLimitError") {
        Ok(class) => match class.call1((message, error.field.name(), given, argument)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `UnsupportedError(algorithm)`: a store that counts the sliding log only was given a GCRA or counter
/// limit.
pub(crate) fn unsupported(py: Python<'_>, algorithm: &str) -> PyErr {
    match UNSUPPORTED.import(py, "ratewindow._errors", "UnsupportedError") {
        Ok(class) => match class.call1((algorithm,)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `UnsupportedError(algorithm, message)`: what a running call's `unsupported` outcome raises (e.g. a
/// batch mixing algorithms whose keys span Redis Cluster slots).
pub(crate) fn unsupported_because(py: Python<'_>, algorithm: &str, message: &str) -> PyErr {
    match UNSUPPORTED.import(py, "ratewindow._errors", "UnsupportedError") {
        Ok(class) => match class.call1((algorithm, message)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `InvalidArgumentError(message, field, value)`: `field` is the argument's name, `value` the object
/// given; `expected` says what it must be.
pub(crate) fn invalid_argument(field: &str, given: &Bound<'_, PyAny>, expected: &str) -> PyErr {
    let py = given.py();
    let shown = given
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let message = format!("invalid {field}: {shown} (expected {expected})");
    match INVALID_ARGUMENT.import(py, "ratewindow._errors", "InvalidArgumentError") {
        Ok(class) => match class.call1((message, field, given)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// `InvalidArgumentError(message, field, value)` for a key that is not valid Unicode (a `str` holding a
/// lone surrogate, which has no UTF-8): the message is the core's, naming the key's position (`key`, or
/// `entries[3].key` in a batch) and the surrogate's index; the key is never replaced.
pub(crate) fn invalid_key(
    given: &Bound<'_, PyAny>,
    position: ratewindow_core::input::KeyPosition,
    encode_error: PyErr,
) -> PyErr {
    let py = given.py();
    // The UnicodeEncodeError's `start`: the index of the first code point UTF-8 cannot encode.
    let at = encode_error
        .value(py)
        .getattr("start")
        .and_then(|s| s.extract::<usize>())
        .unwrap_or(0);
    let error = ratewindow_core::input::KeyError { position, at };
    let message = error.to_string().replace("UTF-16 index", "index");
    match INVALID_ARGUMENT.import(py, "ratewindow._errors", "InvalidArgumentError") {
        Ok(class) => match class.call1((message, error.field(), given)) {
            Ok(instance) => {
                let err = PyErr::from_value(instance);
                err.set_cause(py, Some(encode_error));
                err
            }
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// Runs an entry point's body, turning a panic into `InternalError` instead of PyO3's
/// `PanicException` (a `BaseException` that `except Exception` would not catch).
pub(crate) fn guard<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            Err(Python::attach(|py| {
                match INTERNAL.import(py, "ratewindow._errors", "InternalError") {
                    Ok(class) => {
                        match class.call1((format!("internal error in ratewindow: {what}"),)) {
                            Ok(instance) => PyErr::from_value(instance),
                            Err(e) => e,
                        }
                    }
                    Err(e) => e,
                }
            }))
        }
    }
}
