//! The sharded store's protocol (`ratewindow_core::shard`) for `ratewindow._shard`: the shard's side
//! (`ShardClient`: encodes requests, reads answers into plain tuples) and the manager's
//! (`shard_decode`: validates a request and gives the store method and its arguments;
//! `shard_answer`: encodes what the store answered, refusing a value of the wrong shape).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};
use ratewindow_core::input::KeyPosition;
use ratewindow_core::shard::{
    decode_request, encode_failure, encode_value, expects, shard_rule, Expect, FailureKind,
    ShardAttempt, ShardClient as CoreClient, ShardEntry, ShardFailure, ShardHit, ShardOp,
    ShardValue, ShardVerdict,
};
use ratewindow_core::Rule;

use crate::entry::{key_str, Entry, Key};
use crate::guard;
use crate::limit::{attempt_cost, core_window, whole, Limit};
use crate::rates::{checked_cost, cost_arg, rule_of, CounterLimit, GcraLimit};
use crate::verdict::{AttemptResult, HitResult};

/// A failure as `(kind, message, field, store_failure)`.
type FailureTuple = (&'static str, String, Option<String>, bool);

fn failure_tuple(f: ShardFailure) -> FailureTuple {
    (f.kind.name(), f.message, f.field, f.kind.is_store_failure())
}

/// The shard's side of one connection: numbers requests and reads the manager's answers.
#[pyclass(module = "ratewindow._ratewindow", name = "ShardClient")]
pub(crate) struct ShardClient {
    client: std::sync::Mutex<CoreClient>,
}

impl ShardClient {
    fn send(&self, op: ShardOp) -> (u64, String) {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request(&op)
    }
}

/// A rule as the manager's store takes it: a `Limit`, `GcraLimit` or `CounterLimit`.
fn limit_object<'py>(py: Python<'py>, rule: Rule) -> PyResult<Bound<'py, PyAny>> {
    Ok(match rule {
        Rule::Sliding(inner) => Py::new(py, Limit { inner })?.into_bound(py).into_any(),
        Rule::Gcra(inner) => Py::new(py, GcraLimit { inner })?.into_bound(py).into_any(),
        Rule::Counter(inner) => Py::new(py, CounterLimit { inner })?
            .into_bound(py)
            .into_any(),
    })
}

/// `{"cost": cost}` for a call costing more than 1 (a store of the user's own that takes no `cost`
/// still serves every call costing 1).
fn cost_kwargs(py: Python<'_>, cost: u32) -> PyResult<Option<Bound<'_, PyDict>>> {
    if cost == 1 {
        return Ok(None);
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("cost", cost)?;
    Ok(Some(kwargs))
}

#[pymethods]
impl ShardClient {
    #[new]
    fn new() -> Self {
        ShardClient {
            client: std::sync::Mutex::new(CoreClient::new()),
        }
    }

    /// A consume, peek or reset (`reset`: a `GcraLimit` or `CounterLimit`) under a limit of any
    /// algorithm, costing `cost` (checked as every store checks it, naming `cost`): `(id, text)`.
    #[pyo3(signature = (op, key, limit, cost = None))]
    fn limited(
        &self,
        py: Python<'_>,
        op: &str,
        key: Key<'_>,
        limit: &Bound<'_, PyAny>,
        cost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, String)> {
        guard(|| {
            let rule = rule_of(limit)?;
            let key = key.0.to_owned();
            if op == "reset" {
                let ShardEntry {
                    key,
                    uses,
                    window_ms,
                    algorithm,
                    burst,
                    ..
                } = ShardEntry::of_rule(key, rule, 1);
                let Some(algorithm) = algorithm else {
                    return Err(pyo3::exceptions::PyTypeError::new_err(
                        "reset takes a GcraLimit or a CounterLimit",
                    ));
                };
                return Ok(self.send(ShardOp::Reset {
                    key,
                    algorithm,
                    uses,
                    window_ms,
                    burst,
                }));
            }
            let cost = checked_cost(rule, cost_arg(cost, "cost")?, "cost", cost, py)? as u32;
            Ok(self.send(ShardOp::single(
                op != "peek",
                ShardEntry::of_rule(key, rule, cost),
            )))
        })
    }

    /// A batch (`consume_many` / `peek_many`) of `Entry`s: `(id, text)`.
    fn batch(&self, op: &str, entries: &Bound<'_, PyAny>) -> PyResult<(u64, String)> {
        guard(|| {
            let mut out = Vec::new();
            for (i, item) in entries.try_iter()?.enumerate() {
                let item = item?;
                let entry = item.cast::<Entry>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(
                        "entries must be ratewindow.Entry objects",
                    )
                })?;
                let entry = entry.get();
                let py = item.py();
                let key = key_str(entry.key.bind(py), KeyPosition::Entry(i))?.to_owned();
                let rule = rule_of(entry.limit.bind(py))?;
                let cost = checked_cost(rule, entry.cost, &format!("entries[{i}].cost"), None, py)?;
                out.push(ShardEntry::of_rule(key, rule, cost as u32));
            }
            Ok(self.send(if op == "peek_many" {
                ShardOp::PeekMany { entries: out }
            } else {
                ShardOp::ConsumeMany { entries: out }
            }))
        })
    }

    /// A fixed-window operation: `hit`/`hit_window` `(decay_ms, amount)`, `attempt` `(max, decay_ms,
    /// cost)`,
    /// `too_many_attempts`/`remaining` `(max,)`, the rest `()`. Arguments checked as the memory store
    /// checks them (the same errors, naming them as Python does).
    #[pyo3(signature = (op, key, a = None, b = None, c = None))]
    fn fixed(
        &self,
        op: &str,
        key: Key<'_>,
        a: Option<&Bound<'_, PyAny>>,
        b: Option<&Bound<'_, PyAny>>,
        c: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, String)> {
        guard(|| {
            let key = key.0.to_owned();
            let op = match op {
                "hit" | "hit_window" => {
                    let decay_ms = core_window("decay_ms", need(op, a)?)?.as_ms();
                    let amount = b.map(|b| whole("amount", b)).transpose()?.unwrap_or(1);
                    if op == "hit" {
                        ShardOp::Hit {
                            key,
                            decay_ms,
                            amount,
                        }
                    } else {
                        ShardOp::HitWindow {
                            key,
                            decay_ms,
                            amount,
                        }
                    }
                }
                "attempt" => {
                    let max = whole("max", need(op, a)?)?;
                    let decay_ms = core_window("decay_ms", need(op, b)?)?.as_ms();
                    let cost = attempt_cost(c)?;
                    ShardOp::Attempt {
                        key,
                        max,
                        decay_ms,
                        cost,
                    }
                }
                "too_many_attempts" => ShardOp::TooManyAttempts {
                    key,
                    max: whole("max", need(op, a)?)?,
                },
                "remaining" => ShardOp::Remaining {
                    key,
                    max: whole("max", need(op, a)?)?,
                },
                "attempts" => ShardOp::Attempts { key },
                "available_in" => ShardOp::AvailableIn { key },
                "available_in_ms" => ShardOp::AvailableInMs { key },
                "reset_attempts" => ShardOp::ResetAttempts { key },
                "clear" => ShardOp::Clear { key },
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unknown operation {other:?}"
                    )))
                }
            };
            Ok(self.send(op))
        })
    }

    /// A lock operation (`acquire`, `release`, `force_release`, `owner`) on the manager's store's lock
    /// `key` held by `owner` for `ttl` seconds: `(id, text)`. The manager builds the lock to run the
    /// step on, so a force release or an owner query, which carry none, send a placeholder owner and
    /// TTL (as Node's shard does).
    #[pyo3(signature = (op, key, owner = None, ttl = None))]
    fn lock(
        &self,
        op: &str,
        key: Key<'_>,
        owner: Option<String>,
        ttl: Option<f64>,
    ) -> PyResult<(u64, String)> {
        guard(|| {
            let key = key.0.to_owned();
            let owner = owner.unwrap_or_else(|| PLACEHOLDER_OWNER.to_owned());
            let ttl = ttl.unwrap_or(1.0);
            let op = match op {
                "acquire" => ShardOp::LockAcquire { key, owner, ttl },
                "release" => ShardOp::LockRelease { key, owner, ttl },
                "force_release" => ShardOp::LockForceRelease { key, owner, ttl },
                "owner" => ShardOp::LockOwner { key, owner, ttl },
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unknown lock operation {other:?}"
                    )))
                }
            };
            Ok(self.send(op))
        })
    }

    /// Gives back an allowed batch by the manager's token: `(id, text)`.
    fn release(&self, token: u64) -> PyResult<(u64, String)> {
        guard(|| Ok(self.send(ShardOp::Release { token })))
    }

    /// Reads an answer: `None` when it answers no request under way, else `(id, kind, payload)` with
    /// `kind` `verdict` (payload `(allowed, retry_after_ms, retry_timestamp, blocked, limit,
    /// remaining, refill_after_ms, reset_after_ms, release_token)`), `number`, `bool`, `unit`, `hit` (a
    /// `HitResult`), `attempt` (an `AttemptResult`) or `error`
    /// (`(kind, message, field, store_failure)`).
    fn answer<'py>(
        &self,
        py: Python<'py>,
        text: &str,
    ) -> PyResult<Option<(u64, &'static str, Bound<'py, PyAny>)>> {
        guard(|| {
            let answered = self
                .client
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .answer(text);
            let Some((id, out)) = answered else {
                return Ok(None);
            };
            let (kind, payload): (&'static str, Bound<'py, PyAny>) = match out {
                Ok(ShardValue::Verdict(v)) => (
                    "verdict",
                    (
                        v.allowed,
                        v.retry_after_ms,
                        v.retry_timestamp,
                        v.blocked,
                        v.limit.unwrap_or(0),
                        v.remaining.unwrap_or(0),
                        v.refill_after_ms.unwrap_or(0),
                        v.reset_after_ms.unwrap_or(0),
                        v.release,
                    )
                        .into_pyobject(py)?
                        .into_any(),
                ),
                Ok(ShardValue::Number(n)) => ("number", n.into_pyobject(py)?.into_any()),
                Ok(ShardValue::Bool(b)) => ("bool", PyBool::new(py, b).to_owned().into_any()),
                Ok(ShardValue::Unit) => ("unit", py.None().into_bound(py)),
                Ok(ShardValue::Hit(h)) => (
                    "hit",
                    Bound::new(py, HitResult::new(h.count, h.reset_after_ms))?.into_any(),
                ),
                Ok(ShardValue::Attempt(a)) => (
                    "attempt",
                    Bound::new(py, AttemptResult::new(a.allowed, a.count, a.reset_after_ms))?
                        .into_any(),
                ),
                Ok(ShardValue::Owner(o)) => ("owner", o.into_pyobject(py)?.into_any()),
                Err(f) => ("error", failure_tuple(f).into_pyobject(py)?.into_any()),
            };
            Ok(Some((id, kind, payload)))
        })
    }

    /// Forgets request `id` (timed out after `timeout_ms`, or its connection closed when `None`): the
    /// failure to raise, or `None` if it was not under way.
    #[pyo3(signature = (id, timeout_ms = None))]
    fn forget(&self, id: u64, timeout_ms: Option<u64>) -> PyResult<Option<FailureTuple>> {
        guard(|| {
            Ok(self
                .client
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .forget(id, timeout_ms)
                .map(failure_tuple))
        })
    }

    /// Forgets every request under way (the connection closed): `[(id, failure)]`.
    fn close(&self) -> PyResult<Vec<(u64, FailureTuple)>> {
        guard(|| {
            Ok(self
                .client
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .close()
                .into_iter()
                .map(|(id, f)| (id, failure_tuple(f)))
                .collect())
        })
    }

    /// Requests under way.
    #[getter]
    fn in_flight(&self) -> usize {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .in_flight()
    }
}

/// The owner a lock step that carries none (a force release, an owner query) sends: the manager
/// builds a lock to run the step on, and a lock needs an owner. Node's shard sends the same.
const PLACEHOLDER_OWNER: &str = "ratewindow-shard";

/// A fixed-window argument that must be given.
fn need<'a, 'py>(op: &str, x: Option<&'a Bound<'py, PyAny>>) -> PyResult<&'a Bound<'py, PyAny>> {
    x.ok_or_else(|| pyo3::exceptions::PyTypeError::new_err(format!("{op} needs more arguments")))
}

/// The Python store method of each operation.
fn method(op: &ShardOp) -> &'static str {
    match op {
        ShardOp::Consume { .. } => "consume",
        ShardOp::Peek { .. } => "peek",
        ShardOp::ConsumeMany { .. } => "consume_many",
        ShardOp::PeekMany { .. } => "peek_many",
        ShardOp::Release { .. } => "release",
        ShardOp::Hit { .. } => "hit",
        ShardOp::HitWindow { .. } => "hit_window",
        ShardOp::Attempt { .. } => "attempt",
        ShardOp::Attempts { .. } => "attempts",
        ShardOp::TooManyAttempts { .. } => "too_many_attempts",
        ShardOp::Remaining { .. } => "remaining",
        ShardOp::AvailableIn { .. } => "available_in",
        ShardOp::AvailableInMs { .. } => "available_in_ms",
        ShardOp::ResetAttempts { .. } => "reset_attempts",
        ShardOp::Clear { .. } => "clear",
        ShardOp::Reset { .. } => "reset",
        // The manager builds `store.lock(key, ttl, owner)` and runs the step (the first argument).
        ShardOp::LockAcquire { .. }
        | ShardOp::LockRelease { .. }
        | ShardOp::LockForceRelease { .. }
        | ShardOp::LockOwner { .. } => "lock",
    }
}

/// What `shard_decode` gives the manager: `(id, op, method, args, kwargs, hold_ms, refused)`.
type Decoded<'py> = (
    u64,
    &'static str,
    Option<&'static str>,
    Bound<'py, PyTuple>,
    Option<Bound<'py, PyDict>>,
    u64,
    Option<String>,
);

/// A store method's arguments: positional, and `{"cost": n}` or none.
type StoreArgs<'py> = (Bound<'py, PyTuple>, Option<Bound<'py, PyDict>>);

/// A request's arguments as the store takes them, or the failure to answer (a limit the core's checks
/// refuse, `invalid_limit` naming its field; a `burst` without GCRA, `malformed`).
fn store_args<'py>(py: Python<'py>, op: ShardOp) -> Result<PyResult<StoreArgs<'py>>, ShardFailure> {
    let plain = |args: PyResult<Bound<'py, PyTuple>>| args.map(|a| (a, None));
    Ok(match op {
        ShardOp::Consume {
            key,
            uses,
            window_ms,
            algorithm,
            burst,
            cost,
        }
        | ShardOp::Peek {
            key,
            uses,
            window_ms,
            algorithm,
            burst,
            cost,
        } => {
            let rule = shard_rule(algorithm, uses, window_ms, burst)?;
            (|| {
                Ok((
                    (key, limit_object(py, rule)?).into_pyobject(py)?,
                    cost_kwargs(py, cost)?,
                ))
            })()
        }
        ShardOp::Reset {
            key,
            algorithm,
            uses,
            window_ms,
            burst,
        } => {
            let rule = shard_rule(Some(algorithm), uses, window_ms, burst)?;
            plain(limit_object(py, rule).and_then(|l| (key, l).into_pyobject(py)))
        }
        ShardOp::ConsumeMany { entries } | ShardOp::PeekMany { entries } => {
            let rules = entries
                .iter()
                .map(ShardEntry::rule)
                .collect::<Result<Vec<_>, _>>()?;
            plain((|| {
                let list = PyList::empty(py);
                for (e, rule) in entries.into_iter().zip(rules) {
                    let entry = Entry {
                        key: PyString::new(py, &e.key).unbind(),
                        limit: limit_object(py, rule)?.unbind(),
                        cost: e.cost.into(),
                    };
                    list.append(Py::new(py, entry)?)?;
                }
                PyTuple::new(py, [list.into_any()])
            })())
        }
        ShardOp::Attempt {
            key,
            max,
            decay_ms,
            cost,
        } => (|| {
            Ok((
                (key, max, decay_ms).into_pyobject(py)?,
                cost_kwargs(py, cost)?,
            ))
        })(),
        ShardOp::Release { token } => plain(PyTuple::new(py, [token])),
        ShardOp::Hit {
            key,
            decay_ms,
            amount,
        }
        | ShardOp::HitWindow {
            key,
            decay_ms,
            amount,
        } => plain((key, decay_ms, amount).into_pyobject(py)),
        ShardOp::TooManyAttempts { key, max } | ShardOp::Remaining { key, max } => {
            plain((key, max).into_pyobject(py))
        }
        ShardOp::Attempts { key }
        | ShardOp::AvailableIn { key }
        | ShardOp::AvailableInMs { key }
        | ShardOp::ResetAttempts { key }
        | ShardOp::Clear { key } => plain(PyTuple::new(py, [key])),
        // `(step, key, owner, ttl)`: the manager runs `step` on `store.lock(key, ttl, owner)`.
        ShardOp::LockAcquire { key, owner, ttl } => {
            plain(("acquire", key, owner, ttl).into_pyobject(py))
        }
        ShardOp::LockRelease { key, owner, ttl } => {
            plain(("release", key, owner, ttl).into_pyobject(py))
        }
        ShardOp::LockForceRelease { key, owner, ttl } => {
            plain(("force_release", key, owner, ttl).into_pyobject(py))
        }
        ShardOp::LockOwner { key, owner, ttl } => {
            plain(("owner", key, owner, ttl).into_pyobject(py))
        }
    })
}

/// Reads and validates a request (the manager's side): `(id, op, method, args, kwargs, hold_ms,
/// refused)`. `op` is the wire name (what `shard_answer` takes), `method` the store's Python method,
/// `args` its arguments (`Limit`, `GcraLimit`, `CounterLimit` and `Entry`s built, refused here by the
/// core's checks if out of range), `kwargs` `{"cost": n}` for a call costing more than 1, else
/// `None`; `refused` is the answer to send at once (then `method` is `None`).
#[pyfunction]
pub(crate) fn shard_decode<'py>(py: Python<'py>, text: &str) -> PyResult<Decoded<'py>> {
    guard(|| {
        let request = match decode_request(text) {
            Ok(r) => r,
            Err(refused) => {
                return Ok((
                    refused.id,
                    "",
                    None,
                    PyTuple::empty(py),
                    None,
                    0,
                    Some(refused.answer()),
                ))
            }
        };
        let id = request.id;
        let name = request.op.name();
        let hold = request.op.hold_ms();
        let m = method(&request.op);
        let refuse = |failure: ShardFailure| {
            Ok((
                id,
                name,
                None,
                PyTuple::empty(py),
                None,
                0,
                Some(encode_failure(id, &failure)),
            ))
        };
        match store_args(py, request.op) {
            Ok(Ok((args, kwargs))) => Ok((id, name, Some(m), args, kwargs, hold, None)),
            Ok(Err(e)) => refuse(ShardFailure::new(
                FailureKind::InvalidLimit,
                e.value(py).to_string(),
            )),
            Err(failure) => refuse(failure),
        }
    })
}

fn reply(op: &str, what: String) -> ShardFailure {
    ShardFailure::new(
        FailureKind::Reply,
        format!("the manager's store answered {op} with {what}"),
    )
}

fn int_attr(op: &str, v: &Bound<'_, PyAny>, name: &str) -> Result<Option<u64>, ShardFailure> {
    let Ok(x) = v.getattr(name) else {
        return Ok(None);
    };
    if x.is_none() {
        return Ok(None);
    }
    x.extract::<u64>()
        .map(Some)
        .map_err(|_| reply(op, format!("{name} = {x} (expected a whole number >= 0)")))
}

fn int_of(op: &str, x: &Bound<'_, PyAny>) -> Result<i64, ShardFailure> {
    if x.is_instance_of::<PyBool>() || !x.is_instance_of::<PyInt>() {
        return Err(reply(op, format!("{x} (expected an int)")));
    }
    x.extract::<i64>()
        .map_err(|_| reply(op, format!("{x} (expected a 64-bit int)")))
}

fn value_of(
    op: &str,
    value: &Bound<'_, PyAny>,
    token: Option<u64>,
) -> Result<ShardValue, ShardFailure> {
    let expect = expects(op).ok_or_else(|| reply(op, "an unknown operation".into()))?;
    Ok(match expect {
        Expect::Verdict | Expect::Batch => {
            let allowed = value
                .getattr("allowed")
                .ok()
                .and_then(|a| a.extract::<bool>().ok())
                .ok_or_else(|| reply(op, format!("{value} (expected a Verdict)")))?;
            ShardValue::Verdict(ShardVerdict {
                allowed,
                retry_after_ms: int_attr(op, value, "retry_after_ms")?.unwrap_or(0),
                retry_timestamp: int_attr(op, value, "retry_timestamp")?,
                limit: int_attr(op, value, "limit")?,
                remaining: int_attr(op, value, "remaining")?,
                refill_after_ms: int_attr(op, value, "refill_after_ms")?,
                reset_after_ms: int_attr(op, value, "reset_after_ms")?,
                blocked: if expect == Expect::Batch {
                    int_attr(op, value, "blocked")?
                } else {
                    None
                },
                release: if allowed { token } else { None },
            })
        }
        Expect::Number => ShardValue::Number(int_of(op, value)?),
        Expect::Bool => match value.extract::<bool>() {
            Ok(b) if value.is_instance_of::<PyBool>() => ShardValue::Bool(b),
            _ => return Err(reply(op, format!("{value} (expected a bool)"))),
        },
        Expect::Unit => ShardValue::Unit,
        Expect::Owner => ShardValue::Owner(if value.is_none() {
            None
        } else {
            Some(
                value
                    .extract::<String>()
                    .map_err(|_| reply(op, format!("{value} (expected a str or None)")))?,
            )
        }),
        Expect::Hit => {
            let count = value
                .getattr("count")
                .map_err(|_| reply(op, format!("{value} (expected a HitResult)")))?;
            ShardValue::Hit(ShardHit {
                count: int_of(op, &count)?,
                reset_after_ms: int_attr(op, value, "reset_after_ms")?.unwrap_or(0),
            })
        }
        Expect::Attempt => {
            let count = value
                .getattr("count")
                .map_err(|_| reply(op, format!("{value} (expected an AttemptResult)")))?;
            let allowed = value
                .getattr("allowed")
                .ok()
                .and_then(|a| a.extract::<bool>().ok())
                .unwrap_or(false);
            ShardValue::Attempt(ShardAttempt {
                allowed,
                count: int_of(op, &count)?,
                reset_after_ms: int_attr(op, value, "reset_after_ms")?.unwrap_or(0),
            })
        }
    })
}

/// Encodes what the manager's store answered request `id` (operation `op`, its wire name); `token`
/// is the release token of an allowed `consumeMany`. A value of the wrong shape is answered as a
/// `reply` failure.
#[pyfunction]
#[pyo3(signature = (id, op, value, token = None))]
pub(crate) fn shard_answer(
    id: u64,
    op: &str,
    value: &Bound<'_, PyAny>,
    token: Option<u64>,
) -> PyResult<String> {
    guard(|| {
        Ok(match value_of(op, value, token) {
            Ok(v) => encode_value(id, &v),
            Err(f) => encode_failure(id, &f),
        })
    })
}

/// Encodes a failure (`kind` one of the protocol's; an unknown one is `internal`).
#[pyfunction]
#[pyo3(signature = (id, kind, message, field = None))]
pub(crate) fn shard_answer_error(
    id: u64,
    kind: &str,
    message: &str,
    field: Option<String>,
) -> PyResult<String> {
    guard(|| {
        Ok(encode_failure(
            id,
            &ShardFailure::new(FailureKind::from_name(kind), message).with_field(field),
        ))
    })
}
