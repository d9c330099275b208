//! `Verdict`: plain data, with `release()` on an allowed batch verdict.

use std::sync::Mutex;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;
use ratewindow_core::call::ReleaseToken;
use ratewindow_core::{BatchVerdict, Quota, Release};

use crate::errors::guard;
use crate::store::Shared;

/// A networked store's `release(token)` callable and the token it is handed.
type TokenRelease = (Py<PyAny>, ReleaseToken);

/// How a verdict gives its call back, taken at most once.
enum Releaser {
    /// Nothing to give back (a refusal, a single consume, a peek).
    Nothing,
    /// A memory store's release: the store and the core's `Release`. Boxed, as the token below: every
    /// verdict carries a `Releaser`, and a refused or single consume (most verdicts) moves this enum
    /// whole into the Python object, so its size is that of its smallest payloads.
    Native(Mutex<Option<Box<(Shared, Release)>>>),
    /// A Python store's release: a callable (which may return an awaitable, for asyncio stores).
    Python(Mutex<Option<Py<PyAny>>>),
    /// A networked store's release: its `release(token)` callable and the call machine's token.
    Token(Mutex<Option<Box<TokenRelease>>>),
}

/// What gives an allowed call back on a networked store: opaque, handed to the store's release.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "ReleaseToken")]
pub(crate) struct PyReleaseToken(pub(crate) ReleaseToken);

/// What a call gets back: whether it is allowed and, if not, for how long.
///
/// `retry_after_ms` is 0 and `retry_timestamp` `None` when allowed; a refusal has `retry_after_ms >= 1`
/// and `retry_timestamp` the time (ms, store clock) the next call is allowed. `blocked` is the index of
/// the batch entry with the longest wait (`None` when allowed or not a batch). The quota (`limit`,
/// `remaining`, `refill_after_ms`, `reset_after_ms`) is the tightest entry's, after the call.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "Verdict")]
pub(crate) struct Verdict {
    allowed: bool,
    retry_after_ms: u64,
    retry_timestamp: Option<u64>,
    blocked: Option<usize>,
    quota: Quota,
    releaser: Releaser,
    /// Set on a verdict a failure guard made (`ratewindow.Guard`): why, and the error behind it.
    failure: Option<Box<(&'static str, Py<PyAny>)>>,
}

impl Verdict {
    pub(crate) fn single(v: ratewindow_core::Verdict) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: None,
            quota: v.quota,
            releaser: Releaser::Nothing,
            failure: None,
        }
    }

    /// A networked store's verdict: `single` drops `blocked`; an allowed consume keeps its token.
    pub(crate) fn called(
        v: BatchVerdict,
        single: bool,
        release: Option<(Py<PyAny>, ReleaseToken)>,
    ) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: if single { None } else { v.blocked },
            quota: v.quota,
            releaser: match release {
                Some(r) => Releaser::Token(Mutex::new(Some(Box::new(r)))),
                None => Releaser::Nothing,
            },
            failure: None,
        }
    }

    pub(crate) fn batch(v: BatchVerdict, release: Option<(Shared, Release)>) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: v.blocked,
            quota: v.quota,
            releaser: match release {
                Some(r) => Releaser::Native(Mutex::new(Some(Box::new(r)))),
                None => Releaser::Nothing,
            },
            failure: None,
        }
    }

    /// A verdict a failure guard gives (`guard.rs`): `release` a Python callable (or none), `failure`
    /// why the store did not answer (`timeout`, `store-error`, `not-ready`) and the error behind it.
    pub(crate) fn guarded(
        v: BatchVerdict,
        release: Option<Py<PyAny>>,
        failure: Option<(&'static str, Py<PyAny>)>,
    ) -> Verdict {
        Verdict {
            allowed: v.allowed,
            retry_after_ms: v.retry_after_ms,
            retry_timestamp: v.retry_timestamp,
            blocked: v.blocked,
            quota: v.quota,
            releaser: match release {
                Some(f) => Releaser::Python(Mutex::new(Some(f))),
                None => Releaser::Nothing,
            },
            failure: failure.map(Box::new),
        }
    }

    /// The core's view of this verdict (for `http::response_headers`).
    pub(crate) fn to_core(&self) -> BatchVerdict {
        BatchVerdict {
            allowed: self.allowed,
            retry_after_ms: self.retry_after_ms,
            retry_timestamp: self.retry_timestamp,
            blocked: self.blocked,
            quota: self.quota,
        }
    }

    fn key(&self) -> (bool, u64, Option<u64>, Option<usize>, Quota) {
        (
            self.allowed,
            self.retry_after_ms,
            self.retry_timestamp,
            self.blocked,
            self.quota,
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
    #[pyo3(signature = (
        allowed, retry_after_ms = 0, retry_timestamp = None, blocked = None, *, release = None,
        limit = 0, remaining = 0, refill_after_ms = 0, reset_after_ms = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        allowed: bool,
        retry_after_ms: u64,
        retry_timestamp: Option<u64>,
        blocked: Option<usize>,
        release: Option<Py<PyAny>>,
        limit: u32,
        remaining: u32,
        refill_after_ms: u64,
        reset_after_ms: u64,
    ) -> Verdict {
        Verdict {
            allowed,
            retry_after_ms,
            retry_timestamp,
            blocked,
            quota: Quota {
                limit,
                remaining,
                refill_after_ms,
                reset_after_ms,
            },
            releaser: match release {
                Some(f) => Releaser::Python(Mutex::new(Some(f))),
                None => Releaser::Nothing,
            },
            failure: None,
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

    /// The tightest entry's `uses` (0 for an empty batch or a store that cannot tell).
    #[getter]
    fn limit(&self) -> u32 {
        self.quota.limit
    }

    /// Uses the tightest entry has left after this call.
    #[getter]
    fn remaining(&self) -> u32 {
        self.quota.remaining
    }

    /// Milliseconds until the tightest entry gets a use back; 0 when none is used.
    #[getter]
    fn refill_after_ms(&self) -> u64 {
        self.quota.refill_after_ms
    }

    /// Milliseconds until the tightest entry's window is empty; 0 when it is.
    #[getter]
    fn reset_after_ms(&self) -> u64 {
        self.quota.reset_after_ms
    }

    /// Set when a failure guard (`ratewindow.Guard`) answered instead of the store: `'timeout'`,
    /// `'store-error'` or `'not-ready'`; `None` for the store's own verdicts.
    #[getter]
    fn failed(&self) -> Option<&'static str> {
        self.failure.as_ref().map(|f| f.0)
    }

    /// The error behind `failed` (the store's exception, or a `StoreError` for a timeout); `None`
    /// otherwise.
    #[getter]
    fn cause(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.failure.as_ref().map(|f| f.1.clone_ref(py))
    }

    /// Whether `release()` would still give a call back.
    #[getter]
    fn releasable(&self) -> bool {
        match &self.releaser {
            Releaser::Nothing => false,
            Releaser::Native(slot) => is_some(slot),
            Releaser::Python(slot) => is_some(slot),
            Releaser::Token(slot) => is_some(slot),
        }
    }

    /// Gives back exactly the call this allowed verdict recorded; later calls do nothing. Returns what a
    /// Python store's release callable returns (an awaitable for an asyncio store), else `None`.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| match &self.releaser {
            Releaser::Nothing => Ok(py.None()),
            Releaser::Native(slot) => {
                if let Some(held) = take(slot) {
                    let (shared, release) = *held;
                    let now = shared.now(py)?;
                    shared.store.release(release, now);
                }
                Ok(py.None())
            }
            Releaser::Python(slot) => match take(slot) {
                Some(f) => Ok(f.bind(py).call0()?.unbind()),
                None => Ok(py.None()),
            },
            Releaser::Token(slot) => match take(slot) {
                Some(held) => {
                    let (f, token) = *held;
                    Ok(f.bind(py).call1((PyReleaseToken(token),))?.unbind())
                }
                None => Ok(py.None()),
            },
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(failure) = &self.failure {
            visit.call(&failure.1)?;
        }
        // try_lock: the collector must never block; a verdict being released right now is skipped.
        match &self.releaser {
            Releaser::Nothing => Ok(()),
            Releaser::Native(slot) => match slot.try_lock() {
                Ok(held) => held.as_ref().map_or(Ok(()), |held| held.0.traverse(&visit)),
                Err(_) => Ok(()),
            },
            Releaser::Python(slot) => match slot.try_lock() {
                Ok(held) => visit.call(held.as_ref()),
                Err(_) => Ok(()),
            },
            Releaser::Token(slot) => match slot.try_lock() {
                Ok(held) => visit.call(held.as_ref().map(|held| &held.0)),
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
            "Verdict(allowed={}, retry_after_ms={}, retry_timestamp={}, blocked={}, limit={}, \
             remaining={}, refill_after_ms={}, reset_after_ms={})",
            if self.allowed { "True" } else { "False" },
            self.retry_after_ms,
            opt(self.retry_timestamp.map(|v| v.to_string())),
            opt(self.blocked.map(|v| v.to_string())),
            self.quota.limit,
            self.quota.remaining,
            self.quota.refill_after_ms,
            self.quota.reset_after_ms,
        )
    }
}

/// A fixed-window hit's answer: the count after it and the milliseconds until its window ends.
#[pyclass(frozen, eq, module = "ratewindow._ratewindow", name = "HitResult")]
#[derive(PartialEq)]
pub(crate) struct HitResult {
    /// Hits in the window after this one.
    #[pyo3(get)]
    count: i64,
    /// Milliseconds until the window ends.
    #[pyo3(get)]
    reset_after_ms: u64,
}

impl HitResult {
    pub(crate) fn new(count: i64, reset_after_ms: u64) -> HitResult {
        HitResult {
            count,
            reset_after_ms,
        }
    }
}

#[pymethods]
impl HitResult {
    fn __repr__(&self) -> String {
        format!(
            "HitResult(count={}, reset_after_ms={})",
            self.count, self.reset_after_ms
        )
    }
}

/// A fixed-window `attempt`'s answer: whether the hit was counted (the key had fewer than `max`), the
/// count after the call, and the milliseconds until the window ends (0 when none runs).
#[pyclass(frozen, eq, module = "ratewindow._ratewindow", name = "AttemptResult")]
#[derive(PartialEq)]
pub(crate) struct AttemptResult {
    /// Whether the hit was counted.
    #[pyo3(get)]
    allowed: bool,
    /// Hits in the window after the call.
    #[pyo3(get)]
    count: i64,
    /// Milliseconds until the window ends; 0 when none runs.
    #[pyo3(get)]
    reset_after_ms: u64,
}

impl AttemptResult {
    pub(crate) fn new(allowed: bool, count: i64, reset_after_ms: u64) -> AttemptResult {
        AttemptResult {
            allowed,
            count,
            reset_after_ms,
        }
    }
}

#[pymethods]
impl AttemptResult {
    fn __repr__(&self) -> String {
        format!(
            "AttemptResult(allowed={}, count={}, reset_after_ms={})",
            if self.allowed { "True" } else { "False" },
            self.count,
            self.reset_after_ms
        )
    }
}
