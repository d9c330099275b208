//! The `redis` interface of the `hosted` world: the core's plans (`ratewindow_core::redis`) run by the
//! host's client through the imported `store-io.run-script`, their replies decoded by the core.
//!
//! A script goes by SHA1 first (an empty `script`), and in full only after an error whose text contains
//! `NOSCRIPT`; any other error is `store-failed`, never resent. Call ids are 16 bytes of the host's
//! `store-io.random-bytes`, in hex.

use std::cell::RefCell;

use ratewindow_core::redis::{
    self as plans, Plan, RedisOptions as CoreOptions, RedisRelease, Reply,
};

use crate::bindings::exports::ratewindow::engine::{
    errors::{Error, MalformedReply},
    redis::{
        self as wit, GuestRedisRelease, GuestRedisStore, RedisConsumed, RedisOptions,
        RedisRelease as ReleaseHandle, RedisReleaseBorrow,
    },
    types::{BatchVerdict, Entry},
};
use crate::bindings::ratewindow::engine::store_io::{self, Value};
use crate::{convert, Component};

impl wit::Guest for Component {
    type RedisStore = RedisStore;
    type RedisRelease = Token;
}

/// A store over the host's client: only the key options; every call runs through `store-io`.
pub struct RedisStore {
    options: CoreOptions,
}

/// The release of one allowed `consume-many`: taken when a release succeeds, so a second does nothing.
pub struct Token(RefCell<Option<RedisRelease>>);

impl GuestRedisRelease for Token {}

fn malformed(e: plans::ReplyError) -> Error {
    Error::MalformedReply(MalformedReply {
        expected: format!("{} (the {} script's reply)", e.expected, e.script),
        got: e.got,
    })
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

/// Runs `plan` through the host: EVALSHA, then EVAL only on `NOSCRIPT`.
fn run(plan: &Plan) -> Result<Reply, Error> {
    let script = plan.script;
    match store_io::run_script("", script.sha1, &plan.keys, &plan.args) {
        Ok(r) => Ok(reply(r)),
        Err(e) if says_noscript(&e) => {
            store_io::run_script(script.source, script.sha1, &plan.keys, &plan.args)
                .map(reply)
                .map_err(Error::StoreFailed)
        }
        Err(e) => Err(Error::StoreFailed(e)),
    }
}

/// Whether a runner's error is the server's `NOSCRIPT`. A plain byte scan: `str::contains` would bring
/// the two-way string searcher (a few KB) into the component.
fn says_noscript(error: &str) -> bool {
    error.as_bytes().windows(8).any(|w| w == b"NOSCRIPT")
}

/// A fresh call id: 16 random bytes from the host, in hex.
fn call_id() -> Result<String, Error> {
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

fn window(reply: &Reply) -> Result<Option<plans::WindowState>, Error> {
    plans::decode_window(reply).map_err(malformed)
}

impl GuestRedisStore for RedisStore {
    fn new(options: RedisOptions) -> RedisStore {
        let mut core = CoreOptions::default();
        if let Some(prefix) = options.prefix {
            core = core.with_prefix(prefix);
        }
        if let Some(separator) = options.hash_tag_before {
            // An empty separator is documented as "no hash tag": keep the options as they are.
            core = core.clone().with_hash_tag_before(separator).unwrap_or(core);
        }
        RedisStore { options: core }
    }

    fn consume_many(&self, entries: Vec<Entry>) -> Result<RedisConsumed, Error> {
        let entries = convert::entries(entries)?;
        let id = call_id()?;
        let (plan, release) = plans::plan_consume_many(&entries, &self.options, &id)
            .map_err(|e| Error::StoreFailed(e.to_string()))?;
        let verdict = plans::decode_batch_of(&run(&plan)?, entries.len()).map_err(malformed)?;
        Ok(RedisConsumed {
            release: verdict
                .allowed
                .then(|| ReleaseHandle::new(Token(RefCell::new(Some(release))))),
            verdict: verdict.into(),
        })
    }

    fn peek_many(&self, entries: Vec<Entry>) -> Result<BatchVerdict, Error> {
        let entries = convert::entries(entries)?;
        let plan = plans::plan_peek_many(&entries, &self.options);
        let verdict = plans::decode_batch_of(&run(&plan)?, entries.len()).map_err(malformed)?;
        Ok(verdict.into())
    }

    fn release(&self, token: RedisReleaseBorrow<'_>) -> Result<bool, Error> {
        let cell = &token.get::<Token>().0;
        // `try_borrow`: never panics, even if a host managed to re-enter.
        let plan = match cell.try_borrow().ok().as_deref() {
            Some(Some(release)) => plans::plan_release(release),
            _ => return Ok(false),
        };
        plans::decode_release(&run(&plan)?).map_err(malformed)?;
        if let Ok(mut slot) = cell.try_borrow_mut() {
            *slot = None;
        }
        Ok(true)
    }

    fn hit(&self, key: String, decay_ms: f64, amount: i64) -> Result<i64, Error> {
        let decay = convert::window(decay_ms)?;
        let plan = plans::plan_hit(&key, decay, amount, &self.options);
        let reply = run(&plan)?;
        match window(&reply)? {
            Some(state) => Ok(state.count),
            None => Err(malformed(plans::ReplyError::new(
                "fixed",
                "[count, ms until the window ends > 0] after a hit",
                &reply,
            ))),
        }
    }

    fn attempts(&self, key: String) -> Result<i64, Error> {
        let reply = run(&plans::plan_get_window(&key, &self.options))?;
        Ok(window(&reply)?.map_or(0, |s| s.count))
    }
}
