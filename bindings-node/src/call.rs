//! The call boundary: one [`NativeCalls`] per store (Redis, PostgreSQL or SQLite) starts the core's
//! call machine (`ratewindow_core::call`) for each operation and keeps it by id; the TypeScript driver
//! (`ts/drive.ts`) asks for the call's step, runs the command with the user's client, feeds back the
//! reply, the rows or the client's error message, and reads the outcome. Everything that decides lives
//! in the core; this file only converts values.
//!
//! Each crossing is typed and small, because napi objects are dear here (a 9-field object costs
//! about as much as the whole Redis plan): `next`/`feed…`/`fail` answer the step's kind (a
//! [`StepKind`] number), then typed getters of that call id give what the kind has (a command's
//! `keys` and `args` or `statements`; a verdict's fields one by one; an error or a release token as an
//! object, as they are rare or batch-only), and `end` frees the call. A reply crosses as the JS values
//! the client gave (walked here), or — the fast path — an array of up to nine numbers as arguments.

use std::ptr;

use napi::bindgen_prelude::{Either6, FromNapiValue, JsValue, Null, Result, Unknown};
use napi::sys;
use napi_derive::napi;
use ratewindow_core::call::{
    Call, CallError, Command, Fed, GiveBackFailure, Next, Op, Outcome, Redis, ReleaseToken,
    WindowQuery,
};
use ratewindow_core::redis::{RedisOptions, RedisRelease, Reply};
use ratewindow_core::sql::{Postgres, SqlNames, SqlRelease, SqlValue, Sqlite, Statement};
use ratewindow_core::{BatchVerdict, Entry, Window};

use crate::{coded, guard, limit, limit_error, Res};

/// What a step is: a command to run, or how the call ended.
#[napi]
pub enum StepKind {
    /// Run a Redis script (`script`, `bySha1`, `keys`, `args`), then feed the reply.
    Script,
    /// Run SQL `statements` in order on one connection, then feed the rows of the last.
    Sql,
    /// A consume's or peek's verdict (`allowed`, `retryAfterMs`, … `release`).
    Verdict,
    /// A hit: `count`, `resetAfterMs`.
    Hit,
    /// An attempt: `allowed`, `count`, `resetAfterMs`.
    Attempt,
    /// A number: `int`.
    Int,
    /// A yes or no: `bool`.
    Bool,
    /// Done, nothing to say.
    Unit,
    /// The call failed: `error`.
    Error,
}

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

enum Planner {
    Redis(Redis),
    Postgres(Postgres),
    Sqlite(Sqlite),
}

enum Slot {
    Free,
    Running(Call, bool),
    Done(
        std::result::Result<Outcome, CallError>,
        Vec<GiveBackFailure>,
        bool,
    ),
}

/// One store's call machines and its calls in progress, by id (a slot each: a JS object per call
/// would cost a finalizer).
#[napi]
pub struct NativeCalls {
    planner: Planner,
    slots: Vec<Slot>,
    free: Vec<u32>,
}

fn names(prefix: &str) -> Res<SqlNames> {
    SqlNames::new(prefix).map_err(|message| coded("invalid_argument:prefix", message))
}

fn unsupported(what: &str) -> napi::Error<String> {
    coded(
        "invalid_argument:store",
        format!("{what} is not an operation of this store"),
    )
}

fn no_call(id: u32) -> napi::Error<String> {
    coded(
        "invalid_argument:call",
        format!("no call {id} at this step"),
    )
}

impl NativeCalls {
    fn new(planner: Planner) -> NativeCalls {
        NativeCalls {
            planner,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn start(&mut self, op: Op, now: Option<f64>, keep_release: bool) -> Res<u32> {
        let call = match &self.planner {
            Planner::Redis(r) => r.start(op),
            Planner::Postgres(p) => p.start(op),
            Planner::Sqlite(s) => s.start(op, now.unwrap_or(0.0) as u64),
        };
        let slot = Slot::Running(call, keep_release);
        Ok(match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        })
    }

    /// Feeds (with `f`) the running call `id`, then answers its step's kind (an ended call keeps its
    /// outcome until `end`).
    fn step(&mut self, id: u32, f: impl FnOnce(&mut Call) -> Res<()>) -> Res<StepKind> {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return Err(no_call(id));
        };
        let Slot::Running(call, keep) = slot else {
            return Err(no_call(id));
        };
        f(call)?;
        let result = match call.next() {
            Next::Run(Command::Script { .. }) => return Ok(StepKind::Script),
            Next::Run(Command::Sql { .. }) => return Ok(StepKind::Sql),
            Next::Done(result) => result,
        };
        let kind = match &result {
            Ok(Outcome::Verdict { .. }) => StepKind::Verdict,
            Ok(Outcome::Hit { .. }) => StepKind::Hit,
            Ok(Outcome::Attempt { .. }) => StepKind::Attempt,
            Ok(Outcome::Int(_)) => StepKind::Int,
            Ok(Outcome::Bool(_)) => StepKind::Bool,
            Ok(Outcome::Unit) => StepKind::Unit,
            Err(_) => StepKind::Error,
        };
        let failures = call.take_give_back_failures();
        *slot = Slot::Done(result, failures, *keep);
        Ok(kind)
    }

    fn command(&mut self, id: u32) -> Res<Command<'_>> {
        match self.slots.get_mut(id as usize) {
            Some(Slot::Running(call, _)) => match call.next() {
                Next::Run(command) => Ok(command),
                Next::Done(_) => Err(no_call(id)),
            },
            _ => Err(no_call(id)),
        }
    }

    fn outcome(&self, id: u32) -> Res<&std::result::Result<Outcome, CallError>> {
        match self.slots.get(id as usize) {
            Some(Slot::Done(result, _, _)) => Ok(result),
            _ => Err(no_call(id)),
        }
    }

    fn verdict(&self, id: u32) -> Res<&BatchVerdict> {
        match self.outcome(id)? {
            Ok(Outcome::Verdict { verdict, .. }) => Ok(verdict),
            _ => Err(no_call(id)),
        }
    }
}

#[napi]
impl NativeCalls {
    /// A Redis store's calls: keys start with `prefix`; with `hash_tag_before`, each key is tagged
    /// with its part before that separator (an empty one: code `invalid_argument:hashTag`); `evalsha`
    /// (default true): the host can run scripts by SHA1.
    #[napi(factory)]
    pub fn redis(
        prefix: String,
        hash_tag_before: Option<String>,
        evalsha: Option<bool>,
    ) -> Result<Self, String> {
        guard(|| {
            let mut options = RedisOptions::default().with_prefix(prefix);
            if let Some(separator) = hash_tag_before {
                options = options
                    .with_hash_tag_before(separator)
                    .map_err(|m| coded("invalid_argument:hashTag", m))?;
            }
            let redis = Redis::new(options).evalsha(evalsha.unwrap_or(true));
            Ok(NativeCalls::new(Planner::Redis(redis)))
        })
    }

    /// A PostgreSQL store's calls on the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40
    /// characters); `durable`: every call waits for its commit's WAL flush.
    #[napi(factory)]
    pub fn postgres(prefix: String, durable: Option<bool>) -> Result<Self, String> {
        guard(|| {
            let pg = Postgres::new(names(&prefix)?).durable(durable.unwrap_or(false));
            Ok(NativeCalls::new(Planner::Postgres(pg)))
        })
    }

    /// A SQLite store's calls on the tables named by `prefix` (the host's clock: `now` in each start).
    #[napi(factory)]
    pub fn sqlite(prefix: String) -> Result<Self, String> {
        guard(|| {
            let sqlite = Sqlite::new(names(&prefix)?);
            Ok(NativeCalls::new(Planner::Sqlite(sqlite)))
        })
    }

    /// The SQL schema (idempotent; several statements, run without parameters).
    #[napi]
    pub fn schema(&self) -> Result<String, String> {
        guard(|| match &self.planner {
            Planner::Postgres(p) => Ok(p.schema()),
            Planner::Sqlite(s) => Ok(s.schema()),
            Planner::Redis(_) => Err(unsupported("schema")),
        })
    }

    /// SQLite: what to `exec` on every connection, the busy timeout (`Sqlite::CONNECTION_SETUP`
    /// without one).
    #[napi]
    pub fn connection_setup(&self, busy_timeout_ms: Option<u32>) -> String {
        busy_timeout_ms.map_or_else(
            || Sqlite::CONNECTION_SETUP.to_owned(),
            Sqlite::connection_setup,
        )
    }

    /// The purge (not a call): PostgreSQL one statement answering one row (calls, windows); SQLite
    /// at `now`, statements each deleting rows (their `changes` count them).
    #[napi]
    pub fn purge(&self, now: Option<f64>) -> Result<Vec<NativeStatement>, String> {
        guard(|| match &self.planner {
            Planner::Postgres(p) => Ok(vec![statement(&p.plan_purge())]),
            Planner::Sqlite(s) => Ok(s
                .plan_purge(now.unwrap_or(0.0) as u64)
                .iter()
                .map(statement)
                .collect()),
            Planner::Redis(_) => Err(unsupported("purge")),
        })
    }

    /// PostgreSQL: the purge's counts from its rows (code `store_reply` for rows of the wrong shape).
    #[napi]
    pub fn purged(&self, rows: Unknown<'_>) -> Result<NativePurged, String> {
        guard(|| {
            let value = rows.value();
            // SAFETY: the value and its env come from this call's arguments.
            let rows = unsafe { rows_of(value.env, value.value)? };
            let (calls, windows) =
                Postgres::decode_purge(&rows).map_err(|e| coded("store_reply", e.to_string()))?;
            Ok(NativePurged {
                calls: calls as f64,
                windows: windows as f64,
            })
        })
    }

    /// Starts `Op::Consume` of the entries (three parallel arrays) under `call_id`; with `release`
    /// false its verdict keeps no release token. `now`: SQLite's clock (ms). Answers the call's id.
    #[napi]
    pub fn consume(
        &mut self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
        now: Option<f64>,
    ) -> Result<u32, String> {
        guard(|| {
            let entries = entries(keys, uses, windows)?;
            self.start(Op::Consume { entries, call_id }, now, release)
        })
    }

    /// [`Self::consume`] of one entry, without a release token (a single call's verdict has none).
    #[napi]
    pub fn consume_one(
        &mut self,
        call_id: String,
        key: String,
        uses: f64,
        window_ms: f64,
        now: Option<f64>,
    ) -> Result<u32, String> {
        guard(|| {
            let entries = vec![Entry::new(key, limit(uses, window_ms)?)];
            self.start(Op::Consume { entries, call_id }, now, false)
        })
    }

    /// Starts `Op::Peek`.
    #[napi]
    pub fn peek(
        &mut self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: Option<f64>,
    ) -> Result<u32, String> {
        guard(|| {
            let entries = entries(keys, uses, windows)?;
            self.start(Op::Peek { entries }, now, false)
        })
    }

    /// Starts `Op::Release` of an allowed consume's token.
    #[napi]
    pub fn release(&mut self, token: NativeRelease, now: Option<f64>) -> Result<u32, String> {
        guard(|| {
            let op = Op::Release {
                token: token_of(token)?,
            };
            self.start(op, now, false)
        })
    }

    /// Starts `Op::Hit`.
    #[napi]
    pub fn hit(
        &mut self,
        key: String,
        decay_ms: f64,
        amount: f64,
        now: Option<f64>,
    ) -> Result<u32, String> {
        guard(|| {
            let op = Op::Hit {
                key,
                decay: decay(decay_ms)?,
                amount: amount as i64,
            };
            self.start(op, now, false)
        })
    }

    /// Starts `Op::Attempt`.
    #[napi]
    pub fn attempt(
        &mut self,
        key: String,
        max: f64,
        decay_ms: f64,
        now: Option<f64>,
    ) -> Result<u32, String> {
        guard(|| {
            let op = Op::Attempt {
                key,
                max: max as i64,
                decay: decay(decay_ms)?,
            };
            self.start(op, now, false)
        })
    }

    /// Starts `Op::Read` answering `query` (`attempts`, `tooManyAttempts`, `remaining`,
    /// `availableIn`, `availableInMs`; `max` for the two that take it).
    #[napi]
    pub fn read(
        &mut self,
        key: String,
        query: String,
        max: f64,
        now: Option<f64>,
    ) -> Result<u32, String> {
        guard(|| {
            let query = window_query(&query, max)?;
            self.start(Op::Read { key, query }, now, false)
        })
    }

    /// Starts `Op::ResetAttempts`.
    #[napi]
    pub fn reset_attempts(&mut self, key: String, now: Option<f64>) -> Result<u32, String> {
        guard(|| self.start(Op::ResetAttempts { key }, now, false))
    }

    /// Starts `Op::Clear`.
    #[napi]
    pub fn clear(&mut self, key: String, now: Option<f64>) -> Result<u32, String> {
        guard(|| self.start(Op::Clear { key }, now, false))
    }

    /// The kind of call `id`'s first step.
    #[napi]
    pub fn next(&mut self, id: u32) -> Result<StepKind, String> {
        guard(|| self.step(id, |_| Ok(())))
    }

    /// Feeds call `id` a reply as the client gave it (numbers, strings, null, arrays, Buffers,
    /// bigints); the kind of its next step.
    #[napi]
    pub fn feed(&mut self, id: u32, reply: Unknown<'_>) -> Result<StepKind, String> {
        guard(|| {
            self.step(id, |call| {
                let value = reply.value();
                // SAFETY: the value and its env come from this very call's arguments.
                call.feed(Fed::Reply(unsafe { reply_of(value.env, value.value, 0)? }));
                Ok(())
            })
        })
    }

    /// The fast path of [`Self::feed`]: a reply that is an array of `len` (at most 9) numbers, given
    /// one by one (the shape every ratewindow script answers; no array crosses).
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn feed_numbers(
        &mut self,
        id: u32,
        len: u32,
        n0: f64,
        n1: f64,
        n2: f64,
        n3: f64,
        n4: f64,
        n5: f64,
        n6: f64,
        n7: f64,
        n8: f64,
    ) -> Result<StepKind, String> {
        guard(|| {
            let all = [n0, n1, n2, n3, n4, n5, n6, n7, n8];
            let numbers = all.get(..len as usize).unwrap_or(&all);
            let reply = numbers
                .iter()
                .map(|&n| number(n).map_or_else(Reply::Text, Reply::Int))
                .collect();
            self.step(id, |call| {
                call.feed(Fed::Reply(Reply::Array(reply)));
                Ok(())
            })
        })
    }

    /// Feeds call `id` the rows of its SQL command's last statement (an array of rows, each an array
    /// of column values or an object of them in column order); the kind of its next step.
    #[napi]
    pub fn feed_rows(&mut self, id: u32, rows: Unknown<'_>) -> Result<StepKind, String> {
        guard(|| {
            self.step(id, |call| {
                let value = rows.value();
                // SAFETY: as in `feed`.
                call.feed(Fed::Rows(unsafe { rows_of(value.env, value.value)? }));
                Ok(())
            })
        })
    }

    /// Feeds call `id` the client's failure (its error message, as the client gives it); the kind of
    /// its next step.
    #[napi]
    pub fn fail(&mut self, id: u32, message: String) -> Result<StepKind, String> {
        guard(|| {
            self.step(id, |call| {
                call.fail(message);
                Ok(())
            })
        })
    }

    /// `Script` step: the script's name (`sliding`, `fixed`).
    #[napi]
    pub fn script(&mut self, id: u32) -> Result<String, String> {
        guard(|| match self.command(id)? {
            Command::Script { script, .. } => Ok(script.name.to_owned()),
            Command::Sql { .. } => Err(no_call(id)),
        })
    }

    /// `Script` step: `EVALSHA` with its SHA1 (true) or `EVAL` with its source (false).
    #[napi]
    pub fn by_sha1(&mut self, id: u32) -> Result<bool, String> {
        guard(|| match self.command(id)? {
            Command::Script { by_sha1, .. } => Ok(by_sha1),
            Command::Sql { .. } => Err(no_call(id)),
        })
    }

    /// `Script` step: `KEYS`.
    #[napi(ts_return_type = "Array<string>")]
    pub fn keys(&mut self, id: u32) -> Result<Strings, String> {
        guard(|| match self.command(id)? {
            Command::Script { keys, .. } => Ok(Strings(keys.to_vec())),
            Command::Sql { .. } => Err(no_call(id)),
        })
    }

    /// `Script` step: `ARGV`.
    #[napi(ts_return_type = "Array<string>")]
    pub fn args(&mut self, id: u32) -> Result<Strings, String> {
        guard(|| match self.command(id)? {
            Command::Script { args, .. } => Ok(Strings(args.to_vec())),
            Command::Sql { .. } => Err(no_call(id)),
        })
    }

    /// `Sql` step: the statements, to run in order on one connection.
    #[napi]
    pub fn statements(&mut self, id: u32) -> Result<Vec<NativeStatement>, String> {
        guard(|| match self.command(id)? {
            Command::Sql { statements } => Ok(statements.iter().map(statement).collect()),
            Command::Script { .. } => Err(no_call(id)),
        })
    }

    /// `Verdict`: whether allowed; `Attempt`: whether counted.
    #[napi]
    pub fn allowed(&self, id: u32) -> Result<bool, String> {
        guard(|| match self.outcome(id)? {
            Ok(Outcome::Verdict { verdict, .. }) => Ok(verdict.allowed),
            Ok(Outcome::Attempt { allowed, .. }) => Ok(*allowed),
            _ => Err(no_call(id)),
        })
    }

    /// `Verdict`: ms until the next call is allowed (0 when allowed).
    #[napi]
    pub fn retry_after_ms(&self, id: u32) -> Result<f64, String> {
        guard(|| Ok(self.verdict(id)?.retry_after_ms as f64))
    }

    /// `Verdict`, refused: when the next call is allowed (the store's clock, ms).
    #[napi]
    pub fn retry_timestamp(&self, id: u32) -> Result<Option<f64>, String> {
        guard(|| Ok(self.verdict(id)?.retry_timestamp.map(|t| t as f64)))
    }

    /// `Verdict`, refused: the entry with the longest wait.
    #[napi]
    pub fn blocked(&self, id: u32) -> Result<Option<u32>, String> {
        guard(|| Ok(self.verdict(id)?.blocked.map(|b| b as u32)))
    }

    /// `Verdict`: the tightest entry's uses.
    #[napi]
    pub fn limit(&self, id: u32) -> Result<f64, String> {
        guard(|| Ok(self.verdict(id)?.quota.limit.into()))
    }

    /// `Verdict`: the uses it has left.
    #[napi]
    pub fn remaining(&self, id: u32) -> Result<f64, String> {
        guard(|| Ok(self.verdict(id)?.quota.remaining.into()))
    }

    /// `Verdict`: ms until it gets a use back.
    #[napi]
    pub fn refill_after_ms(&self, id: u32) -> Result<f64, String> {
        guard(|| Ok(self.verdict(id)?.quota.refill_after_ms as f64))
    }

    /// `Verdict`: ms until its window is empty; `Hit`, `Attempt`: until the window ends.
    #[napi]
    pub fn reset_after_ms(&self, id: u32) -> Result<f64, String> {
        guard(|| match self.outcome(id)? {
            Ok(Outcome::Verdict { verdict, .. }) => Ok(verdict.quota.reset_after_ms as f64),
            Ok(Outcome::Hit { reset_after_ms, .. } | Outcome::Attempt { reset_after_ms, .. }) => {
                Ok(*reset_after_ms as f64)
            }
            _ => Err(no_call(id)),
        })
    }

    /// `Verdict` of a consume asked with its release, allowed: what gives it back.
    #[napi]
    pub fn release_token(&self, id: u32) -> Result<Option<NativeRelease>, String> {
        guard(|| match self.slots.get(id as usize) {
            Some(Slot::Done(Ok(Outcome::Verdict { release, .. }), _, keep)) => {
                Ok(release.clone().filter(|_| *keep).map(release_of))
            }
            _ => Err(no_call(id)),
        })
    }

    /// `Hit`, `Attempt`: the count after the call.
    #[napi]
    pub fn count(&self, id: u32) -> Result<f64, String> {
        guard(|| match self.outcome(id)? {
            Ok(Outcome::Hit { count, .. } | Outcome::Attempt { count, .. }) => Ok(*count as f64),
            _ => Err(no_call(id)),
        })
    }

    /// `Int`: the number.
    #[napi]
    pub fn int(&self, id: u32) -> Result<f64, String> {
        guard(|| match self.outcome(id)? {
            Ok(Outcome::Int(n)) => Ok(*n as f64),
            _ => Err(no_call(id)),
        })
    }

    /// `Bool`: the answer.
    #[napi]
    pub fn bool(&self, id: u32) -> Result<bool, String> {
        guard(|| match self.outcome(id)? {
            Ok(Outcome::Bool(b)) => Ok(*b),
            _ => Err(no_call(id)),
        })
    }

    /// `Error`: why the call failed.
    #[napi]
    pub fn error(&self, id: u32) -> Result<NativeCallError, String> {
        guard(|| match self.outcome(id)? {
            Err(e) => Ok(call_error(e)),
            Ok(_) => Err(no_call(id)),
        })
    }

    /// Any outcome: the give-backs that failed on the way (Redis Cluster only; none: `undefined`).
    #[napi]
    pub fn give_back_failures(&self, id: u32) -> Result<Option<Vec<NativeGiveBack>>, String> {
        guard(|| match self.slots.get(id as usize) {
            Some(Slot::Done(_, failures, _)) if failures.is_empty() => Ok(None),
            Some(Slot::Done(_, failures, _)) => Ok(Some(failures.iter().map(give_back).collect())),
            _ => Err(no_call(id)),
        })
    }

    /// Frees call `id` (its outcome read, or the call abandoned).
    #[napi]
    pub fn end(&mut self, id: u32) {
        if let Some(slot) = self.slots.get_mut(id as usize) {
            if !matches!(slot, Slot::Free) {
                *slot = Slot::Free;
                self.free.push(id);
            }
        }
    }

    /// Calls in progress or not yet ended (for leak tests).
    #[napi]
    pub fn in_progress(&self) -> u32 {
        (self.slots.len() - self.free.len()) as u32
    }
}

/// Strings for JS, each made as Latin-1 when it is ASCII (V8's one-byte strings, no UTF-8 decoding:
/// the keys and arguments of a script are nearly always ASCII).
pub struct Strings(Vec<String>);

impl napi::bindgen_prelude::TypeName for Strings {
    fn type_name() -> &'static str {
        "Array<string>"
    }

    fn value_type() -> napi::ValueType {
        napi::ValueType::Object
    }
}

impl napi::bindgen_prelude::ToNapiValue for Strings {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let mut array = ptr::null_mut();
        napi::check_status!(sys::napi_create_array_with_length(
            env,
            val.0.len(),
            &mut array
        ))?;
        for (i, s) in val.0.iter().enumerate() {
            let mut text = ptr::null_mut();
            let status = if s.is_ascii() {
                sys::napi_create_string_latin1(env, s.as_ptr().cast(), s.len() as isize, &mut text)
            } else {
                sys::napi_create_string_utf8(env, s.as_ptr().cast(), s.len() as isize, &mut text)
            };
            napi::check_status!(status)?;
            napi::check_status!(sys::napi_set_element(env, array, i as u32, text))?;
        }
        Ok(array)
    }
}

// ---- Values: the op arguments in, the outcome's parts out ------------------------------------------

/// The entries of a call, given as three parallel arrays, validated by the core.
fn entries(keys: Vec<String>, uses: Vec<f64>, windows: Vec<f64>) -> Res<Vec<Entry>> {
    if keys.len() != uses.len() || keys.len() != windows.len() {
        return Err(coded(
            "invalid_argument:entries",
            "keys, uses and windows differ in length".to_owned(),
        ));
    }
    keys.into_iter()
        .zip(uses.into_iter().zip(windows))
        .map(|(key, (uses, window_ms))| Ok(Entry::new(key, limit(uses, window_ms)?)))
        .collect()
}

/// A fixed window's decay, validated by the core.
fn decay(decay_ms: f64) -> Res<Window> {
    Window::from_f64(decay_ms).map_err(limit_error)
}

fn window_query(name: &str, max: f64) -> Res<WindowQuery> {
    let max = max as i64;
    Ok(match name {
        "attempts" => WindowQuery::Attempts,
        "tooManyAttempts" => WindowQuery::TooManyAttempts { max },
        "remaining" => WindowQuery::Remaining { max },
        "availableIn" => WindowQuery::AvailableIn,
        "availableInMs" => WindowQuery::AvailableInMs,
        _ => {
            return Err(coded(
                "invalid_argument:query",
                format!("unknown window query {name:?}"),
            ))
        }
    })
}

fn release_of(token: ReleaseToken) -> NativeRelease {
    let (store, keys, call_id) = match token {
        ReleaseToken::Redis(r) => ("redis", r.keys, r.call_id),
        ReleaseToken::Sql(r) => ("sql", r.keys, r.call_id),
    };
    NativeRelease {
        store: store.to_owned(),
        keys,
        call_id,
    }
}

/// The token `release` describes (an unknown `store`: code `invalid_argument:release`).
fn token_of(release: NativeRelease) -> Res<ReleaseToken> {
    let NativeRelease {
        store,
        keys,
        call_id,
    } = release;
    match store.as_str() {
        "redis" => Ok(ReleaseToken::Redis(RedisRelease { keys, call_id })),
        "sql" => Ok(ReleaseToken::Sql(SqlRelease { keys, call_id })),
        _ => Err(coded(
            "invalid_argument:release",
            format!("not a release token of this package: store {store:?}"),
        )),
    }
}

fn call_error(error: &CallError) -> NativeCallError {
    let (source, expected, got) = match error {
        CallError::Reply(e) => (Some(e.script), Some(e.expected), Some(e.got.clone())),
        CallError::Rows(e) => (Some(e.statement), Some(e.expected), Some(e.got.clone())),
        _ => (None, None, None),
    };
    NativeCallError {
        kind: error.kind().to_owned(),
        message: error.to_string(),
        client_message: match error {
            CallError::Store { message } => Some(message.clone()),
            _ => None,
        },
        source: source.map(str::to_owned),
        expected: expected.map(str::to_owned),
        got,
    }
}

fn give_back(f: &GiveBackFailure) -> NativeGiveBack {
    NativeGiveBack {
        keys: f.keys.clone(),
        call_id: f.call_id.clone(),
        message: f.message.clone(),
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

fn number(n: f64) -> std::result::Result<i64, String> {
    // Only whole numbers within i64 are integers; anything else is shown as it came.
    if n.fract() == 0.0 && n.abs() < 9.2e18 {
        Ok(n as i64)
    } else {
        Err(n.to_string())
    }
}

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
            Some(items) => {
                let items = items
                    .into_iter()
                    .map(|item| sql_value(env, item))
                    .collect::<Res<Vec<_>>>()?;
                if items.iter().all(|v| matches!(v, SqlValue::Int(_))) {
                    SqlValue::Ints(
                        items
                            .into_iter()
                            .filter_map(|v| {
                                if let SqlValue::Int(i) = v {
                                    Some(i)
                                } else {
                                    None
                                }
                            })
                            .collect(),
                    )
                } else {
                    SqlValue::Texts(items.iter().map(ToString::to_string).collect())
                }
            }
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
