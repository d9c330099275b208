//! Python numbers into validated core limits and windows.
//!
//! A Python `int` goes to the core's integer constructors, a `float` to its `from_f64` ones (which refuse
//! NaN, infinities and fractions); `bool` and every other type is a `TypeError`. The core decides what is
//! valid; a refusal becomes `InvalidLimitError` carrying the object the caller gave.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use ratewindow_core::{LimitError, LimitField, Window};

use crate::errors::{guard, invalid_argument, invalid_limit, invalid_limit_as};

/// A Python number as the core sees it.
#[derive(Clone, Copy)]
enum HostNumber {
    /// An `int` that fits `u64`.
    Whole(u64),
    /// A `float`, or an `int` outside `u64` (negative or huge), as the nearest `f64`.
    Real(f64),
}

impl HostNumber {
    fn as_f64(self) -> f64 {
        match self {
            HostNumber::Whole(v) => v as f64,
            HostNumber::Real(v) => v,
        }
    }
}

fn host_number(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<HostNumber> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int or a float, not bool"
        )));
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        if let Ok(v) = int.extract::<u64>() {
            return Ok(HostNumber::Whole(v));
        }
        // Negative or past u64: the core refuses it either way; an int too large for f64 is infinite.
        let negative = int.lt(0)?;
        let real = int.extract::<f64>().unwrap_or(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
        return Ok(HostNumber::Real(real));
    }
    if let Ok(float) = obj.cast::<PyFloat>() {
        return Ok(HostNumber::Real(float.value()));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be an int or a float, not {}",
        obj.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into())
    )))
}

/// Checks `uses` and `window_ms` in the core.
pub(crate) fn core_limit(
    uses: &Bound<'_, PyAny>,
    window_ms: &Bound<'_, PyAny>,
) -> PyResult<ratewindow_core::Limit> {
    let u = host_number("uses", uses)?;
    let w = host_number("window_ms", window_ms)?;
    let checked = match (u, w) {
        (HostNumber::Whole(u), HostNumber::Whole(w)) => ratewindow_core::Limit::new(u, w),
        _ => ratewindow_core::Limit::from_f64(u.as_f64(), w.as_f64()),
    };
    checked.map_err(|e| refusal(&e, uses, window_ms))
}

fn refusal(error: &LimitError, uses: &Bound<'_, PyAny>, window_ms: &Bound<'_, PyAny>) -> PyErr {
    let given = match error.field {
        LimitField::Uses => uses,
        LimitField::WindowMs => window_ms,
    };
    invalid_limit(uses.py(), error, given)
}

/// Checks a window length (the core's `window_ms`) given as the argument `name` (`window_ms`,
/// `decay_ms`), a refusal naming `name`.
pub(crate) fn core_window(name: &str, ms: &Bound<'_, PyAny>) -> PyResult<Window> {
    let checked = match host_number(name, ms)? {
        HostNumber::Whole(v) => Window::from_ms(v),
        HostNumber::Real(v) => Window::from_f64(v),
    };
    checked.map_err(|e| invalid_limit_as(ms.py(), &e, name, ms))
}

/// The arguments of every fixed-window `hit`: the decay checked by the core (a refusal naming
/// `decay_ms`), and the amount (an `int` of 64 bits, 1 when not given).
pub(crate) fn hit_args(
    decay_ms: &Bound<'_, PyAny>,
    amount: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Window, i64)> {
    let decay = core_window("decay_ms", decay_ms)?;
    let amount = amount.map(|a| whole("amount", a)).transpose()?.unwrap_or(1);
    Ok((decay, amount))
}

/// A fixed-window attempt's `cost` (`None`: 1): an `int` that is not a `bool`, else a `TypeError`; an
/// `int` outside 1 to 4294967295 is `InvalidArgumentError` naming `cost` with the value given.
pub(crate) fn attempt_cost(cost: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    let Some(given) = cost else { return Ok(1) };
    if given.is_instance_of::<PyBool>() || !given.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "cost must be an int, not {}",
            given.get_type().name()?
        )));
    }
    match given.extract::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(invalid_argument(
            "cost",
            given,
            "a whole number from 1 to 4294967295",
        )),
    }
}

/// An `int` argument that is not a `bool` (counts, amounts, maxima): a `TypeError` for another type,
/// `InvalidArgumentError` naming `name` for an `int` outside a signed 64-bit integer.
pub(crate) fn whole(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        )));
    }
    obj.extract::<i64>().map_err(|_| {
        invalid_argument(
            name,
            obj,
            "a whole number from -9223372036854775808 to 9223372036854775807",
        )
    })
}

/// A validated limit: `uses` calls within `window_ms` milliseconds. Immutable.
///
/// The Python package's `ratewindow.Limit` subclasses it (adding a key for named limiters).
#[pyclass(frozen, subclass, module = "ratewindow._ratewindow", name = "Limit")]
pub(crate) struct Limit {
    pub(crate) inner: ratewindow_core::Limit,
}

#[pymethods]
impl Limit {
    #[new]
    fn new(uses: &Bound<'_, PyAny>, window_ms: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            Ok(Limit {
                inner: core_limit(uses, window_ms)?,
            })
        })
    }

    /// Calls allowed per window.
    #[getter]
    fn uses(&self) -> u32 {
        self.inner.uses()
    }

    /// The window, in milliseconds.
    #[getter]
    fn window_ms(&self) -> u64 {
        self.inner.window_ms()
    }
}

/// Checks a window length (or a fixed window's decay) in milliseconds and returns it as an `int`.
#[pyfunction]
pub(crate) fn check_window(window_ms: &Bound<'_, PyAny>) -> PyResult<u64> {
    guard(|| Ok(core_window("window_ms", window_ms)?.as_ms()))
}
