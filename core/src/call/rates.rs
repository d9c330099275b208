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
#[cfg(feature = "sql")]
use crate::sql::{Postgres, RowError, SqlValue, Sqlite, Statement};
use crate::{BatchVerdict, Verdict};

/// The GCRA script: consume, peek and reset on one key holding its TAT.
pub static GCRA: Script = Script {
    name: "gcra",
    source: GCRA_SOURCE,
    sha1: "bf0de0b66db4555c7a6fa463830c1f0f9c02dba3",
};
// Without their comment lines (the SHA1s are of this text): see `redis::SLIDING`.
crate::sql::schema_text!(GCRA_SOURCE = include_str!("../redis/gcra.lua"));
crate::sql::schema_text!(COUNTER_SOURCE = include_str!("../redis/counter.lua"));

/// The sliding-window counter script: consume, peek and reset on one key holding its two counts.
pub static COUNTER: Script = Script {
    name: "counter",
    source: COUNTER_SOURCE,
    sha1: "473536f8b58f275403cbda71a4a1c6639487c24c",
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

/// What a call decided from the state it found: the verdict and, for an allowed consume, the state
/// to store (SQLite writes it; the Redis scripts and PostgreSQL functions wrote it themselves).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
enum Decided {
    Gcra(Verdict, Option<Tat>),
    Counter(Verdict, Option<CounterState>),
}

impl Decided {
    fn verdict(self) -> Verdict {
        match self {
            Decided::Gcra(v, _) | Decided::Counter(v, _) => v,
        }
    }
}

impl Decide {
    /// The decision from the state found at `now`.
    fn decided(self, found: Found, now: u64) -> Option<Decided> {
        Some(match (self, found) {
            (Decide::Gcra { gcra, cost, record }, Found::Gcra(tat)) => {
                let d = gcra.decide(tat, cost, now, record);
                Decided::Gcra(d.verdict, d.store)
            }
            (
                Decide::Counter {
                    counter,
                    cost,
                    record,
                },
                Found::Counter(state),
            ) => {
                // Counts that weigh nothing at now are no key (the Redis key has expired by then).
                let state = state.filter(|s| s.expires_at() > now);
                // A previous count the arithmetic cannot weigh in u64 is no answer (a corrupt value,
                // or counts carried from a limit of billions of uses into a window of centuries).
                if state.is_some_and(|s| {
                    u128::from(s.prev) * u128::from(counter.limit().window_ms())
                        > u128::from(u64::MAX)
                }) {
                    return None;
                }
                let d = counter.decide(state, cost, now, record);
                Decided::Counter(d.verdict, d.store)
            }
            _ => return None,
        })
    }

    /// The verdict from the state found at `now`; `allowed` is the store's own decision, which must
    /// agree.
    fn verdict(self, found: Found, now: u64, allowed: bool) -> Option<Verdict> {
        let verdict = self.decided(found, now)?.verdict();
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
    Script {
        plan: Plan,
        by_sha1: bool,
        /// The host's clock (`rate_at`), which the reply then leaves out.
        at: Option<u64>,
        /// GCRA's `uses`, `r` and `e`, sent again should the script ask for them (a key holding a
        /// TAT with a fraction, under a limit whose times have none).
        more: Option<[u64; 3]>,
    },
    /// PostgreSQL's one statement; its row answers as a script's reply does.
    #[cfg(feature = "sql")]
    Pg,
    /// SQLite's read of the key's row (after `BEGIN IMMEDIATE` for a consume, `tx`), at the host's
    /// `now`; `upsert` writes the new state.
    #[cfg(feature = "sql")]
    SqliteRead {
        now: u64,
        tx: bool,
        upsert: String,
        key: String,
    },
    /// SQLite's write and `COMMIT` (or the `COMMIT` of a refusal): then `outcome`.
    #[cfg(feature = "sql")]
    SqliteCommit(Outcome),
    /// SQLite's `ROLLBACK` after a failure: the failure stands, whatever it gives.
    #[cfg(feature = "sql")]
    SqliteRollback(CallError),
    /// A reset: one `DELETE`.
    #[cfg(feature = "sql")]
    SqlReset,
}

/// One GCRA or counter call in progress.
#[derive(Debug)]
pub(crate) struct RateCall {
    step: Step,
    /// The SQL statements to run now (SQL steps only).
    #[cfg(feature = "sql")]
    statements: Vec<Statement>,
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
            Step::Script { plan, by_sha1, .. } => Command::Script {
                script: plan.script,
                keys: &plan.keys,
                args: &plan.args,
                by_sha1: *by_sha1,
            },
            #[cfg(feature = "sql")]
            _ => Command::Sql {
                statements: &self.statements,
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
        #[cfg(feature = "sql")]
        if matches!(self.step, Step::SqliteRollback(_)) {
            // The failure that rolled back stands, whatever the rollback gave.
            if let Step::SqliteRollback(error) = std::mem::replace(&mut self.step, Step::SqlReset) {
                self.done = Some(Err(error));
            }
            return;
        }
        #[cfg(feature = "sql")]
        let in_tx = self.in_tx();
        self.done = Some(match (&mut self.step, fed) {
            (Step::Script { by_sha1, .. }, Err(message))
                if *by_sha1 && errors::is_noscript(&message) =>
            {
                // Nothing ran: the same command again, with the source.
                *by_sha1 = false;
                return;
            }
            (_, Err(message)) => Err(CallError::Store { message }),
            (Step::Script { plan, more, .. }, Ok(Fed::Reply(Reply::Int(-1)))) if more.is_some() => {
                // A TAT with a fraction, and the call sent no `uses`: the same call with them.
                if let Some(more) = more.take() {
                    plan.args.extend(more.map(|n| n.to_string()));
                }
                return;
            }
            (Step::Script { plan, at, .. }, Ok(Fed::Reply(reply))) => {
                decode_reply(self.decide, plan.script, &reply, *at)
            }
            (Step::Script { .. }, Ok(Fed::Rows(_))) => Err(CallError::Protocol {
                expected: "a Redis reply",
                got: "rows",
            }),
            #[cfg(feature = "sql")]
            (_, Ok(Fed::Reply(_))) => Err(CallError::Protocol {
                expected: "rows",
                got: "a Redis reply",
            }),
            #[cfg(feature = "sql")]
            (_, Ok(Fed::Rows(rows))) => return self.rows(rows),
        });
        #[cfg(feature = "sql")]
        self.roll_back_on_failure(in_tx);
    }
}

fn start(step: Step, decide: Decide) -> Call {
    Call::rate(RateCall {
        step,
        #[cfg(feature = "sql")]
        statements: Vec::new(),
        decide,
        done: None,
        over: false,
    })
}

/// The integers of an array reply, up to 6.
#[cfg(feature = "sql")]
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

const GCRA_REPLY: &str = "now (a full bucket), or the text 'allowed TAT' (then 'sec usec' on the \
                          server's clock) with a TAT ahead of now, consistent with the allowed flag";
const COUNTER_REPLY: &str =
    "now (no counts), or the text 'allowed start:window_ms:cur:prev' (then \
                             'sec usec' on the server's clock) with counts that weigh at now, \
                             consistent with the allowed flag";

/// Reads a script's reply: the state found, then the verdict from it.
fn decode_reply(
    decide: Decide,
    script: &Script,
    reply: &Reply,
    at: Option<u64>,
) -> Result<Outcome, CallError> {
    let (expected, found) = match decide {
        Decide::Reset => {
            return match reply {
                Reply::Int(0 | 1) => Ok(Outcome::Unit),
                _ => Err(ReplyError::new(script.name, "0 or 1 (keys deleted)", reply).into()),
            }
        }
        Decide::Gcra { gcra, .. } => (GCRA_REPLY, gcra_reply(gcra, reply, at)),
        Decide::Counter { .. } => (COUNTER_REPLY, counter_reply(reply, at)),
    };
    found
        .and_then(|(allowed, now, found)| decide.verdict(found, now, allowed))
        .map(|verdict| Outcome::Verdict {
            verdict: batch(verdict),
            release: None,
        })
        .ok_or_else(|| ReplyError::new(script.name, expected, reply).into())
}

#[cfg(feature = "sql")]
fn flag(n: u64) -> Option<bool> {
    match n {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

#[cfg(feature = "sql")]
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

/// A script's reply (GCRA's and the counter's): `now` (an integer) when the key held no state that
/// counts (then the call is allowed), or the text `'allowed STATE'` (then `' sec usec'`, TIME's
/// fields, on the server's clock; `at`, the host's clock, otherwise) with the key's text.
/// `Err(now)`: no state; `Ok((allowed, state, now))` otherwise.
fn script_reply(reply: &Reply, at: Option<u64>) -> Option<Result<(bool, &str, u64), u64>> {
    let text = match reply {
        Reply::Int(now) => {
            let now = u64::try_from(*now).ok()?;
            // On the host's clock the script answers the `now` it was given.
            return (at.unwrap_or(now) == now).then_some(Err(now));
        }
        Reply::Text(text) => text,
        _ => return None,
    };
    // Byte scans (as `text.split(' ')` cuts it), no `char` searcher: this runs on every refusal.
    let allowed = match text.as_bytes().get(..2)? {
        b"1 " => true,
        b"0 " => false,
        _ => return None,
    };
    let (state, rest) = cut(&text[2..], b' ');
    let now = match (at, rest) {
        (Some(now), None) => now,
        (None, Some(rest)) => {
            let (sec, usec) = cut(rest, b' ');
            let sec: u64 = digits(sec)?;
            // A space left in `usec` is no digit.
            let usec: u64 = digits(usec?)?;
            if usec >= 1_000_000 {
                return None;
            }
            sec.checked_mul(1_000)?.checked_add(usec / 1_000)?
        }
        _ => return None,
    };
    Some(Ok((allowed, state, now)))
}

/// `s` cut at its first `sep`: the part before, and the rest after it (`None`: no `sep`).
fn cut(s: &str, sep: u8) -> (&str, Option<&str>) {
    match s.bytes().position(|b| b == sep) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    }
}

/// The GCRA script's reply ([`script_reply`]): the TAT as the key holds it (`ms`, or
/// `ms:rem:per`), ahead of now (else the bucket is full: `now`).
fn gcra_reply(gcra: Gcra, reply: &Reply, at: Option<u64>) -> Option<(bool, u64, Found)> {
    match script_reply(reply, at)? {
        Err(now) => Some((true, now, Found::Gcra(None))),
        Ok((allowed, state, now)) => {
            let tat = tat_text(state, gcra.uses())?;
            (tat.expires_at() > now).then_some((allowed, now, Found::Gcra(Some(tat))))
        }
    }
}

/// The counter script's reply ([`script_reply`]): `start:window_ms:cur:prev` as the key holds it,
/// counts that still weigh at now (else no key: `now`).
fn counter_reply(reply: &Reply, at: Option<u64>) -> Option<(bool, u64, Found)> {
    match script_reply(reply, at)? {
        Err(now) => Some((true, now, Found::Counter(None))),
        Ok((allowed, state, now)) => {
            let mut parts = state.split(':');
            let mut next = || digits(parts.next()?);
            let (start, window_ms) = (next()?, next()?);
            let (cur, prev) = (u32::try_from(next()?).ok()?, u32::try_from(next()?).ok()?);
            let state = CounterState {
                start,
                window_ms,
                cur,
                prev,
            };
            (parts.next().is_none() && window_ms > 0 && state.expires_at() > now).then_some((
                allowed,
                now,
                Found::Counter(Some(state)),
            ))
        }
    }
}

/// A whole number written in ASCII digits only (zero-padded allowed): one pass over the bytes up to
/// 19 digits (no `u64` overflows there), `str::parse` for longer (zero-padded) texts.
fn digits(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 19 {
        return s.parse().ok();
    }
    Some(
        bytes
            .iter()
            .fold(0u64, |n, &b| n * 10 + u64::from(b - b'0')),
    )
}

/// A GCRA key's text: `ms` (whole ms, counted in the limit's `uses`) or `ms:rem:per`.
fn tat_text(s: &str, uses: u32) -> Option<Tat> {
    let (ms, rest) = cut(s, b':');
    let ms = digits(ms)?;
    let Some(rest) = rest else {
        return Some(Tat {
            ms,
            rem: 0,
            per: uses,
        });
    };
    let (rem, per) = cut(rest, b':');
    let rem = u32::try_from(digits(rem)?).ok()?;
    // A ':' left in `per` is no digit.
    let per = u32::try_from(digits(per?)?).ok()?;
    (rem < per).then_some(Tat { ms, rem, per })
}

#[cfg(feature = "sql")]
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
    /// Starts a GCRA or counter operation on the key `{prefix}gcr:{key}` or `{prefix}ctr:{key}`
    /// (hash-tagged like every key), timed by the server's `TIME`.
    pub fn rate(&self, op: RateOp) -> Call {
        self.rate_call(op, None)
    }

    /// As [`rate`](Self::rate), timed at `now` (ms) instead of the server's clock: for hosts that
    /// keep one clock of their own, and for running the vectors on a real server.
    pub fn rate_at(&self, op: RateOp, now: u64) -> Call {
        self.rate_call(op, Some(now))
    }

    /// What [`rate`](Self::rate)'s call for `op` decides from the reply to its first command, when
    /// that reply is an outcome: the same outcome, without starting the call or planning its command
    /// again (a host that keeps the command and sends it for each call). `None` for any other reply,
    /// which only the call answers: the script asking for `uses` (`-1`: the call sends its command
    /// again with them), or a reply of another shape (the call's typed error).
    pub fn rate_answered(&self, op: &RateOp, reply: &Reply) -> Option<Outcome> {
        if matches!(reply, Reply::Int(-1)) {
            return None;
        }
        let decide = op.decide().ok()?;
        let script = match decide {
            Decide::Counter { .. } => &COUNTER,
            Decide::Gcra { .. } | Decide::Reset => &GCRA,
        };
        decode_reply(decide, script, reply, None).ok()
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
        let mut more = None;
        let (script, key, mut args) = match op {
            RateOp::GcraConsume { key, gcra, cost } | RateOp::GcraPeek { key, gcra, cost } => {
                let [uses, q, r, d, e, ceil_tau] = gcra_args(gcra, cost);
                let first = if mode == "c" {
                    ceil_tau.to_string()
                } else {
                    mode.to_owned()
                };
                let mut args = Vec::with_capacity(7);
                args.extend([first, q.to_string(), d.to_string()]);
                // `uses` and the fractions only when the times have some (or with a host's clock,
                // after them); else on the script's asking.
                if r != 0 || e != 0 || now.is_some() {
                    args.extend([uses, r, e].map(|n| n.to_string()));
                } else {
                    more = Some([uses, r, e]);
                }
                (&GCRA, o.gcra_key(&key), args)
            }
            RateOp::GcraReset { key } => (&GCRA, o.gcra_key(&key), Vec::new()),
            RateOp::CounterConsume { key, counter, cost }
            | RateOp::CounterPeek { key, counter, cost } => {
                let limit = counter.limit();
                let first = if mode == "c" {
                    (2 * limit.window_ms()).to_string()
                } else {
                    mode.to_owned()
                };
                let mut args = Vec::with_capacity(5);
                args.extend([
                    first,
                    limit.uses().to_string(),
                    limit.window_ms().to_string(),
                    cost.to_string(),
                ]);
                (&COUNTER, o.counter_key(&key), args)
            }
            RateOp::CounterReset { key } => (&COUNTER, o.counter_key(&key), Vec::new()),
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
        let at = now.filter(|_| !matches!(decide, Decide::Reset));
        start(
            Step::Script {
                plan,
                by_sha1,
                at,
                more,
            },
            decide,
        )
    }
}

#[cfg(feature = "sql")]
impl RateCall {
    fn sql(step: Step, statements: Vec<Statement>, decide: Decide) -> Call {
        Call::rate(RateCall {
            step,
            statements,
            decide,
            done: None,
            over: false,
        })
    }

    /// Whether the step runs inside SQLite's transaction.
    fn in_tx(&self) -> bool {
        match &self.step {
            Step::SqliteRead { tx, .. } => *tx,
            Step::SqliteCommit(_) => true,
            _ => false,
        }
    }

    /// Inside SQLite's transaction (`in_tx`: the step that failed ran there), a failure rolls back
    /// first; the failure stands.
    fn roll_back_on_failure(&mut self, in_tx: bool) {
        if in_tx && matches!(self.done, Some(Err(_))) {
            if let Some(Err(error)) = self.done.take() {
                self.statements = vec![Statement {
                    sql: "ROLLBACK".to_owned(),
                    params: Vec::new(),
                }];
                self.step = Step::SqliteRollback(error);
            }
        }
    }

    fn rows(&mut self, rows: Vec<Vec<SqlValue>>) {
        let in_tx = self.in_tx();
        let step = std::mem::replace(&mut self.step, Step::SqlReset);
        self.done = Some(match step {
            Step::Pg => pg_found(self.decide, &rows)
                .and_then(|(allowed, now, found)| self.decide.verdict(found, now, allowed))
                .map(|verdict| Outcome::Verdict {
                    verdict: batch(verdict),
                    release: None,
                })
                .ok_or_else(|| row_error(self.decide, &rows)),
            Step::SqliteRead {
                now,
                tx,
                upsert,
                key,
            } => {
                match sqlite_found(self.decide, &rows)
                    .and_then(|found| self.decide.decided(found, now))
                {
                    None => Err(row_error(self.decide, &rows)),
                    Some(decided) => {
                        let outcome = Outcome::Verdict {
                            verdict: batch(decided.verdict()),
                            release: None,
                        };
                        if !tx {
                            Ok(outcome)
                        } else {
                            let mut statements = Vec::with_capacity(2);
                            if let Some(state) = upsert_params(decided) {
                                let mut params = vec![SqlValue::Text(key)];
                                params.extend(state);
                                statements.push(Statement {
                                    sql: upsert,
                                    params,
                                });
                            }
                            statements.push(Statement {
                                sql: "COMMIT".to_owned(),
                                params: Vec::new(),
                            });
                            self.statements = statements;
                            self.step = Step::SqliteCommit(outcome);
                            return;
                        }
                    }
                }
            }
            Step::SqliteCommit(outcome) => Ok(outcome),
            Step::SqliteRollback(error) => Err(error),
            Step::SqlReset => Ok(Outcome::Unit),
            // A script's step never gets here (`feed` answers rows to it with a protocol error).
            Step::Script { .. } => Err(CallError::Protocol {
                expected: "a Redis reply",
                got: "rows",
            }),
        });
        self.roll_back_on_failure(in_tx);
    }
}

#[cfg(feature = "sql")]
fn row_error(decide: Decide, rows: &[Vec<SqlValue>]) -> CallError {
    let (statement, expected) = match decide {
        Decide::Gcra { .. } => (
            "gcra",
            "one row (allowed, now, ms, rem), the TAT ahead of now or NULL, consistent with allowed",
        ),
        _ => (
            "counter",
            "one row (allowed, now, start, window_ms, cur, prev), consistent with allowed",
        ),
    };
    let shown: Vec<String> = rows
        .iter()
        .take(4)
        .map(|row| {
            let values: Vec<String> = row.iter().map(ToString::to_string).collect();
            format!("({})", values.join(", "))
        })
        .collect();
    CallError::Rows(RowError {
        statement,
        expected,
        got: format!("[{}]", shown.join(", ")),
    })
}

#[cfg(feature = "sql")]
fn sql_int(value: &SqlValue) -> Option<Option<u64>> {
    match value {
        SqlValue::Null => Some(None),
        SqlValue::Int(i) => u64::try_from(*i).ok().map(Some),
        SqlValue::Text(t) => t.parse().ok().map(Some),
        _ => None,
    }
}

#[cfg(feature = "sql")]
fn sql_bool(value: &SqlValue) -> Option<bool> {
    match value {
        SqlValue::Bool(b) => Some(*b),
        SqlValue::Int(0) => Some(false),
        SqlValue::Int(1) => Some(true),
        SqlValue::Text(t) if t == "t" || t == "true" => Some(true),
        SqlValue::Text(t) if t == "f" || t == "false" => Some(false),
        _ => None,
    }
}

/// PostgreSQL's row: the same numbers as a script's reply, NULLs for no state.
#[cfg(feature = "sql")]
fn pg_found(decide: Decide, rows: &[Vec<SqlValue>]) -> Option<(bool, u64, Found)> {
    let [row] = rows else { return None };
    let allowed = sql_bool(row.first()?)?;
    let rest: Vec<Option<u64>> = row[1..].iter().map(sql_int).collect::<Option<_>>()?;
    let now = rest.first().copied()??;
    let mut reply = vec![Reply::Int(i64::from(allowed)), Reply::Int(now as i64)];
    if rest[1..].iter().all(Option::is_some) {
        reply.extend(rest[1..].iter().map(|v| Reply::Int(v.unwrap_or(0) as i64)));
    } else if rest[1..].iter().any(Option::is_some) {
        return None;
    }
    let reply = Reply::Array(reply);
    match decide {
        Decide::Gcra { gcra, .. } if rest.len() == 3 => gcra_found(gcra, &reply),
        Decide::Counter { .. } if rest.len() == 5 => counter_found(&reply),
        _ => None,
    }
}

/// SQLite's read: no row, or the key's row.
#[cfg(feature = "sql")]
fn sqlite_found(decide: Decide, rows: &[Vec<SqlValue>]) -> Option<Found> {
    let row = match rows {
        [] => None,
        [row] => Some(
            row.iter()
                .map(|v| sql_int(v).flatten())
                .collect::<Option<Vec<u64>>>()?,
        ),
        _ => return None,
    };
    Some(match (decide, row.as_deref()) {
        (Decide::Gcra { .. }, None) => Found::Gcra(None),
        (Decide::Gcra { .. }, Some(&[ms, rem, per])) => Found::Gcra(Some(Tat {
            ms,
            rem: u32::try_from(rem).ok()?,
            per: u32::try_from(per)
                .ok()
                .filter(|&p| p > 0 && rem < p as u64)?,
        })),
        (Decide::Counter { .. }, None) => Found::Counter(None),
        (Decide::Counter { .. }, Some(&[start, window_ms, cur, prev])) if window_ms > 0 => {
            Found::Counter(Some(CounterState {
                start,
                window_ms,
                cur: u32::try_from(cur).ok()?,
                prev: u32::try_from(prev).ok()?,
            }))
        }
        _ => return None,
    })
}

#[cfg(feature = "sql")]
fn sql_u64(n: u64) -> SqlValue {
    SqlValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The upsert's parameters after the key: the state to store, if any.
#[cfg(feature = "sql")]
fn upsert_params(decided: Decided) -> Option<Vec<SqlValue>> {
    match decided {
        Decided::Gcra(_, Some(t)) => Some(vec![
            sql_u64(t.ms),
            sql_u64(t.rem.into()),
            sql_u64(t.per.into()),
        ]),
        Decided::Counter(_, Some(c)) => Some(vec![
            sql_u64(c.start),
            sql_u64(c.window_ms),
            sql_u64(c.cur.into()),
            sql_u64(c.prev.into()),
        ]),
        _ => None,
    }
}

#[cfg(feature = "sql")]
fn mode_of(op: &RateOp) -> &'static str {
    match op {
        RateOp::GcraConsume { .. } | RateOp::CounterConsume { .. } => "c",
        RateOp::GcraPeek { .. } | RateOp::CounterPeek { .. } => "p",
        RateOp::GcraReset { .. } | RateOp::CounterReset { .. } => "r",
    }
}

/// GCRA's constants as the scripts and functions take them: `(uses, q, r, d, e, ceil τ)` with
/// `n·T = q + r/uses` and `τ − n·T = d + e/uses`.
pub(super) fn gcra_args(gcra: Gcra, cost: u64) -> [u64; 6] {
    let uses = gcra.uses() as u64;
    // Both products are at most burst · window_ms ≤ 2^53 − 1 (checked by Gcra::new).
    let (q, r) = divmod(cost * gcra.window_ms(), uses);
    let (tau_ms, tau_rem) = divmod(gcra.burst() as u64 * gcra.window_ms(), uses);
    // τ − n·T ≥ 0 (n ≤ burst), as a pair.
    let (d, e) = if tau_rem >= r {
        (tau_ms - q, tau_rem - r)
    } else {
        (tau_ms - q - 1, tau_rem + uses - r)
    };
    [uses, q, r, d, e, tau_ms + u64::from(tau_rem > 0)]
}

#[cfg(feature = "sql")]
impl Postgres {
    /// Starts a GCRA or counter operation: one statement (`{prefix}_gcra` / `{prefix}_counter`,
    /// installed by [`schema`](Self::schema)) under the key's row lock, on the server's clock.
    pub fn rate(&self, op: RateOp) -> Call {
        self.rate_call(op, None)
    }

    /// As [`rate`](Self::rate), timed at `now` (ms) instead of the server's clock (hosts with a clock
    /// of their own; the vectors).
    pub fn rate_at(&self, op: RateOp, now: u64) -> Call {
        self.rate_call(op, Some(now))
    }

    fn rate_call(&self, op: RateOp, now: Option<u64>) -> Call {
        let decide = match op.decide() {
            Ok(decide) => decide,
            Err(e) => return refused(e),
        };
        let p = self.names().prefix();
        let mode = SqlValue::Text(mode_of(&op).to_owned());
        let now = now.map_or(SqlValue::Null, sql_u64);
        let relaxed = SqlValue::Bool(!self.is_durable());
        let (sql, params) = match op {
            RateOp::GcraConsume { key, gcra, cost } | RateOp::GcraPeek { key, gcra, cost } => {
                let [uses, q, r, d, e, _] = gcra_args(gcra, cost);
                let mut params = vec![mode, SqlValue::Text(key)];
                params.extend([uses, q, r, d, e].map(sql_u64));
                params.extend([now, relaxed]);
                (
                    "SELECT o_allowed, o_now, o_ms, o_rem FROM {p}_gcra($1, $2, $3::bigint, \
                     $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint, $9::boolean)",
                    params,
                )
            }
            RateOp::CounterConsume { key, counter, cost }
            | RateOp::CounterPeek { key, counter, cost } => {
                let limit = counter.limit();
                let mut params = vec![mode, SqlValue::Text(key)];
                params.extend([limit.uses() as u64, limit.window_ms(), cost].map(sql_u64));
                params.extend([now, relaxed]);
                (
                    "SELECT o_allowed, o_now, o_start, o_window, o_cur, o_prev FROM {p}_counter($1, \
                     $2, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::boolean)",
                    params,
                )
            }
            RateOp::GcraReset { key } => (
                "DELETE FROM {p}_gcra WHERE key = $1",
                vec![SqlValue::Text(key)],
            ),
            RateOp::CounterReset { key } => (
                "DELETE FROM {p}_counters WHERE key = $1",
                vec![SqlValue::Text(key)],
            ),
        };
        let step = if matches!(decide, Decide::Reset) {
            Step::SqlReset
        } else {
            Step::Pg
        };
        let statement = Statement {
            sql: sql.replace("{p}", p),
            params,
        };
        RateCall::sql(step, vec![statement], decide)
    }
}

/// The PostgreSQL purge of the GCRA and counter tables as two data-modifying CTEs, `g` (buckets full
/// again) and `c` (counters whose counts weigh nothing), on the server's clock, skipping rows a call
/// holds; `{p}` left for the names. [`Postgres::plan_rates_purge`] and the store's purge
/// ([`Postgres::plan_purge`]) both run them.
#[cfg(feature = "sql")]
pub(crate) fn postgres_rates_purge_ctes() -> String {
    let now = crate::sql::NOW_MS;
    format!(
        "g AS (DELETE FROM {{p}}_gcra WHERE key IN (SELECT key FROM {{p}}_gcra \
         WHERE ms + (rem > 0)::int <= {now} FOR UPDATE SKIP LOCKED) RETURNING 1), \
         c AS (DELETE FROM {{p}}_counters WHERE key IN (SELECT key FROM {{p}}_counters \
         WHERE start_ms + window_ms * (CASE WHEN cur > 0 THEN 2 ELSE 1 END) <= {now} \
         FOR UPDATE SKIP LOCKED) RETURNING 1)"
    )
}

#[cfg(feature = "sql")]
impl Postgres {
    /// The purge of the GCRA and counter tables: rows that no longer count (a full bucket, counts
    /// that weigh nothing) on the server's clock, skipping rows a call holds. One statement; its
    /// one row is `(buckets deleted, counters deleted)` ([`decode_rates_purge`](Self::decode_rates_purge)).
    /// [`plan_purge`](Self::plan_purge) holds it (with the `rates` feature).
    pub fn plan_rates_purge(&self) -> Statement {
        let sql = format!(
            "WITH {} SELECT (SELECT count(*) FROM g) AS buckets, (SELECT count(*) FROM c) AS counters",
            postgres_rates_purge_ctes()
        );
        Statement {
            sql: sql.replace("{p}", self.names().prefix()),
            params: Vec::new(),
        }
    }

    /// The row of [`plan_rates_purge`](Self::plan_rates_purge): (buckets, counters) deleted.
    pub fn decode_rates_purge(rows: &[Vec<SqlValue>]) -> Result<(u64, u64), RowError> {
        if let [row] = rows {
            if let [a, b] = row.as_slice() {
                if let (Some(a), Some(b)) = (sql_int(a).flatten(), sql_int(b).flatten()) {
                    return Ok((a, b));
                }
            }
        }
        Err(RowError {
            statement: "rates purge",
            expected: "one row (buckets, counters)",
            got: format!("{rows:?}"),
        })
    }
}

#[cfg(feature = "sql")]
impl Sqlite {
    /// The purge of the GCRA and counter tables at `now` (the host's clock): rows that no longer
    /// count. Run the statements in order (no rows); [`plan_purge`](Self::plan_purge) holds them.
    pub fn plan_rates_purge(&self, now: u64) -> Vec<Statement> {
        let p = self.names().prefix();
        [
            "DELETE FROM {p}_gcra WHERE ms + (rem > 0) <= ?",
            "DELETE FROM {p}_counters WHERE start_ms + window_ms * \
             (CASE WHEN cur > 0 THEN 2 ELSE 1 END) <= ?",
        ]
        .map(|sql| Statement {
            sql: sql.replace("{p}", p),
            params: vec![sql_u64(now)],
        })
        .to_vec()
    }
}

#[cfg(feature = "sql")]
impl Sqlite {
    /// Starts a GCRA or counter operation at `now` (the host's clock, ms) on the tables
    /// `{prefix}_gcra` / `{prefix}_counters` installed by [`schema`](Self::schema): a consume is
    /// `BEGIN IMMEDIATE` and the key's row, then (decided here) its write and `COMMIT`, `ROLLBACK`
    /// on any failure; a peek one read; a reset one `DELETE`.
    pub fn rate(&self, op: RateOp, now: u64) -> Call {
        let decide = match op.decide() {
            Ok(decide) => decide,
            Err(e) => return refused(e),
        };
        let p = self.names().prefix();
        let tx = mode_of(&op) == "c";
        let (select, upsert, key) = match op {
            RateOp::GcraConsume { key, .. } | RateOp::GcraPeek { key, .. } => (
                "SELECT ms, rem, per FROM {p}_gcra WHERE key = ?",
                "INSERT INTO {p}_gcra (key, ms, rem, per) VALUES (?, ?, ?, ?) ON CONFLICT (key) \
                 DO UPDATE SET ms = excluded.ms, rem = excluded.rem, per = excluded.per",
                key,
            ),
            RateOp::CounterConsume { key, .. } | RateOp::CounterPeek { key, .. } => (
                "SELECT start_ms, window_ms, cur, prev FROM {p}_counters WHERE key = ?",
                "INSERT INTO {p}_counters (key, start_ms, window_ms, cur, prev) VALUES (?, ?, ?, ?, ?) \
                 ON CONFLICT (key) DO UPDATE SET start_ms = excluded.start_ms, \
                 window_ms = excluded.window_ms, cur = excluded.cur, prev = excluded.prev",
                key,
            ),
            RateOp::GcraReset { key } => {
                let sql = "DELETE FROM {p}_gcra WHERE key = ?".replace("{p}", p);
                let params = vec![SqlValue::Text(key)];
                return RateCall::sql(Step::SqlReset, vec![Statement { sql, params }], decide);
            }
            RateOp::CounterReset { key } => {
                let sql = "DELETE FROM {p}_counters WHERE key = ?".replace("{p}", p);
                let params = vec![SqlValue::Text(key)];
                return RateCall::sql(Step::SqlReset, vec![Statement { sql, params }], decide);
            }
        };
        let mut statements = Vec::with_capacity(2);
        if tx {
            statements.push(Statement {
                sql: "BEGIN IMMEDIATE".to_owned(),
                params: Vec::new(),
            });
        }
        statements.push(Statement {
            sql: select.replace("{p}", p),
            params: vec![SqlValue::Text(key.clone())],
        });
        RateCall::sql(
            Step::SqliteRead {
                now,
                tx,
                upsert: upsert.replace("{p}", p),
                key,
            },
            statements,
            decide,
        )
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

    /// The byte scans read every reply text as `split` and `str::parse` did (the readers before
    /// them, kept here as the reference).
    #[test]
    fn replies_and_tats_read_as_split_and_parse() {
        fn digits_ref(s: &str) -> Option<u64> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        }
        fn reply_ref(text: &str, at: Option<u64>) -> Option<(bool, &str, u64)> {
            let mut fields = text.split(' ');
            let allowed = match fields.next()? {
                "1" => true,
                "0" => false,
                _ => return None,
            };
            let state = fields.next()?;
            let now = match at {
                Some(now) => now,
                None => {
                    let sec = digits_ref(fields.next()?)?;
                    let usec = digits_ref(fields.next()?)?;
                    if usec >= 1_000_000 {
                        return None;
                    }
                    sec.checked_mul(1_000)?.checked_add(usec / 1_000)?
                }
            };
            fields.next().is_none().then_some((allowed, state, now))
        }
        fn tat_ref(s: &str, uses: u32) -> Option<Tat> {
            let mut parts = s.split(':');
            let ms = digits_ref(parts.next()?)?;
            let Some(rem) = parts.next() else {
                return Some(Tat {
                    ms,
                    rem: 0,
                    per: uses,
                });
            };
            let rem = u32::try_from(digits_ref(rem)?).ok()?;
            let per = u32::try_from(digits_ref(parts.next()?)?).ok()?;
            (parts.next().is_none() && rem < per).then_some(Tat { ms, rem, per })
        }
        let pieces = [
            "",
            "0",
            "1",
            "2",
            "01",
            "1796185214804",
            "000001796185214804",
            "999999",
            "1000000",
            "18446744073709551615",
            "18446744073709551616",
            "9999999999999999999",
            "00000000000000000000042",
            "4294967296",
            "-1",
            "+1",
            "1.5",
            "a",
            " ",
            ":",
            "1:2",
            "1:2:3",
            "5:1:3",
            "000000001796185214:2:3",
            "7:3:3",
            "7:0:3",
            "7::3",
            "7:1:",
            "1:2:3:4",
        ];
        let mut texts = vec![
            String::new(),
            "1".into(),
            "0".into(),
            "1 ".into(),
            "0  1 2".into(),
        ];
        for a in ["0", "1", "2", "10"] {
            for p in pieces {
                texts.push(format!("{a} {p}"));
                for q in ["1796185157", "", "x", "18446744073709551"] {
                    for r in ["971148", "999999", "1000000", "", "1 2", "0"] {
                        texts.push(format!("{a} {p} {q} {r}"));
                    }
                }
            }
        }
        for text in &texts {
            for at in [None, Some(1_796_185_157_971)] {
                let reply = Reply::Text(text.clone());
                let got = match script_reply(&reply, at) {
                    Some(Ok(x)) => Some(x),
                    Some(Err(_)) => unreachable!("a text is no integer reply"),
                    None => None,
                };
                assert_eq!(got, reply_ref(text, at), "{text:?} {at:?}");
            }
        }
        for p in pieces.iter().map(|p| p.to_string()).chain(texts) {
            assert_eq!(digits(&p), digits_ref(&p), "{p:?}");
            for uses in [1, 3, 1_000_000] {
                assert_eq!(tat_text(&p, uses), tat_ref(&p, uses), "{p:?} {uses}");
            }
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
        assert_eq!(keys, ["p:gcr:k"]);
        // 2 uses = 666 2/3 ms; tau = 2 · 333 1/3 = 666 2/3 ms: tau − 2 uses = 0; ceil(tau) = 667.
        // (The expiry, n·T, τ − n·T in whole ms; then uses and the fractions, as n·T has one.)
        assert_eq!(args, ["667", "666", "0", "3", "2", "0"]);
        call.fail("NOSCRIPT No matching script");
        let Next::Run(Command::Script { by_sha1: false, .. }) = call.next() else {
            panic!("the source")
        };
        // A full bucket: the reply is the server's now.
        call.feed(Fed::Reply(Reply::Int(0)));
        let Next::Done(Ok(Outcome::Verdict { verdict, release })) = call.next() else {
            panic!("a verdict")
        };
        assert!(verdict.allowed && release.is_none());
        assert_eq!(verdict.quota.remaining, 0);
        assert_eq!(verdict.quota.reset_after_ms, 667);
    }

    #[test]
    fn a_whole_limit_sends_uses_only_when_the_script_finds_a_fraction() {
        let redis = Redis::new(RedisOptions::default());
        // 10 a second, a burst of 5: T = 100 ms, tau = 500 ms, no fractions.
        let gcra = Gcra::new(10, 1_000, 5).unwrap();
        let mut call = redis.rate(RateOp::GcraPeek {
            key: "k".into(),
            gcra,
            cost: 1,
        });
        let Next::Run(Command::Script { args, .. }) = call.next() else {
            panic!("a script")
        };
        assert_eq!(args, ["p", "100", "400"]);
        // The key holds 1,050 1/3 ms counted in thirds (another limit's): asked for `uses`.
        call.feed(Fed::Reply(Reply::Int(-1)));
        let Next::Run(Command::Script { args, .. }) = call.next() else {
            panic!("the script again")
        };
        assert_eq!(args, ["p", "100", "400", "10", "0", "0"]);
        call.feed(Fed::Reply(Reply::Text(
            "1 000000000000001050:1:3 1 0".to_owned(),
        )));
        let Next::Done(Ok(Outcome::Verdict { verdict, .. })) = call.next() else {
            panic!("a verdict")
        };
        // Rounded up to 1,051: 51 ms of debt at 1,000, so 4 of 5 left.
        assert!(verdict.allowed);
        assert_eq!(verdict.quota.remaining, 4);
        assert_eq!(verdict.quota.reset_after_ms, 51);
        // Asked twice: no answer.
        let mut call = redis.rate(RateOp::GcraPeek {
            key: "k".into(),
            gcra,
            cost: 1,
        });
        let _ = call.next();
        call.feed(Fed::Reply(Reply::Int(-1)));
        let _ = call.next();
        call.feed(Fed::Reply(Reply::Int(-1)));
        let Next::Done(Err(e)) = call.next() else {
            panic!("an error")
        };
        assert_eq!(e.kind(), "reply");
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
        let text = |s: &str| Reply::Text(s.to_owned());
        // A TAT not ahead of now (100 ms: 0 s and 100,000 µs) is never sent (a full bucket answers
        // its now); a fraction past its `uses`, a flag other than 0 or 1, a field more, neither.
        assert_eq!(run(text("1 50 0 100000")).unwrap_err().kind(), "reply");
        assert_eq!(run(text("1 100 0 100000")).unwrap_err().kind(), "reply");
        assert_eq!(run(text("1 500:3:3 0 100000")).unwrap_err().kind(), "reply");
        assert_eq!(run(text("2 500 0 100000")).unwrap_err().kind(), "reply");
        assert_eq!(run(text("1 500 0 100000 7")).unwrap_err().kind(), "reply");
        assert_eq!(run(text("1 500 0 1000000")).unwrap_err().kind(), "reply");
        assert_eq!(run(text("1 +500 0 100000")).unwrap_err().kind(), "reply");
        // A request for `uses` comes only from a call that did not send them (this one did).
        assert_eq!(run(Reply::Int(-1)).unwrap_err().kind(), "reply");
        assert_eq!(run(arr(&[1, 0])).unwrap_err().kind(), "reply");
        // The TAT 666 2/3 ahead of now = 0 leaves room for no use of 333 1/3 within 666 2/3.
        let Ok(Outcome::Verdict { verdict, .. }) = run(text("0 666:2:3 0 0")) else {
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
            .drive(|_| Ok(Fed::Reply(text("1 100:100:2:0 0 150000"))));
        assert_eq!(result.unwrap_err().kind(), "reply");
        // Counts that weigh nothing at now are never sent (no key answers now).
        let (result, _) = redis
            .rate(RateOp::CounterPeek {
                key: "k".into(),
                counter,
                cost: 1,
            })
            .drive(|_| Ok(Fed::Reply(text("1 0:100:0:2 0 100000"))));
        assert_eq!(result.unwrap_err().kind(), "reply");
        let huge = Counter::new(Limit::new(1, 4_000_000_000_000_000).unwrap()).unwrap();
        let (result, _) = redis
            .rate(RateOp::CounterPeek {
                key: "k".into(),
                counter: huge,
                cost: 1,
            })
            .drive(|_| {
                let state = format!("0 0:4000000000000000:0:{} 0 0", u32::MAX);
                Ok(Fed::Reply(text(&state)))
            });
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

    #[cfg(feature = "sql")]
    fn sql_of(command: Next<'_>) -> Vec<String> {
        let Next::Run(Command::Sql { statements }) = command else {
            panic!("statements")
        };
        statements.iter().map(|s| s.sql.clone()).collect()
    }

    #[test]
    #[cfg(feature = "sql")]
    fn a_sqlite_consume_reads_under_begin_immediate_writes_and_commits() {
        let sqlite = crate::sql::Sqlite::default();
        let op = RateOp::GcraConsume {
            key: "k".into(),
            gcra: gcra(),
            cost: 1,
        };
        let mut call = sqlite.rate(op.clone(), 1_000);
        let sql = sql_of(call.next());
        assert_eq!(sql[0], "BEGIN IMMEDIATE");
        assert!(sql[1].starts_with("SELECT ms, rem, per FROM ratewindow_gcra"));
        call.feed(Fed::Rows(vec![]));
        let Next::Run(Command::Sql { statements }) = call.next() else {
            panic!("the write")
        };
        assert!(statements[0].sql.starts_with("INSERT INTO ratewindow_gcra"));
        // 1,000 + 333 1/3.
        assert_eq!(
            statements[0].params,
            [
                SqlValue::Text("k".into()),
                SqlValue::Int(1_333),
                SqlValue::Int(1),
                SqlValue::Int(3)
            ]
        );
        assert_eq!(statements[1].sql, "COMMIT");
        call.feed(Fed::Rows(vec![]));
        let Next::Done(Ok(Outcome::Verdict { verdict, .. })) = call.next() else {
            panic!("a verdict")
        };
        assert!(verdict.allowed);

        // A failed read rolls back; the read's failure stands, whatever the rollback gives.
        let mut call = sqlite.rate(op.clone(), 1_000);
        let _ = call.next();
        call.fail("database is locked");
        assert_eq!(sql_of(call.next()), ["ROLLBACK"]);
        call.fail("cannot rollback - no transaction is active");
        let Next::Done(Err(CallError::Store { message })) = call.next() else {
            panic!("the store's error")
        };
        assert_eq!(message, "database is locked");

        // A failed commit rolls back too; rows of the wrong shape are a reply error, rolled back.
        let mut call = sqlite.rate(op.clone(), 1_000);
        let _ = call.next();
        call.feed(Fed::Rows(vec![]));
        let _ = call.next();
        call.fail("disk I/O error");
        assert_eq!(sql_of(call.next()), ["ROLLBACK"]);
        call.feed(Fed::Rows(vec![]));
        assert!(matches!(
            call.next(),
            Next::Done(Err(CallError::Store { .. }))
        ));
        let mut call = sqlite.rate(op, 1_000);
        let _ = call.next();
        call.feed(Fed::Rows(vec![vec![SqlValue::Int(5)]]));
        assert_eq!(sql_of(call.next()), ["ROLLBACK"]);
        call.feed(Fed::Rows(vec![]));
        let Next::Done(Err(e)) = call.next() else {
            panic!("an error")
        };
        assert_eq!(e.kind(), "reply");

        // A peek is one read, no transaction.
        let mut call = sqlite.rate(
            RateOp::CounterPeek {
                key: "k".into(),
                counter: Counter::new(Limit::new(2, 100).unwrap()).unwrap(),
                cost: 1,
            },
            1_000,
        );
        assert_eq!(sql_of(call.next()).len(), 1);
        call.fail("no such table: ratewindow_counters");
        assert!(matches!(
            call.next(),
            Next::Done(Err(CallError::Store { .. }))
        ));
    }

    #[test]
    #[cfg(feature = "sql")]
    fn a_postgres_call_is_one_statement_whose_row_must_agree_with_itself() {
        let pg = crate::sql::Postgres::default();
        let op = RateOp::GcraConsume {
            key: "k".into(),
            gcra: gcra(),
            cost: 1,
        };
        let mut call = pg.rate(op.clone());
        let Next::Run(Command::Sql { statements }) = call.next() else {
            panic!("a statement")
        };
        assert_eq!(statements.len(), 1);
        assert!(statements[0].sql.contains("FROM ratewindow_gcra($1"));
        assert_eq!(
            statements[0].params[7],
            SqlValue::Null,
            "the server's clock"
        );
        assert_eq!(
            statements[0].params[8],
            SqlValue::Bool(true),
            "a relaxed commit"
        );
        let row = |allowed, rest: [SqlValue; 3]| {
            let mut row = vec![SqlValue::Bool(allowed)];
            row.extend(rest);
            Fed::Rows(vec![row])
        };
        call.feed(row(
            true,
            [SqlValue::Int(50), SqlValue::Null, SqlValue::Null],
        ));
        assert!(matches!(
            call.next(),
            Next::Done(Ok(Outcome::Verdict { verdict, .. })) if verdict.allowed
        ));
        for bad in [
            row(false, [SqlValue::Int(50), SqlValue::Null, SqlValue::Null]),
            row(true, [SqlValue::Int(50), SqlValue::Int(60), SqlValue::Null]),
            Fed::Rows(vec![]),
        ] {
            let mut call = pg.rate(op.clone());
            let _ = call.next();
            call.feed(bad);
            let Next::Done(Err(e)) = call.next() else {
                panic!("an error")
            };
            assert_eq!(e.kind(), "reply");
        }
    }
}
