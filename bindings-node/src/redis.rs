//! The Redis half of the addon: plans from `ratewindow_core::redis` as strings and arrays, and decoders
//! of the replies the TypeScript layer got from the user's client. No I/O here: TypeScript runs every
//! plan with the user's client and hands the reply back.
//!
//! Encodings (see `ts/redis-backend.ts`, which documents the interface this implements):
//! - a plan is `{ keys, args }` (arrays of strings); the script is named by the caller, who got its
//!   source and SHA1 once from [`redis_scripts`];
//! - a reply crosses as a flat array of numbers (the shape every script answers) or, for anything else,
//!   as JSON of the reply (`null`, integers, strings, arrays);
//! - a decoder returns a number; a reply of the wrong shape returns `NaN` and leaves the core's
//!   `ReplyError` for [`NativeRedis::reply_error`].

use napi_derive::napi;
use ratewindow_core::redis::{
    self, Plan, RedisOptions, RedisRelease, Reply, ReplyError, WindowState, FIXED, SLIDING,
};
use ratewindow_core::{BatchVerdict, Entry, Window};

use napi::bindgen_prelude::Result;

use crate::key::Key;
use crate::{coded, guard, limit, limit_error, Res};

/// A plan's keys and arguments (the script is known to the caller).
#[napi(object)]
pub struct RedisPlan {
    /// `KEYS`.
    pub keys: Vec<String>,
    /// `ARGV`.
    pub args: Vec<String>,
}

impl From<Plan> for RedisPlan {
    fn from(plan: Plan) -> Self {
        RedisPlan {
            keys: plan.keys,
            args: plan.args,
        }
    }
}

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

/// A reply as it crossed: a flat array of numbers, or JSON.
fn reply_of(numbers: Option<Vec<f64>>, json: Option<String>) -> Reply {
    match (numbers, json) {
        (Some(numbers), _) => Reply::Array(
            numbers
                .into_iter()
                .map(|n| {
                    // Only whole numbers within i64 are integers; anything else is shown as it came.
                    if n.fract() == 0.0 && n.abs() < 9.2e18 {
                        Reply::Int(n as i64)
                    } else {
                        Reply::Text(n.to_string())
                    }
                })
                .collect(),
        ),
        // A JSON value that is not a reply shape (an object, a float) is kept as its text, so the
        // decoder names it in its error.
        (None, Some(json)) => serde_json::from_str(&json).unwrap_or(Reply::Text(json)),
        (None, None) => Reply::Nil,
    }
}

/// `parts` joined into one string led by a separator that none of them contains (`\u{1}` unless a
/// part holds it; then the first char from U+E000 up that none holds).
fn joined<'a>(parts: impl Iterator<Item = &'a String> + Clone) -> String {
    let holds = |c: char| parts.clone().any(|p| p.contains(c));
    let separator = std::iter::once('\u{1}')
        .chain(('\u{E000}'..='\u{F8FF}').chain('\u{F0000}'..='\u{FFFFD}'))
        .find(|&c| !holds(c))
        .unwrap_or('\u{1}');
    let mut out = String::new();
    for part in parts {
        out.push(separator);
        out.push_str(part);
    }
    out
}

/// One store's key options and the details of its last decoded refusal, window or reply error.
#[napi]
pub struct NativeRedis {
    options: RedisOptions,
    retry_after_ms: f64,
    blocked: u32,
    ms_left: f64,
    error: Option<ReplyError>,
}

#[napi]
impl NativeRedis {
    /// Keys start with `prefix`; with `hash_tag_before`, each key is tagged with its part before that
    /// separator (an empty separator is refused with code `invalid_argument:hashTag`).
    #[napi(constructor)]
    pub fn new(prefix: String, hash_tag_before: Option<String>) -> Result<Self, String> {
        guard(|| {
            let mut options = RedisOptions::default().with_prefix(prefix);
            if let Some(separator) = hash_tag_before {
                options = options
                    .with_hash_tag_before(separator)
                    .map_err(|m| coded("invalid_argument:hashTag", m))?;
            }
            Ok(NativeRedis {
                options,
                retry_after_ms: 0.0,
                blocked: 0,
                ms_left: 0.0,
                error: None,
            })
        })
    }

    fn entries(keys: Vec<String>, uses: &[f64], windows: &[f64]) -> Res<Vec<Entry>> {
        if uses.len() != keys.len() || windows.len() != keys.len() {
            return Err(coded(
                "invalid_argument:entries",
                "keys, uses and windows differ in length".to_owned(),
            ));
        }
        let mut entries = Vec::with_capacity(keys.len());
        for (i, key) in keys.into_iter().enumerate() {
            entries.push(Entry::new(key, limit(uses[i], windows[i])?));
        }
        Ok(entries)
    }

    /// The sliding script's plan counting one call (id `call_id`) against every entry.
    #[napi]
    pub fn plan_consume(
        &self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
    ) -> Result<RedisPlan, String> {
        guard(|| {
            let entries = Self::entries(keys, &uses, &windows)?;
            let (plan, _release) = redis::plan_consume_many(&entries, &self.options, &call_id)
                .map_err(|e| coded("invalid_argument:callId", e.to_string()))?;
            Ok(plan.into())
        })
    }

    /// [`Self::plan_consume`] of one entry as one string: its first character is a separator that
    /// occurs in none of the parts, then `key`, then the args, each after that separator (one string
    /// crosses instead of an array of six; JS splits it). Such a plan has exactly one key.
    #[napi]
    pub fn plan_consume_one(
        &self,
        call_id: Key,
        key: Key,
        uses: f64,
        window_ms: f64,
    ) -> Result<String, String> {
        guard(|| {
            let entries = [Entry::new(key.as_str(), limit(uses, window_ms)?)];
            let (plan, _release) =
                redis::plan_consume_many(&entries, &self.options, call_id.as_str())
                    .map_err(|e| coded("invalid_argument:callId", e.to_string()))?;
            Ok(joined(plan.keys.iter().chain(&plan.args)))
        })
    }

    /// The sliding script's plan of a peek (writes nothing).
    #[napi]
    pub fn plan_peek(
        &self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
    ) -> Result<RedisPlan, String> {
        guard(|| {
            let entries = Self::entries(keys, &uses, &windows)?;
            Ok(redis::plan_peek_many(&entries, &self.options).into())
        })
    }

    /// The sliding script's plan giving back call `call_id` from the Redis keys `keys` (as planned).
    #[napi]
    pub fn plan_release(&self, call_id: String, keys: Vec<String>) -> Result<RedisPlan, String> {
        guard(|| Ok(redis::plan_release(&RedisRelease { keys, call_id }).into()))
    }

    /// The fixed script's plan of `op`: `hit` (with `decay_ms` and `amount`), `get`, `reset`, `clear`.
    #[napi]
    pub fn plan_fixed(
        &self,
        op: String,
        key: String,
        decay_ms: f64,
        amount: f64,
    ) -> Result<RedisPlan, String> {
        guard(|| {
            let plan = match op.as_str() {
                "hit" => {
                    let decay = Window::from_f64(decay_ms).map_err(limit_error)?;
                    redis::plan_hit(&key, decay, amount as i64, &self.options)
                }
                "get" => redis::plan_get_window(&key, &self.options),
                "reset" => redis::plan_reset_attempts(&key, &self.options),
                "clear" => redis::plan_clear(&key, &self.options),
                _ => {
                    return Err(coded(
                        "invalid_argument:op",
                        format!("unknown fixed-window op {op:?}"),
                    ))
                }
            };
            Ok(plan.into())
        })
    }

    fn failed(&mut self, error: ReplyError) -> f64 {
        self.error = Some(error);
        f64::NAN
    }

    /// Decodes a consume or peek reply of a call of `entries` entries: `0` allowed; `> 0` refused, the
    /// server's `retry_timestamp` ([`Self::retry_after_ms`] and [`Self::blocked`] give the rest);
    /// `NaN` for a reply of the wrong shape ([`Self::reply_error`]).
    #[napi]
    pub fn decode_batch(
        &mut self,
        numbers: Option<Vec<f64>>,
        json: Option<String>,
        entries: u32,
    ) -> Result<f64, String> {
        guard(|| {
            let reply = reply_of(numbers, json);
            Ok(match redis::decode_batch_of(&reply, entries as usize) {
                Ok(BatchVerdict {
                    allowed: false,
                    retry_after_ms,
                    retry_timestamp,
                    blocked,
                    ..
                }) => {
                    self.retry_after_ms = retry_after_ms as f64;
                    self.blocked = blocked.unwrap_or(0) as u32;
                    retry_timestamp.unwrap_or(1).max(1) as f64
                }
                Ok(_) => 0.0,
                Err(e) => self.failed(e),
            })
        })
    }

    /// [`Self::decode_batch`] of a reply of exactly five integers, passed one by one (the shape the
    /// script answers; no array to read across the boundary).
    #[napi]
    pub fn decode_batch5(
        &mut self,
        a: f64,
        b: f64,
        c: f64,
        d: f64,
        e: f64,
        entries: u32,
    ) -> Result<f64, String> {
        self.decode_batch(Some(vec![a, b, c, d, e]), None, entries)
    }

    /// Decodes a release reply: members removed, or `NaN` ([`Self::reply_error`]).
    #[napi]
    pub fn decode_release(
        &mut self,
        numbers: Option<Vec<f64>>,
        json: Option<String>,
    ) -> Result<f64, String> {
        guard(|| {
            Ok(match redis::decode_release(&reply_of(numbers, json)) {
                Ok(n) => n as f64,
                Err(e) => self.failed(e),
            })
        })
    }

    /// Decodes a fixed-window reply: the count (`0` without a window), [`Self::ms_left`] the time left
    /// (`0` without a window); `NaN` for a reply of the wrong shape.
    #[napi]
    pub fn decode_window(
        &mut self,
        numbers: Option<Vec<f64>>,
        json: Option<String>,
    ) -> Result<f64, String> {
        guard(|| {
            Ok(match redis::decode_window(&reply_of(numbers, json)) {
                Ok(Some(WindowState { count, ms_left })) => {
                    self.ms_left = ms_left as f64;
                    count as f64
                }
                Ok(None) => {
                    self.ms_left = 0.0;
                    0.0
                }
                Err(e) => self.failed(e),
            })
        })
    }

    /// `retry_after_ms` of the last refusal decoded (on the server's clock).
    #[napi]
    pub fn retry_after_ms(&self) -> f64 {
        self.retry_after_ms
    }

    /// `blocked` of the last refusal decoded.
    #[napi]
    pub fn blocked(&self) -> u32 {
        self.blocked
    }

    /// Milliseconds left in the last window decoded.
    #[napi]
    pub fn ms_left(&self) -> f64 {
        self.ms_left
    }

    /// The last reply error as `[script, expected, got, message]` (taken: empty after the first read).
    #[napi]
    pub fn reply_error(&mut self) -> Vec<String> {
        match self.error.take() {
            Some(e) => vec![
                e.script.to_owned(),
                e.expected.to_owned(),
                e.got.clone(),
                e.to_string(),
            ],
            None => Vec::new(),
        }
    }
}
