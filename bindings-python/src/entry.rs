//! `Entry`: one entry of a batch, a key and the limit it is counted against.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::PyTraverseError;

use pyo3::exceptions::PyTypeError;

use ratewindow_core::input::KeyPosition;

/// A key argument, borrowed from the Python `str` as UTF-8. A `str` with a lone surrogate is refused
/// with `InvalidArgumentError` naming `key` (never replaced, so two strings never share a key); any
/// other type is a `TypeError` as for `str`.
pub(crate) struct Key<'a>(pub(crate) &'a str);

impl<'a> FromPyObject<'a, '_> for Key<'a> {
    type Error = PyErr;

    #[inline]
    fn extract(ob: Borrowed<'a, '_, PyAny>) -> PyResult<Self> {
        match <&'a str>::extract(ob) {
            Ok(key) => Ok(Key(key)),
            // A `str` that has no UTF-8 (a lone surrogate); anything else keeps its TypeError.
            Err(e) if ob.is_instance_of::<PyString>() => {
                Err(crate::errors::invalid_key(&ob, KeyPosition::Key, e))
            }
            Err(e) => Err(e),
        }
    }
}

/// `key`'s UTF-8, or `InvalidArgumentError` naming `position` when it holds a lone surrogate.
#[inline]
pub(crate) fn key_str<'a>(
    key: &'a Bound<'_, PyString>,
    position: KeyPosition,
) -> PyResult<&'a str> {
    key.to_str()
        .map_err(|e| crate::errors::invalid_key(key.as_any(), position, e))
}

/// One entry of a batch: `key` counted against `limit` (a `Limit`, `GcraLimit` or `CounterLimit`),
/// the call costing it `cost` uses (default 1; its range is checked against the limit when the batch
/// runs). Immutable.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Entry")]
pub(crate) struct Entry {
    pub(crate) key: Py<PyString>,
    pub(crate) limit: Py<PyAny>,
    pub(crate) cost: u64,
}

impl Entry {
    /// The sliding log's limit, for a store that counts nothing else: a GCRA or counter limit (or a
    /// cost other than 1) is `UnsupportedError`.
    pub(crate) fn sliding(&self, py: Python<'_>) -> PyResult<ratewindow_core::Limit> {
        match crate::rates::rule_of(self.limit.bind(py))? {
            ratewindow_core::Rule::Sliding(l) if self.cost == 1 => Ok(l),
            ratewindow_core::Rule::Sliding(_) => {
                Err(crate::errors::unsupported(py, "weighted sliding"))
            }
            ratewindow_core::Rule::Gcra(_) => Err(crate::errors::unsupported(py, "gcra")),
            ratewindow_core::Rule::Counter(_) => Err(crate::errors::unsupported(py, "counter")),
        }
    }
}

#[pymethods]
impl Entry {
    #[new]
    #[pyo3(signature = (key, limit, cost = None))]
    fn new(
        key: Bound<'_, PyString>,
        limit: Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Entry> {
        if !crate::rates::is_limit(&limit) {
            return Err(PyTypeError::new_err(format!(
                "argument 'limit': a ratewindow.Limit, GcraLimit or CounterLimit, not {}",
                limit.get_type().name()?
            )));
        }
        Ok(Entry {
            key: key.unbind(),
            limit: limit.unbind(),
            cost: crate::rates::cost_arg(cost, "cost")?,
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.key)?;
        visit.call(&self.limit)
    }

    /// The key counted.
    #[getter]
    fn key(&self, py: Python<'_>) -> Py<PyString> {
        self.key.clone_ref(py)
    }

    /// Its limit.
    #[getter]
    fn limit(&self, py: Python<'_>) -> Py<PyAny> {
        self.limit.clone_ref(py)
    }

    /// The uses the call takes from this entry.
    #[getter]
    fn cost(&self) -> u64 {
        self.cost
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<Entry>() else {
            return Ok(false);
        };
        let other = other.get();
        let same_key = self.key.bind(py).as_any().eq(other.key.bind(py))?;
        Ok(same_key && self.cost == other.cost && self.limit.bind(py).eq(other.limit.bind(py))?)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        if self.cost == 1 {
            (self.key.bind(py), self.limit.bind(py))
                .into_pyobject(py)?
                .hash()
        } else {
            (self.key.bind(py), self.limit.bind(py), self.cost)
                .into_pyobject(py)?
                .hash()
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let cost = if self.cost == 1 {
            String::new()
        } else {
            format!(", cost={}", self.cost)
        };
        Ok(format!(
            "Entry(key={}, limit={}{cost})",
            self.key.bind(py).repr()?,
            self.limit.bind(py).repr()?
        ))
    }
}
