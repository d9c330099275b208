//! GCRA and the sliding-window counter on the networked stores: one command a call (cargo feature
//! `rates`).
//!
//! Redis (and Cluster: one key, one slot): one script on one key, by SHA1 first and with its source
//! after `NOSCRIPT`. The script decides on the server's clock (`TIME`) and answers the state it found
//! in a few integers; the machine derives every verdict field from that state with the same rule the
//! memory store uses ([`Gcra::decide`], [`Counter::decide`]), and refuses a reply whose `allowed`
//! disagrees with its state. So the fields cannot drift between stores.
//!
//! Hosts check an operation's cost with [`RateOp::check`] first, to raise their language's typed
//! error naming the field; a machine started with a bad cost ends at once in
//! [`CallError::Unsupported`].

use super::{errors, Call, CallError, Command, Fed, Outcome, Redis};
use crate::counter::{Counter, CounterState};
use crate::gcra::{Gcra, RateError, Tat};
use crate::redis::{Plan, Reply, ReplyError, Script};
use crate::{BatchVerdict, Verdict};

/// The GCRA script: consume, peek and reset on one key holding its TAT.
pub static GCRA: Script = Script {
    name: "gcra",
    source: include_str!("../redis/gcra.lua"),
    sha1: "1ee690b17e7d19f86bbbfa8b27ce207897b5d4fd",
};

/// The sliding-window counter script: consume, peek and reset on one key holding its two counts.
pub static COUNTER: Script = Script {
    name: "counter",
    source: include_str!("../redis/counter.lua"),
    sha1: "4b265e8dcd4208202a88f21dcf49c90736402b74",
};

/// A GCRA or sliding-window counter operation on one key, the same on every networked store as on
/// the memory store (`MemoryStore::gcra_consume` and friends). Consumes and peeks end in
/// [`Outcome::Verdict`] (`release: None`: these uses are not given back; `blocked: Some(0)` when
/// refused); resets in [`Outcome::Unit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateOp {
    /// Takes `cost` uses (1 to the burst) from `key`'s bucket, or refuses with the wait.
    GcraConsume {
        /// The key.
        key: String,
        /// The rate and burst.
        gcra: Gcra,
        /// Uses the call takes.
        cost: u64,
    },
    /// The verdict a [`GcraConsume`](RateOp::GcraConsume) would give, writing nothing.
    GcraPeek {
        /// The key.
        key: String,
        /// The rate and burst.
        gcra: Gcra,
        /// Uses the call would take.
        cost: u64,
    },
    /// Fills `key`'s bucket again (removes its state).
    GcraReset {
        /// The key.
        key: String,
    },
    /// Counts `cost` uses (1 to `uses`) on `key`'s sliding-window counter, or refuses with the wait.
    CounterConsume {
        /// The key.
        key: String,
        /// The limit.
        counter: Counter,
        /// Uses the call takes.
        cost: u64,
    },
    /// The verdict a [`CounterConsume`](RateOp::CounterConsume) would give, writing nothing.
    CounterPeek {
        /// The key.
        key: String,
        /// The limit.
        counter: Counter,
        /// Uses the call would take.
        cost: u64,
    },
    /// Forgets `key`'s counts.
    CounterReset {
        /// The key.
        key: String,
    },
}

impl RateOp {
    /// The key the operation names.
    pub fn key(&self) -> &str {
        match self {
            RateOp::GcraConsume { key, .. }
            | RateOp::GcraPeek { key, .. }
            | RateOp::GcraReset { key }
            | RateOp::CounterConsume { key, .. }
            | RateOp::CounterPeek { key, .. }
            | RateOp::CounterReset { key } => key,
        }
    }

    /// Checks the cost (`1..=burst` for GCRA, `1..=uses` for the counter): the error names the field.
    pub fn check(&self) -> Result<(), RateError> {
        self.decide().map(|_| ())
    }

    fn decide(&self) -> Result<Decide, RateError> {
        Ok(match *self {
            RateOp::GcraConsume { gcra, cost, .. } => Decide::Gcra {
                gcra,
                cost: gcra.check_cost(cost)?,
                record: true,
            },
            RateOp::GcraPeek { gcra, cost, .. } => Decide::Gcra {
                gcra,
                cost: gcra.check_cost(cost)?,
                record: false,
            },
            RateOp::CounterConsume { counter, cost, .. } => Decide::Counter {
                counter,
                cost: counter.check_cost(cost)?,
                record: true,
            },
            RateOp::CounterPeek { counter, cost, .. } => Decide::Counter {
                counter,
                cost: counter.check_cost(cost)?,
                record: false,
            },
            RateOp::GcraReset { .. } | RateOp::CounterReset { .. } => Decide::Reset,
        })
    }
}

/// How the answer is read.
#[derive(Debug, Clone, Copy)]
enum Decide {
    Gcra {
        gcra: Gcra,
        cost: u32,
        record: bool,
    },
    Counter {
        counter: Counter,
        cost: u32,
        record: bool,
    },
    Reset,
}

/// The state a store answered, and the clock it decided at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Gcra(Option<Tat>),
    Counter(Option<CounterState>),
}

impl Decide {
    /// The verdict from the state found at `now`; `allowed` is the store's own decision, which must
    /// agree.
    fn verdict(self, found: Found, now: u64, allowed: bool) -> Option<Verdict> {
        let verdict = match (self, found) {
            (Decide::Gcra { gcra, cost, record }, Found::Gcra(tat)) => {
                gcra.decide(tat, cost, now, record).verdict
            }
            (
                Decide::Counter {
                    counter,
                    cost,
                    record,
                },
                Found::Counter(state),
            ) => counter.decide(state, cost, now, record).verdict,
            _ => return None,
        };
        (verdict.allowed == allowed).then_some(verdict)
    }
}

/// A single verdict as a batch of one.
pub(crate) fn batch(verdict: Verdict) -> BatchVerdict {
    BatchVerdict {
        allowed: verdict.allowed,
        retry_after_ms: verdict.retry_after_ms,
        retry_timestamp: verdict.retry_timestamp,
        blocked: (!verdict.allowed).then_some(0),
        quota: verdict.quota,
    }
}

#[derive(Debug)]
enum Step {
    Script { plan: Plan, by_sha1: bool },
}

/// One GCRA or counter call in progress.
#[derive(Debug)]
pub(crate) struct RateCall {
    step: Step,
    decide: Decide,
    done: Option<Result<Outcome, CallError>>,
    over: bool,
}

fn refused(e: RateError) -> Call {
    // The message is static: the hosts check with RateOp::check first and raise the typed error.
    let _ = e;
    Call::done(Err(CallError::Unsupported(
        "invalid cost: a whole number from 1 to the limit's burst (GCRA) or uses \
         (check with RateOp::check first)",
    )))
}

impl RateCall {
    pub(crate) fn command(&self) -> Command<'_> {
        match &self.step {
            Step::Script { plan, by_sha1 } => Command::Script {
                script: plan.script,
                keys: &plan.keys,
                args: &plan.args,
                by_sha1: *by_sha1,
            },
        }
    }

    pub(crate) fn result(&mut self) -> Option<Result<Outcome, CallError>> {
        let done = self.done.take();
        if done.is_some() {
            self.over = true;
        }
        done
    }

    pub(crate) fn feed(&mut self, fed: Result<Fed, String>) {
        if self.over || self.done.is_some() {
            self.done = Some(Err(CallError::Protocol {
                expected: "nothing (the call is over)",
                got: "a result",
            }));
            return;
        }
        self.done = Some(match (&mut self.step, fed) {
            (Step::Script { by_sha1, .. }, Err(message))
                if *by_sha1 && errors::is_noscript(&message) =>
            {
                // Nothing ran: the same command again, with the source.
                *by_sha1 = false;
                return;
            }
            (_, Err(message)) => Err(CallError::Store { message }),
            (Step::Script { plan, .. }, Ok(Fed::Reply(reply))) => {
                decode_reply(self.decide, plan.script, &reply)
            }
            (Step::Script { .. }, Ok(Fed::Rows(_))) => Err(CallError::Protocol {
                expected: "a Redis reply",
                got: "rows",
            }),
        });
    }
}

fn start(step: Step, decide: Decide) -> Call {
    Call::rate(RateCall {
        step,
        decide,
        done: None,
        over: false,
    })
}

/// The integers of an array reply, up to 6.
fn ints(reply: &Reply) -> Option<([u64; 6], usize)> {
    let Reply::Array(items) = reply else {
        return None;
    };
    if items.len() > 6 {
        return None;
    }
    let mut out = [0; 6];
    for (slot, item) in out.iter_mut().zip(items) {
        *slot = match item {
            Reply::Int(i) => u64::try_from(*i).ok()?,
            Reply::Text(s) => s.parse().ok()?,
            _ => return None,
        };
    }
    Some((out, items.len()))
}

const GCRA_REPLY: &str = "{allowed, now} or {allowed, now, ms, rem} with a TAT ahead of now, \
                          consistent with the allowed flag";
const COUNTER_REPLY: &str = "{allowed, now} or {allowed, now, start, window_ms, cur, prev}, \
                             consistent with the allowed flag";

/// Reads a script's reply: the state found, then the verdict from it.
fn decode_reply(decide: Decide, script: &Script, reply: &Reply) -> Result<Outcome, CallError> {
    let (expected, found) = match decide {
        Decide::Reset => {
            return match reply {
                Reply::Int(0 | 1) => Ok(Outcome::Unit),
                _ => Err(ReplyError::new(script.name, "0 or 1 (keys deleted)", reply).into()),
            }
        }
        Decide::Gcra { gcra, .. } => (GCRA_REPLY, gcra_found(gcra, reply)),
        Decide::Counter { .. } => (COUNTER_REPLY, counter_found(reply)),
    };
    found
        .and_then(|(allowed, now, found)| decide.verdict(found, now, allowed))
        .map(|verdict| Outcome::Verdict {
            verdict: batch(verdict),
            release: None,
        })
        .ok_or_else(|| ReplyError::new(script.name, expected, reply).into())
}

fn flag(n: u64) -> Option<bool> {
    match n {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

fn gcra_found(gcra: Gcra, reply: &Reply) -> Option<(bool, u64, Found)> {
    let (v, len) = ints(reply)?;
    let allowed = flag(v[0])?;
    let now = v[1];
    match len {
        2 => Some((allowed, now, Found::Gcra(None))),
        4 => {
            let (ms, rem) = (v[2], v[3]);
            // The script answers a TAT ahead of now, its fraction in this limit's units.
            if rem >= gcra.uses() as u64 || (ms, rem) <= (now, 0) {
                return None;
            }
            let tat = Tat {
                ms,
                rem: rem as u32,
                per: gcra.uses(),
            };
            Some((allowed, now, Found::Gcra(Some(tat))))
        }
        _ => None,
    }
}

fn counter_found(reply: &Reply) -> Option<(bool, u64, Found)> {
    let (v, len) = ints(reply)?;
    let allowed = flag(v[0])?;
    let now = v[1];
    match len {
        2 => Some((allowed, now, Found::Counter(None))),
        6 => {
            let state = CounterState {
                start: v[2],
                window_ms: v[3],
                cur: u32::try_from(v[4]).ok()?,
                prev: u32::try_from(v[5]).ok()?,
            };
            if state.window_ms == 0 {
                return None;
            }
            Some((allowed, now, Found::Counter(Some(state))))
        }
        _ => None,
    }
}

/// `divmod(a, b)`.
fn divmod(a: u64, b: u64) -> (u64, u64) {
    (a / b, a % b)
}

impl Redis {
    /// Starts a GCRA or counter operation on the key `{prefix}gcra:{key}` or `{prefix}ctr:{key}`
    /// (hash-tagged like every key), timed by the server's `TIME`.
    pub fn rate(&self, op: RateOp) -> Call {
        self.rate_call(op, None)
    }

    /// As [`rate`](Self::rate), timed at `now` (ms) instead of the server's clock: for hosts that
    /// keep one clock of their own, and for running the vectors on a real server.
    pub fn rate_at(&self, op: RateOp, now: u64) -> Call {
        self.rate_call(op, Some(now))
    }

    fn rate_call(&self, op: RateOp, now: Option<u64>) -> Call {
        let decide = match op.decide() {
            Ok(decide) => decide,
            Err(e) => return refused(e),
        };
        let o = self.options();
        let mode = match op {
            RateOp::GcraConsume { .. } | RateOp::CounterConsume { .. } => "c",
            RateOp::GcraPeek { .. } | RateOp::CounterPeek { .. } => "p",
            RateOp::GcraReset { .. } | RateOp::CounterReset { .. } => "r",
        };
        let (script, key, mut args) = match op {
            RateOp::GcraConsume { key, gcra, cost } | RateOp::GcraPeek { key, gcra, cost } => {
                let uses = gcra.uses() as u64;
                // Both products are at most burst · window_ms ≤ 2^53 − 1 (checked by Gcra::new).
                let (q, r) = divmod(cost * gcra.window_ms(), uses);
                let (tau_ms, tau_rem) = divmod(gcra.burst() as u64 * gcra.window_ms(), uses);
                // tau − n·T ≥ 0 (n ≤ burst), as a pair.
                let (d, e) = if tau_rem >= r {
                    (tau_ms - q, tau_rem - r)
                } else {
                    (tau_ms - q - 1, tau_rem + uses - r)
                };
                let args = vec![
                    mode.to_owned(),
                    uses.to_string(),
                    q.to_string(),
                    r.to_string(),
                    d.to_string(),
                    e.to_string(),
                    (tau_ms + u64::from(tau_rem > 0)).to_string(),
                ];
                (&GCRA, o.gcra_key(&key), args)
            }
            RateOp::GcraReset { key } => (&GCRA, o.gcra_key(&key), vec![mode.to_owned()]),
            RateOp::CounterConsume { key, counter, cost }
            | RateOp::CounterPeek { key, counter, cost } => {
                let limit = counter.limit();
                let args = vec![
                    mode.to_owned(),
                    limit.uses().to_string(),
                    limit.window_ms().to_string(),
                    cost.to_string(),
                    (2 * limit.window_ms()).to_string(),
                ];
                (&COUNTER, o.counter_key(&key), args)
            }
            RateOp::CounterReset { key } => (&COUNTER, o.counter_key(&key), vec![mode.to_owned()]),
        };
        if let (Some(now), false) = (now, matches!(decide, Decide::Reset)) {
            args.push(now.to_string());
        }
        let plan = Plan {
            script,
            keys: vec![key],
            args,
        };
        let by_sha1 = self.runs_by_sha1();
        start(Step::Script { plan, by_sha1 }, decide)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Next;
    use crate::redis::RedisOptions;
    use crate::Limit;

    #[test]
    fn the_scripts_sha1s_are_their_sources_sha1s() {
        for script in [&GCRA, &COUNTER] {
            let computed = sha1_smol::Sha1::from(script.source).digest().to_string();
            assert_eq!(script.sha1, computed, "update {}'s sha1", script.name);
        }
    }

    fn gcra() -> Gcra {
        Gcra::new(3, 1_000, 2).unwrap()
    }

    #[test]
    fn a_gcra_consume_is_one_script_on_one_key_with_its_constants_as_text() {
        let redis = Redis::new(RedisOptions::default().with_prefix("p:"));
        let mut call = redis.rate(RateOp::GcraConsume {
            key: "k".into(),
            gcra: gcra(),
            cost: 2,
        });
        let Next::Run(Command::Script {
            script,
            keys,
            args,
            by_sha1,
        }) = call.next()
        else {
            panic!("a script")
        };
        assert_eq!((script.name, by_sha1), ("gcra", true));
        assert_eq!(keys, ["p:gcra:k"]);
        // 2 uses = 666 2/3 ms; tau = 2 · 333 1/3 = 666 2/3 ms: tau − 2 uses = 0; ceil(tau) = 667.
        assert_eq!(args, ["c", "3", "666", "2", "0", "0", "667"]);
        call.fail("NOSCRIPT No matching script");
        let Next::Run(Command::Script { by_sha1: false, .. }) = call.next() else {
            panic!("the source")
        };
        call.feed(Fed::Reply(Reply::Array(vec![Reply::Int(1), Reply::Int(0)])));
        let Next::Done(Ok(Outcome::Verdict { verdict, release })) = call.next() else {
            panic!("a verdict")
        };
        assert!(verdict.allowed && release.is_none());
        assert_eq!(verdict.quota.remaining, 0);
        assert_eq!(verdict.quota.reset_after_ms, 667);
    }

    #[test]
    fn a_reply_that_disagrees_with_its_state_is_a_reply_error() {
        let redis = Redis::new(RedisOptions::default());
        let op = RateOp::GcraConsume {
            key: "k".into(),
            gcra: gcra(),
            cost: 1,
        };
        let run = |reply: Reply| {
            redis
                .rate(op.clone())
                .drive(|_| Ok(Fed::Reply(reply.clone())))
                .0
        };
        let arr = |v: &[i64]| Reply::Array(v.iter().copied().map(Reply::Int).collect());
        // A full bucket allows: a refusal of it is no answer.
        assert_eq!(run(arr(&[0, 100])).unwrap_err().kind(), "reply");
        // A TAT behind now is never sent; a fraction past `uses` neither.
        assert_eq!(run(arr(&[1, 100, 50, 0])).unwrap_err().kind(), "reply");
        assert_eq!(run(arr(&[1, 100, 500, 3])).unwrap_err().kind(), "reply");
        assert_eq!(run(Reply::Int(1)).unwrap_err().kind(), "reply");
        // The TAT 666 2/3 ahead of now = 0 leaves room for no use of 333 1/3 within 666 2/3.
        let Ok(Outcome::Verdict { verdict, .. }) = run(arr(&[0, 0, 666, 2])) else {
            panic!()
        };
        assert_eq!(
            (verdict.allowed, verdict.retry_timestamp, verdict.blocked),
            (false, Some(334), Some(0))
        );
        let counter = Counter::new(Limit::new(2, 100).unwrap()).unwrap();
        let (result, _) = redis
            .rate(RateOp::CounterPeek {
                key: "k".into(),
                counter,
                cost: 1,
            })
            .drive(|_| Ok(Fed::Reply(arr(&[1, 150, 100, 100, 2, 0]))));
        assert_eq!(result.unwrap_err().kind(), "reply");
        let (result, _) = redis
            .rate(RateOp::CounterReset { key: "k".into() })
            .drive(|_| Ok(Fed::Reply(Reply::Int(1))));
        assert_eq!(result, Ok(Outcome::Unit));
    }

    #[test]
    fn a_cost_out_of_range_is_refused_before_any_command() {
        let op = RateOp::GcraConsume {
            key: "k".into(),
            gcra: gcra(),
            cost: 3,
        };
        assert_eq!(op.check().unwrap_err().field, crate::gcra::RateField::Cost);
        let (result, _) = Redis::default().rate(op).drive(|_| panic!("no command"));
        assert_eq!(result.unwrap_err().kind(), "unsupported");
    }
}
