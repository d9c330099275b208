//! `MemoryStore`: the core's in-memory store, timed by the host clock or an injected one.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyBool;
use pyo3::PyTraverseError;
use ratewindow_core::gcra::RateError;
use ratewindow_core::input::{check_now, NOW_RANGE};
use ratewindow_core::{Clock, Rule, SystemClock};

use crate::entry::Key;
use crate::errors::{guard, invalid_argument};
use crate::limit::{attempt_cost, hit_args, whole, Limit};
use crate::rates::Batch;
use crate::verdict::{AttemptResult, HitResult, Verdict};

/// A handle on a store: the core store (shared with every verdict it gave) and this holder's own
/// reference to the clock, so each Python object reports exactly the references it holds to the GC.
pub(crate) struct Shared {
    pub(crate) store: Arc<ratewindow_core::MemoryStore>,
    /// A callable returning Unix ms; `None` reads the system clock (the same as
    /// `time.time_ns() // 1_000_000`).
    clock: Option<Py<PyAny>>,
}

impl Shared {
    /// Another handle on the same store and clock.
    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Shared {
        Shared {
            store: Arc::clone(&self.store),
            clock: self.clock.as_ref().map(|c| c.clone_ref(py)),
        }
    }

    /// Reports the clock to the garbage collector.
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.clock)
    }

    pub(crate) fn now(&self, py: Python<'_>) -> PyResult<u64> {
        read_clock(py, self.clock.as_ref())
    }
}

/// Reads `clock` (a callable returning Unix ms), or the system clock when there is none.
pub(crate) fn read_clock(py: Python<'_>, clock: Option<&Py<PyAny>>) -> PyResult<u64> {
    match clock {
        None => Ok(SystemClock.now_ms()),
        Some(clock) => {
            let reading = clock.bind(py).call0()?;
            // An int from 0 to 2^53 - 1 (the core's range for `now`); anything else, a wrapped or
            // negative clock included, is `InvalidArgumentError` naming `now`, and the store is not
            // touched.
            match reading.extract::<u64>() {
                Ok(now) if !reading.is_instance_of::<PyBool>() => {
                    check_now(now).map_err(|_| invalid_argument("now", &reading, NOW_RANGE))
                }
                _ => Err(invalid_argument("now", &reading, NOW_RANGE)),
            }
        }
    }
}

/// Both algorithms over many keys in this process: sliding-window cooldowns and fixed windows.
///
/// Immutable from Python (`frozen`): its state lives in the core behind per-shard mutexes, so it is
/// safe to share across threads, with or without the GIL. Keys expire as the store is used; no thread
/// or timer is started.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "MemoryStore")]
pub(crate) struct MemoryStore {
    shared: Shared,
}

/// Batches of at least this many entries are counted with the GIL released (`py.detach`), so other
/// threads run Python meanwhile. Smaller calls keep it: one call costs ~0.3 µs, and releasing and
/// retaking the GIL would cost about as much again while freeing almost nothing (measured in the
/// package README, "Threads").
const DETACH_BATCH: usize = 256;

impl MemoryStore {
    /// A GCRA or counter consume (`record`) or peek, or a weighted one on the sliding log.
    fn rate(
        &self,
        py: Python<'_>,
        key: &str,
        limit: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
        record: bool,
    ) -> PyResult<Verdict> {
        let rule = crate::rates::rule_of(limit)?;
        let n = crate::rates::checked_cost(
            rule,
            crate::rates::cost_arg(cost, "cost")?,
            "cost",
            cost,
            py,
        )?;
        let now = self.shared.now(py)?;
        let store = &self.shared.store;
        let verdict = match rule {
            Rule::Sliding(l) if record => store.consume_cost(key, l, n, now),
            Rule::Sliding(l) => store.peek_cost(key, l, n, now),
            Rule::Gcra(g) if record => store.gcra_consume(key, g, n, now),
            Rule::Gcra(g) => store.gcra_peek(key, g, n, now),
            Rule::Counter(c) if record => store.counter_consume(key, c, n, now),
            Rule::Counter(c) => store.counter_peek(key, c, n, now),
        };
        Ok(Verdict::single(verdict.map_err(|e| mixed_error(py, &e))?))
    }
}

/// Whether `cost` is absent or the `int` 1 (the sliding log's one cost until it takes weights).
#[inline(always)]
fn unit_cost(cost: Option<&Bound<'_, PyAny>>) -> bool {
    cost.is_none_or(|c| {
        c.is_exact_instance_of::<pyo3::types::PyInt>() && c.extract::<u64>().is_ok_and(|v| v == 1)
    })
}

/// A refusal the core made after the binding's checks (none expected: every cost is checked first).
#[cold]
fn mixed_error(py: Python<'_>, e: &RateError) -> PyErr {
    let given = match e.value.parse::<u64>() {
        Ok(v) => match v.into_pyobject(py) {
            Ok(int) => int.into_any(),
            Err(never) => match never {},
        },
        Err(_) => py.None().into_bound(py),
    };
    invalid_argument(e.field.name(), &given, e.field.range())
}

#[pymethods]
impl MemoryStore {
    #[new]
    #[pyo3(signature = (clock = None, *, shards = 16))]
    fn new(clock: Option<Py<PyAny>>, shards: usize) -> PyResult<Self> {
        guard(|| {
            if shards == 0 || shards > 65_536 {
                return Err(PyValueError::new_err("shards must be from 1 to 65536"));
            }
            Ok(MemoryStore {
                shared: Shared {
                    store: Arc::new(ratewindow_core::MemoryStore::with_shards(shards)),
                    clock,
                },
            })
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.shared.traverse(&visit)
    }

    /// The store's clock now, in Unix ms.
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        guard(|| self.shared.now(py))
    }

    /// Counts one call to `key` under `limit` (a `Limit`, `GcraLimit` or `CounterLimit`), costing
    /// `cost` uses: allowed and recorded, or refused with the wait.
    #[pyo3(signature = (key, limit, cost = None))]
    fn consume(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        limit: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Verdict> {
        guard(|| {
            if let (Ok(limit), true) = (limit.cast::<Limit>(), unit_cost(cost)) {
                let now = self.shared.now(py)?;
                return Ok(Verdict::single(self.shared.store.consume(
                    key.0,
                    limit.get().inner,
                    now,
                )));
            }
            self.rate(py, key.0, limit, cost, true)
        })
    }

    /// The verdict `consume` would give, recording nothing.
    #[pyo3(signature = (key, limit, cost = None))]
    fn peek(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        limit: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Verdict> {
        guard(|| {
            if let (Ok(limit), true) = (limit.cast::<Limit>(), unit_cost(cost)) {
                let now = self.shared.now(py)?;
                return Ok(Verdict::single(self.shared.store.peek(
                    key.0,
                    limit.get().inner,
                    now,
                )));
            }
            self.rate(py, key.0, limit, cost, false)
        })
    }

    /// Forgets `key`'s GCRA bucket or counter (by `limit`'s algorithm): its next call finds every use
    /// there. A `Limit` (the sliding log) is a `TypeError`.
    fn reset(&self, key: Key<'_>, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            match crate::rates::rule_of(limit)? {
                Rule::Gcra(_) => self.shared.store.gcra_reset(key.0),
                Rule::Counter(_) => self.shared.store.counter_reset(key.0),
                Rule::Sliding(_) => return Err(PyTypeError::new_err(
                    "reset takes a GcraLimit or a CounterLimit (a sliding-log call is given back \
                         by its verdict's release())",
                )),
            }
            Ok(())
        })
    }

    /// Counts one call against every entry at once, all or nothing; an allowed verdict can `release()`.
    /// Entries may mix algorithms and costs (`Entry(key, limit, cost)`).
    fn consume_many(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<Verdict> {
        guard(|| {
            let entries = match crate::rates::batch(entries)? {
                Batch::Sliding(entries) => entries,
                Batch::Mixed(entries) => {
                    let now = self.shared.now(py)?;
                    let consumed = self
                        .shared
                        .store
                        .consume_mixed(&entries, now)
                        .map_err(|e| mixed_error(py, &e))?;
                    return Ok(Verdict::batch(
                        consumed.verdict,
                        consumed.release.map(|r| (self.shared.clone_ref(py), r)),
                    ));
                }
            };
            let now = self.shared.now(py)?;
            let store = &self.shared.store;
            let consumed = if entries.len() >= DETACH_BATCH {
                py.detach(|| store.consume_many(&entries, now))
            } else {
                store.consume_many(&entries, now)
            };
            Ok(Verdict::batch(
                consumed.verdict,
                consumed.release.map(|r| (self.shared.clone_ref(py), r)),
            ))
        })
    }

    /// The verdict `consume_many` would give, recording nothing.
    fn peek_many(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<Verdict> {
        guard(|| {
            let entries = match crate::rates::batch(entries)? {
                Batch::Sliding(entries) => entries,
                Batch::Mixed(entries) => {
                    let now = self.shared.now(py)?;
                    let verdict = self
                        .shared
                        .store
                        .peek_mixed(&entries, now)
                        .map_err(|e| mixed_error(py, &e))?;
                    return Ok(Verdict::batch(verdict, None));
                }
            };
            let now = self.shared.now(py)?;
            let store = &self.shared.store;
            let verdict = if entries.len() >= DETACH_BATCH {
                py.detach(|| store.peek_many(&entries, now))
            } else {
                store.peek_many(&entries, now)
            };
            Ok(Verdict::batch(verdict, None))
        })
    }

    /// Adds `amount` hits to `key`'s fixed window (opening one of `decay_ms` if none runs); returns the
    /// count.
    #[pyo3(signature = (key, decay_ms, amount = None))]
    fn hit(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<i64> {
        guard(|| {
            let (decay, amount) = hit_args(decay_ms, amount)?;
            let now = self.shared.now(py)?;
            Ok(self.shared.store.hit(key.0, decay, amount, now))
        })
    }

    /// `hit`, answering the count and the milliseconds until the window ends together.
    #[pyo3(signature = (key, decay_ms, amount = None))]
    fn hit_window(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        decay_ms: &Bound<'_, PyAny>,
        amount: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<HitResult> {
        guard(|| {
            let (decay, amount) = hit_args(decay_ms, amount)?;
            let now = self.shared.now(py)?;
            let (count, ms) = self.shared.store.hit_window(key.0, decay, amount, now);
            Ok(HitResult::new(count, ms))
        })
    }

    /// Atomically: one hit on `key` if it has fewer than `max` in its window (opening one of
    /// `decay_ms` if none runs), else nothing. With `cost`, `cost` hits, counted only when the count
    /// plus `cost` is at most `max` (else nothing).
    #[pyo3(signature = (key, max, decay_ms, cost = None))]
    fn attempt(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        max: &Bound<'_, PyAny>,
        decay_ms: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AttemptResult> {
        guard(|| {
            let max = whole("max", max)?;
            let (decay, _) = hit_args(decay_ms, None)?;
            let cost = attempt_cost(cost)?;
            let now = self.shared.now(py)?;
            let (allowed, count, ms) = if cost == 1 {
                self.shared.store.attempt(key.0, max, decay, now)
            } else {
                // The cost is checked above: the core's only refusal (a cost of 0) cannot come.
                self.shared
                    .store
                    .attempt_cost(key.0, max, cost, decay, now)
                    .map_err(|e| mixed_error(py, &e))?
            };
            Ok(AttemptResult::new(allowed, count, ms))
        })
    }

    /// Hits in `key`'s current window; 0 when none runs.
    fn attempts(&self, py: Python<'_>, key: Key<'_>) -> PyResult<i64> {
        guard(|| Ok(self.shared.store.attempts(key.0, self.shared.now(py)?)))
    }

    /// Whether `key` has `max` or more hits in a window that still runs.
    fn too_many_attempts(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        max: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        guard(|| {
            let max = whole("max", max)?;
            Ok(self
                .shared
                .store
                .too_many_attempts(key.0, max, self.shared.now(py)?))
        })
    }

    /// `max` minus the hits in `key`'s current window, floored at 0.
    fn remaining(&self, py: Python<'_>, key: Key<'_>, max: &Bound<'_, PyAny>) -> PyResult<i64> {
        guard(|| {
            let max = whole("max", max)?;
            Ok(self
                .shared
                .store
                .remaining(key.0, max, self.shared.now(py)?))
        })
    }

    /// Whole seconds until `key`'s window ends, rounded up; 0 when none runs.
    fn available_in(&self, py: Python<'_>, key: Key<'_>) -> PyResult<u64> {
        guard(|| Ok(self.shared.store.available_in(key.0, self.shared.now(py)?)))
    }

    /// Milliseconds until `key`'s window ends; 0 when none runs.
    fn available_in_ms(&self, py: Python<'_>, key: Key<'_>) -> PyResult<u64> {
        guard(|| {
            Ok(self
                .shared
                .store
                .available_in_ms(key.0, self.shared.now(py)?))
        })
    }

    /// Sets `key`'s count to zero, keeping its window running.
    fn reset_attempts(&self, py: Python<'_>, key: Key<'_>) -> PyResult<()> {
        guard(|| {
            self.shared
                .store
                .reset_attempts(key.0, self.shared.now(py)?);
            Ok(())
        })
    }

    /// Removes `key`'s count and window.
    fn clear(&self, key: Key<'_>) -> PyResult<()> {
        guard(|| {
            self.shared.store.clear(key.0);
            Ok(())
        })
    }

    /// Removes every expired key now. Never needed for correctness.
    fn purge(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| {
            self.shared.store.purge(self.shared.now(py)?);
            Ok(())
        })
    }

    /// Keys held (sliding logs and fixed windows), expired ones not yet swept included.
    fn __len__(&self) -> PyResult<usize> {
        guard(|| Ok(self.shared.store.len()))
    }
}
