//! The sharded store's protocol: how a shard (a process or worker of a multi-process app) asks the
//! manager that owns the counts, and how the manager answers. Written once here; the Node and Python
//! bindings only move the text over the channel the processes already have (`process.send`, a
//! `worker_threads` port, a `multiprocessing` connection) and run the operation on the manager's store.
//!
//! Every operation is one message and one answer, each a compact JSON object in one string (so it
//! crosses Node's IPC, a structured clone and a pickle unchanged):
//!
//! ```text
//! request  {"rw":1,"id":7,"op":"consume","key":"click:alice","uses":3,"windowMs":10000}
//!          {"rw":1,"id":8,"op":"consumeMany","entries":[{"key":"a","uses":1,"windowMs":500}]}
//!          {"rw":1,"id":9,"op":"release","token":4}
//!          {"rw":1,"id":10,"op":"hit","key":"k","decayMs":60000,"amount":1}
//! answer   {"rw":1,"id":7,"verdict":{"allowed":true,"retryAfterMs":0,"limit":3,"remaining":2,...}}
//!          {"rw":1,"id":10,"value":4}     (a number, a boolean, or null for reset / clear / release)
//!          {"rw":1,"id":11,"hit":{"count":2,"resetAfterMs":5000}}
//!          {"rw":1,"id":12,"attempt":{"allowed":true,"count":1,"resetAfterMs":60000}}
//!          {"rw":1,"id":13,"error":{"kind":"malformed","message":"missing field `key`"}}
//! ```
//!
//! The shard side ([`ShardClient`]) numbers its requests and remembers what each one expects, so an
//! answer of the wrong shape is refused (a `reply` failure) and a late answer (after a timeout) is
//! dropped. The manager side ([`decode_request`]) validates a message before any store sees it: text
//! that is not a request of this protocol is answered with a typed error (`malformed`, or `unknown`
//! for an operation or version it does not know), never a crash.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version every message carries as `rw`.
pub const PROTOCOL: u64 = 1;

/// The algorithm of a limit that crosses; absent on the wire, the sliding log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardAlgorithm {
    /// GCRA (`uses` per `windowMs`, up to `burst` at once).
    Gcra,
    /// The sliding-window counter.
    Counter,
}

impl ShardAlgorithm {
    /// The algorithm's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            ShardAlgorithm::Gcra => "gcra",
            ShardAlgorithm::Counter => "counter",
        }
    }
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The rule a request's `algorithm`, `uses`, `windowMs` and `burst` name, checked by the core's
/// limits (the same checks as every store's): a `burst` without `"algorithm":"gcra"` is refused.
pub fn shard_rule(
    algorithm: Option<ShardAlgorithm>,
    uses: u32,
    window_ms: u64,
    burst: Option<u32>,
) -> Result<crate::Rule, ShardFailure> {
    let limit = |uses: u32| {
        crate::Limit::new(uses.into(), window_ms).map_err(|e| {
            ShardFailure::new(FailureKind::InvalidLimit, e.to_string())
                .with_field(Some(e.field.name().to_owned()))
        })
    };
    let rate = |e: crate::gcra::RateError| {
        ShardFailure::new(FailureKind::InvalidLimit, e.to_string())
            .with_field(Some(e.field.name().to_owned()))
    };
    match (algorithm, burst) {
        (None, None) => limit(uses).map(crate::Rule::Sliding),
        (None | Some(ShardAlgorithm::Counter), Some(_)) => Err(ShardFailure::new(
            FailureKind::Malformed,
            "`burst` is a GCRA limit's only (\"algorithm\":\"gcra\")",
        )),
        (Some(ShardAlgorithm::Gcra), burst) => {
            crate::gcra::Gcra::new(uses.into(), window_ms, burst.unwrap_or(uses).into())
                .map(crate::Rule::Gcra)
                .map_err(rate)
        }
        (Some(ShardAlgorithm::Counter), None) => crate::counter::Counter::new(limit(uses)?)
            .map(crate::Rule::Counter)
            .map_err(rate),
    }
}

/// One entry of a batch, as it crosses. `algorithm`, `burst` and `cost` are sent only when they are
/// not the sliding log's defaults (none, none, 1), so a plain entry crosses as before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// The key counted.
    pub key: String,
    /// Calls allowed per window.
    pub uses: u32,
    /// The window, in milliseconds.
    #[serde(rename = "windowMs")]
    pub window_ms: u64,
    /// GCRA or the sliding-window counter; absent: the sliding log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<ShardAlgorithm>,
    /// A GCRA limit's burst (absent: `uses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Uses the call costs this entry (absent: 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cost: u32,
}

impl ShardEntry {
    /// A sliding-log entry costing 1.
    pub fn sliding(key: String, uses: u32, window_ms: u64) -> ShardEntry {
        ShardEntry {
            key,
            uses,
            window_ms,
            algorithm: None,
            burst: None,
            cost: 1,
        }
    }

    /// An entry counted under `rule`, costing `cost`: the rule's defaults (the sliding log, a GCRA burst
    /// equal to `uses`, a cost of 1) are left off, so what crosses is what a plain entry always was.
    pub fn of_rule(key: String, rule: crate::Rule, cost: u32) -> ShardEntry {
        let (algorithm, uses, window_ms, burst) = match rule {
            crate::Rule::Sliding(l) => (None, l.uses(), l.window_ms(), None),
            crate::Rule::Gcra(g) => (
                Some(ShardAlgorithm::Gcra),
                g.uses(),
                g.window_ms(),
                (g.burst() != g.uses()).then_some(g.burst()),
            ),
            crate::Rule::Counter(c) => (
                Some(ShardAlgorithm::Counter),
                c.limit().uses(),
                c.limit().window_ms(),
                None,
            ),
        };
        ShardEntry {
            key,
            uses,
            window_ms,
            algorithm,
            burst,
            cost,
        }
    }

    /// Whether the entry is a sliding-log entry costing 1 (what every manager has always taken).
    pub fn is_plain(&self) -> bool {
        self.algorithm.is_none() && self.burst.is_none() && self.cost == 1
    }

    /// Its rule, checked ([`shard_rule`]).
    pub fn rule(&self) -> Result<crate::Rule, ShardFailure> {
        shard_rule(self.algorithm, self.uses, self.window_ms, self.burst)
    }
}

/// One operation a shard asks the manager to run on its store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub enum ShardOp {
    /// One call; `algorithm`, `burst`, `cost` as in [`ShardEntry`] (sent only when not the defaults).
    Consume {
        key: String,
        uses: u32,
        #[serde(rename = "windowMs")]
        window_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        algorithm: Option<ShardAlgorithm>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<u32>,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        cost: u32,
    },
    Peek {
        key: String,
        uses: u32,
        #[serde(rename = "windowMs")]
        window_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        algorithm: Option<ShardAlgorithm>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<u32>,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        cost: u32,
    },
    ConsumeMany {
        entries: Vec<ShardEntry>,
    },
    PeekMany {
        entries: Vec<ShardEntry>,
    },
    /// Gives back the call an allowed `consumeMany` recorded (its verdict's `release` token).
    Release {
        token: u64,
    },
    Hit {
        key: String,
        #[serde(rename = "decayMs")]
        decay_ms: u64,
        amount: i64,
    },
    HitWindow {
        key: String,
        #[serde(rename = "decayMs")]
        decay_ms: u64,
        amount: i64,
    },
    /// `cost` hits (absent: 1), counted only when the count plus `cost` is at most `max`.
    Attempt {
        key: String,
        max: i64,
        #[serde(rename = "decayMs")]
        decay_ms: u64,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        cost: u32,
    },
    Attempts {
        key: String,
    },
    TooManyAttempts {
        key: String,
        max: i64,
    },
    Remaining {
        key: String,
        max: i64,
    },
    AvailableIn {
        key: String,
    },
    AvailableInMs {
        key: String,
    },
    ResetAttempts {
        key: String,
    },
    Clear {
        key: String,
    },
    /// The lock's one try (`ttl` in seconds, as the store's `lock(key, ttl, owner)` takes it).
    LockAcquire {
        key: String,
        owner: String,
        ttl: f64,
    },
    /// A release by `owner` (frees the lock only for its owner).
    LockRelease {
        key: String,
        owner: String,
        ttl: f64,
    },
    /// A release by anyone.
    LockForceRelease {
        key: String,
        owner: String,
        ttl: f64,
    },
    /// Who holds the lock: the owner token, or null.
    LockOwner {
        key: String,
        owner: String,
        ttl: f64,
    },
    /// Forgets a GCRA bucket or a counter (`store.reset(key, limit)`).
    Reset {
        key: String,
        algorithm: ShardAlgorithm,
        uses: u32,
        #[serde(rename = "windowMs")]
        window_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<u32>,
    },
}

/// The operations' names on the wire, in the order of [`ShardOp`].
pub const OPS: [&str; 20] = [
    "consume",
    "peek",
    "consumeMany",
    "peekMany",
    "release",
    "hit",
    "hitWindow",
    "attempt",
    "attempts",
    "tooManyAttempts",
    "remaining",
    "availableIn",
    "availableInMs",
    "resetAttempts",
    "clear",
    "lockAcquire",
    "lockRelease",
    "lockForceRelease",
    "lockOwner",
    "reset",
];

/// What shape of answer an operation expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A verdict without `blocked` (consume, peek).
    Verdict,
    /// A batch verdict (consumeMany, peekMany).
    Batch,
    /// A whole number (hit, attempts, remaining, availableIn, availableInMs).
    Number,
    /// A boolean (tooManyAttempts).
    Bool,
    /// `null` (release, resetAttempts, clear).
    Unit,
    /// `{count, resetAfterMs}` (hitWindow).
    Hit,
    /// `{allowed, count, resetAfterMs}` (attempt).
    Attempt,
    /// A string or null (lockOwner).
    Owner,
}

impl ShardOp {
    /// One call (`consume`, else `peek`) counted as `entry` says.
    pub fn single(consume: bool, entry: ShardEntry) -> ShardOp {
        let ShardEntry {
            key,
            uses,
            window_ms,
            algorithm,
            burst,
            cost,
        } = entry;
        if consume {
            ShardOp::Consume {
                key,
                uses,
                window_ms,
                algorithm,
                burst,
                cost,
            }
        } else {
            ShardOp::Peek {
                key,
                uses,
                window_ms,
                algorithm,
                burst,
                cost,
            }
        }
    }

    /// `reset` of `entry`'s GCRA bucket or counter; `None` for a sliding-log entry (nothing to reset).
    pub fn reset(entry: ShardEntry) -> Option<ShardOp> {
        Some(ShardOp::Reset {
            algorithm: entry.algorithm?,
            key: entry.key,
            uses: entry.uses,
            window_ms: entry.window_ms,
            burst: entry.burst,
        })
    }

    /// The operation's name on the wire.
    pub fn name(&self) -> &'static str {
        OPS[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            ShardOp::Consume { .. } => 0,
            ShardOp::Peek { .. } => 1,
            ShardOp::ConsumeMany { .. } => 2,
            ShardOp::PeekMany { .. } => 3,
            ShardOp::Release { .. } => 4,
            ShardOp::Hit { .. } => 5,
            ShardOp::HitWindow { .. } => 6,
            ShardOp::Attempt { .. } => 7,
            ShardOp::Attempts { .. } => 8,
            ShardOp::TooManyAttempts { .. } => 9,
            ShardOp::Remaining { .. } => 10,
            ShardOp::AvailableIn { .. } => 11,
            ShardOp::AvailableInMs { .. } => 12,
            ShardOp::ResetAttempts { .. } => 13,
            ShardOp::Clear { .. } => 14,
            ShardOp::LockAcquire { .. } => 15,
            ShardOp::LockRelease { .. } => 16,
            ShardOp::LockForceRelease { .. } => 17,
            ShardOp::LockOwner { .. } => 18,
            ShardOp::Reset { .. } => 19,
        }
    }

    /// The answer it expects.
    pub fn expects(&self) -> Expect {
        expects(self.name()).expect("every op has an answer shape")
    }

    /// How long the manager keeps an allowed `consumeMany`'s give-back: its longest window (a release
    /// after that gives back nothing, every entry having left its window). 0 for every other operation.
    pub fn hold_ms(&self) -> u64 {
        match self {
            ShardOp::ConsumeMany { entries } => {
                entries.iter().map(|e| e.window_ms).max().unwrap_or(0)
            }
            _ => 0,
        }
    }
}

/// The answer shape of the operation named `op`, if it is one.
pub fn expects(op: &str) -> Option<Expect> {
    Some(match op {
        "consume" | "peek" => Expect::Verdict,
        "consumeMany" | "peekMany" => Expect::Batch,
        "hit" | "attempts" | "remaining" | "availableIn" | "availableInMs" => Expect::Number,
        "tooManyAttempts" | "lockAcquire" | "lockRelease" | "lockForceRelease" => Expect::Bool,
        "lockOwner" => Expect::Owner,
        "release" | "resetAttempts" | "clear" | "reset" => Expect::Unit,
        "hitWindow" => Expect::Hit,
        "attempt" => Expect::Attempt,
        _ => return None,
    })
}

/// A request: the shard's id for it and the operation.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardRequest {
    /// The shard's number for this request; the answer carries it back.
    pub id: u64,
    /// The operation.
    pub op: ShardOp,
}

/// Why a request failed, as it crosses (and as the shard raises it, in its language's error type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The manager could not read the request (not JSON, a missing or mistyped field).
    Malformed,
    /// A protocol version or an operation the manager does not know.
    Unknown,
    /// The manager's store has no such operation (a store of the user's own without `hit` ...).
    Unsupported,
    /// The manager's store refused a limit (`field`: the engine's `uses` or `window_ms`).
    InvalidLimit,
    /// The manager's store refused an argument (`field` names it).
    InvalidArgument,
    /// The manager's store refused an argument's type.
    Type,
    /// The manager's store failed (its client failed): a store failure on the shard too.
    Store,
    /// An answer of the wrong shape (from the manager's store, or the manager).
    Reply,
    /// A bug in the manager (its store threw something else).
    Internal,
    /// No answer within the shard's timeout (never crosses: the shard makes it).
    Timeout,
    /// The channel to the manager closed (never crosses: the shard makes it).
    Closed,
}

impl FailureKind {
    /// The kind's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Malformed => "malformed",
            FailureKind::Unknown => "unknown",
            FailureKind::Unsupported => "unsupported",
            FailureKind::InvalidLimit => "invalid_limit",
            FailureKind::InvalidArgument => "invalid_argument",
            FailureKind::Type => "type",
            FailureKind::Store => "store",
            FailureKind::Reply => "reply",
            FailureKind::Internal => "internal",
            FailureKind::Timeout => "timeout",
            FailureKind::Closed => "closed",
        }
    }

    /// The kind named `name` (an unknown name is `internal`).
    pub fn from_name(name: &str) -> FailureKind {
        serde_json::from_value(Value::String(name.to_owned())).unwrap_or(FailureKind::Internal)
    }

    /// Whether the shard raises it as a store failure (its language's `StoreError`): everything but a
    /// refused argument, which is the caller's mistake wherever it is found.
    pub fn is_store_failure(self) -> bool {
        !matches!(
            self,
            FailureKind::InvalidLimit | FailureKind::InvalidArgument | FailureKind::Type
        )
    }
}

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardFailure {
    /// Why.
    pub kind: FailureKind,
    /// In words.
    pub message: String,
    /// The refused field, for `invalid_limit` and `invalid_argument`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ShardFailure {
    /// A failure of `kind` with `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> ShardFailure {
        ShardFailure {
            kind,
            message: message.into(),
            field: None,
        }
    }

    /// The failure with `field`.
    pub fn with_field(mut self, field: Option<String>) -> ShardFailure {
        self.field = field;
        self
    }

    /// A shard's timeout after `timeout_ms`.
    pub fn timeout(op: &str, timeout_ms: u64) -> ShardFailure {
        ShardFailure::new(
            FailureKind::Timeout,
            format!("the shard manager did not answer {op} within {timeout_ms} ms"),
        )
    }

    /// The channel to the manager closed with the request under way.
    pub fn closed(op: &str) -> ShardFailure {
        ShardFailure::new(
            FailureKind::Closed,
            format!("the channel to the shard manager closed before it answered {op}"),
        )
    }
}

/// A verdict as it crosses. Times are whole milliseconds; `release` is the manager's token for an
/// allowed `consumeMany`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ShardVerdict {
    pub allowed: bool,
    pub retry_after_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_timestamp: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<u64>,
}

/// A fixed-window hit's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ShardHit {
    pub count: i64,
    pub reset_after_ms: u64,
}

/// A fixed-window attempt's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ShardAttempt {
    pub allowed: bool,
    pub count: i64,
    pub reset_after_ms: u64,
}

/// The value a request answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardValue {
    /// A verdict (single or batch).
    Verdict(ShardVerdict),
    /// A whole number.
    Number(i64),
    /// A boolean.
    Bool(bool),
    /// Nothing.
    Unit,
    /// `hitWindow`'s answer.
    Hit(ShardHit),
    /// `attempt`'s answer.
    Attempt(ShardAttempt),
    /// `lockOwner`'s answer: the owner token, or none.
    Owner(Option<String>),
}

/// The wire form of an answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    rw: u64,
    id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verdict: Option<ShardVerdict>,
    // Present (possibly null) for a number, a boolean or nothing.
    #[serde(default, with = "present", skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hit: Option<ShardHit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attempt: Option<ShardAttempt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ShardFailure>,
}

/// `value` present as `null` is `Some(Null)`, absent is `None`.
mod present {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(v: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().unwrap_or(&Value::Null).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
        Value::deserialize(d).map(Some)
    }
}

// ------------------------------------------------------------------------------------------------
// The shard's side

/// Encodes a request.
pub fn encode_request(id: u64, op: &ShardOp) -> String {
    // An internally tagged enum serialises as `{"op":...,fields}`: the envelope goes in front.
    let body = serde_json::to_string(op).expect("a ShardOp serialises");
    format!("{{\"rw\":{PROTOCOL},\"id\":{id},{}", &body[1..])
}

/// The shard's side of the protocol: numbers requests, remembers what each expects, and reads the
/// manager's answers.
#[derive(Debug, Default)]
pub struct ShardClient {
    next: u64,
    pending: HashMap<u64, (&'static str, Expect)>,
}

impl ShardClient {
    /// A client with nothing under way.
    pub fn new() -> ShardClient {
        ShardClient::default()
    }

    /// Numbers `op` and encodes it: the id and the text to send.
    pub fn request(&mut self, op: &ShardOp) -> (u64, String) {
        self.next += 1;
        let id = self.next;
        self.pending.insert(id, (op.name(), op.expects()));
        (id, encode_request(id, op))
    }

    /// Requests under way.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Forgets request `id` (it timed out, or its channel closed): its answer, if it comes, is dropped.
    /// Answers the failure to raise, naming the operation.
    pub fn forget(&mut self, id: u64, timeout_ms: Option<u64>) -> Option<ShardFailure> {
        let (op, _) = self.pending.remove(&id)?;
        Some(match timeout_ms {
            Some(ms) => ShardFailure::timeout(op, ms),
            None => ShardFailure::closed(op),
        })
    }

    /// Forgets every request under way (the channel closed): their ids and failures.
    pub fn close(&mut self) -> Vec<(u64, ShardFailure)> {
        self.pending
            .drain()
            .map(|(id, (op, _))| (id, ShardFailure::closed(op)))
            .collect()
    }

    /// Reads an answer: the request it answers and its outcome. `None` when the text answers no request
    /// under way (a late answer after a timeout, or text no manager sends: nothing to route it to).
    pub fn answer(&mut self, text: &str) -> Option<(u64, Result<ShardValue, ShardFailure>)> {
        let parsed: Value = serde_json::from_str(text).ok()?;
        let id = parsed.get("id")?.as_u64()?;
        let (op, expect) = self.pending.remove(&id)?;
        Some((id, decode_answer(parsed, op, expect)))
    }
}

fn reply_failure(op: &str, what: impl std::fmt::Display) -> ShardFailure {
    ShardFailure::new(
        FailureKind::Reply,
        format!("the shard manager answered {op} with {what}"),
    )
}

fn decode_answer(parsed: Value, op: &str, expect: Expect) -> Result<ShardValue, ShardFailure> {
    let wire: Wire = serde_json::from_value(parsed)
        .map_err(|e| reply_failure(op, format_args!("an answer of the wrong shape ({e})")))?;
    if wire.rw != PROTOCOL {
        return Err(reply_failure(
            op,
            format_args!("protocol version {}", wire.rw),
        ));
    }
    if let Some(error) = wire.error {
        return Err(error);
    }
    let value = match (expect, wire.verdict, wire.value, wire.hit, wire.attempt) {
        (Expect::Verdict, Some(v), None, None, None)
            if v.blocked.is_none() && v.release.is_none() =>
        {
            ShardValue::Verdict(v)
        }
        (Expect::Batch, Some(v), None, None, None) if v.release.is_none() || v.allowed => {
            ShardValue::Verdict(v)
        }
        (Expect::Number, None, Some(n), None, None) if n.as_i64().is_some() => {
            ShardValue::Number(n.as_i64().unwrap_or(0))
        }
        (Expect::Bool, None, Some(Value::Bool(b)), None, None) => ShardValue::Bool(b),
        (Expect::Unit, None, Some(Value::Null), None, None) => ShardValue::Unit,
        (Expect::Hit, None, None, Some(h), None) => ShardValue::Hit(h),
        (Expect::Attempt, None, None, None, Some(a)) => ShardValue::Attempt(a),
        (Expect::Owner, None, Some(Value::Null), None, None) => ShardValue::Owner(None),
        (Expect::Owner, None, Some(Value::String(o)), None, None) => ShardValue::Owner(Some(o)),
        _ => return Err(reply_failure(op, "an answer of another operation")),
    };
    if let ShardValue::Verdict(v) = &value {
        if v.allowed != (v.retry_after_ms == 0) {
            return Err(reply_failure(
                op,
                "a verdict whose retryAfterMs does not match allowed",
            ));
        }
    }
    Ok(value)
}

// ------------------------------------------------------------------------------------------------
// The manager's side

/// A request the manager could not take: the answer to send back (with the request's id when it could
/// be read, else 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The id it answers.
    pub id: u64,
    /// The failure.
    pub failure: ShardFailure,
}

impl Refused {
    /// The answer's text.
    pub fn answer(&self) -> String {
        encode_failure(self.id, &self.failure)
    }
}

/// Reads and validates a request. Anything but a request of this protocol is refused: `unknown` for a
/// version or operation the manager does not know, `malformed` for the rest (with the id when it
/// could be read, so the shard's call fails at once instead of timing out).
pub fn decode_request(text: &str) -> Result<ShardRequest, Refused> {
    let malformed = |id: u64, message: String| Refused {
        id,
        failure: ShardFailure::new(FailureKind::Malformed, message),
    };
    let mut parsed: Value =
        serde_json::from_str(text).map_err(|e| malformed(0, format!("not a JSON request: {e}")))?;
    let Some(map) = parsed.as_object_mut() else {
        return Err(malformed(0, "a request is a JSON object".into()));
    };
    let id = match map.remove("id") {
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
        Some(other) => {
            return Err(malformed(
                0,
                format!("invalid id: {other} (expected a whole number >= 0)"),
            ))
        }
        None => return Err(malformed(0, "missing field `id`".into())),
    };
    match map.remove("rw") {
        Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL) => {}
        Some(other) => {
            return Err(Refused {
                id,
                failure: ShardFailure::new(
                    FailureKind::Unknown,
                    format!("unknown protocol version {other} (this manager speaks {PROTOCOL})"),
                ),
            })
        }
        None => return Err(malformed(id, "missing field `rw`".into())),
    }
    match map.get("op") {
        Some(Value::String(op)) if expects(op).is_some() => {}
        Some(Value::String(op)) => {
            return Err(Refused {
                id,
                failure: ShardFailure::new(
                    FailureKind::Unknown,
                    format!("unknown operation {op:?}"),
                ),
            })
        }
        Some(other) => {
            return Err(malformed(
                id,
                format!("invalid op: {other} (expected an operation's name)"),
            ))
        }
        None => return Err(malformed(id, "missing field `op`".into())),
    }
    let op: ShardOp = serde_json::from_value(parsed).map_err(|e| malformed(id, e.to_string()))?;
    Ok(ShardRequest { id, op })
}

fn encode(wire: &Wire) -> String {
    serde_json::to_string(wire).expect("an answer serialises")
}

fn wire(id: u64) -> Wire {
    Wire {
        rw: PROTOCOL,
        id,
        verdict: None,
        value: None,
        hit: None,
        attempt: None,
        error: None,
    }
}

/// Encodes a successful answer.
pub fn encode_value(id: u64, value: &ShardValue) -> String {
    let mut w = wire(id);
    match value {
        ShardValue::Verdict(v) => w.verdict = Some(v.clone()),
        ShardValue::Number(n) => w.value = Some((*n).into()),
        ShardValue::Bool(b) => w.value = Some((*b).into()),
        ShardValue::Unit => w.value = Some(Value::Null),
        ShardValue::Hit(h) => w.hit = Some(*h),
        ShardValue::Attempt(a) => w.attempt = Some(*a),
        ShardValue::Owner(o) => w.value = Some(o.clone().map_or(Value::Null, Value::String)),
    }
    encode(&w)
}

/// Encodes a failed answer.
pub fn encode_failure(id: u64, failure: &ShardFailure) -> String {
    let mut w = wire(id);
    w.error = Some(failure.clone());
    encode(&w)
}

/// A number a host's store answered, as the whole milliseconds or count that crosses; a value that is
/// not one (NaN, 1.5, negative where it cannot be) is a `reply` failure naming `field`.
pub fn whole(op: &str, field: &str, value: f64, signed: bool) -> Result<i64, ShardFailure> {
    if value.is_finite()
        && value.fract() == 0.0
        && value.abs() <= 9_007_199_254_740_991.0
        && (signed || value >= 0.0)
    {
        Ok(value as i64)
    } else {
        Err(ShardFailure::new(
            FailureKind::Reply,
            format!("the manager's store answered {op} with {field} = {value} (expected a whole number{})", if signed { "" } else { " >= 0" }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Result<ShardRequest, Refused> {
        decode_request(text)
    }

    #[test]
    fn every_op_round_trips() {
        let entries = vec![
            ShardEntry {
                key: "a".into(),
                uses: 1,
                window_ms: 500,
                algorithm: None,
                burst: None,
                cost: 1,
            },
            ShardEntry {
                key: "b".into(),
                uses: 2,
                window_ms: 900,
                algorithm: None,
                burst: None,
                cost: 1,
            },
        ];
        let ops = vec![
            ShardOp::Consume {
                key: "k".into(),
                uses: 3,
                window_ms: 1000,
                algorithm: None,
                burst: None,
                cost: 1,
            },
            ShardOp::Peek {
                key: "k".into(),
                uses: 3,
                window_ms: 1000,
                algorithm: None,
                burst: None,
                cost: 1,
            },
            ShardOp::ConsumeMany {
                entries: entries.clone(),
            },
            ShardOp::PeekMany { entries },
            ShardOp::Release { token: 4 },
            ShardOp::Hit {
                key: "k".into(),
                decay_ms: 60_000,
                amount: -1,
            },
            ShardOp::HitWindow {
                key: "k".into(),
                decay_ms: 60_000,
                amount: 2,
            },
            ShardOp::Attempt {
                key: "k".into(),
                max: 5,
                decay_ms: 1000,
                cost: 1,
            },
            ShardOp::Attempts { key: "k".into() },
            ShardOp::TooManyAttempts {
                key: "k".into(),
                max: 5,
            },
            ShardOp::Remaining {
                key: "k".into(),
                max: 5,
            },
            ShardOp::AvailableIn { key: "k".into() },
            ShardOp::AvailableInMs { key: "k".into() },
            ShardOp::ResetAttempts { key: "k".into() },
            ShardOp::Clear { key: "k".into() },
            ShardOp::LockAcquire {
                key: "k".into(),
                owner: "o".into(),
                ttl: 1.5,
            },
            ShardOp::LockRelease {
                key: "k".into(),
                owner: "o".into(),
                ttl: 1.5,
            },
            ShardOp::LockForceRelease {
                key: "k".into(),
                owner: "o".into(),
                ttl: 1.5,
            },
            ShardOp::LockOwner {
                key: "k".into(),
                owner: "o".into(),
                ttl: 1.5,
            },
            ShardOp::Reset {
                key: "k".into(),
                algorithm: ShardAlgorithm::Gcra,
                uses: 3,
                window_ms: 1000,
                burst: Some(5),
            },
        ];
        assert_eq!(ops.len(), OPS.len());
        let mut client = ShardClient::new();
        for (i, op) in ops.iter().enumerate() {
            assert_eq!(op.name(), OPS[i]);
            let (id, text) = client.request(op);
            assert!(
                text.starts_with(&format!("{{\"rw\":1,\"id\":{id},\"op\":\"{}\"", OPS[i])),
                "{text}"
            );
            assert_eq!(
                decode_request(&text),
                Ok(ShardRequest { id, op: op.clone() })
            );
        }
        assert_eq!(client.in_flight(), ops.len());
    }

    #[test]
    fn wire_format_is_pinned() {
        let text = encode_request(
            7,
            &ShardOp::Consume {
                key: "click:alice".into(),
                uses: 3,
                window_ms: 10_000,
                algorithm: None,
                burst: None,
                cost: 1,
            },
        );
        assert_eq!(
            text,
            r#"{"rw":1,"id":7,"op":"consume","key":"click:alice","uses":3,"windowMs":10000}"#
        );
        let v = ShardVerdict {
            allowed: true,
            limit: Some(3),
            remaining: Some(2),
            refill_after_ms: Some(10_000),
            reset_after_ms: Some(10_000),
            ..Default::default()
        };
        assert_eq!(
            encode_value(7, &ShardValue::Verdict(v)),
            r#"{"rw":1,"id":7,"verdict":{"allowed":true,"retryAfterMs":0,"limit":3,"remaining":2,"refillAfterMs":10000,"resetAfterMs":10000}}"#
        );
        assert_eq!(
            encode_value(8, &ShardValue::Unit),
            r#"{"rw":1,"id":8,"value":null}"#
        );
        assert_eq!(
            encode_value(9, &ShardValue::Number(4)),
            r#"{"rw":1,"id":9,"value":4}"#
        );
        assert_eq!(
            encode_failure(3, &ShardFailure::new(FailureKind::Store, "down")),
            r#"{"rw":1,"id":3,"error":{"kind":"store","message":"down"}}"#
        );
    }

    #[test]
    fn malformed_and_unknown_requests_are_refused_with_their_id() {
        let kind = |t: &str| req(t).map_err(|r| (r.id, r.failure.kind)).err();
        assert_eq!(kind("not json"), Some((0, FailureKind::Malformed)));
        assert_eq!(kind("[1,2]"), Some((0, FailureKind::Malformed)));
        assert_eq!(
            kind(r#"{"rw":1,"op":"consume"}"#),
            Some((0, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":-1,"op":"consume"}"#),
            Some((0, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":2,"id":5,"op":"consume"}"#),
            Some((5, FailureKind::Unknown))
        );
        assert_eq!(
            kind(r#"{"id":5,"op":"consume"}"#),
            Some((5, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":5,"op":"explode"}"#),
            Some((5, FailureKind::Unknown))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":5,"op":3}"#),
            Some((5, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":5,"op":"consume","key":"k","uses":3}"#),
            Some((5, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":5,"op":"consume","key":"k","uses":1.5,"windowMs":3}"#),
            Some((5, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":5,"op":"consume","key":"k","uses":1,"windowMs":3,"x":1}"#),
            Some((5, FailureKind::Malformed))
        );
        assert_eq!(
            kind(r#"{"rw":1,"id":5,"op":"consume","key":"\ud800","uses":1,"windowMs":3}"#),
            Some((0, FailureKind::Malformed))
        );
        let refused = req(r#"{"rw":1,"id":5,"op":"consume","key":"k","uses":3}"#).unwrap_err();
        assert!(
            refused.failure.message.contains("windowMs"),
            "{}",
            refused.failure.message
        );
        assert!(refused
            .answer()
            .starts_with(r#"{"rw":1,"id":5,"error":{"kind":"malformed""#));
    }

    #[test]
    fn the_client_routes_answers_and_refuses_wrong_shapes() {
        let mut client = ShardClient::new();
        let (id, _) = client.request(&ShardOp::Attempts { key: "k".into() });
        assert_eq!(
            client.answer(&encode_value(id, &ShardValue::Number(3))),
            Some((id, Ok(ShardValue::Number(3))))
        );
        // A second (late or duplicate) answer is dropped.
        assert_eq!(
            client.answer(&encode_value(id, &ShardValue::Number(3))),
            None
        );
        let (id, _) = client.request(&ShardOp::Attempts { key: "k".into() });
        let (_, out) = client
            .answer(&encode_value(id, &ShardValue::Bool(true)))
            .unwrap();
        assert_eq!(out.unwrap_err().kind, FailureKind::Reply);
        let (id, _) = client.request(&ShardOp::Consume {
            key: "k".into(),
            uses: 1,
            window_ms: 5,
            algorithm: None,
            burst: None,
            cost: 1,
        });
        let bad = ShardVerdict {
            allowed: true,
            retry_after_ms: 5,
            ..Default::default()
        };
        assert_eq!(
            client
                .answer(&encode_value(id, &ShardValue::Verdict(bad)))
                .unwrap()
                .1
                .unwrap_err()
                .kind,
            FailureKind::Reply
        );
        let (id, _) = client.request(&ShardOp::Clear { key: "k".into() });
        let failure = ShardFailure::new(FailureKind::InvalidArgument, "invalid key")
            .with_field(Some("key".into()));
        assert_eq!(
            client.answer(&encode_failure(id, &failure)),
            Some((id, Err(failure)))
        );
        assert_eq!(client.answer("garbage"), None);
        let (id, _) = client.request(&ShardOp::Clear { key: "k".into() });
        assert_eq!(
            client.forget(id, Some(250)).unwrap().message,
            "the shard manager did not answer clear within 250 ms"
        );
        assert_eq!(client.answer(&encode_value(id, &ShardValue::Unit)), None);
        assert_eq!(client.in_flight(), 0);
        let (id, _) = client.request(&ShardOp::LockOwner {
            key: "k".into(),
            owner: "o".into(),
            ttl: 1.0,
        });
        let owned = encode_value(id, &ShardValue::Owner(Some("o".into())));
        assert_eq!(owned, format!(r#"{{"rw":1,"id":{id},"value":"o"}}"#));
        assert_eq!(
            client.answer(&owned),
            Some((id, Ok(ShardValue::Owner(Some("o".into())))))
        );
        let (id, _) = client.request(&ShardOp::LockOwner {
            key: "k".into(),
            owner: "o".into(),
            ttl: 1.0,
        });
        assert_eq!(
            client.answer(&encode_value(id, &ShardValue::Unit)),
            Some((id, Ok(ShardValue::Owner(None))))
        );
        let (id, _) = client.request(&ShardOp::LockAcquire {
            key: "k".into(),
            owner: "o".into(),
            ttl: 1.0,
        });
        assert_eq!(
            client.answer(&encode_value(id, &ShardValue::Bool(true))),
            Some((id, Ok(ShardValue::Bool(true))))
        );
    }

    #[test]
    fn entries_of_rules_leave_the_defaults_off() {
        let rule = |a, b: Option<u32>| shard_rule(a, 10, 1000, b).unwrap();
        let sliding = ShardEntry::of_rule("s".into(), rule(None, None), 1);
        assert!(sliding.is_plain());
        assert_eq!(sliding, ShardEntry::sliding("s".into(), 10, 1000));
        // A burst equal to `uses` is GCRA's default: left off, read back as the same rule.
        let even = ShardEntry::of_rule("g".into(), rule(Some(ShardAlgorithm::Gcra), Some(10)), 1);
        assert_eq!(
            (even.algorithm, even.burst),
            (Some(ShardAlgorithm::Gcra), None)
        );
        let gcra = ShardEntry::of_rule("g".into(), rule(Some(ShardAlgorithm::Gcra), Some(4)), 3);
        assert_eq!(
            encode_request(1, &ShardOp::single(true, gcra.clone())),
            r#"{"rw":1,"id":1,"op":"consume","key":"g","uses":10,"windowMs":1000,"algorithm":"gcra","burst":4,"cost":3}"#
        );
        assert_eq!(
            gcra.rule().unwrap(),
            rule(Some(ShardAlgorithm::Gcra), Some(4))
        );
        assert!(matches!(
            ShardOp::single(false, gcra.clone()),
            ShardOp::Peek { cost: 3, .. }
        ));
        assert_eq!(
            encode_request(2, &ShardOp::reset(gcra).unwrap()),
            r#"{"rw":1,"id":2,"op":"reset","key":"g","algorithm":"gcra","uses":10,"windowMs":1000,"burst":4}"#
        );
        let counter = ShardEntry::of_rule("c".into(), rule(Some(ShardAlgorithm::Counter), None), 2);
        assert_eq!(
            (counter.algorithm, counter.burst, counter.cost),
            (Some(ShardAlgorithm::Counter), None, 2)
        );
        assert!(ShardOp::reset(sliding).is_none());
    }

    #[test]
    fn rules_and_costs_cross_only_when_not_the_defaults() {
        let gcra = ShardOp::Consume {
            key: "k".into(),
            uses: 10,
            window_ms: 1000,
            algorithm: Some(ShardAlgorithm::Gcra),
            burst: Some(4),
            cost: 3,
        };
        assert_eq!(
            encode_request(2, &gcra),
            r#"{"rw":1,"id":2,"op":"consume","key":"k","uses":10,"windowMs":1000,"algorithm":"gcra","burst":4,"cost":3}"#
        );
        assert_eq!(decode_request(&encode_request(2, &gcra)).unwrap().op, gcra);
        let batch = ShardOp::PeekMany {
            entries: vec![
                ShardEntry::sliding("a".into(), 2, 50),
                ShardEntry {
                    algorithm: Some(ShardAlgorithm::Counter),
                    cost: 2,
                    ..ShardEntry::sliding("b".into(), 5, 100)
                },
            ],
        };
        let text = encode_request(3, &batch);
        assert!(
            text.contains(r#"{"key":"a","uses":2,"windowMs":50}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"key":"b","uses":5,"windowMs":100,"algorithm":"counter","cost":2}"#),
            "{text}"
        );
        assert_eq!(decode_request(&text).unwrap().op, batch);
        let attempt = ShardOp::Attempt {
            key: "k".into(),
            max: 5,
            decay_ms: 100,
            cost: 2,
        };
        assert!(encode_request(4, &attempt).ends_with(r#""decayMs":100,"cost":2}"#));
        let kind = |t: &str| req(t).map_err(|r| r.failure.kind).err();
        for bad in [
            r#"{"rw":1,"id":5,"op":"consume","key":"k","uses":1,"windowMs":3,"algorithm":"leaky"}"#,
            r#"{"rw":1,"id":5,"op":"consume","key":"k","uses":1,"windowMs":3,"cost":-1}"#,
            r#"{"rw":1,"id":5,"op":"attempt","key":"k","max":1,"decayMs":3,"cost":1.5}"#,
            r#"{"rw":1,"id":5,"op":"reset","key":"k","uses":1,"windowMs":3}"#,
        ] {
            assert_eq!(kind(bad), Some(FailureKind::Malformed), "{bad}");
        }
    }

    #[test]
    fn a_rule_is_checked_as_every_store_checks_it() {
        use crate::Rule;
        assert!(matches!(
            shard_rule(None, 3, 100, None),
            Ok(Rule::Sliding(l)) if l.uses() == 3
        ));
        assert!(matches!(
            shard_rule(Some(ShardAlgorithm::Gcra), 3, 100, None),
            Ok(Rule::Gcra(g)) if g.burst() == 3
        ));
        assert!(matches!(
            shard_rule(Some(ShardAlgorithm::Gcra), 3, 100, Some(7)),
            Ok(Rule::Gcra(g)) if g.burst() == 7
        ));
        assert!(matches!(
            shard_rule(Some(ShardAlgorithm::Counter), 3, 100, None),
            Ok(Rule::Counter(_))
        ));
        let refused = shard_rule(None, 0, 100, None).unwrap_err();
        assert_eq!(
            (refused.kind, refused.field.as_deref()),
            (FailureKind::InvalidLimit, Some("uses"))
        );
        let refused = shard_rule(Some(ShardAlgorithm::Gcra), 3, 100, Some(0)).unwrap_err();
        assert_eq!(
            (refused.kind, refused.field.as_deref()),
            (FailureKind::InvalidLimit, Some("burst"))
        );
        assert_eq!(
            shard_rule(None, 3, 100, Some(4)).unwrap_err().kind,
            FailureKind::Malformed
        );
        assert!(ShardEntry::sliding("k".into(), 1, 5).is_plain());
    }

    #[test]
    fn whole_numbers_only() {
        assert_eq!(whole("consume", "retryAfterMs", 5.0, false), Ok(5));
        assert_eq!(whole("hit", "count", -1.0, true), Ok(-1));
        assert_eq!(
            whole("consume", "retryAfterMs", -1.0, false)
                .unwrap_err()
                .kind,
            FailureKind::Reply
        );
        assert!(whole("consume", "retryAfterMs", f64::NAN, false).is_err());
        assert!(whole("consume", "retryAfterMs", 1.5, false).is_err());
        assert_eq!(
            FailureKind::from_name("invalid_limit"),
            FailureKind::InvalidLimit
        );
        assert_eq!(FailureKind::from_name("nonsense"), FailureKind::Internal);
        assert!(
            FailureKind::Timeout.is_store_failure()
                && !FailureKind::InvalidLimit.is_store_failure()
        );
    }

    #[test]
    fn hold_is_the_longest_window() {
        let entries = vec![
            ShardEntry {
                key: "a".into(),
                uses: 1,
                window_ms: 500,
                algorithm: None,
                burst: None,
                cost: 1,
            },
            ShardEntry {
                key: "b".into(),
                uses: 2,
                window_ms: 900,
                algorithm: None,
                burst: None,
                cost: 1,
            },
        ];
        assert_eq!(ShardOp::ConsumeMany { entries }.hold_ms(), 900);
        assert_eq!(ShardOp::Clear { key: "k".into() }.hold_ms(), 0);
    }
}
