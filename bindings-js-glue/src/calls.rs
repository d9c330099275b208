//! The call boundary both JS builds share (napi: `bindings-node/src/call.rs`; wasm-bindgen:
//! `bindings-wasm/js/src/calls.rs`): one [`Calls`] per store (Redis, PostgreSQL or SQLite) starts the
//! core's call machine (`ratewindow_core::call`) for each operation and keeps it by id until its
//! outcome is read; the TypeScript driver (`bindings-node/ts/drive.ts`) runs each command with the
//! user's client and feeds back what came. Everything that decides lives in the core; this module only
//! converts values, so each shell is left with reading its host's values.
//!
//! ## The fewest crossings
//!
//! Every call that moves a call on (a start, a feed, a failure) answers its next Redis command as ONE
//! string, the keys then the arguments joined, and writes everything else into the store's call record
//! (`[f64; LEN]`, slots named by [`NAMES`]): the call's id, the step's kind, the script and whether by
//! SHA1, how many keys and arguments and each one's length in UTF-16 units (the JS side cuts the string
//! with `slice`), and once the call is done its whole outcome (a verdict's fields, a count, a number).
//! A call whose outcome is wholly in the record is freed at once (`HELD` 0); one with more to read (an
//! error, a release token, failed give-backs) stays until [`Calls::end`]. So one Redis consume is two
//! crossings: the start (answering the command) and the reply fed (answering the verdict).

use ratewindow_core::call::{
    Call, CallError, CallIds, Command, Fed, GiveBackFailure, Next, Op, Outcome, Redis,
    ReleaseToken, WindowQuery,
};
use ratewindow_core::redis::{RedisOptions, RedisRelease, Reply};
use ratewindow_core::sql::{Postgres, SqlNames, SqlRelease, SqlValue, Sqlite, Statement};
use ratewindow_core::{Entry, Quota};

use crate::{number, Failure, Res};

/// What a step is: a command to run, or how the call ended (`StepKind` of `ts/redis-backend.ts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StepKind {
    /// Run a Redis script: the answered string, `SCRIPT`, `BY_SHA1`, `KEYS`, `ARGS`.
    Script = 0,
    /// Run SQL statements (`statements`), then feed the rows of the last.
    Sql = 1,
    /// A consume's or peek's verdict (`ALLOWED` … `RESET_AFTER_MS`).
    Verdict = 2,
    /// A hit: `VALUE` (the count), `RESET_AFTER_MS`.
    Hit = 3,
    /// An attempt: `ALLOWED`, `VALUE` (the count), `RESET_AFTER_MS`.
    Attempt = 4,
    /// A number: `VALUE`.
    Int = 5,
    /// A yes or no: `VALUE` (1 or 0).
    Bool = 6,
    /// Done, nothing to say.
    Unit = 7,
    /// The call failed: `error(id)`.
    Error = 8,
    /// A lock's holder: held, read it with `lock_owner(id)`.
    Owner = 9,
}

/// Slot: the call's id.
pub const ID: usize = 0;
/// Slot: the step's [`StepKind`].
pub const KIND: usize = 1;
/// Slot: 1 while the call is kept (its outcome has more to read: `end` frees it), 0 once freed.
pub const HELD: usize = 2;
/// Slot: a `Script` step by SHA1 (1) or with its source (0).
pub const BY_SHA1: usize = 3;
/// Slot: a `Script` step's script: 0 sliding, 1 fixed, 2 lock; 3 a plain command (no script: its
/// pieces are the command's name, key and arguments).
pub const SCRIPT: usize = 4;
/// Slot: a `Script` step's key count; -1 when its pieces do not fit the record (read `keys`/`args`).
pub const KEYS: usize = 5;
/// Slot: a `Script` step's argument count.
pub const ARGS: usize = 6;
/// Slot: a verdict's or an attempt's `allowed` (1 or 0).
pub const ALLOWED: usize = 7;
/// Slot: a verdict's `retryAfterMs`.
pub const RETRY_AFTER_MS: usize = 8;
/// Slot: a refused verdict's `retryTimestamp` (NaN: none).
pub const RETRY_TIMESTAMP: usize = 9;
/// Slot: a refused batch's `blocked` (NaN: none).
pub const BLOCKED: usize = 10;
/// Slot: a verdict's `limit`.
pub const LIMIT: usize = 11;
/// Slot: a verdict's `remaining`.
pub const REMAINING: usize = 12;
/// Slot: a verdict's `refillAfterMs`.
pub const REFILL_AFTER_MS: usize = 13;
/// Slot: a verdict's `resetAfterMs`, a hit's or an attempt's.
pub const RESET_AFTER_MS: usize = 14;
/// Slot: a hit's or attempt's count, an `Int`, a `Bool` (1 or 0).
pub const VALUE: usize = 15;
/// Slot: how many give-backs failed on the way (read them with `give_back_failures`).
pub const GIVE_BACKS: usize = 16;
/// Slot: 1 when an allowed consume asked with its release has a token (`release_token`).
pub const RELEASE: usize = 17;
/// Slot: the first piece's length; the keys' then the arguments' follow.
pub const PIECES: usize = 18;
/// Slots in a call record.
pub const LEN: usize = 64;

/// The slots' names up to [`PIECES`], in order, as `ts/redis-backend.ts` spells them.
pub const NAMES: [&str; PIECES + 1] = [
    "id",
    "kind",
    "held",
    "bySha1",
    "script",
    "keys",
    "args",
    "allowed",
    "retryAfterMs",
    "retryTimestamp",
    "blocked",
    "limit",
    "remaining",
    "refillAfterMs",
    "resetAfterMs",
    "value",
    "giveBacks",
    "release",
    "pieces",
];

/// One call record.
pub type CallRecord = [f64; LEN];

enum Planner {
    Redis(Redis),
    Postgres(Postgres),
    Sqlite(Sqlite),
}

// Slots are reused in place (a free list): boxing the running call would allocate once per call.
#[allow(clippy::large_enum_variant)]
enum Slot {
    Free,
    Running(Call, bool),
    /// The outcome, the give-backs that failed, whether a token was asked for, and a failed
    /// consume's token (it may have counted: [`Call::failed_release`]).
    Done(
        Result<Outcome, CallError>,
        Vec<GiveBackFailure>,
        bool,
        Option<ReleaseToken>,
    ),
}

/// An operation a Redis store plans once and sends again ([`Calls::prepare`], [`Calls::answer`]): a
/// single consume costing 1 without its release, an attempt costing 1, a GCRA or counter call.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// `Op::Consume` of this one entry (each call its own id).
    Consume(Entry),
    /// `Op::Attempt`.
    Attempt {
        /// The key.
        key: String,
        /// The most hits in a window.
        max: i64,
        /// The window.
        decay: ratewindow_core::Window,
    },
    /// A GCRA or counter operation.
    #[cfg(feature = "rates")]
    Rate(ratewindow_core::call::RateOp),
}

impl Prepared {
    /// A single consume of `key` (`uses` per `window_ms`, as JS gave them).
    pub fn consume(key: String, uses: f64, window_ms: f64) -> Res<Prepared> {
        Ok(Prepared::Consume(Entry::new(
            key,
            number::limit(uses, window_ms)?,
        )))
    }

    /// An attempt on `key` (`max` hits per `decay_ms`).
    pub fn attempt(key: String, max: f64, decay_ms: f64) -> Res<Prepared> {
        Ok(Prepared::Attempt {
            key,
            max: max as i64,
            decay: number::decay(decay_ms)?,
        })
    }

    /// The same operation on another key (a consume or an attempt; `None` for the others): what
    /// [`Calls::answer`] runs when a reply is no answer and the host planned `key`'s command from this
    /// operation's (its keys from [`Calls::key_prefix`], its arguments the same).
    fn with_key(&self, key: &str) -> Option<Prepared> {
        match self {
            Prepared::Consume(entry) => {
                Some(Prepared::Consume(Entry::new(key.to_owned(), entry.limit)))
            }
            Prepared::Attempt { max, decay, .. } => Some(Prepared::Attempt {
                key: key.to_owned(),
                max: *max,
                decay: *decay,
            }),
            #[cfg(feature = "rates")]
            Prepared::Rate(_) => None,
        }
    }

    /// A GCRA or counter operation, as [`Calls::rate`] takes it.
    #[cfg(feature = "rates")]
    #[allow(clippy::too_many_arguments)]
    pub fn rate(
        op: u32,
        key: String,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
    ) -> Res<Prepared> {
        crate::rates::rate_op(op, key, kind, uses, window_ms, burst, cost).map(Prepared::Rate)
    }
}

/// One store's call machines and its calls in progress, by id (a slot each).
pub struct Calls {
    planner: Planner,
    slots: Vec<Slot>,
    free: Vec<u32>,
    ids: CallIds,
    /// The prefix of the prepared consumes' call ids (the host counts them: [`Calls::prepared_ids`]),
    /// never [`CallIds`]'s own, so the two kinds of ids never meet.
    prepared_prefix: u64,
    /// The last allowed consume's token, when nothing else held its call: the host reads it right after
    /// the crossing that ended the call (`release_token`), so the call is freed at once.
    last_release: Option<(u32, ReleaseToken)>,
}

fn coded(code: &str, message: impl Into<String>) -> Failure {
    Failure::new(code, message)
}

fn names(prefix: &str) -> Res<SqlNames> {
    SqlNames::new(prefix).map_err(|message| coded("invalid_argument:prefix", message))
}

fn unsupported(what: &str) -> Failure {
    coded(
        "invalid_argument:store",
        format!("{what} is not an operation of this store"),
    )
}

fn no_call(id: u32) -> Failure {
    coded(
        "invalid_argument:call",
        format!("no call {id} at this step"),
    )
}

/// The length of `s` in UTF-16 code units (JS string length).
fn js_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().map(char::len_utf16).sum()
    }
}

impl Calls {
    fn new(planner: Planner, seed: u64) -> Calls {
        Calls {
            planner,
            slots: Vec::new(),
            free: Vec::new(),
            ids: CallIds::new(seed),
            prepared_prefix: seed ^ 1,
            last_release: None,
        }
    }

    /// A Redis store's calls: keys start with `prefix`; with `hash_tag_before`, each key is tagged
    /// with its part before that separator (an empty one: code `invalid_argument:hashTag`);
    /// `evalsha`: the host can run scripts by SHA1; `seed`: random bits for the call ids' prefix
    /// (the core's [`CallIds`]).
    pub fn redis(
        prefix: String,
        hash_tag_before: Option<String>,
        evalsha: bool,
        seed: u64,
    ) -> Res<Calls> {
        // No prefix may name another prefix's keys (`ratewindow_core::input::check_redis_prefix`).
        ratewindow_core::input::check_redis_prefix(&prefix)
            .map_err(|e| coded("invalid_argument:prefix", e.to_string()))?;
        let mut options = RedisOptions::default().with_prefix(prefix);
        if let Some(separator) = hash_tag_before {
            options = options
                .with_hash_tag_before(separator)
                .map_err(|m| coded("invalid_argument:hashTag", m))?;
        }
        let redis = Redis::new(options).evalsha(evalsha);
        Ok(Calls::new(Planner::Redis(redis), seed))
    }

    /// A Redis store's calls whose host runs plain commands too (`plain`): the lock then acquires by
    /// `SET NX PX` (a `Script` step whose `SCRIPT` slot is 3, the command's name, key and arguments
    /// its pieces: no keys). Other stores are unchanged.
    pub fn with_plain_commands(mut self, plain: bool) -> Calls {
        if let Planner::Redis(redis) = self.planner {
            self.planner = Planner::Redis(redis.plain_commands(plain));
        }
        self
    }

    /// A PostgreSQL store's calls on the objects named by `prefix`; `durable`: every call waits for
    /// its commit's WAL flush.
    pub fn postgres(prefix: &str, durable: bool, seed: u64) -> Res<Calls> {
        let pg = Postgres::new(names(prefix)?).durable(durable);
        Ok(Calls::new(Planner::Postgres(pg), seed))
    }

    /// A SQLite store's calls on the tables named by `prefix` (the host's clock: `now` in each start).
    pub fn sqlite(prefix: &str, seed: u64) -> Res<Calls> {
        Ok(Calls::new(
            Planner::Sqlite(Sqlite::new(names(prefix)?)),
            seed,
        ))
    }

    /// The SQL schema (idempotent; several statements, run without parameters).
    pub fn schema(&self) -> Res<String> {
        match &self.planner {
            Planner::Postgres(p) => Ok(p.schema()),
            Planner::Sqlite(s) => Ok(s.schema()),
            Planner::Redis(_) => Err(unsupported("schema")),
        }
    }

    /// SQLite: what to `exec` on every connection.
    pub fn connection_setup(busy_timeout_ms: Option<u32>) -> String {
        busy_timeout_ms.map_or_else(
            || Sqlite::CONNECTION_SETUP.to_owned(),
            Sqlite::connection_setup,
        )
    }

    /// The purge (not a call): PostgreSQL one statement answering one row (calls, windows); SQLite
    /// at `now`, statements each deleting rows.
    pub fn purge(&self, now: Option<f64>) -> Res<Vec<Statement>> {
        match &self.planner {
            Planner::Postgres(p) => Ok(vec![p.plan_purge()]),
            Planner::Sqlite(s) => Ok(s.plan_purge(now.unwrap_or(0.0) as u64)),
            Planner::Redis(_) => Err(unsupported("purge")),
        }
    }

    /// PostgreSQL: the purge's counts from its rows (code `store_reply` for rows of the wrong shape).
    pub fn purged(rows: &[Vec<SqlValue>]) -> Res<(f64, f64)> {
        let (calls, windows) =
            Postgres::decode_purge(rows).map_err(|e| coded("store_reply", e.to_string()))?;
        Ok((calls as f64, windows as f64))
    }

    fn start(
        &mut self,
        out: &mut CallRecord,
        op: Op,
        now: Option<f64>,
        keep: bool,
    ) -> Res<Option<String>> {
        let call = match &self.planner {
            Planner::Redis(r) => r.start(op),
            Planner::Postgres(p) => p.start(op),
            Planner::Sqlite(s) => s.start(op, now.unwrap_or(0.0) as u64),
        };
        self.run(out, call, keep)
    }

    /// Starts a GCRA or counter operation (`op`: 0 consume, 1 peek, 2 reset; `kind` 1 GCRA, 2 the
    /// counter, the numbers as JS gave them: see `crate::rates`). `now`: SQLite's clock; on Redis and
    /// PostgreSQL, given, it times the call instead of the server's clock (the vectors). Its verdict
    /// keeps no release (these uses are not given back).
    #[cfg(feature = "rates")]
    #[allow(clippy::too_many_arguments)]
    pub fn rate(
        &mut self,
        out: &mut CallRecord,
        op: u32,
        key: String,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let op = crate::rates::rate_op(op, key, kind, uses, window_ms, burst, cost)?;
        let now = now.map(number::now).transpose()?;
        let call = match (&self.planner, now) {
            (Planner::Redis(r), Some(now)) => r.rate_at(op, now),
            (Planner::Redis(r), None) => r.rate(op),
            (Planner::Postgres(p), Some(now)) => p.rate_at(op, now),
            (Planner::Postgres(p), None) => p.rate(op),
            (Planner::Sqlite(s), now) => s.rate(op, now.unwrap_or(0)),
        };
        self.run(out, call, false)
    }

    /// A batch mixing algorithms (`op` 0 consume, 1 peek): entry `i` is `keys[i]` under `kinds[i]`
    /// (0 the sliding log, 1 GCRA, 2 the counter) with its numbers, checked as the memory store's
    /// (`entries[i]`'s field named). SQLite (`now`, its clock), Redis and PostgreSQL (the server's
    /// clock). An allowed consume keeps its release token (the sliding-log calls).
    #[cfg(feature = "mixed")]
    #[allow(clippy::too_many_arguments)]
    pub fn mixed(
        &mut self,
        out: &mut CallRecord,
        op: u32,
        keys: Vec<String>,
        kinds: &[u32],
        uses: &[f64],
        windows: &[f64],
        bursts: &[f64],
        costs: &[f64],
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let n = keys.len();
        if [
            kinds.len(),
            uses.len(),
            windows.len(),
            bursts.len(),
            costs.len(),
        ] != [n; 5]
        {
            return Err(coded(
                "invalid_argument:entries",
                "the entries' columns differ in length",
            ));
        }
        let mut entries = Vec::with_capacity(n);
        for (i, key) in keys.iter().enumerate() {
            entries.push(crate::rates::mixed_entry(
                key, kinds[i], uses[i], windows[i], bursts[i], costs[i], i,
            )?);
        }
        let now = number::now(now.unwrap_or(0.0))?;
        let call_id = (op == 0).then(|| self.ids.next());
        let call = match &self.planner {
            Planner::Sqlite(s) => s.mixed(entries, now, call_id.as_deref()),
            // The server's clock (`TIME`): read, decided here, written if nothing changed.
            Planner::Redis(r) => r.mixed(entries, None, call_id.as_deref()),
            // One statement on the server's clock: locked, decided and written all or nothing.
            Planner::Postgres(p) => p.mixed(entries, call_id.as_deref()),
        };
        self.run(out, call, op == 0)
    }

    /// Holds `call` in a free slot (or a new one) and writes its first step into `out`.
    fn run(&mut self, out: &mut CallRecord, call: Call, keep: bool) -> Res<Option<String>> {
        let id = self.hold(call, keep);
        self.step(out, id, |_| {})
    }

    /// Puts `call` in a free slot (or a new one): its id.
    fn hold(&mut self, call: Call, keep: bool) -> u32 {
        let slot = Slot::Running(call, keep);
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Feeds (with `f`) the running call `id`, then writes its next step (or its outcome) into `out`
    /// and answers a `Script` step's pieces joined.
    fn step(
        &mut self,
        out: &mut CallRecord,
        id: u32,
        f: impl FnOnce(&mut Call),
    ) -> Res<Option<String>> {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return Err(no_call(id));
        };
        let Slot::Running(call, keep) = slot else {
            return Err(no_call(id));
        };
        f(call);
        out[ID] = f64::from(id);
        out[HELD] = 1.0;
        let result = match call.next() {
            Next::Run(Command::Script {
                script,
                keys,
                args,
                by_sha1,
            }) => {
                out[KIND] = StepKind::Script as u8 as f64;
                out[BY_SHA1] = if by_sha1 { 1.0 } else { 0.0 };
                out[SCRIPT] = match script.name {
                    "fixed" => 1.0,
                    "lock" => 2.0,
                    "gcra" => 4.0,
                    "counter" => 5.0,
                    "weighted" => 6.0,
                    "weighted_attempt" => 7.0,
                    "mixed" => 8.0,
                    _ => 0.0,
                };
                return Ok(Some(joined(out, keys, args)));
            }
            Next::Run(Command::Plain { args }) => {
                out[KIND] = StepKind::Script as u8 as f64;
                out[BY_SHA1] = 0.0;
                out[SCRIPT] = 3.0;
                return Ok(Some(joined(out, &[], args)));
            }
            Next::Run(Command::Sql { .. }) => {
                out[KIND] = StepKind::Sql as u8 as f64;
                return Ok(None);
            }
            Next::Done(result) => result,
        };
        let mut result = result;
        let failures = call.take_give_back_failures();
        let keep = *keep;
        // A failed consume asked with its release keeps the token that gives it back.
        let failed = call.take_failed_release().filter(|_| keep);
        let kind = write_outcome(out, &result, keep);
        out[KIND] = kind as u8 as f64;
        out[GIVE_BACKS] = failures.len() as f64;
        if failed.is_some() {
            out[RELEASE] = 1.0;
        }
        // An allowed consume's token with nothing else to hold its call: set aside, the call freed.
        self.last_release = None;
        let aside = failures.is_empty() && out[RELEASE] == 1.0;
        if aside {
            if let Ok(Outcome::Verdict { release, .. }) = &mut result {
                self.last_release = release.take().map(|token| (id, token));
            }
            out[RELEASE] = 0.0;
        }
        let held = kind == StepKind::Error
            || kind == StepKind::Owner
            || !failures.is_empty()
            || out[RELEASE] == 1.0;
        if aside {
            out[RELEASE] = 1.0;
        }
        if held {
            *slot = Slot::Done(result, failures, keep, failed);
        } else {
            *slot = Slot::Free;
            self.free.push(id);
            out[HELD] = 0.0;
        }
        Ok(None)
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

    fn outcome(&self, id: u32) -> Res<(&Result<Outcome, CallError>, &[GiveBackFailure], bool)> {
        match self.slots.get(id as usize) {
            Some(Slot::Done(result, failures, keep, _)) => Ok((result, failures, *keep)),
            _ => Err(no_call(id)),
        }
    }

    /// The prefix of a prepared consume's call ids, 16 hex digits: the host sends the id
    /// `prefix + n.toString(16)` (`n` counting from 0, below 2^53) and names `n` in its answer; the
    /// same format as [`CallIds`], under a prefix of its own.
    pub fn prepared_ids(&self) -> String {
        format!("{:016x}", self.prepared_prefix)
    }

    /// The text the Redis key of every prepared operation of `kind` starts with, the user's key
    /// following it as it is (0 a consume's sliding log, 3 an attempt's fixed window), or `None` when
    /// the store's keys are not so (a hash tag rule rewrites them; not a Redis store; another kind).
    /// Every other piece of a consume's or an attempt's command is the same for every key of the same
    /// limit, so the host plans a new key's command from another key's, with no crossing, and hands
    /// [`Calls::answer`] the key.
    pub fn key_prefix(&self, kind: u32) -> Option<String> {
        let Planner::Redis(redis) = &self.planner else {
            return None;
        };
        let options = redis.options();
        if options.hash_tag().is_some() {
            return None;
        }
        match kind {
            0 => Some(options.log_key("")),
            3 => Some(options.window_key("")),
            _ => None,
        }
    }

    /// Plans `prepared` once (a Redis store only): writes its command's pieces into `out` as a start
    /// does (the call freed at once: nothing runs) and `VALUE` the piece holding the call id (-1:
    /// none). The host keeps the pieces and sends them for every call of this operation, the call id
    /// put in; each reply is then [`Calls::answer`]'s.
    pub fn prepare(&mut self, out: &mut CallRecord, prepared: &Prepared) -> Res<Option<String>> {
        if !matches!(self.planner, Planner::Redis(_)) {
            return Err(unsupported("a prepared call"));
        }
        let id = self.ids.next();
        let call = self.prepared_call(prepared, Some(id.clone()))?;
        let joined = self.run(out, call, false)?;
        let id_at = match &joined {
            Some(s) if out[KIND] == StepKind::Script as u8 as f64 && out[KEYS] >= 0.0 => {
                let n = (out[KEYS] + out[ARGS]) as usize;
                let mut at = 0;
                let mut found = -1.0;
                for i in 0..n {
                    let len = out[PIECES + i] as usize;
                    if s.get(at..at + len) == Some(id.as_str()) {
                        found = i as f64;
                    }
                    at += len;
                }
                found
            }
            _ => -2.0,
        };
        self.end(out[ID] as u32);
        out[VALUE] = id_at;
        Ok(joined)
    }

    /// The reply (or the client's failure) to a prepared operation's command sent with call id `n`
    /// ([`Calls::prepared_ids`]): its call started and fed in one step, answering as a feed does
    /// (the outcome in `out`, or the next step: e.g. the source after `NOSCRIPT`, same id). `key`:
    /// the key the command was sent for when not `prepared`'s own (planned from its command with
    /// [`Calls::key_prefix`]); read (`key()`) only when the reply is no answer and the call runs on.
    pub fn answer(
        &mut self,
        out: &mut CallRecord,
        prepared: &Prepared,
        n: f64,
        fed: Result<Fed, String>,
        key: impl FnOnce() -> Res<Option<String>>,
    ) -> Res<Option<String>> {
        // A reply that is a verdict (or an attempt's outcome): the core decides it from the kept plan,
        // without planning the command again; the outcome is in `out`, nothing held. Any other
        // reply (an error, `NOSCRIPT`) goes to the call below.
        if let (Planner::Redis(redis), Ok(Fed::Reply(reply))) = (&self.planner, &fed) {
            let outcome = match prepared {
                Prepared::Consume(entry)
                    if n.fract() == 0.0 && (0.0..9_007_199_254_740_992.0).contains(&n) =>
                {
                    redis
                        .consume_answered(entry.limit, reply)
                        .map(|verdict| Outcome::Verdict {
                            verdict,
                            release: None,
                        })
                }
                Prepared::Attempt { max, .. } => redis.attempt_answered(*max, reply),
                #[cfg(feature = "rates")]
                Prepared::Rate(op) => redis.rate_answered(op, reply),
                _ => None,
            };
            if let Some(outcome) = outcome {
                let kind = write_outcome(out, &Ok(outcome), false);
                out[KIND] = kind as u8 as f64;
                out[ID] = f64::from(u32::MAX);
                out[HELD] = 0.0;
                out[GIVE_BACKS] = 0.0;
                self.last_release = None;
                return Ok(None);
            }
        }
        let id = match prepared {
            Prepared::Consume(..) => {
                if !((0.0..9_007_199_254_740_992.0).contains(&n) && n.fract() == 0.0) {
                    return Err(coded(
                        "invalid_argument:call",
                        format!("not a prepared call's number: {n}"),
                    ));
                }
                Some(format!("{:016x}{:x}", self.prepared_prefix, n as u64))
            }
            _ => None,
        };
        let other;
        let prepared = match key()? {
            Some(key) => {
                other = prepared.with_key(&key).ok_or_else(|| {
                    coded(
                        "invalid_argument:call",
                        "a prepared GCRA or counter call answered for another key".to_owned(),
                    )
                })?;
                &other
            }
            None => prepared,
        };
        let call = self.prepared_call(prepared, id)?;
        let id = self.hold(call, false);
        self.step(out, id, |call| match fed {
            Ok(fed) => call.feed(fed),
            Err(message) => call.fail(message),
        })
    }

    /// `prepared`'s call on this store's planner, with call id `id` for a consume.
    fn prepared_call(&self, prepared: &Prepared, id: Option<String>) -> Res<Call> {
        let Planner::Redis(redis) = &self.planner else {
            return Err(unsupported("a prepared call"));
        };
        Ok(match prepared {
            Prepared::Consume(entry) => redis.start(Op::Consume {
                entries: vec![entry.clone()],
                call_id: id.unwrap_or_default(),
            }),
            Prepared::Attempt { key, max, decay } => redis.start(Op::Attempt {
                key: key.clone(),
                max: *max,
                decay: *decay,
            }),
            #[cfg(feature = "rates")]
            Prepared::Rate(op) => redis.rate(op.clone()),
        })
    }

    /// Starts `Op::Consume` of `entries`; with `release` false its verdict keeps no release token.
    /// `now`: SQLite's clock (ms).
    pub fn consume(
        &mut self,
        out: &mut CallRecord,
        entries: Vec<Entry>,
        release: bool,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let call_id = self.ids.next();
        self.start(out, Op::Consume { entries, call_id }, now, release)
    }

    /// [`Self::consume`] of one entry; with `release` (the failure guard asks) its verdict keeps the
    /// release token, otherwise none (a single call's verdict has no `release`).
    pub fn consume_one(
        &mut self,
        out: &mut CallRecord,
        key: String,
        uses: f64,
        window_ms: f64,
        now: Option<f64>,
        release: bool,
    ) -> Res<Option<String>> {
        let entries = vec![Entry::new(key, number::limit(uses, window_ms)?)];
        self.consume(out, entries, release, now)
    }

    /// A weighted sliding-log call (`op` 0 consume, 1 peek): entry `i` costs `costs[i]` uses (a whole
    /// number from 1 to its `uses`, else `invalid_argument:cost` naming `cost`, or `entries[i].cost`
    /// with `batch`). A separate entry point, so a call costing 1 pays nothing for weights.
    #[cfg(feature = "weights")]
    #[allow(clippy::too_many_arguments)]
    pub fn weighted(
        &mut self,
        out: &mut CallRecord,
        op: u32,
        keys: Vec<String>,
        uses: &[f64],
        windows: &[f64],
        costs: &[f64],
        batch: bool,
        release: bool,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        if costs.len() != keys.len() {
            return Err(coded(
                "invalid_argument:entries",
                "keys and costs differ in length",
            ));
        }
        let mut entries = entries(keys, uses, windows)?;
        for (i, (entry, &cost)) in entries.iter_mut().zip(costs).enumerate() {
            let limit = entry.limit;
            let checked = ratewindow_core::check_cost_f64(cost, limit).map_err(|e| {
                let name = if batch {
                    format!("entries[{i}].cost")
                } else {
                    "cost".to_owned()
                };
                coded(
                    "invalid_argument:cost",
                    format!("invalid {name}: {} (expected {})", e.value, e.field.range()),
                )
            })?;
            let key = std::mem::take(&mut entry.key);
            *entry = Entry::with_cost(key, limit, u64::from(checked))
                .map_err(|e| coded("invalid_argument:cost", e.to_string()))?;
        }
        match op {
            0 => self.consume(out, entries, release, now),
            1 => self.peek(out, entries, now),
            _ => Err(coded(
                "invalid_argument:op",
                format!("no weighted operation {op}"),
            )),
        }
    }

    /// Starts `Op::Peek`.
    pub fn peek(
        &mut self,
        out: &mut CallRecord,
        entries: Vec<Entry>,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        self.start(out, Op::Peek { entries }, now, false)
    }

    /// Starts `Op::Release` of an allowed consume's token.
    pub fn release(
        &mut self,
        out: &mut CallRecord,
        token: ReleaseToken,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        self.start(out, Op::Release { token }, now, false)
    }

    /// Starts `Op::Hit`.
    pub fn hit(
        &mut self,
        out: &mut CallRecord,
        key: String,
        decay_ms: f64,
        amount: f64,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let op = Op::Hit {
            key,
            decay: number::decay(decay_ms)?,
            amount: amount as i64,
        };
        self.start(out, op, now, false)
    }

    /// Starts `Op::Attempt`.
    pub fn attempt(
        &mut self,
        out: &mut CallRecord,
        key: String,
        max: f64,
        decay_ms: f64,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let op = Op::Attempt {
            key,
            max: max as i64,
            decay: number::decay(decay_ms)?,
        };
        self.start(out, op, now, false)
    }

    /// Starts `Op::AttemptCost`: [`Self::attempt`] costing `cost` hits (a whole number from 1, else
    /// `invalid_argument:cost`).
    #[cfg(feature = "weights")]
    pub fn attempt_cost(
        &mut self,
        out: &mut CallRecord,
        key: String,
        max: f64,
        decay_ms: f64,
        cost: f64,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let op = Op::AttemptCost {
            key,
            max: max as i64,
            decay: number::decay(decay_ms)?,
            cost: crate::store::attempt_cost(cost)?,
        };
        self.start(out, op, now, false)
    }

    /// Starts `Op::Read` answering `query` (`attempts`, `tooManyAttempts`, `remaining`,
    /// `availableIn`, `availableInMs`; `max` for the two that take it).
    pub fn read(
        &mut self,
        out: &mut CallRecord,
        key: String,
        query: &str,
        max: f64,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let query = window_query(query, max)?;
        self.start(out, Op::Read { key, query }, now, false)
    }

    /// Starts `Op::ResetAttempts`.
    pub fn reset_attempts(
        &mut self,
        out: &mut CallRecord,
        key: String,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        self.start(out, Op::ResetAttempts { key }, now, false)
    }

    /// Starts `Op::Clear`.
    pub fn clear(
        &mut self,
        out: &mut CallRecord,
        key: String,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        self.start(out, Op::Clear { key }, now, false)
    }

    /// Call `id`'s current step again (as a start answers it).
    pub fn next(&mut self, out: &mut CallRecord, id: u32) -> Res<Option<String>> {
        self.step(out, id, |_| {})
    }

    /// Feeds call `id` what its client answered.
    pub fn feed(&mut self, out: &mut CallRecord, id: u32, fed: Fed) -> Res<Option<String>> {
        self.step(out, id, |call| call.feed(fed))
    }

    /// Feeds call `id` a reply that is an array of numbers (the shape ratewindow's scripts answer).
    pub fn feed_numbers(
        &mut self,
        out: &mut CallRecord,
        id: u32,
        numbers: &[f64],
    ) -> Res<Option<String>> {
        let reply = Reply::Array(numbers.iter().map(|&n| reply_number(n)).collect());
        self.feed(out, id, Fed::Reply(reply))
    }

    /// Feeds call `id` the client's failure (its error message, as the client gives it).
    pub fn fail(&mut self, out: &mut CallRecord, id: u32, message: String) -> Res<Option<String>> {
        self.step(out, id, |call| call.fail(message))
    }

    /// `Script` step: `KEYS` (when the pieces did not fit the record).
    pub fn keys(&mut self, id: u32) -> Res<Vec<String>> {
        match self.command(id)? {
            Command::Script { keys, .. } => Ok(keys.to_vec()),
            Command::Plain { .. } => Ok(Vec::new()),
            Command::Sql { .. } => Err(no_call(id)),
        }
    }

    /// `Script` step: `ARGV` (when the pieces did not fit the record).
    pub fn args(&mut self, id: u32) -> Res<Vec<String>> {
        match self.command(id)? {
            Command::Script { args, .. } | Command::Plain { args } => Ok(args.to_vec()),
            Command::Sql { .. } => Err(no_call(id)),
        }
    }

    /// `Sql` step: the statements, to run in order on one connection.
    pub fn statements(&mut self, id: u32) -> Res<&[Statement]> {
        match self.command(id)? {
            Command::Sql { statements } => Ok(statements),
            Command::Script { .. } | Command::Plain { .. } => Err(no_call(id)),
        }
    }

    /// What gives back a held consume asked with its release: an allowed one's token, or a failed
    /// one's that may have counted (`RELEASE` 1 in the record for either).
    pub fn release_token(&self, id: u32) -> Res<Option<&ReleaseToken>> {
        match self.slots.get(id as usize) {
            Some(Slot::Done(Ok(Outcome::Verdict { release, .. }), _, keep, _)) => {
                Ok(release.as_ref().filter(|_| *keep))
            }
            Some(Slot::Done(Err(_), _, _, failed)) => Ok(failed.as_ref()),
            _ => match &self.last_release {
                Some((of, token)) if *of == id => Ok(Some(token)),
                _ => Err(no_call(id)),
            },
        }
    }

    /// A held lock `Owner`: the holder's token, or none.
    pub fn lock_owner(&self, id: u32) -> Res<Option<&str>> {
        match self.outcome(id)? {
            (Ok(Outcome::Owner(owner)), _, _) => Ok(owner.as_deref()),
            _ => Err(no_call(id)),
        }
    }

    /// The Redis planner, on a Redis store's calls (the lock's commands planned once, `crate::lock`).
    #[cfg(feature = "lock-commands")]
    pub(crate) fn redis_planner(&self) -> Option<&Redis> {
        match &self.planner {
            Planner::Redis(r) => Some(r),
            _ => None,
        }
    }

    /// Starts a lock operation (`crate::lock`); `now`: SQLite's clock (ms).
    pub(crate) fn start_lock(
        &mut self,
        out: &mut CallRecord,
        op: ratewindow_core::lock::LockOp,
        now: Option<f64>,
    ) -> Res<Option<String>> {
        let call = match &self.planner {
            Planner::Redis(r) => r.lock(op),
            Planner::Postgres(p) => p.lock(op),
            Planner::Sqlite(s) => s.lock(op, now.unwrap_or(0.0) as u64),
        };
        self.run(out, call, false)
    }

    /// A held `Error`: why the call failed.
    pub fn error(&self, id: u32) -> Res<&CallError> {
        match self.outcome(id)? {
            (Err(e), _, _) => Ok(e),
            _ => Err(no_call(id)),
        }
    }

    /// A held outcome: the give-backs that failed on the way (Redis Cluster only).
    pub fn give_back_failures(&self, id: u32) -> Res<&[GiveBackFailure]> {
        Ok(self.outcome(id)?.1)
    }

    /// Frees call `id` (its outcome read, or the call abandoned).
    pub fn end(&mut self, id: u32) {
        if let Some(slot) = self.slots.get_mut(id as usize) {
            if !matches!(slot, Slot::Free) {
                *slot = Slot::Free;
                self.free.push(id);
            }
        }
    }

    /// Calls in progress or held (for leak tests).
    pub fn in_progress(&self) -> u32 {
        (self.slots.len() - self.free.len()) as u32
    }
}

/// The keys then the arguments as one string, each piece's JS length in `out` from [`PIECES`] (or
/// `KEYS` -1 and an empty string when they do not fit: the host reads `keys` and `args`).
fn joined(out: &mut CallRecord, keys: &[String], args: &[String]) -> String {
    if keys.len() + args.len() > LEN - PIECES {
        out[KEYS] = -1.0;
        out[ARGS] = -1.0;
        return String::new();
    }
    out[KEYS] = keys.len() as f64;
    out[ARGS] = args.len() as f64;
    let total = keys.iter().chain(args).map(String::len).sum();
    let mut s = String::with_capacity(total);
    for (i, piece) in keys.iter().chain(args).enumerate() {
        out[PIECES + i] = js_len(piece) as f64;
        s.push_str(piece);
    }
    s
}

fn write_quota(out: &mut CallRecord, quota: Quota) {
    out[LIMIT] = f64::from(quota.limit);
    out[REMAINING] = f64::from(quota.remaining);
    out[REFILL_AFTER_MS] = quota.refill_after_ms as f64;
    out[RESET_AFTER_MS] = quota.reset_after_ms as f64;
}

fn write_outcome(
    out: &mut CallRecord,
    result: &Result<Outcome, CallError>,
    keep: bool,
) -> StepKind {
    out[RELEASE] = 0.0;
    match result {
        Ok(Outcome::Verdict { verdict, release }) => {
            out[ALLOWED] = if verdict.allowed { 1.0 } else { 0.0 };
            out[RETRY_AFTER_MS] = verdict.retry_after_ms as f64;
            out[RETRY_TIMESTAMP] = verdict.retry_timestamp.map_or(f64::NAN, |t| t as f64);
            out[BLOCKED] = verdict.blocked.map_or(f64::NAN, |b| b as f64);
            write_quota(out, verdict.quota);
            if keep && release.is_some() {
                out[RELEASE] = 1.0;
            }
            StepKind::Verdict
        }
        Ok(Outcome::Hit {
            count,
            reset_after_ms,
        }) => {
            out[VALUE] = *count as f64;
            out[RESET_AFTER_MS] = *reset_after_ms as f64;
            StepKind::Hit
        }
        Ok(Outcome::Attempt {
            allowed,
            count,
            reset_after_ms,
        }) => {
            out[ALLOWED] = if *allowed { 1.0 } else { 0.0 };
            out[VALUE] = *count as f64;
            out[RESET_AFTER_MS] = *reset_after_ms as f64;
            StepKind::Attempt
        }
        Ok(Outcome::Int(n)) => {
            out[VALUE] = *n as f64;
            StepKind::Int
        }
        Ok(Outcome::Bool(b)) => {
            out[VALUE] = if *b { 1.0 } else { 0.0 };
            StepKind::Bool
        }
        Ok(Outcome::Unit) => StepKind::Unit,
        Ok(Outcome::Owner(_)) => StepKind::Owner,
        Err(_) => StepKind::Error,
    }
}

/// The first `len` numbers from the [`PIECES`] slot on (a reply the host wrote there), copied out
/// (at most `LEN - PIECES`): the numbers and how many.
pub fn numbers_in(out: &CallRecord, len: u32) -> ([f64; LEN - PIECES], usize) {
    let len = (len as usize).min(LEN - PIECES);
    let mut numbers = [0.0; LEN - PIECES];
    numbers[..len].copy_from_slice(&out[PIECES..PIECES + len]);
    (numbers, len)
}

/// The Redis scripts: `[sliding sha1, sliding source, fixed sha1, fixed source, lock sha1, lock
/// source]`.
pub fn redis_scripts() -> Vec<String> {
    use ratewindow_core::call::LOCK;
    use ratewindow_core::redis::{FIXED, SLIDING};
    #[allow(unused_mut)]
    let mut scripts: Vec<String> = [
        SLIDING.sha1,
        SLIDING.source,
        FIXED.sha1,
        FIXED.source,
        LOCK.sha1,
        LOCK.source,
    ]
    .map(str::to_owned)
    .to_vec();
    // GCRA and the counter (`SCRIPT` slots 4 and 5), in the builds with them.
    #[cfg(feature = "rates")]
    {
        use ratewindow_core::call::{COUNTER, GCRA};
        scripts.extend([GCRA.sha1, GCRA.source, COUNTER.sha1, COUNTER.source].map(str::to_owned));
    }
    // Weighted calls and the weighted attempt (slots 6 and 7), in the builds with them (after GCRA's
    // and the counter's: the Node addon has both).
    #[cfg(feature = "weights")]
    {
        use ratewindow_core::redis::weighted::{WEIGHTED, WEIGHTED_ATTEMPT};
        scripts.extend(
            [
                WEIGHTED.sha1,
                WEIGHTED.source,
                WEIGHTED_ATTEMPT.sha1,
                WEIGHTED_ATTEMPT.source,
            ]
            .map(str::to_owned),
        );
    }
    // The mixed batch's read and write (slot 8), in the builds with mixed batches.
    #[cfg(feature = "mixed")]
    {
        use ratewindow_core::call::MIXED;
        if !cfg!(feature = "weights") {
            scripts.extend([""; 4].map(str::to_owned));
        }
        scripts.extend([MIXED.sha1, MIXED.source].map(str::to_owned));
    }
    scripts
}

// ---- Values: the op arguments in, the outcome's parts out ------------------------------------------

/// The entries of a call, given as three parallel sequences, validated by the core.
pub fn entries(keys: Vec<String>, uses: &[f64], windows: &[f64]) -> Res<Vec<Entry>> {
    if keys.len() != uses.len() || keys.len() != windows.len() {
        return Err(coded(
            "invalid_argument:entries",
            "keys, uses and windows differ in length",
        ));
    }
    keys.into_iter()
        .zip(uses.iter().zip(windows))
        .map(|(key, (&uses, &window_ms))| Ok(Entry::new(key, number::limit(uses, window_ms)?)))
        .collect()
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

/// A release token's parts as the JS side keeps them: whose (`redis`, `sql`), its keys, its call id.
pub fn token_parts(token: &ReleaseToken) -> (&'static str, &[String], &str) {
    match token {
        ReleaseToken::Redis(r) => ("redis", &r.keys, &r.call_id),
        ReleaseToken::Sql(r) => ("sql", &r.keys, &r.call_id),
    }
}

/// The token the JS side's parts describe (an unknown `store`: code `invalid_argument:release`).
pub fn token_of(store: &str, keys: Vec<String>, call_id: String) -> Res<ReleaseToken> {
    match store {
        "redis" => Ok(ReleaseToken::Redis(RedisRelease { keys, call_id })),
        "sql" => Ok(ReleaseToken::Sql(SqlRelease { keys, call_id })),
        _ => Err(coded(
            "invalid_argument:release",
            format!("not a release token of this package: store {store:?}"),
        )),
    }
}

/// A failed call as the JS side's `CallErrorInfo` has it.
pub struct ErrorParts {
    /// The stable kind (`store`, `reply`, `protocol`, `unsupported`).
    pub kind: &'static str,
    /// The core's message.
    pub message: String,
    /// `store`: the client's own message.
    pub client_message: Option<String>,
    /// `reply`: whose reply.
    pub source: Option<&'static str>,
    /// `reply`: what it should have been.
    pub expected: Option<&'static str>,
    /// `reply`: what came, rendered briefly.
    pub got: Option<String>,
}

/// `error`'s parts.
pub fn error_parts(error: &CallError) -> ErrorParts {
    let (source, expected, got) = match error {
        CallError::Reply(e) => (Some(e.script), Some(e.expected), Some(e.got.clone())),
        CallError::Rows(e) => (Some(e.statement), Some(e.expected), Some(e.got.clone())),
        _ => (None, None, None),
    };
    ErrorParts {
        kind: error.kind(),
        message: error.to_string(),
        client_message: match error {
            CallError::Store { message } => Some(message.clone()),
            _ => None,
        },
        source,
        expected,
        got,
    }
}

/// A JS number in a reply: an integer when whole and within i64, else its text as it came.
pub fn reply_number(n: f64) -> Reply {
    number_or_text(n).map_or_else(Reply::Text, Reply::Int)
}

/// A JS number as an integer when whole and within i64, else its text (the core's `number_text`, not
/// `to_string`: the float formatter would cost the wasm package ~16 KB).
pub fn number_or_text(n: f64) -> Result<i64, String> {
    if n.fract() == 0.0 && n.abs() < 9.2e18 {
        Ok(n as i64)
    } else {
        Err(ratewindow_core::input::number_text(n))
    }
}

/// A list of JS values as one SQL value: integers when every item is one, else their texts.
pub fn sql_list(items: Vec<SqlValue>) -> SqlValue {
    if items.iter().all(|v| matches!(v, SqlValue::Int(_))) {
        SqlValue::Ints(
            items
                .into_iter()
                .filter_map(|v| match v {
                    SqlValue::Int(i) => Some(i),
                    _ => None,
                })
                .collect(),
        )
    } else {
        SqlValue::Texts(items.iter().map(ToString::to_string).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consume_is_two_steps_with_everything_in_the_record() {
        let mut calls = Calls::redis("p:".into(), None, true, 7).unwrap();
        let mut out = [0.0; LEN];
        let s = calls
            .consume_one(&mut out, "é".into(), 5.0, 1000.0, None, false)
            .unwrap()
            .unwrap();
        assert_eq!(out[KIND], StepKind::Script as u8 as f64);
        assert_eq!(out[BY_SHA1], 1.0);
        assert_eq!(out[SCRIPT], 0.0);
        let (k, a) = (out[KEYS] as usize, out[ARGS] as usize);
        let mut at = 0;
        let utf16: Vec<u16> = s.encode_utf16().collect();
        let mut pieces = Vec::new();
        for i in 0..k + a {
            let n = out[PIECES + i] as usize;
            pieces.push(String::from_utf16(&utf16[at..at + n]).unwrap());
            at += n;
        }
        assert_eq!(at, utf16.len());
        let id = out[ID] as u32;
        assert_eq!(pieces[..k], calls.keys(id).unwrap()[..]);
        assert_eq!(pieces[k..], calls.args(id).unwrap()[..]);
        assert_eq!(calls.in_progress(), 1);
        // A failure of the client is held for its error.
        assert!(calls.fail(&mut out, id, "boom".into()).unwrap().is_none());
        assert_eq!(out[KIND], StepKind::Error as u8 as f64);
        assert_eq!(out[HELD], 1.0);
        assert_eq!(calls.error(id).unwrap().kind(), "store");
        calls.end(id);
        assert_eq!(calls.in_progress(), 0);
    }

    #[test]
    fn a_batch_too_long_for_the_record_is_read_by_getters() {
        let mut calls = Calls::redis("p:".into(), None, true, 7).unwrap();
        let mut out = [0.0; LEN];
        let n = 30;
        let keys = (0..n).map(|i| format!("k{i}")).collect();
        let entries = entries(keys, &vec![1.0; n], &vec![1000.0; n]).unwrap();
        let s = calls
            .consume(&mut out, entries, true, None)
            .unwrap()
            .unwrap();
        assert_eq!((s.as_str(), out[KEYS]), ("", -1.0));
        assert_eq!(calls.keys(out[ID] as u32).unwrap().len(), n);
    }

    #[test]
    fn unknown_calls_and_tokens_are_refused() {
        let mut calls = Calls::sqlite("rw_", 1).unwrap();
        let mut out = [0.0; LEN];
        assert_eq!(
            calls.next(&mut out, 9).unwrap_err().code,
            "invalid_argument:call"
        );
        assert_eq!(
            token_of("x", vec![], String::new()).unwrap_err().code,
            "invalid_argument:release"
        );
        assert_eq!(
            calls
                .read(&mut out, "k".into(), "nope", 0.0, None)
                .unwrap_err()
                .code,
            "invalid_argument:query"
        );
    }
}
