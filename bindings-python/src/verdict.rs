//! `Verdict`: plain data, with `release()` on an allowed batch verdict.

use std::sync::Mutex;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;
use ratewindow_core::{BatchVerdict, Release};

use crate::errors::guard;
use crate::store::Shared;

/// How a verdict gives its call back, taken at most once.
enum Releaser {
    /// Nothing to give back (a refusal, a single consume, a peek).
    Nothing,
    /// A memory store's release: the store and the core's `Release`.
    Native(Mutex<Option<(Shared, Release)>>),
    /// A Python store's release: a callable (which may return an awaitable, for asyncio stores).
    Python(Mutex<Option<Py<PyAny>>>),
}

/// What a call gets back: whether it is allowed and, if not, for how long.
///
/// `retry_after_ms` is 0 and `retry_timestamp` `None` when allowed; a refusal has `retry_after_ms >= 1`
/// and `retry_timestamp` the time (ms, store clock) the next call is allowed. `blocked` is the index of
/// the batch entry with the longest wait (`None` when allowed or not a batch).
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Verdict")]
pub(crate) struct Verdict {
    allowed: bool,
    retry_after_ms: u64,
    retry_timestamp: Option<u64>,
    blocked: Option<usize>,
    releaser: Releaser,
}

impl Verdict {
    pub(crate) fn single(v: ratewindow_core::Verdict) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: None,
            releaser: Releaser::Nothing,
        }
    }

    pub(crate) fn batch(v: BatchVerdict, release: Option<(Shared, Release)>) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: v.blocked,
            releaser: match release {
                Some(r) => Releaser::Native(Mutex::new(Some(r))),
                None => Releaser::Nothing,
            },
        }
    }

    fn key(&self) -> (bool, u64, Option<u64>, Option<usize>) {
        (
            self.allowed,
            self.retry_after_ms,
            self.retry_timestamp,
            self.blocked,
        )
    }
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    // A poisoned lock only means another thread panicked while taking; the Option is still whole.
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

fn is_some<T>(slot: &Mutex<Option<T>>) -> bool {
    slot.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

#[pymethods]
impl Verdict {
    #[new]
    #[pyo3(signature = (allowed, retry_after_ms = 0, retry_timestamp = None, blocked = None, *, release = None))]
    fn new(
        allowed: bool,
        retry_after_ms: u64,
        retry_timestamp: Option<u64>,
        blocked: Option<usize>,
        release: Option<Py<PyAny>>,
    ) -> Verdict {
        Verdict {
            allowed,
            retry_after_ms,
            retry_timestamp,
            blocked,
            releaser: match release {
                Some(f) => Releaser::Python(Mutex::new(Some(f))),
                None => Releaser::Nothing,
            },
        }
    }

    /// The fields a positional `case Verdict(...)` pattern matches, in order.
    #[classattr]
    fn __match_args__() -> (&'static str, &'static str, &'static str, &'static str) {
        ("allowed", "retry_after_ms", "retry_timestamp", "blocked")
    }

    /// Whether the call was allowed (and, for a consume, recorded).
    #[getter]
    fn allowed(&self) -> bool {
        self.allowed
    }

    /// Milliseconds until the next call is allowed; 0 when allowed.
    #[getter]
    fn retry_after_ms(&self) -> u64 {
        self.retry_after_ms
    }

    /// When the next call is allowed (ms, store clock); `None` when allowed.
    #[getter]
    fn retry_timestamp(&self) -> Option<u64> {
        self.retry_timestamp
    }

    /// Index of the batch entry with the longest wait; `None` when allowed.
    #[getter]
    fn blocked(&self) -> Option<usize> {
        self.blocked
    }

    /// Whether `release()` would still give a call back.
    #[getter]
    fn releasable(&self) -> bool {
        match &self.releaser {
            Releaser::Nothing => false,
            Releaser::Native(slot) => is_some(slot),
            Releaser::Python(slot) => is_some(slot),
        }
    }

    /// Gives back exactly the call this allowed verdict recorded; later calls do nothing. Returns what a
    /// Python store's release callable returns (an awaitable for an asyncio store), else `None`.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| match &self.releaser {
            Releaser::Nothing => Ok(py.None()),
            Releaser::Native(slot) => {
                if let Some((shared, release)) = take(slot) {
                    let now = shared.now(py)?;
                    shared.store.release(release, now);
                }
                Ok(py.None())
            }
            Releaser::Python(slot) => match take(slot) {
                Some(f) => Ok(f.bind(py).call0()?.unbind()),
                None => Ok(py.None()),
            },
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // try_lock: the collector must never block; a verdict being released right now is skipped.
        match &self.releaser {
            Releaser::Nothing => Ok(()),
            Releaser::Native(slot) => match slot.try_lock() {
                Ok(held) => held
                    .as_ref()
                    .map_or(Ok(()), |(shared, _)| shared.traverse(&visit)),
                Err(_) => Ok(()),
            },
            Releaser::Python(slot) => match slot.try_lock() {
                Ok(held) => visit.call(held.as_ref()),
                Err(_) => Ok(()),
            },
        }
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Verdict>()
            .is_ok_and(|o| o.get().key() == self.key())
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{BuildHasher, RandomState};
        static SEED: std::sync::OnceLock<RandomState> = std::sync::OnceLock::new();
        SEED.get_or_init(RandomState::new).hash_one(self.key())
    }

    fn __repr__(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "None".to_owned());
        format!(
            "Verdict(allowed={}, retry_after_ms={}, retry_timestamp={}, blocked={})",
            if self.allowed { "True" } else { "False" },
            self.retry_after_ms,
            opt(self.retry_timestamp.map(|v| v.to_string())),
            opt(self.blocked.map(|v| v.to_string())),
        )
    }
}
