//! Call machines: every store operation as a sans-I/O state machine, written once for every host.
//!
//! A host starts a [`Call`] with an [`Op`] on a store's planner ([`Redis`],
//! [`Postgres`](crate::sql::Postgres), [`Sqlite`](crate::sql::Sqlite)), then loops:
//!
//! ```text
//!   loop {
//!       match call.next() {
//!           Next::Run(command) => run it with the client, then
//!               call.feed(Fed::Reply(..)) | call.feed(Fed::Rows(..)) | call.fail(message)
//!           Next::Done(result) => return result   // an Outcome, or a CallError
//!       }
//!   }
//! ```
//!
//! Everything that decides lives here: which script or statement runs next, what a reply or a
//! client's failure means (`NOSCRIPT` → the script in full; `CROSSSLOT` → key by key with the give-back;
//! SQLite's `ROLLBACK` after a failed step), the verdict arithmetic, and the typed errors. A host only
//! converts values and runs commands, in its own idiom (an `await` loop in TypeScript, a sync and an
//! asyncio driver in Python, imports in the component).
//!
//! The models: quinn-proto (`poll_transmit` / `handle_event`), rustls' unbuffered API (a state to act
//! on, then the data back), h11 (`next_event` / `send`).

mod ids;
#[cfg(feature = "lock")]
mod lock;
#[cfg(feature = "mixed")]
mod mixed;
#[cfg(feature = "mixed")]
mod mixed_redis;
#[cfg(feature = "rates")]
mod rates;
mod redis;

use serde::{Deserialize, Serialize};

pub use self::ids::CallIds;
#[cfg(feature = "lock-commands")]
pub use self::lock::LockCommands;
#[cfg(feature = "lock")]
pub use self::lock::{AnswerReply, LockAnswers, LOCK};
#[cfg(feature = "mixed")]
pub use self::mixed::check_mixed;
#[cfg(feature = "mixed")]
pub use self::mixed_redis::{MIXED, MIXED_RACES};
#[cfg(all(feature = "rates", feature = "sql"))]
pub(crate) use self::rates::postgres_rates_purge_ctes;
#[cfg(feature = "rates")]
pub use self::rates::{RateOp, COUNTER, GCRA};
pub use self::redis::Redis;
use crate::redis::{Reply, ReplyError, Script};
use crate::sql::{RowError, SqlRelease, SqlValue, Statement};
use crate::{BatchVerdict, Entry, Window};

/// One operation a host asks a store for. The same operations exist on every store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sliding log: count one call against every entry, all or nothing. `call_id` must be unique to
    /// this call (16 random bytes in hex, say): it keeps calls apart and lets a release find them.
    Consume {
        /// The entries.
        entries: Vec<Entry>,
        /// The call's id.
        call_id: String,
    },
    /// Sliding log: the verdict a consume would give, recording, trimming and creating nothing.
    Peek {
        /// The entries.
        entries: Vec<Entry>,
    },
    /// Gives back exactly the call an allowed consume recorded.
    Release {
        /// The consume's token.
        token: ReleaseToken,
    },
    /// Fixed window: adds `amount` hits (negative gives back), opening a window of `decay` if none runs.
    Hit {
        /// The key.
        key: String,
        /// The window a first hit opens.
        decay: Window,
        /// Hits to add.
        amount: i64,
    },
    /// Fixed window, atomically: one hit if the key has fewer than `max` hits, else nothing.
    Attempt {
        /// The key.
        key: String,
        /// Hits allowed in a window.
        max: i64,
        /// The window a first hit opens.
        decay: Window,
    },
    /// Fixed window, atomically: `cost` hits if the key's count plus `cost` is at most `max`, else
    /// nothing (a window opens with `cost` hits when `cost <= max`). Cargo feature `weights`; Redis
    /// and SQLite (PostgreSQL answers `Unsupported`).
    #[cfg(feature = "weights")]
    AttemptCost {
        /// The key.
        key: String,
        /// Hits allowed in a window.
        max: i64,
        /// The window a first hit opens.
        decay: Window,
        /// Hits the attempt takes, at least 1.
        cost: u32,
    },
    /// Fixed window: reads the key's window and answers `query`.
    Read {
        /// The key.
        key: String,
        /// What to answer.
        query: WindowQuery,
    },
    /// Fixed window: sets the count to zero, keeping the window.
    ResetAttempts {
        /// The key.
        key: String,
    },
    /// Fixed window: removes the count and the window.
    Clear {
        /// The key.
        key: String,
    },
}

/// What a [`Op::Read`] answers about a fixed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowQuery {
    /// Hits in the current window; 0 without one → [`Outcome::Int`].
    Attempts,
    /// Whether the key has `max` or more hits in a window that runs → [`Outcome::Bool`].
    TooManyAttempts {
        /// The maximum.
        max: i64,
    },
    /// `max` minus the hits, floored at 0 → [`Outcome::Int`].
    Remaining {
        /// The maximum.
        max: i64,
    },
    /// Whole seconds until the window ends, rounded up; 0 without one → [`Outcome::Int`].
    AvailableIn,
    /// Milliseconds until the window ends; 0 without one → [`Outcome::Int`].
    AvailableInMs,
}

impl WindowQuery {
    /// The answer for a window of `count` hits ending in `ms_left` ms (`None`: no window runs).
    pub fn answer(self, window: Option<crate::redis::WindowState>) -> Outcome {
        let (count, ms_left) = window.map_or((0, 0), |w| (w.count, w.ms_left));
        match self {
            WindowQuery::Attempts => Outcome::Int(count),
            WindowQuery::TooManyAttempts { max } => Outcome::Bool(ms_left > 0 && count >= max),
            WindowQuery::Remaining { max } => Outcome::Int(crate::fixed::remaining(count, max)),
            WindowQuery::AvailableIn => Outcome::Int(ms_left.div_ceil(1000) as i64),
            WindowQuery::AvailableInMs => Outcome::Int(ms_left.min(i64::MAX as u64) as i64),
        }
    }
}

/// What gives an allowed consume's call back: opaque to hosts, which keep it and hand it to
/// [`Op::Release`]. Serialisable, so a host may keep it as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "store", rename_all = "lowercase")]
pub enum ReleaseToken {
    /// A Redis call: the keys it recorded under (every key, even when counted key by key) and its id.
    Redis(crate::redis::RedisRelease),
    /// A SQL call (PostgreSQL, SQLite): the keys and the id of its rows.
    Sql(SqlRelease),
}

/// What a call ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A consume or a peek: the verdict, and for an allowed consume the token that gives it back.
    Verdict {
        /// The verdict.
        verdict: BatchVerdict,
        /// `Some` exactly for an allowed consume.
        release: Option<ReleaseToken>,
    },
    /// A hit: the count after it, and ms until its window ends.
    Hit {
        /// Hits in the window after this one.
        count: i64,
        /// Ms until the window ends.
        reset_after_ms: u64,
    },
    /// An attempt: whether the hit was counted, the count after the call and ms until the window
    /// ends (0 when no window runs).
    Attempt {
        /// Whether the hit was counted (the key had fewer than `max`).
        allowed: bool,
        /// Hits in the window after the call.
        count: i64,
        /// Ms until the window ends.
        reset_after_ms: u64,
    },
    /// A number ([`WindowQuery`] answers).
    Int(i64),
    /// A yes or no ([`WindowQuery::TooManyAttempts`]).
    Bool(bool),
    /// Done, nothing to say (release, reset, clear).
    Unit,
    /// A lock's holder ([`LockOp::Owner`](crate::lock::LockOp::Owner)): its owner token, or `None`.
    #[cfg(feature = "lock")]
    Owner(Option<String>),
}

/// Why a call failed. Hosts map each kind to their language's typed error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The client failed (connection lost, timeout, a server error other than the ones a machine
    /// handles). The call may or may not have counted on the server.
    #[error("the store's client failed: {message}")]
    Store {
        /// The client's message.
        message: String,
    },
    /// A Redis reply of the wrong shape: never decoded into a verdict.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// SQL rows of the wrong shape: never decoded into a verdict.
    #[error(transparent)]
    Rows(#[from] RowError),
    /// The machine was fed what it did not ask for (a host bug: rows to a Redis call, a feed after
    /// the outcome).
    #[error("the call was fed {got} while it waited for {expected}")]
    Protocol {
        /// What the machine waited for.
        expected: &'static str,
        /// What it got.
        got: &'static str,
    },
    /// The operation does not exist on this store (e.g. a Redis release token given to SQLite).
    #[error("{0}")]
    Unsupported(&'static str),
}

impl CallError {
    /// A stable kind name, the same in every language: `store`, `reply`, `protocol`, `unsupported`.
    /// Row errors are `reply` errors too (the store answered something no statement gives).
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Store { .. } => "store",
            CallError::Reply(_) | CallError::Rows(_) => "reply",
            CallError::Protocol { .. } => "protocol",
            CallError::Unsupported(_) => "unsupported",
        }
    }
}

/// A give-back that failed: the consume was refused or failed after counting some of its keys one by
/// one (Redis Cluster), and giving those back failed too. The call's own result stands; the host
/// reports this (Node: `onGiveBackError`, Python: a warning), and may release `keys` again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveBackFailure {
    /// The Redis keys whose member could not be removed.
    pub keys: Vec<String>,
    /// The call's id (its member).
    pub call_id: String,
    /// The client's message.
    pub message: String,
}

/// A command for the host to run with its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// Redis: run `script` with `keys` and `args` — `EVALSHA script.sha1` when `by_sha1`, else
    /// `EVAL script.source`. Feed back the reply ([`Fed::Reply`]) or the client's error message.
    Script {
        /// The script.
        script: &'static Script,
        /// `KEYS`.
        keys: &'a [String],
        /// `ARGV`.
        args: &'a [String],
        /// `EVALSHA` (true) or `EVAL` (false).
        by_sha1: bool,
    },
    /// Redis: run one plain command (not a script): `args[0]` is its name, `args[1]` its one key
    /// (what a Cluster client routes by), the rest its arguments — e.g. the lock's `SET key owner NX
    /// PX ttl`. Feed back the reply as the client gives it ([`Fed::Reply`]) or the client's error
    /// message. Asked for only by a [`Redis`] store made with [`Redis::plain_commands`].
    Plain {
        /// The command: its name, its key, its arguments.
        args: &'a [String],
    },
    /// SQL: run `statements` in order on one connection; feed back the rows of the last one
    /// ([`Fed::Rows`], every column as a [`SqlValue`]), or the driver's error message as soon as one
    /// fails (run none after it).
    Sql {
        /// The statements.
        statements: &'a [Statement],
    },
}

/// What a host feeds back after running a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fed {
    /// A Redis reply.
    Reply(Reply),
    /// The rows of the last statement of a [`Command::Sql`].
    Rows(Vec<Vec<SqlValue>>),
}

impl Fed {
    fn name(&self) -> &'static str {
        match self {
            Fed::Reply(_) => "a Redis reply",
            Fed::Rows(_) => "rows",
        }
    }
}

/// What the host does next.
#[derive(Debug)]
pub enum Next<'a> {
    /// Run this command, then [`Call::feed`] its result or [`Call::fail`] with the client's error.
    Run(Command<'a>),
    /// The call is over. Any further `next` answers a [`CallError::Protocol`].
    Done(Result<Outcome, CallError>),
}

/// One store operation in progress. Start it on a store's planner; drive it with [`next`](Call::next),
/// [`feed`](Call::feed) and [`fail`](Call::fail) until it is done.
///
/// After [`Next::Done`], [`give_back_failures`](Call::give_back_failures) lists the give-backs that
/// failed on the way (Redis Cluster only), for the host to report.
#[derive(Debug)]
#[must_use = "a call does nothing until the host drives it"]
pub struct Call {
    inner: Inner,
    give_back_failures: Vec<GiveBackFailure>,
    failed_release: Option<ReleaseToken>,
}

#[derive(Debug)]
enum Inner {
    Redis(self::redis::RedisCall),
    #[cfg(feature = "sql")]
    Sql(crate::sql::SqlCall),
    #[cfg(feature = "lock")]
    Lock(Box<self::lock::LockCall>),
    #[cfg(feature = "rates")]
    Rate(Box<self::rates::RateCall>),
    #[cfg(feature = "mixed")]
    Mixed(Box<self::mixed::MixedCall>),
    #[cfg(feature = "mixed")]
    MixedRedis(Box<self::mixed_redis::MixedRedisCall>),
    Finished(Option<Result<Outcome, CallError>>),
}

impl Call {
    pub(crate) fn redis(call: self::redis::RedisCall) -> Call {
        Call {
            inner: Inner::Redis(call),
            give_back_failures: Vec::new(),
            failed_release: None,
        }
    }

    #[cfg(feature = "sql")]
    pub(crate) fn sql(call: crate::sql::SqlCall) -> Call {
        Call {
            inner: Inner::Sql(call),
            give_back_failures: Vec::new(),
            failed_release: None,
        }
    }

    #[cfg(feature = "lock")]
    pub(crate) fn lock(call: self::lock::LockCall) -> Call {
        Call {
            inner: Inner::Lock(Box::new(call)),
            ..Call::done(Ok(Outcome::Unit))
        }
    }

    #[cfg(feature = "rates")]
    pub(crate) fn rate(call: self::rates::RateCall) -> Call {
        Call {
            inner: Inner::Rate(Box::new(call)),
            ..Call::done(Ok(Outcome::Unit))
        }
    }

    #[cfg(feature = "mixed")]
    pub(crate) fn mixed(call: self::mixed::MixedCall) -> Call {
        Call {
            inner: Inner::Mixed(Box::new(call)),
            ..Call::done(Ok(Outcome::Unit))
        }
    }

    #[cfg(feature = "mixed")]
    pub(crate) fn mixed_redis(call: self::mixed_redis::MixedRedisCall) -> Call {
        Call {
            inner: Inner::MixedRedis(Box::new(call)),
            ..Call::done(Ok(Outcome::Unit))
        }
    }

    /// A call that is over before it starts (an empty batch, a refused argument).
    pub(crate) fn done(result: Result<Outcome, CallError>) -> Call {
        Call {
            inner: Inner::Finished(Some(result)),
            give_back_failures: Vec::new(),
            failed_release: None,
        }
    }

    /// What to do next: run a command, or take the result (given once).
    // Not an iterator: a call is fed between two `next`s, as h11's `next_event` is.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Next<'_> {
        if let Some(result) = match &mut self.inner {
            Inner::Redis(call) => {
                call.result(&mut self.give_back_failures, &mut self.failed_release)
            }
            #[cfg(feature = "sql")]
            Inner::Sql(call) => call.result(&mut self.failed_release),
            #[cfg(feature = "lock")]
            Inner::Lock(call) => call.result(),
            #[cfg(feature = "rates")]
            Inner::Rate(call) => call.result(),
            #[cfg(feature = "mixed")]
            Inner::Mixed(call) => call.result(),
            #[cfg(feature = "mixed")]
            Inner::MixedRedis(call) => call.result(&mut self.failed_release),
            Inner::Finished(_) => None,
        } {
            self.inner = Inner::Finished(Some(result));
        }
        match &mut self.inner {
            Inner::Redis(call) => Next::Run(call.command()),
            #[cfg(feature = "sql")]
            Inner::Sql(call) => Next::Run(call.command()),
            #[cfg(feature = "lock")]
            Inner::Lock(call) => Next::Run(call.command()),
            #[cfg(feature = "rates")]
            Inner::Rate(call) => Next::Run(call.command()),
            #[cfg(feature = "mixed")]
            Inner::Mixed(call) => Next::Run(call.command()),
            #[cfg(feature = "mixed")]
            Inner::MixedRedis(call) => Next::Run(call.command()),
            Inner::Finished(result) => {
                Next::Done(result.take().unwrap_or(Err(CallError::Protocol {
                    expected: "nothing (the call is over)",
                    got: "a request for its next step",
                })))
            }
        }
    }

    /// Feeds the result of the command [`next`](Call::next) asked for.
    pub fn feed(&mut self, fed: Fed) {
        match &mut self.inner {
            Inner::Redis(call) => call.feed(Ok(fed)),
            #[cfg(feature = "sql")]
            Inner::Sql(call) => call.feed(Ok(fed)),
            #[cfg(feature = "lock")]
            Inner::Lock(call) => call.feed(Ok(fed)),
            #[cfg(feature = "rates")]
            Inner::Rate(call) => call.feed(Ok(fed)),
            #[cfg(feature = "mixed")]
            Inner::Mixed(call) => call.feed(Ok(fed)),
            #[cfg(feature = "mixed")]
            Inner::MixedRedis(call) => call.feed(Ok(fed)),
            Inner::Finished(_) => self.protocol("nothing (the call is over)", fed.name()),
        }
    }

    /// Feeds the client's failure to run the command `next` asked for (its error message, as the
    /// client gives it: `NOSCRIPT …`, `CROSSSLOT …`, `database is locked`, `Connection closed` …).
    pub fn fail(&mut self, message: impl Into<String>) {
        let message = message.into();
        match &mut self.inner {
            Inner::Redis(call) => call.feed(Err(message)),
            #[cfg(feature = "sql")]
            Inner::Sql(call) => call.feed(Err(message)),
            #[cfg(feature = "lock")]
            Inner::Lock(call) => call.feed(Err(message)),
            #[cfg(feature = "rates")]
            Inner::Rate(call) => call.feed(Err(message)),
            #[cfg(feature = "mixed")]
            Inner::Mixed(call) => call.feed(Err(message)),
            #[cfg(feature = "mixed")]
            Inner::MixedRedis(call) => call.feed(Err(message)),
            Inner::Finished(_) => self.protocol("nothing (the call is over)", "a failure"),
        }
    }

    fn protocol(&mut self, expected: &'static str, got: &'static str) {
        self.inner = Inner::Finished(Some(Err(CallError::Protocol { expected, got })));
    }

    /// The give-backs that failed during the call (Redis Cluster's key-by-key counting only).
    pub fn give_back_failures(&self) -> &[GiveBackFailure] {
        &self.give_back_failures
    }

    /// Takes the give-back failures, leaving none.
    pub fn take_give_back_failures(&mut self) -> Vec<GiveBackFailure> {
        std::mem::take(&mut self.give_back_failures)
    }

    /// After a consume ended in a [`CallError::Store`] or [`CallError::Reply`] whose command may have
    /// run on the server: the token that gives that call back, by its `call_id` (an [`Op::Release`]
    /// like an allowed consume's). Giving back is idempotent — a member that was never added is not
    /// removed — so a host may run it whether or not the call counted. The failure guard does, when
    /// its policy refused the call (`ratewindow_core::guard`, "the failed call").
    ///
    /// - **Redis**: the one script may have run before its reply was lost (a connection cut after the
    ///   server answered, a client timeout): `Some`. A call counted key by key (Redis Cluster) gives its
    ///   keys back itself and answers `None`. A batch mixing algorithms: `Some` when its write (the
    ///   second script) failed, for its sliding-log calls; a failed read wrote nothing.
    /// - **PostgreSQL**: the one statement commits on its own; a connection lost after the commit
    ///   leaves the call counted: `Some`.
    /// - **SQLite**: a failed step is rolled back and a failed `COMMIT` commits nothing: `None`.
    /// - **The fixed window** (`hit`, `attempt`): `None`. A hit has no id of its own, and taking one
    ///   hit off a key whose failed hit never ran would take someone else's: nothing is exact there.
    pub fn failed_release(&self) -> Option<&ReleaseToken> {
        self.failed_release.as_ref()
    }

    /// Takes [`failed_release`](Call::failed_release)'s token, leaving none.
    pub fn take_failed_release(&mut self) -> Option<ReleaseToken> {
        self.failed_release.take()
    }

    /// Drives the call to its end with a blocking `run` (tests, Rust hosts): `run` answers each
    /// command with what to feed back, or the client's error message.
    pub fn drive(
        mut self,
        mut run: impl FnMut(Command<'_>) -> Result<Fed, String>,
    ) -> (Result<Outcome, CallError>, Vec<GiveBackFailure>) {
        loop {
            let result = match self.next() {
                Next::Done(result) => result,
                Next::Run(command) => {
                    match run(command) {
                        Ok(fed) => self.feed(fed),
                        Err(message) => self.fail(message),
                    }
                    continue;
                }
            };
            return (result, self.take_give_back_failures());
        }
    }
}

/// How the client's error messages are read, once for every host.
///
/// Clients spell a server error differently: node-redis and ioredis keep the server's text
/// (`NOSCRIPT No matching script…`), redis-py raises `NoScriptError` with the text after the code
/// (hosts feed `"NoScriptError: No matching script…"`, the class name first), redis-rs writes
/// `… - NoScriptError: …` and `CrossSlot: …`. Each rule knows every spelling.
pub mod errors {
    /// The server's `NOSCRIPT`: the script is not loaded; sending it in full is safe (nothing ran).
    pub fn is_noscript(message: &str) -> bool {
        has(message, "NOSCRIPT")
            || has(message, "NoScriptError")
            || message.starts_with("No matching script")
    }

    /// The cluster's `CROSSSLOT`: the keys span slots; the server refused before running anything.
    /// redis-py's cluster client refuses before sending (`RedisClusterException: EVALSHA - all keys
    /// must map to the same key slot`): nothing ran either.
    pub fn is_crossslot(message: &str) -> bool {
        has(message, "CROSSSLOT")
            || has(message, "CrossSlot")
            || has(message, "don't hash to the same slot")
            || has(message, "must map to the same key slot")
    }

    /// Whether `message` contains `needle`: a byte window, not `str::contains`, whose substring
    /// searcher costs the WebAssembly component ~2.6 KB (messages are short; speed is no matter).
    fn has(message: &str, needle: &str) -> bool {
        message
            .as_bytes()
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }
}
