//! The sharded store's protocol (`ratewindow_core::shard`) for `ts/shard.ts`: the shard's side
//! ([`NativeShardClient`]: encodes requests, reads answers) and the manager's (`shardDecode`, which
//! validates a request, and the `shardAnswer*` functions, which encode what the manager's store
//! answered). Only strings, numbers and small objects cross; every export runs inside the crate's
//! panic guard.

use napi::bindgen_prelude::Result;
use napi_derive::napi;
use ratewindow_core::shard::{
    decode_request, encode_failure, encode_value, shard_rule, whole, FailureKind, ShardAlgorithm,
    ShardAttempt, ShardClient, ShardEntry, ShardFailure, ShardHit, ShardOp, ShardValue,
    ShardVerdict,
};
use ratewindow_core::Rule;
use ratewindow_js_glue::rates::checked_rule;
use ratewindow_js_glue::Failure;

use crate::key::{Key, Keys};
use crate::{guard, thrown};

/// A JS number the shard's TypeScript already checked, as the integer the protocol carries (a value
/// that slipped through is refused naming its field, never truncated).
fn int(field: &str, value: f64, min: f64, max: f64) -> Result<f64, String> {
    if value.is_finite() && value.fract() == 0.0 && value >= min && value <= max {
        Ok(value)
    } else {
        Err(napi::Error::new(
            format!("invalid_argument:{field}"),
            format!("invalid {field}: {value} (expected a whole number from {min} to {max})"),
        ))
    }
}

const SAFE: f64 = 9_007_199_254_740_991.0;

/// A request's id and text, as the shard sends it.
#[napi(object)]
pub struct ShardRequestText {
    pub id: f64,
    pub text: String,
}

/// A failure as the shard raises it.
#[napi(object)]
pub struct ShardFailureJs {
    pub id: f64,
    /// `malformed`, `unknown`, `unsupported`, `invalid_limit`, `invalid_argument`, `type`, `store`,
    /// `reply`, `internal`, `timeout`, `closed`.
    pub kind: String,
    pub message: String,
    pub field: Option<String>,
    /// Whether the shard raises it as a `StoreError`.
    pub store_failure: bool,
}

fn failure_js(id: u64, f: ShardFailure) -> ShardFailureJs {
    ShardFailureJs {
        id: id as f64,
        kind: f.kind.name().to_owned(),
        store_failure: f.kind.is_store_failure(),
        message: f.message,
        field: f.field,
    }
}

/// An answer as the shard reads it: `kind` says which fields are set.
#[napi(object)]
pub struct ShardAnswerJs {
    pub id: f64,
    /// `verdict`, `number`, `bool`, `unit`, `hit`, `attempt` or `error`.
    pub kind: String,
    pub allowed: Option<bool>,
    pub retry_after_ms: Option<f64>,
    pub retry_timestamp: Option<f64>,
    pub limit: Option<f64>,
    pub remaining: Option<f64>,
    pub refill_after_ms: Option<f64>,
    pub reset_after_ms: Option<f64>,
    pub blocked: Option<f64>,
    /// The manager's release token of an allowed `consumeMany`.
    pub release: Option<f64>,
    /// A number's value, or a hit's or attempt's count.
    pub value: Option<f64>,
    pub flag: Option<bool>,
    /// A lock's owner token (`kind` `owner`; absent when nobody holds the lock).
    pub owner: Option<String>,
    pub error: Option<ShardFailureJs>,
}

fn answer_js(id: u64, out: std::result::Result<ShardValue, ShardFailure>) -> ShardAnswerJs {
    let mut a = ShardAnswerJs {
        id: id as f64,
        kind: String::new(),
        allowed: None,
        retry_after_ms: None,
        retry_timestamp: None,
        limit: None,
        remaining: None,
        refill_after_ms: None,
        reset_after_ms: None,
        blocked: None,
        release: None,
        value: None,
        flag: None,
        owner: None,
        error: None,
    };
    let f = |v: Option<u64>| v.map(|n| n as f64);
    a.kind = match out {
        Ok(ShardValue::Verdict(v)) => {
            a.allowed = Some(v.allowed);
            a.retry_after_ms = Some(v.retry_after_ms as f64);
            a.retry_timestamp = f(v.retry_timestamp);
            a.limit = f(v.limit);
            a.remaining = f(v.remaining);
            a.refill_after_ms = f(v.refill_after_ms);
            a.reset_after_ms = f(v.reset_after_ms);
            a.blocked = f(v.blocked);
            a.release = f(v.release);
            "verdict"
        }
        Ok(ShardValue::Number(n)) => {
            a.value = Some(n as f64);
            "number"
        }
        Ok(ShardValue::Bool(b)) => {
            a.flag = Some(b);
            "bool"
        }
        Ok(ShardValue::Unit) => "unit",
        Ok(ShardValue::Hit(h)) => {
            a.value = Some(h.count as f64);
            a.reset_after_ms = Some(h.reset_after_ms as f64);
            "hit"
        }
        Ok(ShardValue::Attempt(t)) => {
            a.allowed = Some(t.allowed);
            a.value = Some(t.count as f64);
            a.reset_after_ms = Some(t.reset_after_ms as f64);
            "attempt"
        }
        Ok(ShardValue::Owner(o)) => {
            a.owner = o;
            "owner"
        }
        Err(e) => {
            a.error = Some(failure_js(id, e));
            "error"
        }
    }
    .to_owned();
    a
}

/// The shard's side: numbers requests and reads the manager's answers (one per channel).
#[napi]
pub struct NativeShardClient {
    client: ShardClient,
}

impl Default for NativeShardClient {
    fn default() -> Self {
        Self::new()
    }
}

#[napi]
impl NativeShardClient {
    #[napi(constructor)]
    pub fn new() -> Self {
        NativeShardClient {
            client: ShardClient::new(),
        }
    }

    fn send(&mut self, op: ShardOp) -> ShardRequestText {
        let (id, text) = self.client.request(&op);
        ShardRequestText {
            id: id as f64,
            text,
        }
    }

    /// A one-key request. `a` and `b` by operation: consume/peek `uses, windowMs`; hit/hitWindow
    /// `decayMs, amount`; attempt `max, decayMs` (and `cost`, default 1); tooManyAttempts/remaining
    /// `max`; release `token` (the key unused); the rest nothing.
    #[napi]
    pub fn single(
        &mut self,
        op: String,
        key: Key,
        a: f64,
        b: f64,
        cost: Option<f64>,
    ) -> Result<ShardRequestText, String> {
        guard(|| {
            let key = || key.get().map(str::to_owned).map_err(thrown);
            let op = match op.as_str() {
                "consume" | "peek" => {
                    let (key, uses, window_ms) = (
                        key()?,
                        int("uses", a, 1.0, u32::MAX as f64)? as u32,
                        int("windowMs", b, 1.0, SAFE)? as u64,
                    );
                    if op == "consume" {
                        ShardOp::Consume {
                            key,
                            uses,
                            window_ms,
                            algorithm: None,
                            burst: None,
                            cost: 1,
                        }
                    } else {
                        ShardOp::Peek {
                            key,
                            uses,
                            window_ms,
                            algorithm: None,
                            burst: None,
                            cost: 1,
                        }
                    }
                }
                "hit" | "hitWindow" => {
                    let (key, decay_ms, amount) = (
                        key()?,
                        int("decayMs", a, 1.0, SAFE)? as u64,
                        int("amount", b, -SAFE, SAFE)? as i64,
                    );
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
                "attempt" => ShardOp::Attempt {
                    key: key()?,
                    max: int("max", a, -SAFE, SAFE)? as i64,
                    decay_ms: int("decayMs", b, 1.0, SAFE)? as u64,
                    cost: match cost {
                        Some(c) => ratewindow_js_glue::store::attempt_cost(c).map_err(thrown)?,
                        None => 1,
                    },
                },
                "tooManyAttempts" => ShardOp::TooManyAttempts {
                    key: key()?,
                    max: int("max", a, -SAFE, SAFE)? as i64,
                },
                "remaining" => ShardOp::Remaining {
                    key: key()?,
                    max: int("max", a, -SAFE, SAFE)? as i64,
                },
                "release" => ShardOp::Release {
                    token: int("token", a, 0.0, SAFE)? as u64,
                },
                "attempts" => ShardOp::Attempts { key: key()? },
                "availableIn" => ShardOp::AvailableIn { key: key()? },
                "availableInMs" => ShardOp::AvailableInMs { key: key()? },
                "resetAttempts" => ShardOp::ResetAttempts { key: key()? },
                "clear" => ShardOp::Clear { key: key()? },
                other => {
                    return Err(thrown(Failure {
                        code: "invalid_argument:op".into(),
                        message: format!("unknown operation {other:?}"),
                    }))
                }
            };
            Ok(self.send(op))
        })
    }

    /// A call under any algorithm (`kind` 0 the sliding log, 1 GCRA, 2 the counter) costing `cost`:
    /// `op` `consume` or `peek`, or `reset` (a GCRA bucket or counter; `cost` unused). The limit and
    /// cost are checked as the memory store checks them, refusals naming the field as JS spells it.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn rate(
        &mut self,
        op: String,
        key: Key,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
    ) -> Result<ShardRequestText, String> {
        guard(|| {
            let key = key.get().map_err(thrown)?.to_owned();
            let reset = op == "reset";
            let (rule, cost) = checked_rule(
                kind,
                uses,
                window_ms,
                burst,
                if reset { 1.0 } else { cost },
                None,
            )
            .map_err(thrown)?;
            let entry = ShardEntry::of_rule(key, rule, cost as u32);
            let op = match op.as_str() {
                "consume" | "peek" => ShardOp::single(op == "consume", entry),
                _ => ShardOp::reset(entry).ok_or_else(|| {
                    thrown(Failure {
                        code: "invalid_argument:op".into(),
                        message: format!("no {op} of a sliding-log limit"),
                    })
                })?,
            };
            Ok(self.send(op))
        })
    }

    /// A batch request (`consumeMany` or `peekMany`); with `kinds`, entries of any algorithm (as
    /// [`Self::rate`]) with their `bursts` and `costs`.
    #[napi(
        ts_args_type = "op: string, keys: Array<string>, uses: Array<number>, windows: Array<number>, kinds?: Array<number>, bursts?: Array<number>, costs?: Array<number>"
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn batch(
        &mut self,
        op: String,
        keys: Keys,
        uses: Vec<f64>,
        windows: Vec<f64>,
        kinds: Option<Vec<u32>>,
        bursts: Option<Vec<f64>>,
        costs: Option<Vec<f64>>,
    ) -> Result<ShardRequestText, String> {
        guard(|| {
            let keys = keys.get().map_err(thrown)?;
            let mut entries = Vec::with_capacity(keys.len());
            let at = |v: &Option<Vec<f64>>, i: usize, absent: f64| {
                v.as_ref()
                    .map_or(absent, |v| *v.get(i).unwrap_or(&f64::NAN))
            };
            for (i, key) in keys.into_iter().enumerate() {
                let u = *uses.get(i).unwrap_or(&f64::NAN);
                let w = *windows.get(i).unwrap_or(&f64::NAN);
                if let Some(kinds) = &kinds {
                    let kind = *kinds.get(i).unwrap_or(&u32::MAX);
                    let (rule, cost) =
                        checked_rule(kind, u, w, at(&bursts, i, u), at(&costs, i, 1.0), Some(i))
                            .map_err(thrown)?;
                    entries.push(ShardEntry::of_rule(key, rule, cost as u32));
                    continue;
                }
                let u = int("uses", u, 1.0, u32::MAX as f64)? as u32;
                let w = int("windowMs", w, 1.0, SAFE)? as u64;
                entries.push(ShardEntry::sliding(key, u, w));
            }
            let op = if op == "consumeMany" {
                ShardOp::ConsumeMany { entries }
            } else {
                ShardOp::PeekMany { entries }
            };
            Ok(self.send(op))
        })
    }

    /// A lock operation (`lockAcquire`, `lockRelease`, `lockForceRelease`, `lockOwner`) on `key` for
    /// the lock owned by `owner` with `ttl` seconds (checked by the `Lock` before).
    #[napi]
    pub fn lock(
        &mut self,
        op: String,
        key: Key,
        owner: String,
        ttl: f64,
    ) -> Result<ShardRequestText, String> {
        guard(|| {
            let key = key.get().map_err(thrown)?.to_owned();
            let op = match op.as_str() {
                "lockAcquire" => ShardOp::LockAcquire { key, owner, ttl },
                "lockRelease" => ShardOp::LockRelease { key, owner, ttl },
                "lockForceRelease" => ShardOp::LockForceRelease { key, owner, ttl },
                "lockOwner" => ShardOp::LockOwner { key, owner, ttl },
                other => {
                    return Err(thrown(Failure {
                        code: "invalid_argument:op".into(),
                        message: format!("unknown lock operation {other:?}"),
                    }))
                }
            };
            Ok(self.send(op))
        })
    }

    /// Reads an answer; `null` when it answers no request under way (late, or not a manager's).
    #[napi]
    pub fn answer(&mut self, text: String) -> Result<Option<ShardAnswerJs>, String> {
        guard(|| {
            Ok(self
                .client
                .answer(&text)
                .map(|(id, out)| answer_js(id, out)))
        })
    }

    /// Forgets request `id`: the failure to raise (a timeout after `timeoutMs`, or the channel closed
    /// when it is absent); `null` if it was not under way.
    #[napi]
    pub fn forget(
        &mut self,
        id: f64,
        timeout_ms: Option<f64>,
    ) -> Result<Option<ShardFailureJs>, String> {
        guard(|| {
            Ok(self
                .client
                .forget(id as u64, timeout_ms.map(|t| t as u64))
                .map(|f| failure_js(id as u64, f)))
        })
    }

    /// Forgets every request under way (the channel closed): their failures.
    #[napi]
    pub fn close(&mut self) -> Result<Vec<ShardFailureJs>, String> {
        guard(|| {
            Ok(self
                .client
                .close()
                .into_iter()
                .map(|(id, f)| failure_js(id, f))
                .collect())
        })
    }

    /// Requests under way.
    #[napi(getter)]
    pub fn in_flight(&self) -> u32 {
        self.client.in_flight() as u32
    }
}

/// A limit as the manager's store takes it: `{ uses, windowMs }` (the sliding log), with `algorithm`
/// `gcra` and its `burst`, or `algorithm` `counter`.
#[napi(object)]
pub struct ShardLimitJs {
    pub uses: f64,
    pub window_ms: f64,
    pub algorithm: Option<String>,
    pub burst: Option<f64>,
}

impl From<Rule> for ShardLimitJs {
    fn from(rule: Rule) -> Self {
        let (uses, window_ms, algorithm, burst) = match rule {
            Rule::Sliding(l) => (l.uses(), l.window_ms(), None, None),
            Rule::Gcra(g) => (
                g.uses(),
                g.window_ms(),
                Some(ShardAlgorithm::Gcra),
                Some(g.burst() as f64),
            ),
            Rule::Counter(c) => (
                c.limit().uses(),
                c.limit().window_ms(),
                Some(ShardAlgorithm::Counter),
                None,
            ),
        };
        ShardLimitJs {
            uses: uses as f64,
            window_ms: window_ms as f64,
            algorithm: algorithm.map(|a| a.name().to_owned()),
            burst,
        }
    }
}

/// An entry as the manager's store takes it (`cost` only above 1).
#[napi(object)]
pub struct ShardEntryJs {
    pub key: String,
    pub limit: ShardLimitJs,
    pub cost: Option<f64>,
}

/// A request as the manager runs it, or `refused`: the answer to send back at once.
#[napi(object)]
pub struct ShardCallJs {
    pub id: f64,
    /// The operation's name (`consume`, `hitWindow` ...); empty when refused.
    pub op: String,
    pub key: Option<String>,
    pub limit: Option<ShardLimitJs>,
    pub entries: Option<Vec<ShardEntryJs>>,
    pub decay_ms: Option<f64>,
    pub amount: Option<f64>,
    pub max: Option<f64>,
    pub token: Option<f64>,
    /// A call's cost, only above 1 (so a store of the user's own without costs serves the rest).
    pub cost: Option<f64>,
    /// A lock operation's owner token and TTL in seconds.
    pub owner: Option<String>,
    pub ttl: Option<f64>,
    /// How long an allowed `consumeMany`'s give-back is worth keeping, in ms.
    pub hold_ms: f64,
    pub refused: Option<String>,
}

/// A cost as the manager passes it: only above 1.
fn cost_js(cost: u32) -> Option<f64> {
    (cost != 1).then_some(cost as f64)
}

/// Reads and validates a request (the manager's side): its limits checked as every store checks them
/// (`shard_rule`: `invalid_limit` naming the field; a `burst` without GCRA `malformed`).
#[napi(js_name = "shardDecode")]
pub fn shard_decode(text: String) -> Result<ShardCallJs, String> {
    guard(|| {
        let mut c = ShardCallJs {
            id: 0.0,
            op: String::new(),
            key: None,
            limit: None,
            entries: None,
            decay_ms: None,
            amount: None,
            max: None,
            token: None,
            cost: None,
            owner: None,
            ttl: None,
            hold_ms: 0.0,
            refused: None,
        };
        let request = match decode_request(&text) {
            Ok(r) => r,
            Err(refused) => {
                c.id = refused.id as f64;
                c.refused = Some(refused.answer());
                return Ok(c);
            }
        };
        c.id = request.id as f64;
        if let Err(failure) = fill(&mut c, request.op) {
            c.op = String::new();
            c.refused = Some(encode_failure(request.id, &failure));
        }
        Ok(c)
    })
}

/// `c`'s fields from `op`, or the refusal of a limit the core does not take.
fn fill(c: &mut ShardCallJs, op: ShardOp) -> std::result::Result<(), ShardFailure> {
    c.op = op.name().to_owned();
    c.hold_ms = op.hold_ms() as f64;
    match op {
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
            c.limit = Some(shard_rule(algorithm, uses, window_ms, burst)?.into());
            c.key = Some(key);
            c.cost = cost_js(cost);
        }
        ShardOp::Reset {
            key,
            algorithm,
            uses,
            window_ms,
            burst,
        } => {
            c.limit = Some(shard_rule(Some(algorithm), uses, window_ms, burst)?.into());
            c.key = Some(key);
        }
        ShardOp::ConsumeMany { entries } | ShardOp::PeekMany { entries } => {
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                out.push(ShardEntryJs {
                    limit: e.rule()?.into(),
                    cost: cost_js(e.cost),
                    key: e.key,
                });
            }
            c.entries = Some(out);
        }
        ShardOp::Release { token } => c.token = Some(token as f64),
        ShardOp::Hit {
            key,
            decay_ms,
            amount,
        }
        | ShardOp::HitWindow {
            key,
            decay_ms,
            amount,
        } => {
            c.key = Some(key);
            c.decay_ms = Some(decay_ms as f64);
            c.amount = Some(amount as f64);
        }
        ShardOp::Attempt {
            key,
            max,
            decay_ms,
            cost,
        } => {
            c.key = Some(key);
            c.max = Some(max as f64);
            c.decay_ms = Some(decay_ms as f64);
            c.cost = cost_js(cost);
        }
        ShardOp::TooManyAttempts { key, max } | ShardOp::Remaining { key, max } => {
            c.key = Some(key);
            c.max = Some(max as f64);
        }
        ShardOp::Attempts { key }
        | ShardOp::AvailableIn { key }
        | ShardOp::AvailableInMs { key }
        | ShardOp::ResetAttempts { key }
        | ShardOp::Clear { key } => c.key = Some(key),
        ShardOp::LockAcquire { key, owner, ttl }
        | ShardOp::LockRelease { key, owner, ttl }
        | ShardOp::LockForceRelease { key, owner, ttl }
        | ShardOp::LockOwner { key, owner, ttl } => {
            c.key = Some(key);
            c.owner = Some(owner);
            c.ttl = Some(ttl);
        }
    }
    Ok(())
}

/// A verdict as the manager's store answered it (any object: its fields are checked here).
#[napi(object)]
pub struct ShardVerdictIn {
    pub allowed: Option<bool>,
    pub retry_after_ms: Option<f64>,
    pub retry_timestamp: Option<f64>,
    pub limit: Option<f64>,
    pub remaining: Option<f64>,
    pub refill_after_ms: Option<f64>,
    pub reset_after_ms: Option<f64>,
    pub blocked: Option<f64>,
}

fn verdict_of(
    op: &str,
    v: &ShardVerdictIn,
    batch: bool,
    token: Option<f64>,
) -> std::result::Result<ShardValue, ShardFailure> {
    let n = |field: &str, x: f64| whole(op, field, x, false).map(|n| n as u64);
    let opt = |field: &str, x: Option<f64>| x.map(|x| n(field, x)).transpose();
    let Some(allowed) = v.allowed else {
        return Err(ShardFailure::new(
            FailureKind::Reply,
            format!("the manager's store answered {op} without `allowed`"),
        ));
    };
    Ok(ShardValue::Verdict(ShardVerdict {
        allowed,
        retry_after_ms: n("retryAfterMs", v.retry_after_ms.unwrap_or(f64::NAN))?,
        retry_timestamp: opt("retryTimestamp", v.retry_timestamp)?,
        limit: opt("limit", v.limit)?,
        remaining: opt("remaining", v.remaining)?,
        refill_after_ms: opt("refillAfterMs", v.refill_after_ms)?,
        reset_after_ms: opt("resetAfterMs", v.reset_after_ms)?,
        blocked: if batch {
            opt("blocked", v.blocked)?
        } else {
            None
        },
        release: if allowed {
            opt("release", token)?
        } else {
            None
        },
    }))
}

fn answered(id: f64, out: std::result::Result<ShardValue, ShardFailure>) -> String {
    match out {
        Ok(v) => encode_value(id as u64, &v),
        Err(f) => encode_failure(id as u64, &f),
    }
}

/// Encodes a verdict the manager's store answered (`batch` keeps `blocked`; `token` is the release
/// token of an allowed `consumeMany`). A verdict with a field of the wrong kind is answered as a
/// `reply` failure.
#[napi(js_name = "shardAnswerVerdict")]
pub fn shard_answer_verdict(
    id: f64,
    op: String,
    verdict: ShardVerdictIn,
    batch: bool,
    token: Option<f64>,
) -> Result<String, String> {
    guard(|| Ok(answered(id, verdict_of(&op, &verdict, batch, token))))
}

/// Encodes a number (`hit`, `attempts`, `remaining`, `availableIn`, `availableInMs`).
#[napi(js_name = "shardAnswerNumber")]
pub fn shard_answer_number(id: f64, op: String, value: f64) -> Result<String, String> {
    guard(|| {
        Ok(answered(
            id,
            whole(&op, "the answer", value, true).map(ShardValue::Number),
        ))
    })
}

/// Encodes a boolean (`tooManyAttempts`).
#[napi(js_name = "shardAnswerBool")]
pub fn shard_answer_bool(id: f64, value: bool) -> Result<String, String> {
    guard(|| Ok(encode_value(id as u64, &ShardValue::Bool(value))))
}

/// Encodes nothing (`release`, `resetAttempts`, `clear`).
#[napi(js_name = "shardAnswerUnit")]
pub fn shard_answer_unit(id: f64) -> Result<String, String> {
    guard(|| Ok(encode_value(id as u64, &ShardValue::Unit)))
}

/// Encodes `hitWindow`'s answer.
#[napi(js_name = "shardAnswerHit")]
pub fn shard_answer_hit(
    id: f64,
    op: String,
    count: f64,
    reset_after_ms: f64,
) -> Result<String, String> {
    guard(|| {
        let out = (|| {
            Ok(ShardValue::Hit(ShardHit {
                count: whole(&op, "count", count, true)?,
                reset_after_ms: whole(&op, "resetAfterMs", reset_after_ms, false)? as u64,
            }))
        })();
        Ok(answered(id, out))
    })
}

/// Encodes `attempt`'s answer.
#[napi(js_name = "shardAnswerAttempt")]
pub fn shard_answer_attempt(
    id: f64,
    op: String,
    allowed: bool,
    count: f64,
    reset_after_ms: f64,
) -> Result<String, String> {
    guard(|| {
        let out = (|| {
            Ok(ShardValue::Attempt(ShardAttempt {
                allowed,
                count: whole(&op, "count", count, true)?,
                reset_after_ms: whole(&op, "resetAfterMs", reset_after_ms, false)? as u64,
            }))
        })();
        Ok(answered(id, out))
    })
}

/// Encodes a lock's owner (`lockOwner`): the token, or none.
#[napi(js_name = "shardAnswerOwner")]
pub fn shard_answer_owner(id: f64, owner: Option<String>) -> Result<String, String> {
    guard(|| Ok(encode_value(id as u64, &ShardValue::Owner(owner))))
}

/// Encodes a failure: `kind` one of the protocol's kinds (an unknown one is `internal`).
#[napi(js_name = "shardAnswerError")]
pub fn shard_answer_error(
    id: f64,
    kind: String,
    message: String,
    field: Option<String>,
) -> Result<String, String> {
    guard(|| {
        Ok(encode_failure(
            id as u64,
            &ShardFailure::new(FailureKind::from_name(&kind), message).with_field(field),
        ))
    })
}
