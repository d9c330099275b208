//! The lock's napi shell (`ts/lock.ts`): the memory store's locks ([`NativeLocks`]), `block`'s
//! schedule ([`NativeLockWait`]) and the networked stores' lock calls (`NativeCalls::lock`, driven like
//! every call), and a Redis lock's commands planned once (`NativeCalls::lock_commands`, each reply read
//! by [`lock_answer`]). Everything that decides is the core's (`ratewindow_core::lock`, the Redis
//! lock machine), through `ratewindow_js_glue::lock`.

use napi::bindgen_prelude::{JsValue, Result, Unknown};
use napi::sys;
use napi_derive::napi;
use ratewindow_core::redis::Reply;
use ratewindow_js_glue::lock::{JsLocks, JsWait};

use crate::call::{Joined, NativeCalls};
use crate::key::Key;
use crate::{glue, guard, thrown};

/// Checks a lock's TTL (seconds) and owner token (code `invalid_argument:ttl` / `owner`).
#[napi]
pub fn check_lock(ttl: f64, owner: String) -> Result<(), String> {
    glue(|| ratewindow_js_glue::lock::check(ttl, &owner))
}

/// The memory store's locks, timed by the host's `now` (ms).
#[napi]
#[derive(Default)]
pub struct NativeLocks {
    locks: JsLocks,
}

#[napi]
impl NativeLocks {
    /// No locks.
    #[napi(constructor)]
    pub fn new() -> Self {
        NativeLocks::default()
    }

    /// `op` (`acquire`, `release`, `forceRelease`) at `now`: whether it took or freed the lock.
    #[napi]
    pub fn run(
        &self,
        op: String,
        key: String,
        owner: Option<String>,
        ttl: f64,
        now: f64,
    ) -> Result<bool, String> {
        glue(|| Ok(self.locks.run(&op, key, owner, ttl, now)?.0 == 1.0))
    }

    /// Who holds `key` at `now`.
    #[napi]
    pub fn owner(&self, key: String, now: f64) -> Result<Option<String>, String> {
        glue(|| Ok(self.locks.run("owner", key, None, 0.0, now)?.1))
    }

    /// Locks in the table.
    #[napi]
    pub fn size(&self) -> f64 {
        self.locks.size()
    }
}

/// `block(seconds, retryMs)`'s schedule.
#[napi]
pub struct NativeLockWait {
    wait: JsWait,
}

#[napi]
impl NativeLockWait {
    /// A wait of `seconds` from `now` (ms), trying every `retry_ms` (codes `invalid_argument:seconds`,
    /// `invalid_argument:retryMs`).
    #[napi(constructor)]
    pub fn new(seconds: f64, retry_ms: f64, now: f64) -> Result<Self, String> {
        glue(|| JsWait::new(seconds, retry_ms, now).map(|wait| NativeLockWait { wait }))
    }

    /// After a refused try at `now`: ms to sleep, or -1: give up.
    #[napi]
    pub fn after_refusal(&self, now: f64) -> Result<f64, String> {
        glue(|| self.wait.after_refusal(now))
    }
}

#[napi]
impl NativeCalls {
    /// Starts the lock operation `op` (`acquire`, `release`, `forceRelease`, `owner`) on `key`;
    /// `owner` for acquire and release, `ttl` (seconds) for acquire; `now`: SQLite's clock (ms).
    /// Answers the first step, like every start. `op` and `key` are read as [`Key`]s (one napi call
    /// into a stack buffer each, no allocation), as a consume's key is.
    #[napi(ts_return_type = "string | null")]
    pub fn lock(
        &mut self,
        op: Key,
        key: Key,
        owner: Option<String>,
        ttl: f64,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|calls, out| {
            let key = key.get()?.to_owned();
            calls.lock(out, op.get()?, key, owner, ttl, now)
        })
    }

    /// A held lock `Owner` outcome: the holder's token, or null.
    #[napi]
    pub fn lock_owner(&self, id: u32) -> Result<Option<String>, String> {
        guard(|| {
            self.calls
                .lock_owner(id)
                .map(|o| o.map(str::to_owned))
                .map_err(thrown)
        })
    }

    /// A Redis lock's commands, planned once for a `Lock` (its owner and TTL checked: codes
    /// `invalid_argument:owner` / `ttl`): the acquire's `SET` arguments, then the release script's
    /// keys and arguments, as one string cut by the lengths in the record (see
    /// `ratewindow_js_glue::lock`); null when the store runs every lock operation as a call.
    #[napi(ts_return_type = "string | null")]
    pub fn lock_commands(&mut self, key: Key, owner: Key, ttl: f64) -> Result<Joined, String> {
        self.go(|calls, out| calls.lock_commands(out, key.get()?, owner.get()?, ttl))
    }
}

/// The longest string reply read as an answer (`OK`, `1`, `0` and the like): a longer one is no
/// answer, and goes to the call machine with the rest.
const ANSWER_BYTES: usize = 16;

/// The answer in a client's reply to a lock's planned command (`acquire`: its `SET … NX`; else the
/// release script), decided by the core (`Redis::lock_answer`): 1 taken or freed, 0 not, -1 no
/// answer (a reply of another shape: drive the operation as a call, fed this reply). Reads null,
/// undefined, a number or a short string without allocating; anything else answers -1.
#[napi]
pub fn lock_answer(acquire: bool, reply: Unknown<'_>) -> f64 {
    let value = reply.value();
    // SAFETY: the value and its env come from this very call's arguments.
    let reply = unsafe { simple_reply(value.env, value.value) };
    reply.map_or(-1.0, |r| ratewindow_js_glue::lock::lock_answer(acquire, &r))
}

/// A reply that is null, undefined, a number or a short string, as the core reads it; else none.
///
/// # Safety
/// `env` and `value` must be napi's for the current call.
unsafe fn simple_reply(env: sys::napi_env, value: sys::napi_value) -> Option<Reply> {
    use sys::ValueType as T;
    let mut t = 0;
    if unsafe { sys::napi_typeof(env, value, &mut t) } != sys::Status::napi_ok {
        return None;
    }
    match t {
        T::napi_null | T::napi_undefined => Some(Reply::Nil),
        T::napi_number => {
            let mut n = 0.0;
            if unsafe { sys::napi_get_value_double(env, value, &mut n) } != sys::Status::napi_ok {
                return None;
            }
            // Only an integer is an answer (1 or 0); any other number is for the call machine.
            (n.fract() == 0.0 && n.abs() < 1e15).then_some(Reply::Int(n as i64))
        }
        T::napi_string => {
            let mut buf = [0u8; ANSWER_BYTES + 1];
            let mut len = 0usize;
            // SAFETY: V8 writes at most `buf.len()` bytes, a NUL included.
            let status = unsafe {
                sys::napi_get_value_string_utf8(
                    env,
                    value,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut len,
                )
            };
            if status != sys::Status::napi_ok || len >= ANSWER_BYTES {
                return None;
            }
            std::str::from_utf8(&buf[..len])
                .ok()
                .map(|s| Reply::Text(s.to_owned()))
        }
        _ => None,
    }
}
