//! The lock's napi shell (`ts/lock.ts`): the memory store's locks ([`NativeLocks`]), `block`'s
//! schedule ([`NativeLockWait`]) and the networked stores' lock calls (`NativeCalls::lock`, driven like
//! every call), and a Redis lock's commands planned once (`NativeCalls::lock_commands`, each reply
//! looked up among [`lock_answers`]). Everything that decides is the core's (`ratewindow_core::lock`, the Redis
//! lock machine), through `ratewindow_js_glue::lock`.

use napi::bindgen_prelude::Result;
use napi_derive::napi;
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

/// A reply that answers a lock's planned command, and its answer (see [`lock_answers`]): `text` a
/// string reply, else `int` an integer reply, else (both absent) nil — `null` or `undefined`.
#[napi(object)]
pub struct LockAnswer {
    /// A string reply (`'OK'`, `'1'`).
    pub text: Option<String>,
    /// An integer reply.
    pub int: Option<f64>,
    /// The answer: taken or freed.
    pub answer: bool,
}

/// Every reply that answers a lock's planned command (`acquire`: its `SET … NX`; else the release
/// script), with its answer, from the core (`Redis::lock_answers`): the store looks each reply up in
/// these (no crossing a reply); a reply not among them is no answer, and the operation is driven as
/// a call fed that reply.
#[napi]
pub fn lock_answers(acquire: bool) -> Vec<LockAnswer> {
    use ratewindow_core::call::AnswerReply;
    ratewindow_js_glue::lock::lock_answers(acquire)
        .iter()
        .map(|&(reply, answer)| {
            let (text, int) = match reply {
                AnswerReply::Nil => (None, None),
                AnswerReply::Int(n) => (None, Some(n as f64)),
                AnswerReply::Text(t) => (Some(t.to_owned()), None),
            };
            LockAnswer { text, int, answer }
        })
        .collect()
}
