//! A Rust host for the ratewindow component, on wasmtime's component model.
//!
//! [`EngineWorld`] runs the component built for the pure `engine` world (the host passes `now`);
//! [`HostedWorld`] runs the one built for the `hosted` world, whose store reads the host's clock through
//! the imported `clock` interface ([`HostState::clock_ms`]). Both implement [`Ops`], the operations of
//! the conformance vectors, so one runner drives either.
//!
//! The `hosted` world also exports the `redis` store: the core's call machines run inside the component,
//! and each script they ask for comes out through the imported `store-io.run-script`, which this host
//! hands to [`HostState::runner`], a callback over the host's own Redis client (the tests give it a
//! `redis::Connection` to the real server, or a scripted conversation). Give-backs that failed arrive
//! through `store-io.give-back-failed` in [`HostState::give_back_failures`].
//!
//! [`Ops`] is implemented once for both worlds by `impl_ops!`: the worlds' generated types differ only
//! in their module and in whether `now` crosses the call.
//!
//! The components are found in `RATEWINDOW_COMPONENT_DIR`, else in `bindings-wasm/component/dist/`,
//! where `scripts/test-wasm-component.sh` puts them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::path::PathBuf;

use wasmtime::component::{Component, HasSelf, Linker, ResourceAny};
use wasmtime::error::Context;
use wasmtime::Result;
use wasmtime::{Config, Engine, Store};

/// Bindings for the `engine` world (exports only).
#[allow(missing_docs)]
pub mod engine {
    wasmtime::component::bindgen!({ path: "../../wit", world: "engine" });
}

/// Bindings for the `hosted` world (imports `clock` and `store-io`).
#[allow(missing_docs)]
pub mod hosted {
    wasmtime::component::bindgen!({ path: "../../wit", world: "hosted" });
}

/// A limit as the host's numbers: `uses` and `window_ms`, unchecked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// Calls per window.
    pub uses: f64,
    /// Window length, ms.
    pub window_ms: f64,
}

/// Which algorithm a [`RateLimit`] counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// The sliding log (a mixed batch's entry only).
    Sliding,
    /// GCRA.
    Gcra,
    /// The sliding-window counter.
    Counter,
}

/// A GCRA, counter or (in a mixed batch) sliding-log limit as the host's numbers, unchecked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Uses per window.
    pub uses: f64,
    /// Window length, ms.
    pub window_ms: f64,
    /// GCRA only: the most uses at once (`None`: `uses`).
    pub burst: Option<f64>,
}

/// One entry of a weighted batch: the key, its limit and its cost (`None`: the entry has no cost, 1).
pub type Weighted = (String, Limit, Option<f64>);

/// A verdict, world-independent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Allowed (and recorded, for a consume).
    pub allowed: bool,
    /// Wait in ms; 0 when allowed.
    pub retry_after_ms: u64,
    /// When the next call is allowed; `None` when allowed.
    pub retry_timestamp: Option<u64>,
    /// Batches only: the blocking entry.
    pub blocked: Option<u32>,
    /// The tightest entry's `uses`.
    pub limit: u32,
    /// Uses it has left after the call.
    pub remaining: u32,
    /// Ms until it gets a use back.
    pub refill_after_ms: u64,
    /// Ms until its window is empty.
    pub reset_after_ms: u64,
}

/// A fixed window's answer to `hit-window` and `attempt`, world-independent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// `attempt` only (true for a hit): whether the hit was counted.
    pub allowed: bool,
    /// Hits in the window after the call.
    pub count: i64,
    /// Ms until the window ends; 0 when none runs.
    pub reset_after_ms: u64,
}

/// The component's `error` variant, world-independent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// `invalid-limit`: the field (`uses` or `window_ms`) and the value as text.
    InvalidLimit {
        /// `uses` or `window_ms`.
        field: &'static str,
        /// The refused value, as the component rendered it.
        value: String,
    },
    /// `invalid-argument`: the argument (`now`) and the value as text.
    InvalidArgument {
        /// The refused argument's name.
        field: String,
        /// The refused value, as the component rendered it.
        value: String,
    },
    /// `malformed-reply`.
    MalformedReply {
        /// What was expected.
        expected: String,
        /// What came.
        got: String,
    },
    /// `store-failed`.
    StoreFailed(String),
    /// `protocol`.
    Protocol(String),
    /// `unsupported`.
    Unsupported(String),
    /// `lock-timeout`: a lock's `block` waited its seconds without the lock (the lock's key).
    LockTimeout(String),
}

impl Error {
    /// The stable kind, as the core's `CallError::kind()` and the conversation vectors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidLimit { .. } => "invalid_limit",
            Error::InvalidArgument { .. } => "invalid_argument",
            Error::MalformedReply { .. } => "reply",
            Error::StoreFailed(_) => "store",
            Error::Protocol(_) => "protocol",
            Error::Unsupported(_) => "unsupported",
            Error::LockTimeout(_) => "lock_timeout",
        }
    }
}

/// Operations of the conformance vectors on one current store of a component instance.
///
/// The outer `Result` is the host's (a trap would land there and fail the test); the inner one is the
/// component's `error` variant.
pub trait Ops {
    /// Replaces the current store with a fresh, empty one (dropping release tokens it handed out).
    fn fresh_store(&mut self) -> Result<()>;
    /// `check-limit`.
    fn check_limit(&mut self, limit: Limit) -> Result<Result<(), Error>>;
    /// `consume`.
    fn consume(&mut self, key: &str, limit: Limit, now: u64) -> Result<Result<Verdict, Error>>;
    /// `peek`.
    fn peek(&mut self, key: &str, limit: Limit, now: u64) -> Result<Result<Verdict, Error>>;
    /// `consume-many`; the token (when allowed) is kept under `id`, or dropped when `id` is `None`.
    fn consume_many(
        &mut self,
        entries: &[(String, Limit)],
        now: u64,
        id: Option<&str>,
    ) -> Result<Result<Verdict, Error>>;
    /// `peek-many`.
    fn peek_many(
        &mut self,
        entries: &[(String, Limit)],
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
    /// `consume-cost`: a sliding-log call costing `cost` uses.
    fn consume_cost(
        &mut self,
        key: &str,
        limit: Limit,
        cost: f64,
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
    /// `peek-cost`.
    fn peek_cost(
        &mut self,
        key: &str,
        limit: Limit,
        cost: f64,
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
    /// `consume-many` of entries with costs; the token kept under `id` as `consume_many`.
    fn consume_many_weighted(
        &mut self,
        entries: &[Weighted],
        now: u64,
        id: Option<&str>,
    ) -> Result<Result<Verdict, Error>>;
    /// `peek-many` of entries with costs.
    fn peek_many_weighted(
        &mut self,
        entries: &[Weighted],
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
    /// `release` of the token kept under `id`, if any (again: a no-op in the component).
    fn release(&mut self, id: &str, now: u64) -> Result<()>;
    /// `hit`.
    fn hit(
        &mut self,
        key: &str,
        decay_ms: f64,
        amount: i64,
        now: u64,
    ) -> Result<Result<i64, Error>>;
    /// `hit-window`.
    fn hit_window(
        &mut self,
        key: &str,
        decay_ms: f64,
        amount: i64,
        now: u64,
    ) -> Result<Result<Window, Error>>;
    /// `attempt`.
    fn attempt(
        &mut self,
        key: &str,
        max: i64,
        decay_ms: f64,
        now: u64,
    ) -> Result<Result<Window, Error>>;
    /// `attempts`.
    fn attempts(&mut self, key: &str, now: u64) -> Result<i64>;
    /// `too-many-attempts`.
    fn too_many_attempts(&mut self, key: &str, max: i64, now: u64) -> Result<bool>;
    /// `remaining`.
    fn remaining(&mut self, key: &str, max: i64, now: u64) -> Result<i64>;
    /// `available-in`.
    fn available_in(&mut self, key: &str, now: u64) -> Result<u64>;
    /// `available-in-ms`.
    fn available_in_ms(&mut self, key: &str, now: u64) -> Result<u64>;
    /// `reset-attempts`.
    fn reset_attempts(&mut self, key: &str, now: u64) -> Result<()>;
    /// `clear`.
    fn clear(&mut self, key: &str, now: u64) -> Result<()>;
    /// `key-count`.
    fn key_count(&mut self) -> Result<u64>;
    /// `check-rate` (a GCRA or counter limit).
    fn check_rate(&mut self, limit: RateLimit) -> Result<Result<(), Error>>;
    /// `consume-rate` (GCRA or the counter) costing `cost` uses.
    fn consume_rate(
        &mut self,
        key: &str,
        limit: RateLimit,
        cost: f64,
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
    /// `peek-rate`.
    fn peek_rate(
        &mut self,
        key: &str,
        limit: RateLimit,
        cost: f64,
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
    /// `reset-rate` of `algorithm` (GCRA or the counter).
    fn reset_rate(&mut self, key: &str, algorithm: Algorithm, now: u64) -> Result<()>;
    /// `consume-mixed` of `(key, limit, cost)` entries; the token kept under `id` as `consume_many`.
    fn consume_mixed(
        &mut self,
        entries: &[(String, RateLimit, f64)],
        now: u64,
        id: Option<&str>,
    ) -> Result<Result<Verdict, Error>>;
    /// `peek-mixed`.
    fn peek_mixed(
        &mut self,
        entries: &[(String, RateLimit, f64)],
        now: u64,
    ) -> Result<Result<Verdict, Error>>;
}

/// The reply type of `store-io.run-script`.
pub use hosted::ratewindow::engine::store_io::{
    GiveBackFailure, Reply as ScriptReply, Value as ScriptValue,
};

/// The host's script runner behind `store-io.run-script`: `(script, sha1, keys, args)`, where an empty
/// `script` means `EVALSHA sha1` and a non-empty one `EVAL script`; the reply, or the client's error
/// message (`NOSCRIPT ...` for a script the server lacks).
pub type ScriptRunner =
    Box<dyn FnMut(&str, &str, &[String], &[String]) -> Result<ScriptReply, String> + Send>;

/// The host side of a component instance: its clock (read by the `hosted` world), how often the
/// component read it, and the script runner of the `redis` store.
#[derive(Default)]
pub struct HostState {
    /// What `clock.now-ms` returns.
    pub clock_ms: u64,
    /// How many times the component called `clock.now-ms`.
    pub clock_reads: u64,
    /// The real clock: `clock.now-ms` reads the system time and `clock.sleep-ms` sleeps (a lock's
    /// `block` on a real store). Otherwise `now-ms` is [`HostState::clock_ms`] and `sleep-ms` moves it.
    pub real_time: bool,
    /// What `clock.sleep-ms` was asked to sleep, oldest first.
    pub slept_ms: Vec<u64>,
    /// Runs the `redis` store's scripts; without one, `run-script` answers an error.
    pub runner: Option<ScriptRunner>,
    /// `run-script` calls that sent the script by SHA1 only (EVALSHA).
    pub evalsha_calls: u64,
    /// `run-script` calls that sent the full source (EVAL, after a `NOSCRIPT`).
    pub eval_calls: u64,
    /// What the component reported through `store-io.give-back-failed`, oldest first.
    pub give_back_failures: Vec<GiveBackFailure>,
    /// Call ids handed out through `random-bytes`.
    random_counter: u64,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("clock_ms", &self.clock_ms)
            .field("clock_reads", &self.clock_reads)
            .field("runner", &self.runner.as_ref().map(|_| "..."))
            .field("evalsha_calls", &self.evalsha_calls)
            .field("eval_calls", &self.eval_calls)
            .field("give_back_failures", &self.give_back_failures)
            .finish()
    }
}

impl hosted::ratewindow::engine::clock::Host for HostState {
    fn now_ms(&mut self) -> u64 {
        self.clock_reads += 1;
        if self.real_time {
            return std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
        }
        self.clock_ms
    }

    fn sleep_ms(&mut self, ms: u64) {
        self.slept_ms.push(ms);
        if self.real_time {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        } else {
            self.clock_ms = self.clock_ms.saturating_add(ms);
        }
    }
}

/// Scripts go to [`HostState::runner`]; this host has no SQL client (`query` is reserved).
impl hosted::ratewindow::engine::store_io::Host for HostState {
    fn run_script(
        &mut self,
        script: String,
        sha1: String,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<ScriptReply, String> {
        if script.is_empty() {
            self.evalsha_calls += 1;
        } else {
            self.eval_calls += 1;
        }
        match self.runner.as_mut() {
            Some(run) => run(&script, &sha1, &keys, &args),
            None => Err("this host has no Redis client".to_owned()),
        }
    }

    /// Random bytes from std's randomly keyed SipHash (`RandomState`) over a counter: unique and
    /// unpredictable per process, with no dependency.
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        use std::hash::{BuildHasher, Hasher};
        let mut out = Vec::with_capacity(len as usize);
        while out.len() < len as usize {
            self.random_counter += 1;
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(self.random_counter);
            out.extend_from_slice(&h.finish().to_le_bytes());
        }
        out.truncate(len as usize);
        out
    }

    fn give_back_failed(&mut self, failure: GiveBackFailure) {
        self.give_back_failures.push(failure);
    }

    fn query(
        &mut self,
        _statements: Vec<hosted::ratewindow::engine::store_io::Statement>,
    ) -> Result<hosted::ratewindow::engine::store_io::Reply, String> {
        Err("this host has no SQL client".to_owned())
    }
}

/// The directory holding `ratewindow-engine.wasm` and `ratewindow-hosted.wasm`.
pub fn component_dir() -> PathBuf {
    match std::env::var_os("RATEWINDOW_COMPONENT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../component/dist"),
    }
}

/// A wasmtime engine configured for the component model.
pub fn wasmtime_engine() -> Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    Engine::new(&config)
}

fn load(engine: &Engine, file: &str) -> Result<Component> {
    let path = component_dir().join(file);
    Component::from_file(engine, &path).with_context(|| {
        format!(
            "loading {} (build it with scripts/test-wasm-component.sh)",
            path.display()
        )
    })
}

macro_rules! convert_types {
    ($types:path, $errors:path) => {
        use $errors as e;
        use $types as t;

        pub(crate) fn limit(l: crate::Limit) -> t::Limit {
            t::Limit {
                uses: l.uses,
                window_ms: l.window_ms,
            }
        }

        pub(crate) fn weighted(list: &[crate::Weighted]) -> Vec<t::Entry> {
            list.iter()
                .map(|(key, l, cost)| t::Entry {
                    key: key.clone(),
                    limit: limit(*l),
                    cost: *cost,
                })
                .collect()
        }

        fn gcra(l: crate::RateLimit) -> t::GcraLimit {
            t::GcraLimit {
                uses: l.uses,
                window_ms: l.window_ms,
                burst: l.burst,
            }
        }

        fn plain(l: crate::RateLimit) -> t::Limit {
            t::Limit {
                uses: l.uses,
                window_ms: l.window_ms,
            }
        }

        /// A GCRA or counter limit; a sliding-log one is a host error (it has no single rate call).
        pub(crate) fn rate(l: crate::RateLimit) -> wasmtime::Result<t::RateLimit> {
            match l.algorithm {
                crate::Algorithm::Gcra => Ok(t::RateLimit::Gcra(gcra(l))),
                crate::Algorithm::Counter => Ok(t::RateLimit::Counter(plain(l))),
                crate::Algorithm::Sliding => {
                    wasmtime::bail!("a sliding-log limit has no rate call: use consume")
                }
            }
        }

        pub(crate) fn algorithm(a: crate::Algorithm) -> wasmtime::Result<t::RateAlgorithm> {
            match a {
                crate::Algorithm::Gcra => Ok(t::RateAlgorithm::Gcra),
                crate::Algorithm::Counter => Ok(t::RateAlgorithm::Counter),
                crate::Algorithm::Sliding => {
                    wasmtime::bail!("reset-rate forgets GCRA or counter keys")
                }
            }
        }

        pub(crate) fn mixed(list: &[(String, crate::RateLimit, f64)]) -> Vec<t::MixedEntry> {
            list.iter()
                .map(|(key, l, cost)| t::MixedEntry {
                    key: key.clone(),
                    limit: match l.algorithm {
                        crate::Algorithm::Sliding => t::MixedLimit::Sliding(plain(*l)),
                        crate::Algorithm::Gcra => t::MixedLimit::Gcra(gcra(*l)),
                        crate::Algorithm::Counter => t::MixedLimit::Counter(plain(*l)),
                    },
                    cost: *cost,
                })
                .collect()
        }

        pub(crate) fn verdict(v: t::Verdict) -> crate::Verdict {
            crate::Verdict {
                allowed: v.allowed,
                retry_after_ms: v.retry_after_ms,
                retry_timestamp: v.retry_timestamp,
                blocked: None,
                limit: v.limit,
                remaining: v.remaining,
                refill_after_ms: v.refill_after_ms,
                reset_after_ms: v.reset_after_ms,
            }
        }

        pub(crate) fn batch(v: t::BatchVerdict) -> crate::Verdict {
            crate::Verdict {
                allowed: v.allowed,
                retry_after_ms: v.retry_after_ms,
                retry_timestamp: v.retry_timestamp,
                blocked: v.blocked,
                limit: v.limit,
                remaining: v.remaining,
                refill_after_ms: v.refill_after_ms,
                reset_after_ms: v.reset_after_ms,
            }
        }

        pub(crate) fn hit_window(h: t::HitWindow) -> crate::Window {
            crate::Window {
                allowed: true,
                count: h.count,
                reset_after_ms: h.reset_after_ms,
            }
        }

        pub(crate) fn attempt(a: t::AttemptResult) -> crate::Window {
            crate::Window {
                allowed: a.allowed,
                count: a.count,
                reset_after_ms: a.reset_after_ms,
            }
        }

        pub(crate) fn error(err: e::Error) -> crate::Error {
            match err {
                e::Error::InvalidLimit(i) => crate::Error::InvalidLimit {
                    field: match i.field {
                        e::LimitField::Uses => "uses",
                        e::LimitField::WindowMs => "window_ms",
                        e::LimitField::Burst => "burst",
                    },
                    value: i.value,
                },
                e::Error::InvalidArgument(a) => crate::Error::InvalidArgument {
                    field: a.field,
                    value: a.value,
                },
                e::Error::MalformedReply(m) => crate::Error::MalformedReply {
                    expected: m.expected,
                    got: m.got,
                },
                e::Error::StoreFailed(s) => crate::Error::StoreFailed(s),
                e::Error::Protocol(s) => crate::Error::Protocol(s),
                e::Error::Unsupported(s) => crate::Error::Unsupported(s),
                e::Error::LockTimeout(s) => crate::Error::LockTimeout(s),
            }
        }
    };
}

mod engine_conv {
    convert_types!(
        crate::engine::exports::ratewindow::engine::types,
        crate::engine::exports::ratewindow::engine::errors
    );
}

mod hosted_conv {
    convert_types!(
        crate::hosted::exports::ratewindow::engine::types,
        crate::hosted::exports::ratewindow::engine::errors
    );
}

impl From<hosted::exports::ratewindow::engine::types::Verdict> for Verdict {
    fn from(v: hosted::exports::ratewindow::engine::types::Verdict) -> Verdict {
        hosted_conv::verdict(v)
    }
}

impl From<hosted::exports::ratewindow::engine::types::BatchVerdict> for Verdict {
    fn from(v: hosted::exports::ratewindow::engine::types::BatchVerdict) -> Verdict {
        hosted_conv::batch(v)
    }
}

impl From<hosted::exports::ratewindow::engine::errors::Error> for Error {
    fn from(e: hosted::exports::ratewindow::engine::errors::Error) -> Error {
        hosted_conv::error(e)
    }
}

/// The current store of an instance and the release tokens it handed out, by vector `id`.
struct Current {
    store: Option<ResourceAny>,
    tokens: Vec<(String, ResourceAny)>,
}

impl Current {
    fn new() -> Current {
        Current {
            store: None,
            tokens: Vec::new(),
        }
    }

    fn store(&self) -> Result<ResourceAny> {
        self.store.context("no store: call fresh_store first")
    }

    fn token(&self, id: &str) -> Option<ResourceAny> {
        self.tokens
            .iter()
            .rev()
            .find(|(k, _)| k == id)
            .map(|(_, t)| *t)
    }

    fn drop_all(&mut self, store: &mut Store<HostState>) -> Result<()> {
        for (_, token) in self.tokens.drain(..) {
            token.resource_drop(&mut *store)?;
        }
        if let Some(s) = self.store.take() {
            s.resource_drop(&mut *store)?;
        }
        Ok(())
    }
}

/// The component built for the `engine` world in wasmtime: the host passes `now` to every call.
pub struct EngineWorld {
    /// The wasmtime store (its data is unused by this world).
    pub store: Store<HostState>,
    bindings: engine::Engine,
    current: Current,
}

impl EngineWorld {
    /// Compiles and instantiates `ratewindow-engine.wasm`.
    pub fn new() -> Result<EngineWorld> {
        let engine = wasmtime_engine()?;
        let component = load(&engine, "ratewindow-engine.wasm")?;
        EngineWorld::instantiate(&engine, &component)
    }

    /// Instantiates an already compiled component (an `engine`-world component has no imports).
    pub fn instantiate(engine: &Engine, component: &Component) -> Result<EngineWorld> {
        let linker = Linker::<HostState>::new(engine);
        let mut store = Store::new(engine, HostState::default());
        let bindings = engine::Engine::instantiate(&mut store, component, &linker)?;
        Ok(EngineWorld {
            store,
            bindings,
            current: Current::new(),
        })
    }

    /// The engine world passes `now` to every call: nothing to set.
    fn at(&mut self, _now: u64) {}

    /// The `memory` interface's exports.
    pub fn memory(&self) -> &engine::exports::ratewindow::engine::memory::Guest {
        self.bindings.ratewindow_engine_memory()
    }

    /// The current store handle (after [`Ops::fresh_store`]).
    pub fn store_handle(&self) -> Result<ResourceAny> {
        self.current.store()
    }

    /// The wasmtime store and the `memory` exports at once, to call them directly.
    pub fn split(
        &mut self,
    ) -> (
        &mut Store<HostState>,
        &engine::exports::ratewindow::engine::memory::Guest,
    ) {
        (&mut self.store, self.bindings.ratewindow_engine_memory())
    }
}

/// The component built for the `hosted` world in wasmtime: the store reads [`HostState::clock_ms`]
/// through the imported clock, so each op sets the clock to its `now` and passes no time.
pub struct HostedWorld {
    /// The wasmtime store; its data is the host's clock.
    pub store: Store<HostState>,
    bindings: hosted::Hosted,
    current: Current,
}

impl HostedWorld {
    /// Compiles and instantiates `ratewindow-hosted.wasm`, linking this host's clock and store-io.
    pub fn new() -> Result<HostedWorld> {
        let engine = wasmtime_engine()?;
        let component = load(&engine, "ratewindow-hosted.wasm")?;
        let mut linker = Linker::<HostState>::new(&engine);
        hosted::Hosted::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
        let mut store = Store::new(&engine, HostState::default());
        let bindings = hosted::Hosted::instantiate(&mut store, &component, &linker)?;
        Ok(HostedWorld {
            store,
            bindings,
            current: Current::new(),
        })
    }

    /// The `redis` interface's exports.
    pub fn redis(&self) -> &hosted::exports::ratewindow::engine::redis::Guest {
        self.bindings.ratewindow_engine_redis()
    }

    /// A new `redis-store` with `options`, owned by the caller.
    pub fn redis_store(
        &mut self,
        options: &hosted::exports::ratewindow::engine::redis::RedisOptions,
    ) -> Result<ResourceAny> {
        self.bindings
            .ratewindow_engine_redis()
            .redis_store()
            .call_constructor(&mut self.store, options)
    }

    /// The wasmtime store and the `redis` exports at once, to call them directly.
    pub fn split_redis(
        &mut self,
    ) -> (
        &mut Store<HostState>,
        &hosted::exports::ratewindow::engine::redis::Guest,
    ) {
        (&mut self.store, self.bindings.ratewindow_engine_redis())
    }

    /// The `lock` interface's exports.
    pub fn lock(&self) -> &hosted::exports::ratewindow::engine::lock::Guest {
        self.bindings.ratewindow_engine_lock()
    }

    /// The wasmtime store and the `lock` exports at once, to call them directly.
    pub fn split_lock(
        &mut self,
    ) -> (
        &mut Store<HostState>,
        &hosted::exports::ratewindow::engine::lock::Guest,
    ) {
        (&mut self.store, self.bindings.ratewindow_engine_lock())
    }

    /// The `clocked-memory` interface's exports.
    pub fn clocked(&self) -> &hosted::exports::ratewindow::engine::clocked_memory::Guest {
        self.bindings.ratewindow_engine_clocked_memory()
    }

    /// The current store handle (after [`Ops::fresh_store`]).
    pub fn store_handle(&self) -> Result<ResourceAny> {
        self.current.store()
    }

    /// The wasmtime store and the `clocked-memory` exports at once, to call them directly.
    pub fn split(
        &mut self,
    ) -> (
        &mut Store<HostState>,
        &hosted::exports::ratewindow::engine::clocked_memory::Guest,
    ) {
        (
            &mut self.store,
            self.bindings.ratewindow_engine_clocked_memory(),
        )
    }

    fn at(&mut self, now: u64) {
        self.store.data_mut().clock_ms = now;
    }
}

/// The one implementation of [`Ops`] for both worlds: `$iface` names the store interface's accessor,
/// `$conv` the world's conversions, and `$now => [$($pass)?]` whether `now` crosses each call (the
/// `engine` world) or is set on the host's clock (the `hosted` world, whose `at` does that).
macro_rules! impl_ops {
    ($world:ident, $conv:ident, $iface:ident, $now:ident => [$($pass:ident)?]) => {
        impl Ops for $world {
            fn fresh_store(&mut self) -> Result<()> {
                self.current.drop_all(&mut self.store)?;
                let handle = self
                    .bindings
                    .$iface()
                    .memory_store()
                    .call_constructor(&mut self.store)?;
                self.current.store = Some(handle);
                Ok(())
            }

            fn check_limit(&mut self, limit: Limit) -> Result<Result<(), Error>> {
                let r = self
                    .bindings
                    .ratewindow_engine_limits()
                    .call_check_limit(&mut self.store, $conv::limit(limit))?;
                Ok(r.map_err($conv::error))
            }

            fn consume(&mut self, key: &str, limit: Limit, $now: u64) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_consume(
                    &mut self.store, s, key, $conv::limit(limit) $(, $pass)?)?;
                Ok(r.map($conv::verdict).map_err($conv::error))
            }

            fn peek(&mut self, key: &str, limit: Limit, $now: u64) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_peek(
                    &mut self.store, s, key, $conv::limit(limit) $(, $pass)?)?;
                Ok(r.map($conv::verdict).map_err($conv::error))
            }

            fn consume_cost(&mut self, key: &str, limit: Limit, cost: f64, $now: u64) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_consume_cost(
                    &mut self.store, s, key, $conv::limit(limit), cost $(, $pass)?)?;
                Ok(r.map($conv::verdict).map_err($conv::error))
            }

            fn peek_cost(&mut self, key: &str, limit: Limit, cost: f64, $now: u64) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_peek_cost(
                    &mut self.store, s, key, $conv::limit(limit), cost $(, $pass)?)?;
                Ok(r.map($conv::verdict).map_err($conv::error))
            }

            fn consume_many(
                &mut self,
                entries: &[(String, Limit)],
                $now: u64,
                id: Option<&str>,
            ) -> Result<Result<Verdict, Error>> {
                let list: Vec<Weighted> = entries.iter().map(|(k, l)| (k.clone(), *l, None)).collect();
                self.consume_many_weighted(&list, $now, id)
            }

            fn peek_many(
                &mut self,
                entries: &[(String, Limit)],
                $now: u64,
            ) -> Result<Result<Verdict, Error>> {
                let list: Vec<Weighted> = entries.iter().map(|(k, l)| (k.clone(), *l, None)).collect();
                self.peek_many_weighted(&list, $now)
            }

            fn consume_many_weighted(
                &mut self,
                entries: &[Weighted],
                $now: u64,
                id: Option<&str>,
            ) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let list = $conv::weighted(entries);
                let r = self.bindings.$iface().memory_store().call_consume_many(
                    &mut self.store, s, &list $(, $pass)?)?;
                Ok(match r {
                    Ok(consumed) => {
                        if let Some(token) = consumed.release {
                            match id {
                                Some(id) => self.current.tokens.push((id.to_owned(), token)),
                                None => token.resource_drop(&mut self.store)?,
                            }
                        }
                        Ok($conv::batch(consumed.verdict))
                    }
                    Err(e) => Err($conv::error(e)),
                })
            }

            fn peek_many_weighted(
                &mut self,
                entries: &[Weighted],
                $now: u64,
            ) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let list = $conv::weighted(entries);
                let r = self.bindings.$iface().memory_store().call_peek_many(
                    &mut self.store, s, &list $(, $pass)?)?;
                Ok(r.map($conv::batch).map_err($conv::error))
            }

            fn release(&mut self, id: &str, $now: u64) -> Result<()> {
                let s = self.current.store()?;
                self.at($now);
                if let Some(token) = self.current.token(id) {
                    self.bindings.$iface().memory_store().call_release(
                        &mut self.store, s, token $(, $pass)?)?;
                }
                Ok(())
            }

            fn hit(&mut self, key: &str, decay_ms: f64, amount: i64, $now: u64) -> Result<Result<i64, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_hit(
                    &mut self.store, s, key, decay_ms, amount $(, $pass)?)?;
                Ok(r.map_err($conv::error))
            }

            fn hit_window(&mut self, key: &str, decay_ms: f64, amount: i64, $now: u64) -> Result<Result<Window, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_hit_window(
                    &mut self.store, s, key, decay_ms, amount $(, $pass)?)?;
                Ok(r.map($conv::hit_window).map_err($conv::error))
            }

            fn attempt(&mut self, key: &str, max: i64, decay_ms: f64, $now: u64) -> Result<Result<Window, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_attempt(
                    &mut self.store, s, key, max, decay_ms $(, $pass)?)?;
                Ok(r.map($conv::attempt).map_err($conv::error))
            }

            fn attempts(&mut self, key: &str, $now: u64) -> Result<i64> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_attempts(&mut self.store, s, key $(, $pass)?)
            }

            fn too_many_attempts(&mut self, key: &str, max: i64, $now: u64) -> Result<bool> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_too_many_attempts(
                    &mut self.store, s, key, max $(, $pass)?)
            }

            fn remaining(&mut self, key: &str, max: i64, $now: u64) -> Result<i64> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_remaining(&mut self.store, s, key, max $(, $pass)?)
            }

            fn available_in(&mut self, key: &str, $now: u64) -> Result<u64> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_available_in(&mut self.store, s, key $(, $pass)?)
            }

            fn available_in_ms(&mut self, key: &str, $now: u64) -> Result<u64> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_available_in_ms(&mut self.store, s, key $(, $pass)?)
            }

            fn reset_attempts(&mut self, key: &str, $now: u64) -> Result<()> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_reset_attempts(&mut self.store, s, key $(, $pass)?)
            }

            fn clear(&mut self, key: &str, $now: u64) -> Result<()> {
                let s = self.current.store()?;
                self.at($now);
                self.bindings.$iface().memory_store().call_clear(&mut self.store, s, key)
            }

            fn key_count(&mut self) -> Result<u64> {
                let s = self.current.store()?;
                self.bindings.$iface().memory_store().call_key_count(&mut self.store, s)
            }

            fn check_rate(&mut self, limit: RateLimit) -> Result<Result<(), Error>> {
                let r = self
                    .bindings
                    .ratewindow_engine_limits()
                    .call_check_rate(&mut self.store, $conv::rate(limit)?)?;
                Ok(r.map_err($conv::error))
            }

            fn consume_rate(&mut self, key: &str, limit: RateLimit, cost: f64, $now: u64) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_consume_rate(
                    &mut self.store, s, key, $conv::rate(limit)?, cost $(, $pass)?)?;
                Ok(r.map($conv::verdict).map_err($conv::error))
            }

            fn peek_rate(&mut self, key: &str, limit: RateLimit, cost: f64, $now: u64) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let r = self.bindings.$iface().memory_store().call_peek_rate(
                    &mut self.store, s, key, $conv::rate(limit)?, cost $(, $pass)?)?;
                Ok(r.map($conv::verdict).map_err($conv::error))
            }

            fn reset_rate(&mut self, key: &str, algorithm: Algorithm, $now: u64) -> Result<()> {
                let s = self.current.store()?;
                self.at($now);
                let a = $conv::algorithm(algorithm)?;
                self.bindings.$iface().memory_store().call_reset_rate(&mut self.store, s, key, a)
            }

            fn consume_mixed(
                &mut self,
                entries: &[(String, RateLimit, f64)],
                $now: u64,
                id: Option<&str>,
            ) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let list = $conv::mixed(entries);
                let r = self.bindings.$iface().memory_store().call_consume_mixed(
                    &mut self.store, s, &list $(, $pass)?)?;
                Ok(match r {
                    Ok(consumed) => {
                        if let Some(token) = consumed.release {
                            match id {
                                Some(id) => self.current.tokens.push((id.to_owned(), token)),
                                None => token.resource_drop(&mut self.store)?,
                            }
                        }
                        Ok($conv::batch(consumed.verdict))
                    }
                    Err(e) => Err($conv::error(e)),
                })
            }

            fn peek_mixed(
                &mut self,
                entries: &[(String, RateLimit, f64)],
                $now: u64,
            ) -> Result<Result<Verdict, Error>> {
                let s = self.current.store()?;
                self.at($now);
                let list = $conv::mixed(entries);
                let r = self.bindings.$iface().memory_store().call_peek_mixed(
                    &mut self.store, s, &list $(, $pass)?)?;
                Ok(r.map($conv::batch).map_err($conv::error))
            }
        }
    };
}

impl_ops!(EngineWorld, engine_conv, ratewindow_engine_memory, now => [now]);
impl_ops!(HostedWorld, hosted_conv, ratewindow_engine_clocked_memory, now => []);
