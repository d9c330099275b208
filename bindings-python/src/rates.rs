//! GCRA and the sliding-window counter: `GcraLimit`, `CounterLimit`, and batches mixing them with the
//! sliding log (the core's memory store; the networked stores raise `UnsupportedError` for now).
//!
//! The numbers go to the core's checks: `uses` and `window_ms` as for a `Limit`, then `burst` and the
//! limit's own ranges (`Gcra::new`, `Counter::new`); a refusal is `InvalidLimitError` naming `uses`,
//! `window_ms` or `burst`. A call's `cost` is an `int` from 1 to the limit's burst (GCRA) or uses: a
//! `TypeError` for another type, `InvalidArgumentError` naming `cost` (`entries[i].cost`) otherwise.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};
use ratewindow_core::counter::Counter;
use ratewindow_core::gcra::{Gcra, RateError, RateField};
use ratewindow_core::input::KeyPosition;
use ratewindow_core::{Entry, MixedEntry, Rule};

use crate::entry::key_str;
use crate::errors::{guard, invalid_argument, invalid_rate_limit, unsupported};
use crate::limit::{core_limit, Limit};

/// A GCRA limit (a token bucket kept as one time per key): `uses` per `window_ms` on average, up to
/// `burst` at once (default `uses`). Immutable; checked by the core when built.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "GcraLimit")]
pub(crate) struct GcraLimit {
    pub(crate) inner: Gcra,
}

/// A sliding-window counter limit: about `uses` per any `window_ms`, from two fixed windows. Immutable;
/// checked by the core when built.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "CounterLimit")]
pub(crate) struct CounterLimit {
    pub(crate) inner: Counter,
}

/// A whole number >= 0 given as `int` or `float` for `burst`; anything else a refusal naming it.
fn burst_of(given: &Bound<'_, PyAny>) -> PyResult<u64> {
    let refuse = |shown: String| {
        invalid_rate_limit(
            given.py(),
            &RateError::new(RateField::Burst, shown),
            "burst",
            given,
        )
    };
    if given.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "burst must be an int or a float, not bool",
        ));
    }
    if let Ok(int) = given.cast::<PyInt>() {
        return int.extract::<u64>().map_err(|_| refuse(int.to_string()));
    }
    if let Ok(float) = given.cast::<PyFloat>() {
        let v = float.value();
        if v >= 0.0 && v <= u64::MAX as f64 && v.fract() == 0.0 {
            return Ok(v as u64);
        }
        return Err(refuse(float.repr()?.to_string()));
    }
    Err(PyTypeError::new_err(format!(
        "burst must be an int or a float, not {}",
        given.get_type().name()?
    )))
}

#[pymethods]
impl GcraLimit {
    #[new]
    #[pyo3(signature = (uses, window_ms, burst = None))]
    fn new(
        uses: &Bound<'_, PyAny>,
        window_ms: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(|| {
            let limit = core_limit(uses, window_ms)?;
            let b = match burst {
                Some(b) => burst_of(b)?,
                None => limit.uses() as u64,
            };
            let inner = Gcra::new(limit.uses() as u64, limit.window_ms(), b).map_err(|e| {
                let given = match e.field {
                    RateField::Uses => uses,
                    RateField::WindowMs => window_ms,
                    _ => burst.unwrap_or(uses),
                };
                invalid_rate_limit(uses.py(), &e, e.field.name(), given)
            })?;
            Ok(GcraLimit { inner })
        })
    }

    /// `"gcra"`.
    #[classattr]
    fn algorithm() -> &'static str {
        "gcra"
    }

    /// Uses per window, on average.
    #[getter]
    fn uses(&self) -> u32 {
        self.inner.uses()
    }

    /// The window, in milliseconds.
    #[getter]
    fn window_ms(&self) -> u64 {
        self.inner.window_ms()
    }

    /// The most uses at once.
    #[getter]
    fn burst(&self) -> u32 {
        self.inner.burst()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<GcraLimit>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        hash(&("gcra", self.inner))
    }

    fn __repr__(&self) -> String {
        format!(
            "GcraLimit(uses={}, window_ms={}, burst={})",
            self.inner.uses(),
            self.inner.window_ms(),
            self.inner.burst()
        )
    }
}

#[pymethods]
impl CounterLimit {
    #[new]
    fn new(uses: &Bound<'_, PyAny>, window_ms: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            let inner = Counter::new(core_limit(uses, window_ms)?)
                .map_err(|e| invalid_rate_limit(uses.py(), &e, e.field.name(), uses))?;
            Ok(CounterLimit { inner })
        })
    }

    /// `"counter"`.
    #[classattr]
    fn algorithm() -> &'static str {
        "counter"
    }

    /// Uses per window.
    #[getter]
    fn uses(&self) -> u32 {
        self.inner.limit().uses()
    }

    /// The window, in milliseconds.
    #[getter]
    fn window_ms(&self) -> u64 {
        self.inner.limit().window_ms()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<CounterLimit>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        hash(&("counter", self.inner))
    }

    fn __repr__(&self) -> String {
        format!(
            "CounterLimit(uses={}, window_ms={})",
            self.inner.limit().uses(),
            self.inner.limit().window_ms()
        )
    }
}

fn hash(v: &impl std::hash::Hash) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    // Python reserves -1 (as an isize) for errors.
    h.finish() >> 1
}

/// A limit of any algorithm: the sliding log's `Limit`, a `GcraLimit` or a `CounterLimit`.
pub(crate) fn rule_of(limit: &Bound<'_, PyAny>) -> PyResult<Rule> {
    if let Ok(l) = limit.cast::<Limit>() {
        return Ok(Rule::Sliding(l.get().inner));
    }
    if let Ok(g) = limit.cast::<GcraLimit>() {
        return Ok(Rule::Gcra(g.get().inner));
    }
    if let Ok(c) = limit.cast::<CounterLimit>() {
        return Ok(Rule::Counter(c.get().inner));
    }
    Err(PyTypeError::new_err(format!(
        "limit must be a ratewindow.Limit, GcraLimit or CounterLimit, not {}",
        limit.get_type().name()?
    )))
}

/// Whether `limit` is one of the three limit classes (what `Entry` accepts).
pub(crate) fn is_limit(limit: &Bound<'_, PyAny>) -> bool {
    limit.is_instance_of::<Limit>()
        || limit.is_instance_of::<GcraLimit>()
        || limit.is_instance_of::<CounterLimit>()
}

/// A call's cost as given (`None`: 1): an `int`, else a `TypeError`; its range is checked against the
/// rule by [`checked_cost`].
pub(crate) fn cost_arg(cost: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<u64> {
    let Some(cost) = cost else { return Ok(1) };
    if cost.is_instance_of::<PyBool>() || !cost.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            cost.get_type().name()?
        )));
    }
    // Negative or past u64: 0 is refused by every rule with the value given.
    Ok(cost.extract::<u64>().unwrap_or(0))
}

/// Checks `cost` against `rule` (1 to the burst or uses), a refusal naming `name` and carrying `given`.
pub(crate) fn checked_cost(
    rule: Rule,
    cost: u64,
    name: &str,
    given: Option<&Bound<'_, PyAny>>,
    py: Python<'_>,
) -> PyResult<u64> {
    let checked = match rule {
        // The log's weights: 1 to uses, as the core's weighted calls take them.
        Rule::Sliding(l) => ratewindow_core::check_cost(cost, l),
        Rule::Gcra(g) => g.check_cost(cost),
        Rule::Counter(c) => c.check_cost(cost),
    };
    checked.map(u64::from).map_err(|e| {
        let given = match given {
            Some(g) => g.clone(),
            None => match cost.into_pyobject(py) {
                Ok(int) => int.into_any(),
                Err(never) => match never {},
            },
        };
        invalid_argument(name, &given, e.field.range())
    })
}

/// A batch as the memory store runs it: the sliding log's entries only (the common case, converted as
/// before), or entries mixing algorithms or costs.
pub(crate) enum Batch {
    Sliding(Vec<Entry>),
    Mixed(Vec<MixedEntry>),
}

/// A batch's entries: `ratewindow.Entry` (its `cost` included), a `(key, limit)` or `(key, limit,
/// cost)` tuple, or any object with `key` and `limit` attributes (and `cost`, when it has one).
pub(crate) fn batch(items: &Bound<'_, PyAny>) -> PyResult<Batch> {
    let py = items.py();
    let mut sliding: Vec<Entry> = Vec::with_capacity(items.len().unwrap_or(0));
    let mut mixed: Option<Vec<MixedEntry>> = None;
    for (index, item) in items.try_iter()?.enumerate() {
        let item = item?;
        let position = KeyPosition::Entry(index);
        let cost_name = || format!("entries[{index}].cost");
        let (key, limit, cost) = if let Ok(entry) = item.cast::<crate::entry::Entry>() {
            let e = entry.get();
            (
                e.key.bind(py).clone().into_any(),
                e.limit.bind(py).clone(),
                e.cost,
            )
        } else {
            match item.cast::<PyTuple>() {
                Ok(t) if t.len() == 2 || t.len() == 3 => {
                    let cost = if t.len() == 3 {
                        Some(t.get_item(2)?)
                    } else {
                        None
                    };
                    let c = cost_arg(cost.as_ref(), &cost_name())?;
                    (t.get_item(0)?, t.get_item(1)?, c)
                }
                _ => match (
                    item.getattr(intern!(py, "key")),
                    item.getattr(intern!(py, "limit")),
                ) {
                    (Ok(key), Ok(limit)) => {
                        let cost = item.getattr_opt(intern!(py, "cost"))?;
                        let c = cost_arg(cost.as_ref(), &cost_name())?;
                        (key, limit, c)
                    }
                    _ => {
                        return Err(PyTypeError::new_err(
                            "each entry must be an Entry(key, limit, cost=1)",
                        ))
                    }
                },
            }
        };
        let key = key
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("an entry's key must be a str"))?;
        let key = key_str(key, position)?;
        let rule = rule_of(&limit).map_err(|_| {
            PyTypeError::new_err(
                "an entry's limit must be a ratewindow.Limit, GcraLimit or CounterLimit",
            )
        })?;
        match (&mut mixed, rule) {
            (None, Rule::Sliding(l)) if cost == 1 => sliding.push(Entry::new(key, l)),
            (None, _) => {
                let mut all: Vec<MixedEntry> = sliding
                    .drain(..)
                    .map(|e| MixedEntry::new(e.key, Rule::Sliding(e.limit), 1))
                    .collect();
                let cost = checked_cost(rule, cost, &cost_name(), None, py)?;
                all.push(MixedEntry::new(key, rule, cost));
                mixed = Some(all);
            }
            (Some(all), _) => {
                let cost = checked_cost(rule, cost, &cost_name(), None, py)?;
                all.push(MixedEntry::new(key, rule, cost));
            }
        }
    }
    Ok(match mixed {
        Some(all) => Batch::Mixed(all),
        None => Batch::Sliding(sliding),
    })
}

/// A batch for a networked store: its sliding-log entries (`Ok`, costs included), or the entries of a
/// batch naming a GCRA or counter limit (`Err`: a mixed batch, `Sqlite::mixed`).
pub(crate) fn sliding_or_mixed(
    items: &Bound<'_, PyAny>,
) -> PyResult<Result<Vec<Entry>, Vec<MixedEntry>>> {
    match batch(items)? {
        Batch::Sliding(entries) => Ok(Ok(entries)),
        Batch::Mixed(entries) if entries.iter().all(|e| matches!(e.rule, Rule::Sliding(_))) => {
            let entries = entries
                .into_iter()
                .map(|e| match e.rule {
                    Rule::Sliding(l) => weighted_entry(e.key, l, e.cost),
                    _ => unreachable!("every entry is a sliding one"),
                })
                .collect::<PyResult<_>>()?;
            Ok(Ok(entries))
        }
        Batch::Mixed(entries) => Ok(Err(entries)),
    }
}

/// A sliding-log entry costing `cost` (already checked against `limit`).
fn weighted_entry(key: String, limit: ratewindow_core::Limit, cost: u64) -> PyResult<Entry> {
    Entry::with_cost(key, limit, cost)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// Starts a GCRA or counter call on a networked store's machine: `op` is `"consume"`, `"peek"` or
/// `"reset"`; `now` (tests, the vectors) times it at that ms instead of the server's clock. The cost is
/// checked first (`InvalidArgumentError` naming `cost`); a `Limit` with a cost is a weighted call on
/// the sliding log (on the store's clock, `now` unused), its reset `UnsupportedError`.
#[pyfunction]
#[pyo3(signature = (machine, op, key, limit, cost = None, now = None))]
pub(crate) fn rate_call(
    py: Python<'_>,
    machine: &Bound<'_, crate::call::Machine>,
    op: &str,
    key: crate::entry::Key<'_>,
    limit: &Bound<'_, PyAny>,
    cost: Option<&Bound<'_, PyAny>>,
    now: Option<u64>,
) -> PyResult<crate::call::Call> {
    use ratewindow_core::call::RateOp;
    guard(|| {
        let rule = rule_of(limit)?;
        let n = if op == "reset" {
            1
        } else {
            checked_cost(rule, cost_arg(cost, "cost")?, "cost", cost, py)?
        };
        let key = key.0.to_owned();
        let rate = match (rule, op) {
            (Rule::Gcra(gcra), "consume") => RateOp::GcraConsume { key, gcra, cost: n },
            (Rule::Gcra(gcra), "peek") => RateOp::GcraPeek { key, gcra, cost: n },
            (Rule::Gcra(_), "reset") => RateOp::GcraReset { key },
            (Rule::Counter(counter), "consume") => RateOp::CounterConsume {
                key,
                counter,
                cost: n,
            },
            (Rule::Counter(counter), "peek") => RateOp::CounterPeek {
                key,
                counter,
                cost: n,
            },
            (Rule::Counter(_), "reset") => RateOp::CounterReset { key },
            // A weighted call on the networked sliding log: the core's weighted consume or peek (on
            // the store's clock; PostgreSQL refuses it, UnsupportedError).
            (Rule::Sliding(l), "consume" | "peek") => {
                let entry = weighted_entry(key, l, n)?;
                return machine.get().start_weighted(py, op == "consume", entry);
            }
            (Rule::Sliding(_), _) => return Err(unsupported(py, "weighted sliding")),
            _ => {
                return Err(PyTypeError::new_err(
                    "op must be 'consume', 'peek' or 'reset'",
                ))
            }
        };
        machine.get().start_rate(py, rate, now)
    })
}
