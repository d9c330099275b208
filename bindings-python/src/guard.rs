//! `GuardCore`: the failure guard's decisions (`ratewindow_core::guard`) for `ratewindow.Guard` and
//! `ratewindow.AsyncGuard` (`python/ratewindow/_guard.py`). The Python layer runs the stores, waits
//! and races the timers; every decision — the policy's verdict, which errors are failures, what a late
//! answer gets, the block cache, the counters — is made here by the core, once for Node and Python.
//!
//! Time is this module's own monotonic clock in whole milliseconds ([`GuardCore::now`]), so a call's
//! start and the cache's expiry are on one clock.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use ratewindow_core::guard::{
    BlockCache, Failure, Guard, GuardConfig, GuardError, GuardStats, LateAction, OnFailure, Policy,
    DEFAULT_MAX_KEYS,
};
use ratewindow_core::{BatchVerdict, Limit as CoreLimit};

use crate::entry::{key_str, Entry, Key};
use crate::errors::{guard, invalid_argument};
use crate::verdict::Verdict;

/// Milliseconds on a monotonic clock that starts with the module.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A guard option the core refused, as `InvalidArgumentError` naming the field as Python spells it.
fn option_error(error: &GuardError, given: &Bound<'_, PyAny>) -> PyErr {
    let spelled = match error.field {
        ratewindow_core::guard::GuardField::TimeoutMs => "timeout_ms",
        ratewindow_core::guard::GuardField::Policy => "on_failure",
        ratewindow_core::guard::GuardField::MaxKeys => "block_cache",
    };
    invalid_argument(spelled, given, error.field.range())
}

/// A host number for the core's checks: an `int` (any size) or a `float`; a `bool` or anything else
/// is a `TypeError`.
fn number(name: &str, given: &Bound<'_, PyAny>) -> PyResult<f64> {
    if given.is_instance_of::<pyo3::types::PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be a number, not bool"
        )));
    }
    if let Ok(i) = given.extract::<i128>() {
        return Ok(i.clamp(-(1 << 60), 1 << 60) as f64);
    }
    if given.is_instance_of::<pyo3::types::PyInt>() {
        // Beyond i128: out of every range.
        return Ok(f64::INFINITY);
    }
    given.extract::<f64>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be a number, not {}",
            given
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

fn failure_of(name: &str) -> PyResult<Failure> {
    Failure::parse(name)
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err(format!("unknown failure {name:?}")))
}

/// The entries of a batch, borrowed: each key's UTF-8 and its core limit.
fn batch<'py>(entries: &'py [Bound<'py, Entry>]) -> PyResult<Vec<(&'py str, CoreLimit)>> {
    entries
        .iter()
        .enumerate()
        .map(|(i, bound)| {
            let e = bound.get();
            let key = key_str(
                e.key.bind(bound.py()),
                ratewindow_core::input::KeyPosition::Entry(i),
            )?;
            Ok((key, e.sliding(bound.py())?))
        })
        .collect()
}

/// The sliding log's limit of a single-entry call for the block cache, which remembers the sliding
/// log's refusals only: a `GcraLimit` or `CounterLimit` is `UnsupportedError` (as in Node's guard),
/// anything else a `TypeError`. Without the cache the guard never reads the limit.
fn sliding_limit(limit: &Bound<'_, PyAny>) -> PyResult<CoreLimit> {
    match crate::rates::rule_of(limit)? {
        ratewindow_core::Rule::Sliding(l) => Ok(l),
        ratewindow_core::Rule::Gcra(_) => Err(crate::errors::unsupported(limit.py(), "gcra")),
        ratewindow_core::Rule::Counter(_) => Err(crate::errors::unsupported(limit.py(), "counter")),
    }
}

/// A verdict of the store's with a release the guard tracks (or none), and no failure.
fn copy(v: &Verdict, single: bool, release: Option<Py<PyAny>>) -> Verdict {
    let mut core = v.to_core();
    if single {
        core.blocked = None;
    }
    Verdict::guarded(core, release, None)
}

/// The guard's state for one guarded store: its configuration, counters and block cache.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "GuardCore")]
pub(crate) struct GuardCore {
    inner: Mutex<Guard>,
    timeout_ms: u64,
    policy: Policy,
    caching: bool,
}

impl GuardCore {
    fn lock(&self) -> MutexGuard<'_, Guard> {
        // A poisoned lock only means a panic elsewhere mid-update; the counters are still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl GuardCore {
    /// `timeout_ms`: a whole number of milliseconds from 1 to 2**31; `policy`: `'deny'`, `'allow'`, or
    /// `None` when the binding holds a fallback store; `max_keys`: the block cache's bound, or `None`
    /// for no cache.
    #[new]
    #[pyo3(signature = (timeout_ms, policy, max_keys))]
    fn new(
        timeout_ms: &Bound<'_, PyAny>,
        policy: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<GuardCore> {
        guard(|| {
            let policy = match policy {
                None => Policy::Fallback,
                Some(p) => {
                    let text = p.cast::<PyString>().map_err(|_| {
                        pyo3::exceptions::PyTypeError::new_err(
                            "on_failure must be 'deny', 'allow' or a cooldown store",
                        )
                    })?;
                    Policy::parse(&text.to_cow()?).map_err(|e| option_error(&e, p))?
                }
            };
            let config = GuardConfig::from_f64(number("timeout_ms", timeout_ms)?, policy)
                .map_err(|e| option_error(&e, timeout_ms))?;
            let cache = match max_keys {
                None => None,
                Some(n) => Some(
                    BlockCache::from_f64(number("block_cache", n)?)
                        .map_err(|e| option_error(&e, n))?,
                ),
            };
            let caching = cache.is_some();
            Ok(GuardCore {
                inner: Mutex::new(Guard::new(config, cache)),
                timeout_ms: config.timeout_ms(),
                policy,
                caching,
            })
        })
    }

    /// The block cache's default bound.
    #[classattr]
    const DEFAULT_MAX_KEYS: usize = DEFAULT_MAX_KEYS;

    /// How long a call waits for the store, in ms.
    #[getter]
    fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// `'deny'`, `'allow'` or `'fallback'`.
    #[getter]
    fn policy(&self) -> &'static str {
        self.policy.name()
    }

    /// Whether the block cache is on.
    #[getter]
    fn caching(&self) -> bool {
        self.caching
    }

    /// Now, in whole ms on the guard's monotonic clock (a call's `started`).
    #[staticmethod]
    fn now() -> u64 {
        now_ms()
    }

    /// Whether a call that started at `started` has run past the timeout.
    fn expired(&self, started: u64) -> bool {
        now_ms().saturating_sub(started) >= self.timeout_ms
    }

    /// Begins a call on one entry: counts it and, with the block cache, answers a remembered refusal
    /// without a round trip (a `Verdict`); else the call's start (an `int`, ms): ask the store.
    fn begin(&self, py: Python<'_>, key: Key<'_>, limit: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let now = now_ms();
            if !self.caching {
                // Without the cache the guard reads nothing of the limit: the store counts what it can.
                self.lock().begin();
                return Ok(now.into_pyobject(py)?.into_any().unbind());
            }
            let limit = sliding_limit(limit)?;
            let mut g = self.lock();
            match g.begin_checked([(key.0, limit)], now) {
                None => Ok(now.into_pyobject(py)?.into_any().unbind()),
                Some(mut v) => {
                    v.blocked = None;
                    Ok(Py::new(py, Verdict::guarded(v, None, None))?.into_any())
                }
            }
        })
    }

    /// `begin` for a batch: a refusal names the blocked entry's index.
    fn begin_many(&self, py: Python<'_>, entries: Vec<Bound<'_, Entry>>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let now = now_ms();
            if !self.caching {
                self.lock().begin();
                return Ok(now.into_pyobject(py)?.into_any().unbind());
            }
            let entries = batch(&entries)?;
            match self.lock().begin_checked(entries, now) {
                None => Ok(now.into_pyobject(py)?.into_any().unbind()),
                Some(v) => Ok(Py::new(py, Verdict::guarded(v, None, None))?.into_any()),
            }
        })
    }

    /// The store answered a call on one entry: `None` when it took `timeout_ms` or longer (a late
    /// answer: nothing counted, the host applies the policy and the late-answer rule); else counts it,
    /// remembers a refusal and returns the verdict the caller gets: the store's own, or — when
    /// `release` is given — a copy whose `release()` is that callable (the guard's tracked give-back).
    #[pyo3(signature = (verdict, key, limit, started, release = None))]
    fn answered(
        &self,
        verdict: Bound<'_, Verdict>,
        key: Key<'_>,
        limit: &Bound<'_, PyAny>,
        started: u64,
        release: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<Verdict>>> {
        guard(|| {
            if self.expired(started) {
                return Ok(None);
            }
            let v = verdict.get();
            let mut core = v.to_core();
            let batch = core.blocked.is_some();
            core.blocked = Some(0);
            if self.caching {
                let limit = sliding_limit(limit)?;
                self.lock()
                    .answered_verdict(&[(key.0, limit)], &core, started);
            } else {
                self.lock().answered(core.allowed);
            }
            // A batch verdict (the store's consume_many of one entry) answers as a single one.
            if release.is_none() && !batch {
                return Ok(Some(verdict.unbind()));
            }
            Py::new(verdict.py(), copy(v, true, release)).map(Some)
        })
    }

    /// `answered` for a batch.
    #[pyo3(signature = (verdict, entries, started, release = None))]
    fn answered_many(
        &self,
        verdict: Bound<'_, Verdict>,
        entries: Vec<Bound<'_, Entry>>,
        started: u64,
        release: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<Verdict>>> {
        guard(|| {
            if self.expired(started) {
                return Ok(None);
            }
            let v = verdict.get();
            let core = v.to_core();
            if self.caching && !core.allowed {
                let entries = batch(&entries)?;
                self.lock().answered_verdict(&entries, &core, started);
            } else {
                self.lock().answered(core.allowed);
            }
            match release {
                None => Ok(Some(verdict.unbind())),
                Some(f) => Py::new(verdict.py(), copy(v, false, Some(f))).map(Some),
            }
        })
    }

    /// What an error the store raised means: `None` when it is the caller's own mistake (an invalid
    /// limit or argument, a `TypeError`: re-raise it), else the failure — `'timeout'` when the call had
    /// already run `timeout_ms` (the client's own timeout fired), `'store-error'` before.
    fn failure_of(&self, error: &Bound<'_, PyAny>, started: u64) -> PyResult<Option<&'static str>> {
        guard(|| {
            let code = match error.getattr("code") {
                Ok(c) if c.is_instance_of::<PyString>() => c.extract::<String>()?,
                _ => error.get_type().name()?.to_string(),
            };
            Ok(Failure::of_error_code(&code).map(|f| {
                if f == Failure::StoreError && self.expired(started) {
                    Failure::Timeout.name()
                } else {
                    f.name()
                }
            }))
        })
    }

    /// A failure (`'timeout'`, `'store-error'`, `'not-ready'`) with its cause: counts it and answers
    /// the policy's verdict, marked with `failed` and `cause`, or `None` (ask the fallback store).
    fn failed(&self, failure: &str, cause: Py<PyAny>) -> PyResult<Option<Verdict>> {
        guard(|| {
            let failure = failure_of(failure)?;
            Ok(match self.lock().failed(failure) {
                OnFailure::Answer(v) => {
                    Some(Verdict::guarded(v, None, Some((failure.name(), cause))))
                }
                OnFailure::Fallback => None,
            })
        })
    }

    /// The fallback store answered a failed call: counts it and answers its verdict marked with the
    /// failure (a refusal of one entry without `blocked`), its `release()` being `release`.
    #[pyo3(signature = (verdict, failure, cause, single, release = None))]
    fn fallback_answered(
        &self,
        verdict: &Bound<'_, Verdict>,
        failure: &str,
        cause: Py<PyAny>,
        single: bool,
        release: Option<Py<PyAny>>,
    ) -> PyResult<Verdict> {
        guard(|| {
            let failure = failure_of(failure)?;
            let mut v: BatchVerdict = verdict.get().to_core();
            if single {
                v.blocked = None;
            }
            self.lock().fallback_answered(v.allowed);
            Ok(Verdict::guarded(v, release, Some((failure.name(), cause))))
        })
    }

    /// The fallback store failed too: the call is refused as under `'deny'`, marked with the failure.
    fn fallback_failed(&self, failure: &str, cause: Py<PyAny>) -> PyResult<Verdict> {
        guard(|| {
            let failure = failure_of(failure)?;
            let v = self.lock().fallback_failed();
            Ok(Verdict::guarded(v, None, Some((failure.name(), cause))))
        })
    }

    /// The late-answer rule: `'release'`, `'keep'` or `'ignore'`.
    fn late(&self, answered_allowed: bool, late_allowed: bool) -> &'static str {
        match self.lock().late(answered_allowed, late_allowed) {
            LateAction::Release => "release",
            LateAction::Keep => "keep",
            LateAction::Ignore => "ignore",
        }
    }

    /// A late answer's release finished (`ok`) or failed.
    fn late_released(&self, ok: bool) {
        self.lock().late_released(ok);
    }

    /// A call on one entry was given back through the guard: forgets it in the block cache.
    fn forget(&self, key: Key<'_>, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.caching {
            let limit = sliding_limit(limit)?;
            self.lock().released([(key.0, limit)]);
        }
        Ok(())
    }

    /// `forget` for a batch.
    fn forget_many(&self, entries: Vec<Bound<'_, Entry>>) -> PyResult<()> {
        if self.caching {
            let entries = batch(&entries)?;
            self.lock().released(entries);
        }
        Ok(())
    }

    /// The counters, in the order of `STATS`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.lock().stats().counts())
    }

    /// The counters' names, in the order `stats()` answers them.
    #[classattr]
    #[allow(non_snake_case)]
    fn STATS() -> [&'static str; 10] {
        GuardStats::NAMES
    }

    /// Entries the block cache holds (0 without one).
    fn cached(&self) -> usize {
        self.lock().cache().map_or(0, BlockCache::len)
    }

    /// The block cache at an explicit monotonic time (the shared vectors drive it, as the core's and
    /// Node's runners do): the refusal it remembers for any of `entries` at `now`, or `None`.
    fn check_at(&self, entries: Vec<Bound<'_, Entry>>, now: u64) -> PyResult<Option<Verdict>> {
        guard(|| {
            let entries = batch(&entries)?;
            let mut g = self.lock();
            Ok(g.cache_mut()
                .and_then(|cache| cache.check(entries, now))
                .map(|v| Verdict::guarded(v, None, None)))
        })
    }

    /// Remembers `verdict`'s refusal of `entries` for a call sent at `started` (the vectors' clock).
    fn refused_at(
        &self,
        entries: Vec<Bound<'_, Entry>>,
        verdict: &Bound<'_, Verdict>,
        started: u64,
    ) -> PyResult<()> {
        guard(|| {
            let entries = batch(&entries)?;
            if let Some(cache) = self.lock().cache_mut() {
                cache.record(&entries, &verdict.get().to_core(), started);
            }
            Ok(())
        })
    }
}
