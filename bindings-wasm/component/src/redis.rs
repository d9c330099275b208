//! The `redis` interface of the `hosted` world: every operation is one of the core's Redis call machines
//! ([`ratewindow_core::call::Redis`]), driven here: each command it asks for goes to the host's client
//! through the imported `store-io.run-script`, and the reply or the client's error message goes back to
//! the machine as it is. The machine decides everything (`NOSCRIPT`, the Cluster fallback with its
//! give-back, the verdicts, the typed errors); this layer converts values and reports the give-backs
//! that failed through `store-io.give-back-failed`. Call ids are 16 bytes of the host's
//! `store-io.random-bytes`, in hex.

use std::cell::RefCell;

use ratewindow_core::call::{
    Call, CallError, Command, Fed, Op, Outcome, RateOp, Redis, ReleaseToken, WindowQuery,
};
use ratewindow_core::input::check_redis_prefix;
use ratewindow_core::redis::{RedisOptions as CoreOptions, Reply};

use crate::bindings::exports::ratewindow::engine::{
    errors::{Error, InvalidArgument, MalformedReply},
    redis::{
        self as wit, GuestRedisRelease, GuestRedisStore, RedisConsumed, RedisConsumedOne,
        RedisOptions, RedisRelease as ReleaseHandle, RedisReleaseBorrow,
    },
    types::{
        AttemptResult, BatchVerdict, Entry, HitWindow, Limit, RateAlgorithm, RateLimit, Verdict,
    },
};
use crate::bindings::ratewindow::engine::store_io::{self, GiveBackFailure, Value};
use crate::convert::{self, Rate};
use crate::Component;

impl wit::Guest for Component {
    type RedisStore = RedisStore;
    type RedisRelease = Token;
}

/// A store over the host's client: the machines' options; every call runs through `store-io`.
pub struct RedisStore {
    machine: Redis,
    /// A prefix that could name another prefix's keys (`core::input::check_redis_prefix`). The WIT
    /// constructor cannot fail, so the store is made and every call is refused with
    /// `invalid-argument { field: "prefix" }` before any command runs.
    bad_prefix: Option<String>,
}

/// The release of one allowed consume: taken when a release succeeds, so a second does nothing.
pub struct Token(RefCell<Option<ReleaseToken>>);

impl GuestRedisRelease for Token {}

impl From<CallError> for Error {
    fn from(e: CallError) -> Error {
        match e {
            CallError::Store { message } => Error::StoreFailed(message),
            CallError::Reply(e) => Error::MalformedReply(MalformedReply {
                expected: format!("{} (the {} script's reply)", e.expected, e.script),
                got: e.got,
            }),
            CallError::Rows(e) => Error::MalformedReply(MalformedReply {
                expected: format!("{} (the rows of {})", e.expected, e.statement),
                got: e.got,
            }),
            CallError::Unsupported(message) => Error::Unsupported(message.to_owned()),
            protocol => Error::Protocol(protocol.to_string()),
        }
    }
}

fn value(v: Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Integer(i) => Reply::Int(i),
        // A client that hands integers back as floats (a JS number): exact whole values only.
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Reply::Int(f as i64),
        Value::Float(_) => Reply::Text("a float that is not a whole number".to_owned()),
        Value::Text(s) => Reply::Text(s),
        Value::Bytes(b) => Reply::Text(
            String::from_utf8(b).unwrap_or_else(|_| "bytes that are not UTF-8".to_owned()),
        ),
    }
}

fn reply(r: store_io::Reply) -> Reply {
    match r {
        store_io::Reply::Value(v) => value(v),
        store_io::Reply::Array(items) => Reply::Array(items.into_iter().map(value).collect()),
        store_io::Reply::Rows(rows) => Reply::Array(
            rows.into_iter()
                .map(|row| Reply::Array(row.into_iter().map(value).collect()))
                .collect(),
        ),
    }
}

/// Runs one command the machine asks for with the host's client.
pub(crate) fn run(command: Command<'_>) -> Result<Fed, String> {
    match command {
        Command::Script {
            script,
            keys,
            args,
            by_sha1,
        } => {
            let source = if by_sha1 { "" } else { script.source };
            store_io::run_script(source, script.sha1, keys, args).map(|r| Fed::Reply(reply(r)))
        }
        // A Redis machine never asks for SQL, nor for a plain command (the component's store is not
        // made with `plain_commands`: its lock acquires by script); a failure lets the machine say so.
        Command::Sql { .. } | Command::Plain { .. } => {
            Err("the component's store runs scripts only".to_owned())
        }
    }
}

/// A fresh call id: 16 random bytes from the host, in hex.
pub(crate) fn call_id() -> Result<String, Error> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = store_io::random_bytes(16);
    if bytes.len() < 16 {
        return Err(Error::StoreFailed(format!(
            "store-io.random-bytes gave {} bytes for a call id; 16 are needed",
            bytes.len()
        )));
    }
    let mut id = String::with_capacity(32);
    for b in bytes.iter().take(16) {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(id)
}

/// An outcome the operation cannot give (a machine bug): a protocol error, never a trap. Not rendered
/// with `{:?}`, which would carry every outcome type's `Debug` into the component.
pub(crate) fn unexpected(_outcome: &Outcome) -> Error {
    Error::Protocol("the call ended with an outcome of another operation".to_owned())
}

fn verdict_of(outcome: Outcome) -> Result<(BatchVerdict, Option<ReleaseHandle>), Error> {
    match outcome {
        Outcome::Verdict { verdict, release } => Ok((
            verdict.into(),
            release.map(|r| ReleaseHandle::new(Token(RefCell::new(Some(r))))),
        )),
        other => Err(unexpected(&other)),
    }
}

fn single(v: BatchVerdict) -> Verdict {
    Verdict {
        allowed: v.allowed,
        retry_after_ms: v.retry_after_ms,
        retry_timestamp: v.retry_timestamp,
        limit: v.limit,
        remaining: v.remaining,
        refill_after_ms: v.refill_after_ms,
        reset_after_ms: v.reset_after_ms,
    }
}

fn int(outcome: Outcome) -> Result<i64, Error> {
    match outcome {
        Outcome::Int(n) => Ok(n),
        other => Err(unexpected(&other)),
    }
}

fn unit(outcome: Outcome) -> Result<(), Error> {
    match outcome {
        Outcome::Unit => Ok(()),
        other => Err(unexpected(&other)),
    }
}

impl RedisStore {
    /// The store's machine (its options): a lock on the store runs its own calls on it.
    pub(crate) fn machine(&self) -> &Redis {
        &self.machine
    }

    /// The refused prefix, if the store has one.
    pub(crate) fn bad_prefix(&self) -> Option<&str> {
        self.bad_prefix.as_deref()
    }

    /// Drives `op`'s machine to its end, reporting the give-backs that failed on the way.
    fn call(&self, op: Op) -> Result<Outcome, Error> {
        self.drive(|machine| machine.start(op))
    }

    /// Drives the call `start` makes to its end (unless the prefix is refused), reporting the
    /// give-backs that failed on the way.
    fn drive(&self, start: impl FnOnce(&Redis) -> Call) -> Result<Outcome, Error> {
        if let Some(prefix) = &self.bad_prefix {
            return Err(Error::InvalidArgument(InvalidArgument {
                field: "prefix".to_owned(),
                value: prefix.clone(),
            }));
        }
        let (result, failures) = start(&self.machine).drive(run);
        for f in failures {
            store_io::give_back_failed(&GiveBackFailure {
                keys: f.keys,
                call_id: f.call_id,
                message: f.message,
            });
        }
        Ok(result?)
    }

    fn consume(&self, entries: Vec<Entry>) -> Result<(BatchVerdict, Option<ReleaseHandle>), Error> {
        let entries = convert::entries(entries)?;
        let call_id = call_id()?;
        verdict_of(self.call(Op::Consume { entries, call_id })?)
    }

    fn peek(&self, entries: Vec<Entry>) -> Result<BatchVerdict, Error> {
        let entries = convert::entries(entries)?;
        Ok(verdict_of(self.call(Op::Peek { entries })?)?.0)
    }

    /// GCRA or the counter: one script (the core's rate machine), on the server's clock.
    fn rate(
        &self,
        key: String,
        limit: &RateLimit,
        cost: f64,
        record: bool,
    ) -> Result<Verdict, Error> {
        let op = match (convert::rate(limit, cost)?, record) {
            (Rate::Gcra(gcra, cost), true) => RateOp::GcraConsume { key, gcra, cost },
            (Rate::Gcra(gcra, cost), false) => RateOp::GcraPeek { key, gcra, cost },
            (Rate::Counter(counter, cost), true) => RateOp::CounterConsume { key, counter, cost },
            (Rate::Counter(counter, cost), false) => RateOp::CounterPeek { key, counter, cost },
        };
        Ok(single(verdict_of(self.drive(|m| m.rate(op))?)?.0))
    }

    fn read(&self, key: String, query: WindowQuery) -> Result<Outcome, Error> {
        self.call(Op::Read { key, query })
    }

    fn hit_op(&self, key: String, decay_ms: f64, amount: i64) -> Result<HitWindow, Error> {
        let decay = convert::window(decay_ms)?;
        match self.call(Op::Hit { key, decay, amount })? {
            Outcome::Hit {
                count,
                reset_after_ms,
            } => Ok(convert::hit_window((count, reset_after_ms))),
            other => Err(unexpected(&other)),
        }
    }
}

fn entry(key: String, limit: Limit, cost: Option<f64>) -> Vec<Entry> {
    vec![Entry { key, limit, cost }]
}

impl GuestRedisStore for RedisStore {
    fn new(options: RedisOptions) -> RedisStore {
        let mut core = CoreOptions::default();
        let mut bad_prefix = None;
        if let Some(prefix) = options.prefix {
            if check_redis_prefix(&prefix).is_err() {
                bad_prefix = Some(prefix.clone());
            }
            core = core.with_prefix(prefix);
        }
        if let Some(separator) = options.hash_tag_before {
            // An empty separator is documented as "no hash tag": keep the options as they are.
            core = core.clone().with_hash_tag_before(separator).unwrap_or(core);
        }
        RedisStore {
            machine: Redis::new(core).evalsha(options.evalsha.unwrap_or(true)),
            bad_prefix,
        }
    }

    fn consume(&self, key: String, limit: Limit) -> Result<RedisConsumedOne, Error> {
        let (verdict, release) = RedisStore::consume(self, entry(key, limit, None))?;
        Ok(RedisConsumedOne {
            verdict: single(verdict),
            release,
        })
    }

    fn peek(&self, key: String, limit: Limit) -> Result<Verdict, Error> {
        RedisStore::peek(self, entry(key, limit, None)).map(single)
    }

    fn consume_cost(
        &self,
        key: String,
        limit: Limit,
        cost: f64,
    ) -> Result<RedisConsumedOne, Error> {
        let (verdict, release) = RedisStore::consume(self, entry(key, limit, Some(cost)))?;
        Ok(RedisConsumedOne {
            verdict: single(verdict),
            release,
        })
    }

    fn peek_cost(&self, key: String, limit: Limit, cost: f64) -> Result<Verdict, Error> {
        RedisStore::peek(self, entry(key, limit, Some(cost))).map(single)
    }

    fn consume_many(&self, entries: Vec<Entry>) -> Result<RedisConsumed, Error> {
        let (verdict, release) = RedisStore::consume(self, entries)?;
        Ok(RedisConsumed { verdict, release })
    }

    fn peek_many(&self, entries: Vec<Entry>) -> Result<BatchVerdict, Error> {
        RedisStore::peek(self, entries)
    }

    fn release(&self, token: RedisReleaseBorrow<'_>) -> Result<bool, Error> {
        let cell = &token.get::<Token>().0;
        // `try_borrow`: never panics, even if a host managed to re-enter.
        let token = match cell.try_borrow().ok().as_deref() {
            Some(Some(token)) => token.clone(),
            _ => return Ok(false),
        };
        unit(self.call(Op::Release { token })?)?;
        if let Ok(mut slot) = cell.try_borrow_mut() {
            *slot = None;
        }
        Ok(true)
    }

    fn hit(&self, key: String, decay_ms: f64, amount: i64) -> Result<i64, Error> {
        Ok(self.hit_op(key, decay_ms, amount)?.count)
    }

    fn hit_window(&self, key: String, decay_ms: f64, amount: i64) -> Result<HitWindow, Error> {
        self.hit_op(key, decay_ms, amount)
    }

    fn attempt(&self, key: String, max: i64, decay_ms: f64) -> Result<AttemptResult, Error> {
        let decay = convert::window(decay_ms)?;
        match self.call(Op::Attempt { key, max, decay })? {
            Outcome::Attempt {
                allowed,
                count,
                reset_after_ms,
            } => Ok(convert::attempt((allowed, count, reset_after_ms))),
            other => Err(unexpected(&other)),
        }
    }

    fn attempts(&self, key: String) -> Result<i64, Error> {
        int(self.read(key, WindowQuery::Attempts)?)
    }

    fn too_many_attempts(&self, key: String, max: i64) -> Result<bool, Error> {
        match self.read(key, WindowQuery::TooManyAttempts { max })? {
            Outcome::Bool(b) => Ok(b),
            other => Err(unexpected(&other)),
        }
    }

    fn remaining(&self, key: String, max: i64) -> Result<i64, Error> {
        int(self.read(key, WindowQuery::Remaining { max })?)
    }

    fn available_in(&self, key: String) -> Result<u64, Error> {
        Ok(int(self.read(key, WindowQuery::AvailableIn)?)?.max(0) as u64)
    }

    fn available_in_ms(&self, key: String) -> Result<u64, Error> {
        Ok(int(self.read(key, WindowQuery::AvailableInMs)?)?.max(0) as u64)
    }

    fn reset_attempts(&self, key: String) -> Result<(), Error> {
        unit(self.call(Op::ResetAttempts { key })?)
    }

    fn clear(&self, key: String) -> Result<(), Error> {
        unit(self.call(Op::Clear { key })?)
    }

    fn consume_rate(&self, key: String, limit: RateLimit, cost: f64) -> Result<Verdict, Error> {
        self.rate(key, &limit, cost, true)
    }

    fn peek_rate(&self, key: String, limit: RateLimit, cost: f64) -> Result<Verdict, Error> {
        self.rate(key, &limit, cost, false)
    }

    fn reset_rate(&self, key: String, algorithm: RateAlgorithm) -> Result<(), Error> {
        let op = match algorithm {
            RateAlgorithm::Gcra => RateOp::GcraReset { key },
            RateAlgorithm::Counter => RateOp::CounterReset { key },
        };
        unit(self.drive(|m| m.rate(op))?)
    }
}
