//! The napi shell of the call boundary (`ratewindow_js_glue::calls`, which the wasm-bindgen package
//! shares): one [`NativeCalls`] per store (Redis, PostgreSQL or SQLite) wraps the glue's `Calls` and
//! the store's call record (a `Float64Array` the TypeScript side reads by the slot names of
//! `ratewindow_js_glue::calls::NAMES`). Each start, feed or failure answers the next Redis command as
//! one string (keys then arguments, cut by the lengths in the record) and leaves the step's kind, or
//! the whole outcome, in the record: one Redis consume is two crossings. This file only reads JS
//! values (a reply as the client gave it, rows, a release token) and makes the few objects that are
//! rare (an error, a release token, failed give-backs, SQL statements).

use std::hash::{BuildHasher, Hasher};
use std::ptr;

use napi::bindgen_prelude::{
    Either6, Float64Array, FromNapiValue, JsValue, Null, Result, ToNapiValue, TypeName, Unknown,
    ValidateNapiValue,
};
use napi::sys;
use napi_derive::napi;
use ratewindow_core::call::Fed;
use ratewindow_core::redis::Reply;
use ratewindow_core::sql::{SqlValue, Statement};
use ratewindow_js_glue::calls::{self, CallRecord, Calls, Prepared};

use crate::key::{Key, Keys};
use crate::{coded, glue, guard, thrown, Res};

/// What gives an allowed consume's call back (the core's `ReleaseToken`): keep it as it is and hand it
/// to `release`.
#[napi(object)]
pub struct NativeRelease {
    /// Whose token: `redis` or `sql`.
    pub store: String,
    /// The keys the call was recorded under.
    pub keys: Vec<String>,
    /// The call's id.
    pub call_id: String,
}

/// A failed call: the stable kind (`store`, `reply`, `protocol`, `unsupported`) and the details.
#[napi(object, object_from_js = false)]
pub struct NativeCallError {
    /// The kind.
    pub kind: String,
    /// The core's message.
    pub message: String,
    /// `store`: the client's own message (the failure that stands).
    pub client_message: Option<String>,
    /// `reply`: whose reply (the script or statement).
    pub source: Option<String>,
    /// `reply`: what it should have been.
    pub expected: Option<String>,
    /// `reply`: what came, rendered briefly.
    pub got: Option<String>,
}

/// A statement of a SQL command: its text and parameters, in the dialect's placeholder style.
#[napi(object, object_from_js = false)]
pub struct NativeStatement {
    /// The SQL text.
    pub sql: String,
    /// Its parameters, in order (napi's typegen needs the type written out, not an alias).
    #[allow(clippy::type_complexity)]
    pub params: Vec<Either6<Null, bool, f64, String, Vec<f64>, Vec<String>>>,
}

/// A give-back that failed (Redis Cluster): the keys, the call's id, the client's message.
#[napi(object, object_from_js = false)]
pub struct NativeGiveBack {
    /// The Redis keys whose member could not be removed.
    pub keys: Vec<String>,
    /// The call's id.
    pub call_id: String,
    /// The client's message.
    pub message: String,
}

/// What a purge deleted.
#[napi(object, object_from_js = false)]
pub struct NativePurged {
    /// Rows of calls that had left their windows.
    pub calls: f64,
    /// Fixed windows that had ended.
    pub windows: f64,
}

/// The call record's slot names up to the first piece's length (checked by the TypeScript side).
#[napi]
pub fn call_record_layout() -> Vec<String> {
    calls::NAMES.iter().map(|&n| n.to_owned()).collect()
}

/// One store's call machines (the glue's `Calls`) and the record their answers are written into.
#[napi]
pub struct NativeCalls {
    pub(crate) calls: Calls,
    record: Float64Array,
    /// The operation the last `prepare*` planned, until `prepared` takes it.
    prepared: Option<Prepared>,
}

/// A Redis store's operation planned once (`NativeCalls::prepare*`): the host sends its command again
/// for each call and hands this back with the reply (`NativeCalls::answer*`).
#[napi]
pub struct PreparedCall {
    inner: Prepared,
}

/// The key an `answer*` method was given (a JS string, or none), read only now: on the path of a
/// reply that is no answer, so an answered call never converts it.
fn later_key(key: Option<Unknown<'_>>) -> ratewindow_js_glue::Res<Option<String>> {
    let Some(key) = key else {
        return Ok(None);
    };
    let value = key.value();
    // SAFETY: the value and its env come from the arguments of the call this runs in.
    let read = unsafe { <Key as FromNapiValue>::from_napi_value(value.env, value.value) };
    match read {
        Ok(key) => key.get().map(|k| Some(k.to_owned())),
        Err(e) => Err(ratewindow_js_glue::Failure::new(
            "invalid_argument:key",
            e.reason.clone(),
        )),
    }
}

/// A reply that is a string (a script's one-text answer), read in one napi call into a stack buffer
/// when short (as `src/key.rs` reads keys), else in full; a lone surrogate becomes U+FFFD, as the
/// generic `feed` reads a string.
pub struct ReplyText(String);

impl TypeName for ReplyText {
    fn type_name() -> &'static str {
        "string"
    }

    fn value_type() -> napi::ValueType {
        napi::ValueType::String
    }
}

impl ValidateNapiValue for ReplyText {}

impl FromNapiValue for ReplyText {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        const ROOM: usize = 128;
        let mut buffer = [0u8; ROOM];
        let mut written = 0usize;
        // SAFETY: `env` and `value` come from napi-rs for this call; V8 writes at most ROOM - 1
        // bytes and a NUL.
        let status = unsafe {
            sys::napi_get_value_string_utf8(
                env,
                value,
                buffer.as_mut_ptr().cast(),
                ROOM,
                &mut written,
            )
        };
        napi::check_status!(status, "a reply text must be a string")?;
        // A character takes at most 4 bytes: a text that stopped 4 or more bytes before the end of
        // the room was copied whole.
        if written + 4 < ROOM {
            let bytes = &buffer[..written];
            // Valid UTF-8 (every reply of ratewindow's scripts) is checked in one pass; only another
            // text takes the lossy walk.
            Ok(ReplyText(match std::str::from_utf8(bytes) {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(bytes).into_owned(),
            }))
        } else {
            // SAFETY: as above.
            unsafe { String::from_napi_value(env, value) }.map(ReplyText)
        }
    }
}

/// Random bits for the call ids' per-store prefix (std's per-process hasher keys).
fn seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x7261_7465_7769_6e64);
    h.finish()
}

/// A Redis command's pieces joined, or nothing (the step is in the record): made as Latin-1 when
/// ASCII (V8's one-byte strings, no UTF-8 decoding: keys and arguments are nearly always ASCII).
pub struct Joined(Option<String>);

impl TypeName for Joined {
    fn type_name() -> &'static str {
        "string | null"
    }

    fn value_type() -> napi::ValueType {
        napi::ValueType::String
    }
}

impl ToNapiValue for Joined {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let Some(s) = val.0 else {
            return Null::to_napi_value(env, Null);
        };
        let mut text = ptr::null_mut();
        let status = if s.is_ascii() {
            sys::napi_create_string_latin1(env, s.as_ptr().cast(), s.len() as isize, &mut text)
        } else {
            sys::napi_create_string_utf8(env, s.as_ptr().cast(), s.len() as isize, &mut text)
        };
        napi::check_status!(status)?;
        Ok(text)
    }
}

fn check_record(record: &Float64Array) -> Res<()> {
    if record.len() == calls::LEN {
        Ok(())
    } else {
        Err(coded(
            "invalid_argument:record",
            format!(
                "a store's call record holds {} numbers, not {}",
                calls::LEN,
                record.len()
            ),
        ))
    }
}

impl NativeCalls {
    fn made(calls: ratewindow_js_glue::Res<Calls>, record: Float64Array) -> Res<NativeCalls> {
        check_record(&record)?;
        Ok(NativeCalls {
            calls: calls.map_err(thrown)?,
            record,
            prepared: None,
        })
    }

    /// Runs `f` on the calls and the record; its joined command as JS takes it.
    #[inline(always)]
    pub(crate) fn go(
        &mut self,
        f: impl FnOnce(&mut Calls, &mut CallRecord) -> ratewindow_js_glue::Res<Option<String>>,
    ) -> Result<Joined, String> {
        guard(|| {
            // SAFETY: the Float64Array is kept alive by the reference this struct holds, and JS runs
            // nothing while this call runs, so nothing else reads or writes it meanwhile.
            let slice = unsafe { self.record.as_mut() };
            let out = <&mut CallRecord>::try_from(slice).expect("length checked when made");
            f(&mut self.calls, out).map(Joined).map_err(thrown)
        })
    }
}

#[napi]
impl NativeCalls {
    /// A Redis store's calls writing into `record`: keys start with `prefix`; with
    /// `hash_tag_before`, each key is tagged with its part before that separator (an empty one: code
    /// `invalid_argument:hashTag`); `evalsha` (default true): the host can run scripts by SHA1;
    /// `commands` (default false): it can run plain commands (the lock's `SET NX PX`).
    #[napi(factory)]
    pub fn redis(
        record: Float64Array,
        prefix: String,
        hash_tag_before: Option<String>,
        evalsha: Option<bool>,
        commands: Option<bool>,
    ) -> Result<Self, String> {
        guard(|| {
            let calls = Calls::redis(prefix, hash_tag_before, evalsha.unwrap_or(true), seed())
                .map(|calls| calls.with_plain_commands(commands.unwrap_or(false)));
            NativeCalls::made(calls, record)
        })
    }

    /// A PostgreSQL store's calls on the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40
    /// characters); `durable`: every call waits for its commit's WAL flush.
    #[napi(factory)]
    pub fn postgres(
        record: Float64Array,
        prefix: String,
        durable: Option<bool>,
    ) -> Result<Self, String> {
        guard(|| {
            let calls = Calls::postgres(&prefix, durable.unwrap_or(false), seed());
            NativeCalls::made(calls, record)
        })
    }

    /// A SQLite store's calls on the tables named by `prefix` (the host's clock: `now` in each start).
    #[napi(factory)]
    pub fn sqlite(record: Float64Array, prefix: String) -> Result<Self, String> {
        guard(|| NativeCalls::made(Calls::sqlite(&prefix, seed()), record))
    }

    /// The SQL schema (idempotent; several statements, run without parameters).
    #[napi]
    pub fn schema(&self) -> Result<String, String> {
        guard(|| self.calls.schema().map_err(thrown))
    }

    /// SQLite: what to `exec` on every connection, the busy timeout (`Sqlite::CONNECTION_SETUP`
    /// without one).
    #[napi]
    pub fn connection_setup(&self, busy_timeout_ms: Option<u32>) -> String {
        Calls::connection_setup(busy_timeout_ms)
    }

    /// The purge (not a call): PostgreSQL one statement answering one row (calls, windows); SQLite
    /// at `now`, statements each deleting rows (their `changes` count them).
    #[napi]
    pub fn purge(&self, now: Option<f64>) -> Result<Vec<NativeStatement>, String> {
        guard(|| {
            let statements = self.calls.purge(now).map_err(thrown)?;
            Ok(statements.iter().map(statement).collect())
        })
    }

    /// PostgreSQL: the purge's counts from its rows (code `store_reply` for rows of the wrong shape).
    #[napi]
    pub fn purged(&self, rows: Unknown<'_>) -> Result<NativePurged, String> {
        guard(|| {
            let value = rows.value();
            // SAFETY: the value and its env come from this call's arguments.
            let rows = unsafe { rows_of(value.env, value.value)? };
            let (calls, windows) = Calls::purged(&rows).map_err(thrown)?;
            Ok(NativePurged { calls, windows })
        })
    }

    /// Starts `Op::Consume` of the entries (three parallel arrays); with `release` false its verdict
    /// keeps no release token. `now`: SQLite's clock (ms). Answers the first step (see the module).
    #[napi(
        ts_args_type = "keys: Array<string>, uses: Array<number>, windows: Array<number>, release: boolean, now?: number | undefined | null",
        ts_return_type = "string | null"
    )]
    pub fn consume(
        &mut self,
        keys: Keys,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let entries = calls::entries(keys.get()?, &uses, &windows)?;
            c.consume(out, entries, release, now)
        })
    }

    /// [`Self::consume`] of one entry; its verdict keeps the release token only with `release` (the
    /// failure guard asks: a single call's verdict has none).
    #[napi(ts_return_type = "string | null")]
    pub fn consume_one(
        &mut self,
        key: Key,
        uses: f64,
        window_ms: f64,
        now: Option<f64>,
        release: Option<bool>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let key = key.get()?.to_owned();
            c.consume_one(out, key, uses, window_ms, now, release.unwrap_or(false))
        })
    }

    /// Starts a GCRA or counter operation (`op`: 0 consume, 1 peek, 2 reset; `kind` 1 GCRA, 2 the
    /// counter): `now` is SQLite's clock, and on Redis and PostgreSQL times the call instead of the
    /// server's (the vectors).
    #[napi(ts_return_type = "string | null")]
    #[allow(clippy::too_many_arguments)]
    pub fn rate(
        &mut self,
        op: u32,
        key: Key,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let key = key.get()?.to_owned();
            c.rate(out, op, key, kind, uses, window_ms, burst, cost, now)
        })
    }

    /// A weighted sliding-log call (`op` 0 consume, 1 peek), entry `i` costing `costs[i]` uses (a
    /// batch's refusal of a cost names `entries[i].cost`): a separate entry point, so a call costing 1
    /// crosses and allocates as before.
    #[napi(
        ts_args_type = "op: number, keys: Array<string>, uses: Array<number>, windows: Array<number>, costs: Array<number>, batch: boolean, release: boolean, now?: number | undefined | null",
        ts_return_type = "string | null"
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn weighted(
        &mut self,
        op: u32,
        keys: Keys,
        uses: Vec<f64>,
        windows: Vec<f64>,
        costs: Vec<f64>,
        batch: bool,
        release: bool,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            c.weighted(
                out,
                op,
                keys.get()?,
                &uses,
                &windows,
                &costs,
                batch,
                release,
                now,
            )
        })
    }

    /// A batch mixing algorithms (`op` 0 consume, 1 peek): entry `i` is `keys[i]` under `kinds[i]`
    /// (0 the sliding log, 1 GCRA, 2 the counter); SQLite only (`now`, its clock).
    #[napi(
        ts_args_type = "op: number, keys: Array<string>, kinds: Array<number>, uses: Array<number>, windows: Array<number>, bursts: Array<number>, costs: Array<number>, now?: number | undefined | null",
        ts_return_type = "string | null"
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn mixed(
        &mut self,
        op: u32,
        keys: Keys,
        kinds: Vec<u32>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        bursts: Vec<f64>,
        costs: Vec<f64>,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            c.mixed(
                out,
                op,
                keys.get()?,
                &kinds,
                &uses,
                &windows,
                &bursts,
                &costs,
                now,
            )
        })
    }

    /// Starts `Op::AttemptCost`: an attempt costing `cost` hits.
    #[napi(ts_return_type = "string | null")]
    pub fn attempt_cost(
        &mut self,
        key: Key,
        max: f64,
        decay_ms: f64,
        cost: f64,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let key = key.get()?.to_owned();
            c.attempt_cost(out, key, max, decay_ms, cost, now)
        })
    }

    /// Starts `Op::Peek`.
    #[napi(
        ts_args_type = "keys: Array<string>, uses: Array<number>, windows: Array<number>, now?: number | undefined | null",
        ts_return_type = "string | null"
    )]
    pub fn peek(
        &mut self,
        keys: Keys,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let entries = calls::entries(keys.get()?, &uses, &windows)?;
            c.peek(out, entries, now)
        })
    }

    /// Starts `Op::Release` of an allowed consume's token.
    #[napi(ts_return_type = "string | null")]
    pub fn release(&mut self, token: NativeRelease, now: Option<f64>) -> Result<Joined, String> {
        self.go(|c, out| {
            let token = calls::token_of(&token.store, token.keys, token.call_id)?;
            c.release(out, token, now)
        })
    }

    /// Starts `Op::Hit`.
    #[napi(ts_return_type = "string | null")]
    pub fn hit(
        &mut self,
        key: Key,
        decay_ms: f64,
        amount: f64,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| c.hit(out, key.get()?.to_owned(), decay_ms, amount, now))
    }

    /// Starts `Op::Attempt`.
    #[napi(ts_return_type = "string | null")]
    pub fn attempt(
        &mut self,
        key: Key,
        max: f64,
        decay_ms: f64,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| c.attempt(out, key.get()?.to_owned(), max, decay_ms, now))
    }

    /// Starts `Op::Read` answering `query` (`attempts`, `tooManyAttempts`, `remaining`,
    /// `availableIn`, `availableInMs`; `max` for the two that take it).
    #[napi(ts_return_type = "string | null")]
    pub fn read(
        &mut self,
        key: Key,
        query: String,
        max: f64,
        now: Option<f64>,
    ) -> Result<Joined, String> {
        self.go(|c, out| c.read(out, key.get()?.to_owned(), &query, max, now))
    }

    /// Starts `Op::ResetAttempts`.
    #[napi(ts_return_type = "string | null")]
    pub fn reset_attempts(&mut self, key: Key, now: Option<f64>) -> Result<Joined, String> {
        self.go(|c, out| c.reset_attempts(out, key.get()?.to_owned(), now))
    }

    /// Starts `Op::Clear`.
    #[napi(ts_return_type = "string | null")]
    pub fn clear(&mut self, key: Key, now: Option<f64>) -> Result<Joined, String> {
        self.go(|c, out| c.clear(out, key.get()?.to_owned(), now))
    }

    /// Call `id`'s current step again.
    #[napi(ts_return_type = "string | null")]
    pub fn next(&mut self, id: u32) -> Result<Joined, String> {
        self.go(|c, out| c.next(out, id))
    }

    /// Feeds call `id` a reply as the client gave it (numbers, strings, null, arrays, Buffers,
    /// bigints).
    #[napi(ts_return_type = "string | null")]
    pub fn feed(&mut self, id: u32, reply: Unknown<'_>) -> Result<Joined, String> {
        let value = reply.value();
        // SAFETY: the value and its env come from this very call's arguments.
        let reply = guard(|| unsafe { reply_of(value.env, value.value, 0) })?;
        self.go(|c, out| c.feed(out, id, Fed::Reply(reply)))
    }

    /// The fast path of [`Self::feed`]: a reply that is an array of `len` numbers (at most
    /// `LEN - PIECES`), written by JS into the call record from the `pieces` slot (no array and no
    /// argument per number crosses).
    #[napi(ts_return_type = "string | null")]
    pub fn feed_record(&mut self, id: u32, len: u32) -> Result<Joined, String> {
        self.go(|c, out| {
            let numbers = calls::numbers_in(out, len);
            c.feed_numbers(out, id, &numbers.0[..numbers.1])
        })
    }

    /// [`Self::feed`] of a reply that is a string (a script's one-text answer: the sliding consume's
    /// `'count oldest newest now'`, a refusal marker), read without napi's generic value walk.
    #[napi(
        ts_args_type = "id: number, text: string",
        ts_return_type = "string | null"
    )]
    pub fn feed_text(&mut self, id: u32, text: ReplyText) -> Result<Joined, String> {
        self.go(|c, out| c.feed(out, id, Fed::Reply(Reply::Text(text.0))))
    }

    /// The prefix of a prepared consume's call ids (16 hex digits): the host sends `prefix +
    /// n.toString(16)` and names `n` in the answer.
    #[napi]
    pub fn prepared_ids(&self) -> String {
        self.calls.prepared_ids()
    }

    /// The text the Redis key of every prepared consume (`kind` 0) or attempt (3) starts with, the
    /// user's key following it as it is; null when the store's keys are not so (a hash tag rule).
    /// The host then plans a new key's command from a prepared one of the same limit: the same
    /// arguments, the key this prefix and the key, and names the key to the `answer*` methods.
    #[napi]
    pub fn prepared_key_prefix(&self, kind: u32) -> Option<String> {
        self.calls.key_prefix(kind)
    }

    /// Plans `prepared` once: its command's pieces joined (cut by the record as a start's), `value`
    /// the piece holding the call id (-1 none; -2 no command: answer every call as an ordinary one).
    fn prepare(&mut self, prepared: Prepared) -> Result<Joined, String> {
        let joined = self.go(|c, out| c.prepare(out, &prepared))?;
        self.prepared = Some(prepared);
        Ok(joined)
    }

    /// Plans a single consume of `key` costing 1 (no release) once; `prepared()` then gives it.
    #[napi(ts_return_type = "string | null")]
    pub fn prepare_consume(
        &mut self,
        key: Key,
        uses: f64,
        window_ms: f64,
    ) -> Result<Joined, String> {
        let prepared = glue(|| Prepared::consume(key.get()?.to_owned(), uses, window_ms))?;
        self.prepare(prepared)
    }

    /// Plans an attempt costing 1 on `key` once; `prepared()` then gives it.
    #[napi(ts_return_type = "string | null")]
    pub fn prepare_attempt(&mut self, key: Key, max: f64, decay_ms: f64) -> Result<Joined, String> {
        let prepared = glue(|| Prepared::attempt(key.get()?.to_owned(), max, decay_ms))?;
        self.prepare(prepared)
    }

    /// Plans a GCRA or counter operation once (as `rate` takes it, on the server's clock);
    /// `prepared()` then gives it.
    #[napi(ts_return_type = "string | null")]
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_rate(
        &mut self,
        op: u32,
        key: Key,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
    ) -> Result<Joined, String> {
        let prepared = glue(|| {
            Prepared::rate(
                op,
                key.get()?.to_owned(),
                kind,
                uses,
                window_ms,
                burst,
                cost,
            )
        })?;
        self.prepare(prepared)
    }

    /// The operation the last `prepare*` planned.
    #[napi]
    pub fn prepared(&mut self) -> Result<PreparedCall, String> {
        match self.prepared.take() {
            Some(inner) => Ok(PreparedCall { inner }),
            None => Err(coded(
                "invalid_argument:call",
                "nothing prepared".to_owned(),
            )),
        }
    }

    /// The reply to `prepared`'s command sent as call `n`, an array of `len` numbers written into the
    /// record from the `pieces` slot (as `feedRecord`): its call started and fed in one crossing.
    ///
    /// `key` (all four `answer*`): the key the command was sent for when the host planned it from
    /// `prepared`'s (`preparedKeyPrefix`); read only when the reply is no answer.
    #[napi(
        ts_args_type = "prepared: PreparedCall, n: number, len: number, key?: string",
        ts_return_type = "string | null"
    )]
    pub fn answer_record(
        &mut self,
        prepared: &PreparedCall,
        n: f64,
        len: u32,
        key: Option<Unknown<'_>>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let numbers = calls::numbers_in(out, len);
            let reply = Reply::Array(
                numbers.0[..numbers.1]
                    .iter()
                    .map(|&x| calls::reply_number(x))
                    .collect(),
            );
            c.answer(out, &prepared.inner, n, Ok(Fed::Reply(reply)), || {
                later_key(key)
            })
        })
    }

    /// [`Self::answer_record`] of a reply that is a string.
    #[napi(
        ts_args_type = "prepared: PreparedCall, n: number, text: string, key?: string",
        ts_return_type = "string | null"
    )]
    pub fn answer_text(
        &mut self,
        prepared: &PreparedCall,
        n: f64,
        text: ReplyText,
        key: Option<Unknown<'_>>,
    ) -> Result<Joined, String> {
        self.go(|c, out| {
            let reply = Ok(Fed::Reply(Reply::Text(text.0)));
            c.answer(out, &prepared.inner, n, reply, || later_key(key))
        })
    }

    /// [`Self::answer_record`] of any reply, as the client gave it.
    #[napi(
        ts_args_type = "prepared: PreparedCall, n: number, reply: unknown, key?: string",
        ts_return_type = "string | null"
    )]
    pub fn answer(
        &mut self,
        prepared: &PreparedCall,
        n: f64,
        reply: Unknown<'_>,
        key: Option<Unknown<'_>>,
    ) -> Result<Joined, String> {
        let value = reply.value();
        // SAFETY: the value and its env come from this very call's arguments.
        let reply = guard(|| unsafe { reply_of(value.env, value.value, 0) })?;
        self.go(|c, out| {
            c.answer(out, &prepared.inner, n, Ok(Fed::Reply(reply)), || {
                later_key(key)
            })
        })
    }

    /// [`Self::answer_record`] of the client's failure (its message).
    #[napi(
        ts_args_type = "prepared: PreparedCall, n: number, message: string, key?: string",
        ts_return_type = "string | null"
    )]
    pub fn answer_failed(
        &mut self,
        prepared: &PreparedCall,
        n: f64,
        message: String,
        key: Option<Unknown<'_>>,
    ) -> Result<Joined, String> {
        self.go(|c, out| c.answer(out, &prepared.inner, n, Err(message), || later_key(key)))
    }

    /// Feeds call `id` the rows of its SQL command's last statement (an array of rows, each an array
    /// of column values or an object of them in column order).
    #[napi(ts_return_type = "string | null")]
    pub fn feed_rows(&mut self, id: u32, rows: Unknown<'_>) -> Result<Joined, String> {
        let value = rows.value();
        // SAFETY: as in `feed`.
        let rows = guard(|| unsafe { rows_of(value.env, value.value) })?;
        self.go(|c, out| c.feed(out, id, Fed::Rows(rows)))
    }

    /// Feeds call `id` the client's failure (its error message, as the client gives it).
    #[napi(ts_return_type = "string | null")]
    pub fn fail(&mut self, id: u32, message: String) -> Result<Joined, String> {
        self.go(|c, out| c.fail(out, id, message))
    }

    /// `Script` step whose pieces did not fit the record: `KEYS`.
    #[napi]
    pub fn keys(&mut self, id: u32) -> Result<Vec<String>, String> {
        guard(|| self.calls.keys(id).map_err(thrown))
    }

    /// `Script` step whose pieces did not fit the record: `ARGV`.
    #[napi]
    pub fn args(&mut self, id: u32) -> Result<Vec<String>, String> {
        guard(|| self.calls.args(id).map_err(thrown))
    }

    /// `Sql` step: the statements, to run in order on one connection.
    #[napi]
    pub fn statements(&mut self, id: u32) -> Result<Vec<NativeStatement>, String> {
        guard(|| {
            let statements = self.calls.statements(id).map_err(thrown)?;
            Ok(statements.iter().map(statement).collect())
        })
    }

    /// A held consume (`release` 1 in the record): what gives it back (an allowed one, or a failed
    /// one that may have counted).
    #[napi]
    pub fn release_token(&self, id: u32) -> Result<Option<NativeRelease>, String> {
        guard(|| {
            let token = self.calls.release_token(id).map_err(thrown)?;
            Ok(token.map(|t| {
                let (store, keys, call_id) = calls::token_parts(t);
                NativeRelease {
                    store: store.to_owned(),
                    keys: keys.to_vec(),
                    call_id: call_id.to_owned(),
                }
            }))
        })
    }

    /// `Error`: why the call failed.
    #[napi]
    pub fn error(&self, id: u32) -> Result<NativeCallError, String> {
        guard(|| {
            let e = calls::error_parts(self.calls.error(id).map_err(thrown)?);
            Ok(NativeCallError {
                kind: e.kind.to_owned(),
                message: e.message,
                client_message: e.client_message,
                source: e.source.map(str::to_owned),
                expected: e.expected.map(str::to_owned),
                got: e.got,
            })
        })
    }

    /// A held outcome: the give-backs that failed on the way (Redis Cluster only).
    #[napi]
    pub fn give_back_failures(&self, id: u32) -> Result<Vec<NativeGiveBack>, String> {
        guard(|| {
            let failures = self.calls.give_back_failures(id).map_err(thrown)?;
            Ok(failures
                .iter()
                .map(|f| NativeGiveBack {
                    keys: f.keys.clone(),
                    call_id: f.call_id.clone(),
                    message: f.message.clone(),
                })
                .collect())
        })
    }

    /// Frees call `id` (its outcome read, or the call abandoned).
    #[napi]
    pub fn end(&mut self, id: u32) {
        self.calls.end(id);
    }

    /// Calls in progress or held (for leak tests).
    #[napi]
    pub fn in_progress(&self) -> u32 {
        self.calls.in_progress()
    }
}

fn statement(s: &Statement) -> NativeStatement {
    NativeStatement {
        sql: s.sql.clone(),
        params: s.params.iter().map(param).collect(),
    }
}

#[allow(clippy::type_complexity)]
fn param(value: &SqlValue) -> Either6<Null, bool, f64, String, Vec<f64>, Vec<String>> {
    match value {
        SqlValue::Null => Either6::A(Null),
        SqlValue::Bool(b) => Either6::B(*b),
        SqlValue::Int(i) => Either6::C(*i as f64),
        SqlValue::Text(s) => Either6::D(s.clone()),
        SqlValue::Ints(v) => Either6::E(v.iter().map(|&i| i as f64).collect()),
        SqlValue::Texts(v) => Either6::F(v.clone()),
    }
}

// ---- Reading what the client gave: JS values into the core's Reply and SqlValue -------------------

/// `napi_bigint` (typeof answers it on every Node with BigInt; napi-sys names it only under `napi6`).
const NAPI_BIGINT: sys::napi_valuetype = 9;

fn ok(status: sys::napi_status) -> Res<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(coded(
            "panic",
            format!("ratewindow: reading a reply failed (napi status {status})"),
        ))
    }
}

unsafe fn type_of(env: sys::napi_env, value: sys::napi_value) -> Res<sys::napi_valuetype> {
    let mut t = 0;
    ok(sys::napi_typeof(env, value, &mut t))?;
    Ok(t)
}

/// The elements of `value` when it is an array.
unsafe fn elements(
    env: sys::napi_env,
    value: sys::napi_value,
) -> Res<Option<Vec<sys::napi_value>>> {
    let mut is = false;
    ok(sys::napi_is_array(env, value, &mut is))?;
    if !is {
        return Ok(None);
    }
    let mut len = 0u32;
    ok(sys::napi_get_array_length(env, value, &mut len))?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let mut item = ptr::null_mut();
        ok(sys::napi_get_element(env, value, i, &mut item))?;
        out.push(item);
    }
    Ok(Some(out))
}

/// A value that is no number, string, null or array, as text: a Buffer's bytes (lossy UTF-8), an
/// Error's message as `(error) …`, anything else as `String(value)` does.
unsafe fn text_of(env: sys::napi_env, value: sys::napi_value) -> Res<String> {
    let mut is = false;
    ok(sys::napi_is_buffer(env, value, &mut is))?;
    if is {
        let mut data = ptr::null_mut();
        let mut len = 0usize;
        ok(sys::napi_get_buffer_info(env, value, &mut data, &mut len))?;
        let bytes = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(data as *const u8, len)
        };
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    }
    ok(sys::napi_is_error(env, value, &mut is))?;
    let mut target = value;
    if is {
        ok(sys::napi_get_named_property(
            env,
            value,
            c"message".as_ptr(),
            &mut target,
        ))?;
    }
    let mut text = ptr::null_mut();
    ok(sys::napi_coerce_to_string(env, target, &mut text))?;
    let text = String::from_napi_value(env, text).map_err(|e| coded("panic", e.to_string()))?;
    Ok(if is { format!("(error) {text}") } else { text })
}

use ratewindow_js_glue::calls::number_or_text as number;

unsafe fn string(env: sys::napi_env, value: sys::napi_value) -> Res<String> {
    String::from_napi_value(env, value).map_err(|e| coded("panic", e.to_string()))
}

unsafe fn double(env: sys::napi_env, value: sys::napi_value) -> Res<f64> {
    let mut n = 0.0;
    ok(sys::napi_get_value_double(env, value, &mut n))?;
    Ok(n)
}

/// A bigint as an integer when it fits, else its digits.
unsafe fn bigint(
    env: sys::napi_env,
    value: sys::napi_value,
) -> Res<std::result::Result<i64, String>> {
    let text = text_of(env, value)?;
    Ok(text.parse::<i64>().map_err(|_| text))
}

unsafe fn reply_of(env: sys::napi_env, value: sys::napi_value, depth: u32) -> Res<Reply> {
    use sys::ValueType as T;
    Ok(match type_of(env, value)? {
        T::napi_undefined | T::napi_null => Reply::Nil,
        T::napi_number => number(double(env, value)?).map_or_else(Reply::Text, Reply::Int),
        T::napi_string => Reply::Text(string(env, value)?),
        NAPI_BIGINT => bigint(env, value)?.map_or_else(Reply::Text, Reply::Int),
        T::napi_object => match elements(env, value)? {
            Some(_) if depth >= 8 => Reply::Text("[…]".to_owned()),
            Some(items) => Reply::Array(
                items
                    .into_iter()
                    .map(|item| reply_of(env, item, depth + 1))
                    .collect::<Res<_>>()?,
            ),
            None => Reply::Text(text_of(env, value)?),
        },
        _ => Reply::Text(text_of(env, value)?),
    })
}

unsafe fn sql_value(env: sys::napi_env, value: sys::napi_value) -> Res<SqlValue> {
    use sys::ValueType as T;
    Ok(match type_of(env, value)? {
        T::napi_undefined | T::napi_null => SqlValue::Null,
        T::napi_boolean => {
            let mut b = false;
            ok(sys::napi_get_value_bool(env, value, &mut b))?;
            SqlValue::Bool(b)
        }
        T::napi_number => number(double(env, value)?).map_or_else(SqlValue::Text, SqlValue::Int),
        T::napi_string => SqlValue::Text(string(env, value)?),
        NAPI_BIGINT => bigint(env, value)?.map_or_else(SqlValue::Text, SqlValue::Int),
        T::napi_object => match elements(env, value)? {
            Some(items) => calls::sql_list(
                items
                    .into_iter()
                    .map(|item| sql_value(env, item))
                    .collect::<Res<Vec<_>>>()?,
            ),
            None => SqlValue::Text(text_of(env, value)?),
        },
        _ => SqlValue::Text(text_of(env, value)?),
    })
}

/// Rows: an array of rows, each an array of values or an object of them (in column order). Anything
/// else becomes one row holding its text, which no statement answers (the machine names it).
unsafe fn rows_of(env: sys::napi_env, value: sys::napi_value) -> Res<Vec<Vec<SqlValue>>> {
    let Some(rows) = elements(env, value)? else {
        return Ok(vec![vec![SqlValue::Text(text_of(env, value)?)]]);
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let columns = match elements(env, row)? {
            Some(columns) => columns,
            None if type_of(env, row)? == sys::ValueType::napi_object => {
                let mut names = ptr::null_mut();
                ok(sys::napi_get_property_names(env, row, &mut names))?;
                let mut columns = Vec::new();
                for name in elements(env, names)?.unwrap_or_default() {
                    let mut column = ptr::null_mut();
                    ok(sys::napi_get_property(env, row, name, &mut column))?;
                    columns.push(column);
                }
                columns
            }
            None => {
                out.push(vec![SqlValue::Text(text_of(env, row)?)]);
                continue;
            }
        };
        out.push(
            columns
                .into_iter()
                .map(|c| sql_value(env, c))
                .collect::<Res<_>>()?,
        );
    }
    Ok(out)
}
