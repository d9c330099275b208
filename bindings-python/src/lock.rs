//! The lock for Python (`ratewindow/_lock.py`): the arguments checked by the core and refused with
//! `InvalidArgumentError` naming the field as Python spells it (`ttl`, `owner`, `seconds`,
//! `retry_ms`); the memory store's locks ([`MemoryLocks`]); `block`'s schedule ([`LockWait`]); and the
//! networked stores' lock calls ([`lock_call`], driven by `_sansio` like every call).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use ratewindow_core::call::Outcome;
use ratewindow_core::lock::{check_owner, LockError, LockOp, LockTtl, LockWait as CoreWait};

use crate::call::{Call, Machine};
use crate::errors::{guard, invalid_argument};

/// A number argument (`int` or `float`, not `bool`) as `f64`, else `TypeError` naming `field`.
fn number(field: &str, given: &Bound<'_, PyAny>) -> PyResult<f64> {
    if given.is_instance_of::<PyBool>()
        || !(given.is_instance_of::<PyInt>() || given.is_instance_of::<PyFloat>())
    {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a number, not {}",
            given.get_type().name()?
        )));
    }
    given.extract::<f64>()
}

fn refused(e: &LockError, given: &Bound<'_, PyAny>) -> PyErr {
    invalid_argument(e.field.name(), given, e.field.range())
}

fn ttl_of(ttl: &Bound<'_, PyAny>) -> PyResult<LockTtl> {
    LockTtl::from_secs(number("ttl", ttl)?).map_err(|e| refused(&e, ttl))
}

fn owner_of(owner: &Bound<'_, PyAny>) -> PyResult<String> {
    let text: String = owner
        .extract()
        .map_err(|_| PyTypeError::new_err("owner must be a str"))?;
    check_owner(&text).map_err(|e| refused(&e, owner))?;
    Ok(text)
}

/// Checks a lock's TTL (seconds) and owner token, as a lock is made.
#[pyfunction]
pub(crate) fn check_lock(ttl: &Bound<'_, PyAny>, owner: &Bound<'_, PyAny>) -> PyResult<()> {
    guard(|| {
        ttl_of(ttl)?;
        owner_of(owner).map(|_| ())
    })
}

/// The operation `op` (`acquire`, `release`, `force_release`, `owner`) on `key`.
fn op_of(
    op: &str,
    key: String,
    owner: Option<&Bound<'_, PyAny>>,
    ttl: Option<&Bound<'_, PyAny>>,
) -> PyResult<LockOp> {
    let owner = || match owner {
        Some(owner) => owner_of(owner),
        None => Err(PyTypeError::new_err("the lock operation needs its owner")),
    };
    Ok(match op {
        "acquire" => LockOp::Acquire {
            key,
            ttl: match ttl {
                Some(ttl) => ttl_of(ttl)?,
                None => return Err(PyTypeError::new_err("acquire needs a ttl")),
            },
            owner: owner()?,
        },
        "release" => LockOp::Release {
            key,
            owner: owner()?,
        },
        "force_release" => LockOp::ForceRelease { key },
        "owner" => LockOp::Owner { key },
        other => {
            return Err(PyTypeError::new_err(format!(
                "unknown lock operation {other:?}"
            )))
        }
    })
}

/// A lock operation on a networked store's machine: a `Call` to drive (its outcome a `bool`, or for
/// `owner` the holder's token or `None`).
#[pyfunction]
#[pyo3(signature = (machine, op, key, owner=None, ttl=None))]
pub(crate) fn lock_call(
    py: Python<'_>,
    machine: &Bound<'_, Machine>,
    op: &str,
    key: String,
    owner: Option<&Bound<'_, PyAny>>,
    ttl: Option<&Bound<'_, PyAny>>,
) -> PyResult<Call> {
    guard(|| {
        let op = op_of(op, key, owner, ttl)?;
        machine.get().start_lock(py, op)
    })
}

/// `lock_commands`' answer: see there.
type LockPlan = (
    Vec<String>,
    usize,
    Vec<String>,
    Vec<String>,
    usize,
    bool,
    &'static str,
);

/// A Redis lock's commands planned once (`Redis::lock_commands`; the TTL and owner checked, refused
/// as `check_lock` refuses them): `(acquire, acquire_owner, release_keys, release_args,
/// release_owner, by_sha1, script)` — the acquire's `SET key owner NX PX ttl`, the release script's
/// keys and arguments, where the owner is in each (another owner's lock on the key and TTL: these
/// with its owner there), whether the release runs by SHA1, and the script to run (its SHA1, else
/// its source). `None` on another store, or a Redis store without plain commands: every operation is
/// then a call (`lock_call`).
#[pyfunction]
pub(crate) fn lock_commands(
    machine: &Bound<'_, Machine>,
    key: &str,
    owner: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
) -> PyResult<Option<LockPlan>> {
    guard(|| {
        let ttl_ms = ttl_of(ttl)?;
        let token = owner_of(owner)?;
        let Some(redis) = machine.get().redis_planner() else {
            return Ok(None);
        };
        // Both were checked above: a refusal here names the owner.
        let plan = redis
            .lock_commands(key, &token, ttl_ms)
            .map_err(|e| refused(&e, owner))?;
        let by_sha1 = redis.runs_by_sha1();
        let script = &ratewindow_core::call::LOCK;
        Ok(plan.map(|p| {
            (
                p.acquire,
                p.acquire_owner,
                p.release_keys,
                p.release_args,
                p.release_owner,
                by_sha1,
                if by_sha1 { script.sha1 } else { script.source },
            )
        }))
    })
}

/// The answer in the client's reply to a command of `lock_commands` (`acquire`: its `SET … NX`, in
/// redis-py's spelling `True` / `None` or `b'OK'`; else the release script's 1 / 0), decided by the
/// core (`Redis::lock_answer`): 1 taken or freed, 0 not, -1 no answer (drive the operation as a
/// `lock_call` fed this reply: its error names what came).
#[pyfunction]
pub(crate) fn lock_answer(acquire: bool, reply: &Bound<'_, PyAny>) -> PyResult<i32> {
    guard(|| {
        let reply = crate::redis::reply(reply, 0);
        Ok(
            match ratewindow_core::call::Redis::lock_answer(acquire, &reply) {
                Some(true) => 1,
                Some(false) => 0,
                None => -1,
            },
        )
    })
}

/// The memory store's locks, timed by the `now` (Unix ms) given to each operation.
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "MemoryLocks")]
pub(crate) struct MemoryLocks {
    locks: ratewindow_core::lock::MemoryLocks,
}

#[pymethods]
impl MemoryLocks {
    #[new]
    fn new() -> MemoryLocks {
        MemoryLocks {
            locks: ratewindow_core::lock::MemoryLocks::new(),
        }
    }

    /// Runs `op` at `now`: a `bool`, or for `owner` the holder's token or `None`.
    #[pyo3(signature = (op, key, now, owner=None, ttl=None))]
    fn run(
        &self,
        py: Python<'_>,
        op: &str,
        key: String,
        now: u64,
        owner: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        guard(|| {
            let op = op_of(op, key, owner, ttl)?;
            Ok(match self.locks.run(&op, now) {
                Outcome::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
                Outcome::Owner(Some(o)) => o.into_pyobject(py)?.into_any().unbind(),
                _ => py.None(),
            })
        })
    }

    fn __len__(&self) -> usize {
        self.locks.len()
    }
}

/// `block(seconds, retry_ms)`'s schedule, started at `now` (Unix ms).
#[pyclass(frozen, module = "ratewindow._ratewindow", name = "LockWait")]
pub(crate) struct LockWait {
    wait: CoreWait,
}

#[pymethods]
impl LockWait {
    #[new]
    fn new(
        seconds: &Bound<'_, PyAny>,
        retry_ms: &Bound<'_, PyAny>,
        now: u64,
    ) -> PyResult<LockWait> {
        guard(|| {
            let s = number("seconds", seconds)?;
            let r = number("retry_ms", retry_ms)?;
            CoreWait::new(s, r, now)
                .map(|wait| LockWait { wait })
                .map_err(|e| {
                    let given = match e.field {
                        ratewindow_core::lock::LockField::Seconds => seconds,
                        _ => retry_ms,
                    };
                    refused(&e, given)
                })
        })
    }

    /// After a refused try at `now`: ms to sleep before the next, or `None`: give up.
    fn after_refusal(&self, now: u64) -> Option<u64> {
        self.wait.after_refusal(now)
    }
}
