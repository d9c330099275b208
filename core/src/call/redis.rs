//! The Redis call machine: one script a call; `NOSCRIPT` → the source; `CROSSSLOT` → key by key.

use super::{
    errors, Call, CallError, Command, Fed, GiveBackFailure, Op, Outcome, ReleaseToken, WindowQuery,
};
use crate::redis::{self as plan, Plan, RedisOptions, RedisRelease, Reply, ReplyError, SLIDING};
use crate::{BatchVerdict, Limit, Quota};

/// Starts call machines for one Redis (Valkey, KeyDB, Redis Cluster) store: its key options, and
/// whether the host can run scripts by SHA1.
///
/// ```
/// use ratewindow_core::call::{Command, Fed, Next, Op, Outcome, Redis};
/// use ratewindow_core::redis::{RedisOptions, Reply};
/// use ratewindow_core::{Entry, Limit};
///
/// let store = Redis::new(RedisOptions::default());
/// let entries = vec![Entry::new("click:alice", Limit::new(3, 10_000)?)];
/// let mut call = store.start(Op::Consume { entries, call_id: "f3a9c2".into() });
/// let Next::Run(Command::Script { by_sha1, keys, .. }) = call.next() else { unreachable!() };
/// assert!(by_sha1);
/// assert_eq!(keys, ["ratewindow:log:click:alice"]);
/// call.fail("NOSCRIPT No matching script. Please use EVAL.");
/// let Next::Run(Command::Script { by_sha1: false, .. }) = call.next() else { unreachable!() };
/// // The server answers: allowed; 2 uses left; the use back in 10 s.
/// call.feed(Fed::Reply(Reply::Array([1, 0, -1, -1, 1_000, 0, 2, 10_000, 10_000].map(Reply::Int).to_vec())));
/// let Next::Done(Ok(Outcome::Verdict { verdict, release })) = call.next() else { unreachable!() };
/// assert!(verdict.allowed && release.is_some());
/// assert_eq!(verdict.quota.remaining, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Redis {
    options: RedisOptions,
    evalsha: bool,
    plain: bool,
}

impl Redis {
    /// Calls on a store with `options`, running scripts by SHA1 first (`EVALSHA`, then `EVAL` with the
    /// source only on `NOSCRIPT`).
    pub fn new(options: RedisOptions) -> Redis {
        Redis {
            options,
            evalsha: true,
            plain: false,
        }
    }

    /// Whether the host can run plain commands ([`Command::Plain`]; `false` by default). The lock then
    /// acquires by `SET key owner NX PX ttl`, frees by force with `DEL` and reads its owner with `GET`
    /// (a release stays a script: compare and delete in one step); without them, or in a build
    /// without the `lock-commands` feature, every lock step is the lock script.
    pub fn plain_commands(mut self, plain: bool) -> Redis {
        self.plain = plain;
        self
    }

    /// Whether lock calls ask for plain commands.
    pub fn runs_plain_commands(&self) -> bool {
        self.plain
    }

    /// Whether the host runs scripts by SHA1 (`true` by default). A host that can only `EVAL` says
    /// `false`, and every command carries the source.
    pub fn evalsha(mut self, evalsha: bool) -> Redis {
        self.evalsha = evalsha;
        self
    }

    /// The key options.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Whether calls run scripts by SHA1 first.
    pub fn runs_by_sha1(&self) -> bool {
        self.evalsha
    }

    /// What a single consume (one entry, costing 1, `Op::Consume` as [`Redis::start`] plans it)
    /// decides from the reply to its first command, when that reply is a verdict: the verdict its call
    /// would give, without planning the command again (a host that keeps the command and sends it for
    /// each call). `None` for any other reply, which only the call answers (its typed error). The
    /// call's release token is not made: a host asking for it starts the call.
    pub fn consume_answered(&self, limit: Limit, reply: &Reply) -> Option<BatchVerdict> {
        plan::decode_consume(reply, &[limit])
            .ok()
            .map(|(verdict, _)| verdict)
    }

    /// [`Redis::consume_answered`] for `Op::Attempt` under `max`: its outcome, when the reply is one.
    pub fn attempt_answered(&self, max: i64, reply: &Reply) -> Option<Outcome> {
        decide_fixed(Fixed::Attempt(max), reply).ok()
    }

    /// Starts `op`. Times are the server's (`TIME` inside the scripts).
    pub fn start(&self, op: Op) -> Call {
        let o = &self.options;
        let (plan, kind) = match op {
            Op::Consume { entries, call_id } => {
                if call_id.is_empty() {
                    return Call::done(Err(CallError::Unsupported(
                        "a call id must not be empty: pass a fresh random id for every call",
                    )));
                }
                if entries.is_empty() {
                    return Call::done(Ok(allowed(Quota::NONE, Some(Vec::new()), call_id)));
                }
                if entries.len() > plan::MAX_BATCH {
                    return Call::done(Err(TOO_LARGE));
                }
                let limits = entries.iter().map(|e| e.limit).collect();
                // A call with a cost above 1 runs the weighted script; its token names the cost.
                #[cfg(feature = "weights")]
                if weighted::is_weighted(&entries) {
                    let plan = weighted::plan_weighted("c", &entries, o, &call_id, None);
                    let call_id = weighted::token_id(&call_id, weighted::max_cost(&entries));
                    return Call::redis(RedisCall::new(
                        plan,
                        self.evalsha,
                        Kind::Consume { limits, call_id },
                    ));
                }
                let plan = plan::sliding_plan("c", &entries, o, &call_id);
                (plan, Kind::Consume { limits, call_id })
            }
            Op::Peek { entries } => {
                if entries.is_empty() {
                    return Call::done(Ok(Outcome::Verdict {
                        verdict: BatchVerdict::ALLOWED,
                        release: None,
                    }));
                }
                if entries.len() > plan::MAX_BATCH {
                    return Call::done(Err(TOO_LARGE));
                }
                let limits = entries.iter().map(|e| e.limit).collect();
                #[cfg(feature = "weights")]
                if weighted::is_weighted(&entries) {
                    let plan = weighted::plan_weighted("p", &entries, o, "-", None);
                    return Call::redis(RedisCall::new(plan, self.evalsha, Kind::Peek { limits }));
                }
                (
                    plan::sliding_plan("p", &entries, o, "-"),
                    Kind::Peek { limits },
                )
            }
            Op::Release { token } => match token {
                ReleaseToken::Redis(release) if release.keys.is_empty() => {
                    return Call::done(Ok(Outcome::Unit))
                }
                #[cfg(feature = "weights")]
                ReleaseToken::Redis(release) if weighted::plan_release(&release).is_some() => (
                    weighted::plan_release(&release).expect("checked"),
                    Kind::Release,
                ),
                ReleaseToken::Redis(release) => (plan::plan_release(&release), Kind::Release),
                ReleaseToken::Sql(_) => {
                    return Call::done(Err(CallError::Unsupported(
                        "a SQL store's release token was given to a Redis store",
                    )))
                }
            },
            Op::Hit { key, decay, amount } => (
                plan::plan_hit(&key, decay, amount, o),
                Kind::Fixed(Fixed::Hit),
            ),
            Op::Attempt { key, max, decay } => (
                plan::plan_attempt(&key, decay, max, o),
                Kind::Fixed(Fixed::Attempt(max)),
            ),
            #[cfg(feature = "weights")]
            Op::AttemptCost { cost: 0, .. } => {
                return Call::done(Err(CallError::Unsupported(ZERO_COST)));
            }
            #[cfg(feature = "weights")]
            Op::AttemptCost {
                key,
                max,
                decay,
                cost,
            } => (
                weighted::plan_attempt_cost(&key, decay, max, cost, o),
                Kind::Fixed(Fixed::AttemptCost(max, cost)),
            ),
            Op::Read { key, query } => (
                plan::plan_get_window(&key, o),
                Kind::Fixed(Fixed::Read(query)),
            ),
            Op::ResetAttempts { key } => {
                (plan::plan_reset_attempts(&key, o), Kind::Fixed(Fixed::Unit))
            }
            Op::Clear { key } => (plan::plan_clear(&key, o), Kind::Fixed(Fixed::Unit)),
        };
        Call::redis(RedisCall::new(plan, self.evalsha, kind))
    }
}

/// Whether a plan runs the weighted script (never, without the weights feature).
fn is_weighted(plan: &Plan) -> bool {
    cfg!(feature = "weights") && plan.script.name == "weighted"
}

#[cfg(feature = "weights")]
use crate::redis::weighted::{self, decode_weighted};
#[cfg(not(feature = "weights"))]
fn decode_weighted(
    reply: &Reply,
    _: &[Limit],
    _: bool,
) -> Result<(BatchVerdict, usize), ReplyError> {
    Err(ReplyError::new(
        "weighted",
        "no reply (no weights feature)",
        reply,
    ))
}

/// An attempt costing nothing: a cost is at least 1.
#[cfg(feature = "weights")]
pub(crate) const ZERO_COST: &str = "an attempt's cost must be at least 1";

/// A batch above [`plan::MAX_BATCH`] entries: more than the clients carry in one command.
const TOO_LARGE: CallError = CallError::Unsupported(
    "a Redis call carries at most 10000 entries (ratewindow_core::redis::MAX_BATCH): \
     split the batch into calls of at most that many",
);

fn allowed(quota: Quota, keys: Option<Vec<String>>, call_id: String) -> Outcome {
    Outcome::Verdict {
        verdict: BatchVerdict::ALLOWED.with_quota(quota),
        release: keys.map(|keys| ReleaseToken::Redis(RedisRelease { keys, call_id })),
    }
}

#[derive(Debug)]
enum Kind {
    Consume { limits: Vec<Limit>, call_id: String },
    Peek { limits: Vec<Limit> },
    Release,
    Fixed(Fixed),
}

#[derive(Debug, Clone, Copy)]
enum Fixed {
    Hit,
    Attempt(i64),
    /// An attempt costing more than one hit: max, cost.
    #[cfg(feature = "weights")]
    AttemptCost(i64, u32),
    Read(WindowQuery),
    Unit,
}

/// One Redis call in progress.
#[derive(Debug)]
pub(crate) struct RedisCall {
    /// The command running now.
    plan: Plan,
    /// Whether the command runs by SHA1 now.
    by_sha1: bool,
    /// Whether the host can run scripts by SHA1 at all.
    evalsha: bool,
    kind: Kind,
    /// Set once the keys turned out to span Cluster slots.
    apart: Option<Box<Apart>>,
    done: Option<Result<Outcome, CallError>>,
}

impl RedisCall {
    fn new(plan: Plan, evalsha: bool, kind: Kind) -> RedisCall {
        RedisCall {
            plan,
            by_sha1: evalsha,
            evalsha,
            kind,
            apart: None,
            done: None,
        }
    }

    pub(crate) fn command(&self) -> Command<'_> {
        Command::Script {
            script: self.plan.script,
            keys: &self.plan.keys,
            args: &self.plan.args,
            by_sha1: self.by_sha1,
        }
    }

    pub(crate) fn result(
        &mut self,
        give_back_failures: &mut Vec<GiveBackFailure>,
        failed_release: &mut Option<ReleaseToken>,
    ) -> Option<Result<Outcome, CallError>> {
        let done = self.done.take()?;
        if let Some(apart) = &mut self.apart {
            give_back_failures.append(&mut apart.failures);
        } else if let (
            Err(CallError::Store { .. } | CallError::Reply(_)),
            Kind::Consume { call_id, .. },
        ) = (&done, &mut self.kind)
        {
            // The script may have run before its reply was lost: its release, by the call's id.
            *failed_release = Some(ReleaseToken::Redis(RedisRelease {
                keys: std::mem::take(&mut self.plan.keys),
                call_id: std::mem::take(call_id),
            }));
        }
        Some(done)
    }

    pub(crate) fn feed(&mut self, fed: Result<Fed, String>) {
        if self.done.is_some() {
            self.done = Some(Err(CallError::Protocol {
                expected: "nothing (the call is over)",
                got: "a result",
            }));
            return;
        }
        let reply = match fed {
            Ok(Fed::Reply(reply)) => Ok(reply),
            Ok(Fed::Rows(_)) => {
                self.done = Some(Err(CallError::Protocol {
                    expected: "a Redis reply",
                    got: "rows",
                }));
                return;
            }
            Err(message) => {
                if self.by_sha1 && errors::is_noscript(&message) {
                    // Nothing ran: the same command again, with the source.
                    self.by_sha1 = false;
                    return;
                }
                Err(message)
            }
        };
        if self.apart.is_some() {
            return self.feed_apart(reply);
        }
        if let Err(message) = &reply {
            if self.plan.keys.len() > 1
                && errors::is_crossslot(message)
                && !matches!(self.kind, Kind::Fixed(_))
            {
                return self.go_apart();
            }
        }
        self.done = Some(self.decide(reply));
    }

    /// The outcome of the one-script path.
    fn decide(&mut self, reply: Result<Reply, String>) -> Result<Outcome, CallError> {
        let reply = reply.map_err(|message| CallError::Store { message })?;
        match &mut self.kind {
            Kind::Consume { limits, call_id } => {
                let (verdict, _) = if is_weighted(&self.plan) {
                    decode_weighted(&reply, limits, true)?
                } else {
                    plan::decode_consume(&reply, limits)?
                };
                Ok(if verdict.allowed {
                    let keys = std::mem::take(&mut self.plan.keys);
                    allowed(verdict.quota, Some(keys), std::mem::take(call_id))
                } else {
                    Outcome::Verdict {
                        verdict,
                        release: None,
                    }
                })
            }
            Kind::Peek { limits } => Ok(Outcome::Verdict {
                verdict: if is_weighted(&self.plan) {
                    decode_weighted(&reply, limits, false)?.0
                } else {
                    plan::decode_batch(&reply, limits)?.0
                },
                release: None,
            }),
            Kind::Release => plan::decode_release_of(&reply, self.plan.keys.len())
                .map(|_| Outcome::Unit)
                .map_err(Into::into),
            Kind::Fixed(fixed) => decide_fixed(*fixed, &reply),
        }
    }

    /// The keys span Cluster slots: count key by key, in order of first appearance.
    fn go_apart(&mut self) {
        let call_id = self.plan.args.get(1).cloned().unwrap_or_default();
        let groups = Group::of(&self.plan);
        // A weighted call: each entry's cost, and the largest (its release removes that many).
        #[cfg(feature = "weights")]
        let (costs, max_cost) = if is_weighted(&self.plan) {
            let costs: Vec<u32> = self
                .plan
                .args
                .get(3..)
                .unwrap_or(&[])
                .chunks(4)
                .map(|c| c.get(3).and_then(|c| c.parse().ok()).unwrap_or(1))
                .collect();
            let max = match self.kind {
                Kind::Release => self.plan.args.get(2).and_then(|c| c.parse().ok()),
                _ => costs.iter().copied().max(),
            };
            (costs, max)
        } else {
            (Vec::new(), None)
        };
        let mode = match &self.kind {
            Kind::Consume { .. } => Mode::Consume,
            Kind::Peek { .. } => Mode::Peek,
            _ => Mode::Release,
        };
        let limits: Vec<Limit> = match &self.kind {
            Kind::Consume { limits, .. } | Kind::Peek { limits } => limits.clone(),
            _ => Vec::new(),
        };
        let apart = Box::new(Apart {
            mode,
            limits,
            call_id,
            #[cfg(feature = "weights")]
            costs,
            #[cfg(feature = "weights")]
            max_cost,
            keys: std::mem::take(&mut self.plan.keys),
            groups,
            next: 0,
            phase: match mode {
                Mode::Consume => Phase::Count,
                Mode::Peek => Phase::Peek,
                Mode::Release => Phase::ReleaseEach,
            },
            counted: Vec::new(),
            give_back: std::collections::VecDeque::new(),
            refusal: None,
            allowed_quotas: Vec::new(),
            error: None,
            failures: Vec::new(),
        });
        self.by_sha1 = self.evalsha;
        self.plan = apart.command();
        self.apart = Some(apart);
    }

    fn feed_apart(&mut self, reply: Result<Reply, String>) {
        let Some(apart) = self.apart.as_mut() else {
            return;
        };
        match apart.feed(reply) {
            Some(done) => self.done = Some(done),
            None => {
                self.plan = apart.command();
                // Each new command starts by SHA1 again (the script is loaded by now).
                self.by_sha1 = self.evalsha;
            }
        }
    }
}

fn decide_fixed(fixed: Fixed, reply: &Reply) -> Result<Outcome, CallError> {
    Ok(match fixed {
        Fixed::Hit => match plan::decode_window(reply)? {
            Some(w) => Outcome::Hit {
                count: w.count,
                reset_after_ms: w.ms_left,
            },
            None => {
                return Err(ReplyError::new(
                    "fixed",
                    "[count, ms until the window ends > 0] after a hit",
                    reply,
                )
                .into())
            }
        },
        Fixed::Attempt(max) => {
            let (allowed, window) = plan::decode_attempt_max(reply, max)?;
            let (count, reset_after_ms) = window.map_or((0, 0), |w| (w.count, w.ms_left));
            Outcome::Attempt {
                allowed,
                count,
                reset_after_ms,
            }
        }
        #[cfg(feature = "weights")]
        Fixed::AttemptCost(max, cost) => {
            let (allowed, window) = weighted::decode_attempt_cost(reply, max, cost)?;
            let (count, reset_after_ms) = window.map_or((0, 0), |w| (w.count, w.ms_left));
            Outcome::Attempt {
                allowed,
                count,
                reset_after_ms,
            }
        }
        Fixed::Read(query) => query.answer(plan::decode_window(reply)?),
        Fixed::Unit => {
            plan::decode_window(reply)?;
            Outcome::Unit
        }
    })
}

/// The entries of one key, as a group of a call counted key by key.
#[derive(Debug)]
struct Group {
    /// Index into the call's keys.
    key: usize,
    /// The call's entry indices of this key, in order.
    entries: Vec<usize>,
}

impl Group {
    /// The groups of a sliding plan (`mode, id, (key index, uses, window)*`, or one entry's short
    /// form `'uses:window'[, id]`; weighted: `mode, id, now, (key index, uses, window, cost)*`), in
    /// order of keys.
    fn of(plan: &Plan) -> Vec<Group> {
        if plan.keys.len() == 1
            && plan.args.len() <= 2
            && plan.args.first().is_some_and(|a| a != "r")
            && !is_weighted(plan)
        {
            return vec![Group {
                key: 0,
                entries: vec![0],
            }];
        }
        let (from, width) = if is_weighted(plan) { (3, 4) } else { (2, 3) };
        let mut groups: Vec<Group> = (0..plan.keys.len())
            .map(|key| Group {
                key,
                entries: Vec::new(),
            })
            .collect();
        for (i, triple) in plan
            .args
            .get(from..)
            .unwrap_or(&[])
            .chunks(width)
            .enumerate()
        {
            let Some(k) = triple.first() else { continue };
            let Some(group) = k
                .parse::<usize>()
                .ok()
                .and_then(|k| groups.get_mut(k.wrapping_sub(1)))
            else {
                continue;
            };
            group.entries.push(i);
        }
        groups
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Consume,
    Peek,
    Release,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Consume: counting group `next`.
    Count,
    /// Giving back the keys in `give_back` (one script each), then `after`.
    GiveBack,
    /// Peeking group `next` (after a refusal, or for a peek).
    Peek,
    /// Release: removing the call from key `next`.
    ReleaseEach,
}

/// A call whose keys span Cluster slots, counted key by key.
#[derive(Debug)]
struct Apart {
    mode: Mode,
    call_id: String,
    /// A weighted call's cost of each entry (empty for a call costing 1).
    #[cfg(feature = "weights")]
    costs: Vec<u32>,
    /// A weighted call's largest cost (`None` for a call costing 1).
    #[cfg(feature = "weights")]
    max_cost: Option<u32>,
    keys: Vec<String>,
    limits: Vec<Limit>,
    groups: Vec<Group>,
    next: usize,
    phase: Phase,
    /// Groups counted so far (consume).
    counted: Vec<usize>,
    /// Keys still to give back.
    give_back: std::collections::VecDeque<usize>,
    /// The longest refusal so far, with `blocked` as the call's entry index.
    refusal: Option<BatchVerdict>,
    /// Each allowed group's quota, with its tightest entry's window, in order.
    allowed_quotas: Vec<(Quota, u64)>,
    /// The error to answer once the give-back is over.
    error: Option<CallError>,
    failures: Vec<GiveBackFailure>,
}

impl Apart {
    fn command(&self) -> Plan {
        match self.phase {
            Phase::Count | Phase::Peek => {
                let group = &self.groups[self.next];
                let mode = if self.phase == Phase::Count { "c" } else { "p" };
                let id = if self.phase == Phase::Count {
                    self.call_id.as_str()
                } else {
                    "-"
                };
                let limits = self.group_limits(self.next);
                #[cfg(feature = "weights")]
                if self.weighted() {
                    let group = &self.groups[self.next];
                    let entries = group.entries.iter().map(|&i| {
                        let limit = self.limits.get(i).copied();
                        (0, limit, self.costs.get(i).copied().unwrap_or(1))
                    });
                    let entries = entries.filter_map(|(k, l, c)| Some((k, l?, c)));
                    let key = vec![self.keys[group.key].clone()];
                    return weighted::plan_of(mode, key, entries, id, None);
                }
                let args = if let [limit] = limits[..] {
                    plan::one_entry_args(mode, id, limit)
                } else {
                    let mut args = Vec::with_capacity(2 + 3 * limits.len());
                    args.push(mode.to_owned());
                    args.push(id.to_owned());
                    for limit in limits {
                        args.push("1".to_owned());
                        args.push(limit.uses().to_string());
                        args.push(limit.window_ms().to_string());
                    }
                    args
                };
                Plan {
                    script: &SLIDING,
                    keys: vec![self.keys[group.key].clone()],
                    args,
                }
            }
            Phase::GiveBack => self.release_plan(self.give_back.front().copied().unwrap_or(0)),
            Phase::ReleaseEach => self.release_plan(self.next),
        }
    }

    fn release_plan(&self, key: usize) -> Plan {
        let release = RedisRelease {
            keys: vec![self.keys[key].clone()],
            call_id: self.token_id(),
        };
        #[cfg(feature = "weights")]
        if let Some(plan) = weighted::plan_release(&release) {
            return plan;
        }
        plan::plan_release(&release)
    }

    /// The id a release token carries: a weighted call's names its largest cost.
    fn token_id(&self) -> String {
        #[cfg(feature = "weights")]
        if let Some(cost) = self.max_cost {
            return weighted::token_id(&self.call_id, cost);
        }
        self.call_id.clone()
    }

    /// Whether the call is weighted (never, without the weights feature).
    fn weighted(&self) -> bool {
        #[cfg(feature = "weights")]
        return self.max_cost.is_some();
        #[cfg(not(feature = "weights"))]
        false
    }

    fn group_limits(&self, g: usize) -> Vec<Limit> {
        self.groups[g]
            .entries
            .iter()
            .filter_map(|&i| self.limits.get(i).copied())
            .collect()
    }

    /// Decodes group `g`'s reply (a failure is the store's), with `blocked` mapped to the call's entry index, and the window of
    /// its tightest entry.
    fn decode(
        &self,
        g: usize,
        reply: Result<Reply, String>,
    ) -> Result<(BatchVerdict, u64), CallError> {
        let reply = reply.map_err(|message| CallError::Store { message })?;
        let limits = self.group_limits(g);
        let count = self.phase == Phase::Count;
        let (mut verdict, tight) = match (self.weighted(), count) {
            (true, _) => decode_weighted(&reply, &limits, count)?,
            (false, true) => plan::decode_consume(&reply, &limits)?,
            (false, false) => plan::decode_batch(&reply, &limits)?,
        };
        verdict.blocked = verdict.blocked.map(|b| self.groups[g].entries[b]);
        Ok((verdict, limits[tight].window_ms()))
    }

    fn merge_refusal(&mut self, verdict: BatchVerdict) {
        // The longest wait blocks; ties keep the earlier entry. Waits, not timestamps: the nodes of a
        // cluster have clocks of their own.
        if self
            .refusal
            .is_none_or(|best| verdict.retry_after_ms > best.retry_after_ms)
        {
            self.refusal = Some(verdict);
        }
    }

    /// Feeds a result; `Some` when the call is over.
    fn feed(&mut self, reply: Result<Reply, String>) -> Option<Result<Outcome, CallError>> {
        match self.phase {
            Phase::Count => {
                let g = self.next;
                match self.decode(g, reply) {
                    Ok((verdict, window)) if verdict.allowed => {
                        self.counted.push(g);
                        self.allowed_quotas.push((verdict.quota, window));
                        self.next += 1;
                        return (self.next == self.groups.len()).then(|| Ok(self.allowed()));
                    }
                    Ok((verdict, _)) => {
                        self.merge_refusal(verdict);
                        self.next += 1;
                        self.give_back = self.counted.iter().map(|&g| self.groups[g].key).collect();
                        self.phase = Phase::GiveBack;
                    }
                    Err(error) => {
                        // The script may have run (a timeout): its give-back removes nothing if not.
                        self.error = Some(error);
                        self.give_back = self.counted.iter().map(|&g| self.groups[g].key).collect();
                        self.give_back.push_back(self.groups[g].key);
                        self.phase = Phase::GiveBack;
                    }
                }
                self.after_give_back()
            }
            Phase::GiveBack => {
                let Some(key) = self.give_back.pop_front() else {
                    return self.after_give_back();
                };
                let failed = match reply {
                    Ok(r) => plan::decode_release_of(&r, 1).err().map(|e| e.to_string()),
                    Err(message) => Some(message),
                };
                if let Some(message) = failed {
                    self.failures.push(GiveBackFailure {
                        keys: vec![self.keys[key].clone()],
                        call_id: self.token_id(),
                        message,
                    });
                }
                self.after_give_back()
            }
            Phase::Peek => {
                match self.decode(self.next, reply) {
                    Ok((verdict, window)) if verdict.allowed => {
                        self.allowed_quotas.push((verdict.quota, window))
                    }
                    Ok((verdict, _)) => self.merge_refusal(verdict),
                    // After a consume's refusal a failed peek leaves the refusal standing (it is
                    // right; only its wait may be shorter than the longest). A peek cannot answer
                    // without every key.
                    Err(error) if self.mode == Mode::Peek => return Some(Err(error)),
                    Err(_) => {}
                }
                self.next += 1;
                self.peek_or_done()
            }
            Phase::ReleaseEach => {
                let failed = match reply {
                    Ok(r) => plan::decode_release_of(&r, 1).err().map(CallError::from),
                    Err(message) => Some(CallError::Store { message }),
                };
                if self.error.is_none() {
                    self.error = failed;
                }
                self.next += 1;
                if self.next < self.keys.len() {
                    return None;
                }
                // A release is idempotent: the host may run the same token again after a failure.
                Some(match self.error.take() {
                    Some(error) => Err(error),
                    None => Ok(Outcome::Unit),
                })
            }
        }
    }

    /// After a give-back step (or none): more keys to give back, the error, or the peeks.
    fn after_give_back(&mut self) -> Option<Result<Outcome, CallError>> {
        if !self.give_back.is_empty() {
            self.phase = Phase::GiveBack;
            return None;
        }
        if let Some(error) = self.error.take() {
            return Some(Err(error));
        }
        self.phase = Phase::Peek;
        self.peek_or_done()
    }

    fn peek_or_done(&mut self) -> Option<Result<Outcome, CallError>> {
        if self.next < self.groups.len() {
            return None;
        }
        Some(Ok(match self.refusal {
            Some(verdict) => Outcome::Verdict {
                verdict,
                release: None,
            },
            None => Outcome::Verdict {
                verdict: BatchVerdict::ALLOWED
                    .with_quota(Quota::tightest(self.allowed_quotas.iter().copied())),
                release: None,
            },
        }))
    }

    fn allowed(&mut self) -> Outcome {
        allowed(
            Quota::tightest(self.allowed_quotas.iter().copied()),
            Some(std::mem::take(&mut self.keys)),
            self.token_id(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Next;
    use crate::Entry;

    /// A kept plan's answer decides as the call does: every reply shape, verdict or not.
    #[test]
    fn an_answered_consume_or_attempt_decides_as_its_call() {
        let store = Redis::new(RedisOptions::default());
        let limit = Limit::new(5, 60_000).unwrap();
        let int = |xs: &[i64]| Reply::Array(xs.iter().map(|&x| Reply::Int(x)).collect());
        // A refusal marker: until, end (16 digits each), uses:window; then TIME's seconds and µs.
        let marker =
            |limit: &str| format!("00017000000600000001700000061000{limit} 1700000001 250000");
        let replies = [
            Reply::Text("3 1700000000000 1700000000500 1700000001000".into()),
            Reply::Text(marker("5:60000")),
            Reply::Text(marker("4:60000")),
            int(&[0, 700, 1_700_000_000_000, 9_000]),
            int(&[1, 2, 60_000, 60_000, 1_700_000_000_000]),
            int(&[1, 0, -1, -1, 1_000, 0, 4, 60_000, 60_000]),
            int(&[1, 0, -1, -1, 1_000, 0, 9, 60_000, 60_000]),
            int(&[0, 0]),
            Reply::Text("6 1700000000000 1700000000500 1700000001000".into()),
            Reply::Nil,
        ];
        let mut decided = Vec::new();
        for reply in &replies {
            let mut call = store.start(Op::Consume {
                entries: vec![Entry::new("k", limit)],
                call_id: "id".into(),
            });
            let _ = call.next();
            call.feed(Fed::Reply(reply.clone()));
            let whole = match call.next() {
                Next::Done(Ok(Outcome::Verdict { verdict, .. })) => Some(verdict),
                Next::Done(Err(_)) => None,
                other => panic!("{other:?}"),
            };
            assert_eq!(store.consume_answered(limit, reply), whole, "{reply:?}");
            decided.push(whole.is_some());
        }
        // The allowed text, the marker, the 4- and 5-number and the 9-number replies are verdicts.
        assert_eq!(
            decided,
            [true, true, false, true, true, true, false, false, false, false]
        );
        let fixed = [
            int(&[1, 3, 900]),
            int(&[0, 5, 900]),
            int(&[1, 6, 900]),
            int(&[0, 0, 0]),
            int(&[1]),
        ];
        for reply in &fixed {
            let mut call = store.start(Op::Attempt {
                key: "k".into(),
                max: 5,
                decay: crate::Window::from_ms(1_000).unwrap(),
            });
            let _ = call.next();
            call.feed(Fed::Reply(reply.clone()));
            let whole = match call.next() {
                Next::Done(Ok(outcome)) => Some(format!("{outcome:?}")),
                Next::Done(Err(_)) => None,
                other => panic!("{other:?}"),
            };
            assert_eq!(
                store.attempt_answered(5, reply).map(|o| format!("{o:?}")),
                whole,
                "{reply:?}"
            );
            decided.push(whole.is_some());
        }
        assert_eq!(decided[10..], [true, true, false, false, false]);
    }

    #[test]
    fn a_batch_above_the_maximum_is_refused_before_anything_runs() {
        let store = Redis::new(RedisOptions::default());
        let entries = |n: usize| -> Vec<Entry> {
            (0..n)
                .map(|i| Entry::new(format!("u{i}"), Limit::new(5, 1_000).unwrap()))
                .collect()
        };
        let mut at_most = store.start(Op::Peek {
            entries: entries(plan::MAX_BATCH),
        });
        assert!(matches!(at_most.next(), Next::Run(_)));
        for op in [
            Op::Peek {
                entries: entries(plan::MAX_BATCH + 1),
            },
            Op::Consume {
                entries: entries(plan::MAX_BATCH + 1),
                call_id: "id".into(),
            },
        ] {
            let mut call = store.start(op);
            match call.next() {
                Next::Done(Err(error)) => {
                    assert_eq!(error.kind(), "unsupported");
                    assert!(error.to_string().contains("at most 10000 entries"));
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
