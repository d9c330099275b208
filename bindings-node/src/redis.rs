//! The Redis half of the addon: [`NativeRedis`] starts the core's Redis call machine
//! (`ratewindow_core::call::Redis`) for each operation; `src/call.rs` drives the boundary. No I/O here:
//! TypeScript runs each script with the user's client and feeds the reply back.

use napi::bindgen_prelude::Result;
use napi_derive::napi;
use ratewindow_core::call::{Call, Op, Redis};
use ratewindow_core::redis::{RedisOptions, FIXED, SLIDING};

use crate::call::{NativeCall, NativeRelease, Starter};
use crate::{coded, guard};

/// The two scripts: `[sliding sha1, sliding source, fixed sha1, fixed source]`.
#[napi]
pub fn redis_scripts() -> Vec<String> {
    vec![
        SLIDING.sha1.to_owned(),
        SLIDING.source.to_owned(),
        FIXED.sha1.to_owned(),
        FIXED.source.to_owned(),
    ]
}

/// One Redis store's call machines: its key options, and whether the host runs scripts by SHA1.
#[napi]
pub struct NativeRedis {
    redis: Redis,
}

impl Starter for NativeRedis {
    fn begin(&self, op: Op, _now: f64) -> Call {
        self.redis.start(op)
    }
}

#[napi]
impl NativeRedis {
    /// Keys start with `prefix`; with `hash_tag_before`, each key is tagged with its part before that
    /// separator (an empty separator is refused with code `invalid_argument:hashTag`). `evalsha`
    /// (default true): the host can run scripts by SHA1.
    #[napi(constructor)]
    pub fn new(
        prefix: String,
        hash_tag_before: Option<String>,
        evalsha: Option<bool>,
    ) -> Result<Self, String> {
        guard(|| {
            let mut options = RedisOptions::default().with_prefix(prefix);
            if let Some(separator) = hash_tag_before {
                options = options
                    .with_hash_tag_before(separator)
                    .map_err(|m| coded("invalid_argument:hashTag", m))?;
            }
            Ok(NativeRedis {
                redis: Redis::new(options).evalsha(evalsha.unwrap_or(true)),
            })
        })
    }

    /// `Op::Consume` of the entries (three parallel arrays) under `call_id`; with `release` false the
    /// verdict carries no release token.
    #[napi]
    pub fn consume(
        &self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
    ) -> Result<NativeCall, String> {
        Starter::consume(self, call_id, keys, uses, windows, release, 0.0)
    }

    /// `Op::Peek`.
    #[napi]
    pub fn peek(
        &self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
    ) -> Result<NativeCall, String> {
        Starter::peek(self, keys, uses, windows, 0.0)
    }

    /// `Op::Release` of an allowed consume's token.
    #[napi]
    pub fn release(&self, token: &NativeRelease) -> Result<NativeCall, String> {
        Starter::release(self, token, 0.0)
    }

    /// `Op::Hit`.
    #[napi]
    pub fn hit(&self, key: String, decay_ms: f64, amount: f64) -> Result<NativeCall, String> {
        Starter::hit(self, key, decay_ms, amount, 0.0)
    }

    /// `Op::Attempt`.
    #[napi]
    pub fn attempt(&self, key: String, max: f64, decay_ms: f64) -> Result<NativeCall, String> {
        Starter::attempt(self, key, max, decay_ms, 0.0)
    }

    /// `Op::Read` answering `query` (`attempts`, `tooManyAttempts`, `remaining`, `availableIn`,
    /// `availableInMs`; `max` for the two that take it).
    #[napi]
    pub fn read(&self, key: String, query: String, max: f64) -> Result<NativeCall, String> {
        Starter::read(self, key, query, max, 0.0)
    }

    /// `Op::ResetAttempts`.
    #[napi]
    pub fn reset_attempts(&self, key: String) -> Result<NativeCall, String> {
        Starter::reset_attempts(self, key, 0.0)
    }

    /// `Op::Clear`.
    #[napi]
    pub fn clear(&self, key: String) -> Result<NativeCall, String> {
        Starter::clear(self, key, 0.0)
    }
}
