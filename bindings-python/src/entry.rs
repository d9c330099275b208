//! `Entry`: one entry of a batch, a key and the limit it is counted against.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::PyTraverseError;

use crate::limit::Limit;

/// One entry of a batch: `key` counted against `limit`. Immutable.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Entry")]
pub(crate) struct Entry {
    pub(crate) key: Py<PyString>,
    pub(crate) limit: Py<Limit>,
}

#[pymethods]
impl Entry {
    #[new]
    fn new(key: Bound<'_, PyString>, limit: Bound<'_, Limit>) -> Entry {
        Entry {
            key: key.unbind(),
            limit: limit.unbind(),
        }
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
    fn limit(&self, py: Python<'_>) -> Py<Limit> {
        self.limit.clone_ref(py)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<Entry>() else {
            return Ok(false);
        };
        let other = other.get();
        let same_key = self.key.bind(py).as_any().eq(other.key.bind(py))?;
        Ok(same_key && self.limit.bind(py).as_any().eq(other.limit.bind(py))?)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.key.bind(py), self.limit.bind(py))
            .into_pyobject(py)?
            .hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Entry(key={}, limit={})",
            self.key.bind(py).repr()?,
            self.limit.bind(py).repr()?
        ))
    }
}
