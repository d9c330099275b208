//! The wasm-bindgen shell of the call boundary (`ratewindow_js_glue::calls`, which the napi addon
//! shares): [`WasmCalls`] wraps the glue's `Calls` for one Redis, PostgreSQL or SQLite store, and
//! `ts/wasm.ts` presents it as the `BackendCalls` of `bindings-node/ts/redis-backend.ts`, so the Node
//! package's `RedisStore`, `PostgresStore` and `SqliteStore` run here unchanged.
//!
//! Every call that moves a call on takes the store's call record (`&mut [f64]`, copied in and back
//! out by wasm-bindgen) and answers the next Redis command as one string, as in the addon. This file
//! only reads JS values (a reply as the client gave it, rows, a release token) and makes the few
//! objects that are rare (an error, a release token, failed give-backs, SQL statements).

use js_sys::{Array, JsString, Object, Reflect, Uint8Array};
use ratewindow_core::call::Fed;
use ratewindow_core::input::{utf16_to_utf8, KeyPosition};
use ratewindow_core::redis::Reply;
use ratewindow_core::sql::{SqlValue, Statement};
use ratewindow_js_glue::calls::{self, CallRecord, Calls};
use ratewindow_js_glue::key::key_failure;
use ratewindow_js_glue::Failure;
use wasm_bindgen::prelude::*;

use crate::thrown;

/// The call record's slot names up to the first piece's length (checked by the TypeScript side).
#[wasm_bindgen(js_name = callRecordLayout)]
pub fn call_record_layout() -> Vec<String> {
    calls::NAMES.iter().map(|&n| n.to_owned()).collect()
}

/// Random bits for the call ids' per-store prefix.
fn seed() -> u64 {
    let hi = (js_sys::Math::random() * 4_294_967_296.0) as u64;
    let lo = (js_sys::Math::random() * 4_294_967_296.0) as u64;
    (hi << 32) | lo
}

fn record(out: &mut [f64]) -> Result<&mut CallRecord, JsValue> {
    let len = out.len();
    <&mut CallRecord>::try_from(out).map_err(|_| {
        thrown(Failure::new(
            "invalid_argument:record",
            format!(
                "a store's call record holds {} numbers, not {len}",
                calls::LEN
            ),
        ))
    })
}

/// One store's call machines.
#[wasm_bindgen]
pub struct WasmCalls {
    calls: Calls,
}

impl WasmCalls {
    fn go(
        &mut self,
        out: &mut [f64],
        f: impl FnOnce(&mut Calls, &mut CallRecord) -> ratewindow_js_glue::Res<Option<String>>,
    ) -> Result<Option<String>, JsValue> {
        let out = record(out)?;
        f(&mut self.calls, out).map_err(thrown)
    }
}

/// A key exactly as JavaScript holds it. wasm-bindgen's conversion replaces a lone surrogate with
/// U+FFFD, which would make `'s\uD800'` and `'s\uFFFD'` one key; so a key whose conversion holds U+FFFD
/// is read again as UTF-16, and one with a lone surrogate is refused naming `position`
/// (`invalid_argument:key`), as the memory store does.
fn key_of(value: &JsValue, position: KeyPosition) -> ratewindow_js_glue::Res<String> {
    match value.as_string() {
        Some(text) if !text.contains('\u{FFFD}') => Ok(text),
        Some(_) => {
            let units: Vec<u16> = value.unchecked_ref::<JsString>().iter().collect();
            utf16_to_utf8(&units).map_err(|at| key_failure(position, at))
        }
        None => Err(Failure::new(
            "invalid_argument:key",
            format!("invalid {position}: not a string"),
        )),
    }
}

/// A batch's keys, each read by [`key_of`] (naming `entries[i].key`).
fn keys_of(keys: &Array) -> ratewindow_js_glue::Res<Vec<String>> {
    (0..keys.length())
        .map(|i| key_of(&keys.get(i), KeyPosition::Entry(i as usize)))
        .collect()
}

fn made(calls: ratewindow_js_glue::Res<Calls>) -> Result<WasmCalls, JsValue> {
    Ok(WasmCalls {
        calls: calls.map_err(thrown)?,
    })
}

#[wasm_bindgen]
impl WasmCalls {
    /// A Redis store's calls (see `NativeCalls::redis` of the addon).
    pub fn redis(
        prefix: String,
        hash_tag_before: Option<String>,
        evalsha: Option<bool>,
    ) -> Result<WasmCalls, JsValue> {
        made(Calls::redis(
            prefix,
            hash_tag_before,
            evalsha.unwrap_or(true),
            seed(),
        ))
    }

    /// A PostgreSQL store's calls.
    pub fn postgres(prefix: String, durable: Option<bool>) -> Result<WasmCalls, JsValue> {
        made(Calls::postgres(&prefix, durable.unwrap_or(false), seed()))
    }

    /// A SQLite store's calls.
    pub fn sqlite(prefix: String) -> Result<WasmCalls, JsValue> {
        made(Calls::sqlite(&prefix, seed()))
    }

    /// The SQL schema.
    pub fn schema(&self) -> Result<String, JsValue> {
        self.calls.schema().map_err(thrown)
    }

    /// SQLite: what to `exec` on every connection.
    #[wasm_bindgen(js_name = connectionSetup)]
    pub fn connection_setup(&self, busy_timeout_ms: Option<u32>) -> String {
        Calls::connection_setup(busy_timeout_ms)
    }

    /// The purge's statements.
    pub fn purge(&self, now: Option<f64>) -> Result<Array, JsValue> {
        let statements = self.calls.purge(now).map_err(thrown)?;
        Ok(statements.iter().map(statement).collect())
    }

    /// PostgreSQL: the purge's counts from its rows.
    pub fn purged(&self, rows: JsValue) -> Result<JsValue, JsValue> {
        let (calls, windows) = Calls::purged(&rows_of(&rows)).map_err(thrown)?;
        let o = Object::new();
        set(&o, "calls", calls.into());
        set(&o, "windows", windows.into());
        Ok(o.into())
    }

    /// Starts a consume of the entries (three parallel arrays).
    pub fn consume(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string[]")] keys: Array,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            let entries = calls::entries(keys_of(&keys)?, &uses, &windows)?;
            c.consume(out, entries, release, now)
        })
    }

    /// Starts a consume of one entry.
    #[wasm_bindgen(js_name = consumeOne)]
    pub fn consume_one(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        uses: f64,
        window_ms: f64,
        now: Option<f64>,
        release: Option<bool>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            let key = key_of(&key, KeyPosition::Key)?;
            c.consume_one(out, key, uses, window_ms, now, release.unwrap_or(false))
        })
    }

    /// Starts a GCRA or counter operation (`op`: 0 consume, 1 peek, 2 reset; `kind` 1 GCRA, 2 the
    /// counter): `now` is SQLite's clock, and on Redis and PostgreSQL times the call instead of the
    /// server's (the vectors).
    #[allow(clippy::too_many_arguments)]
    pub fn rate(
        &mut self,
        out: &mut [f64],
        op: u32,
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            let key = key_of(&key, KeyPosition::Key)?;
            c.rate(out, op, key, kind, uses, window_ms, burst, cost, now)
        })
    }

    /// Starts a weighted sliding-log call (`op` 0 consume, 1 peek), entry `i` costing `costs[i]` uses
    /// (a batch's refusal of a cost names `entries[i].cost`): a separate entry point, so a call costing
    /// 1 crosses as before (see `NativeCalls::weighted` of the addon).
    #[allow(clippy::too_many_arguments)]
    pub fn weighted(
        &mut self,
        out: &mut [f64],
        op: u32,
        #[wasm_bindgen(unchecked_param_type = "string[]")] keys: Array,
        uses: Vec<f64>,
        windows: Vec<f64>,
        costs: Vec<f64>,
        batch: bool,
        release: bool,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.weighted(
                out,
                op,
                keys_of(&keys)?,
                &uses,
                &windows,
                &costs,
                batch,
                release,
                now,
            )
        })
    }

    /// Starts a batch mixing algorithms (`op` 0 consume, 1 peek): entry `i` is `keys[i]` under
    /// `kinds[i]` (0 the sliding log, 1 GCRA, 2 the counter); Redis and PostgreSQL (the server's clock)
    /// and SQLite (`now`, its clock).
    #[allow(clippy::too_many_arguments)]
    pub fn mixed(
        &mut self,
        out: &mut [f64],
        op: u32,
        #[wasm_bindgen(unchecked_param_type = "string[]")] keys: Array,
        kinds: Vec<u32>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        bursts: Vec<f64>,
        costs: Vec<f64>,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.mixed(
                out,
                op,
                keys_of(&keys)?,
                &kinds,
                &uses,
                &windows,
                &bursts,
                &costs,
                now,
            )
        })
    }

    /// Starts a peek.
    pub fn peek(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string[]")] keys: Array,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            let entries = calls::entries(keys_of(&keys)?, &uses, &windows)?;
            c.peek(out, entries, now)
        })
    }

    /// Starts the release of an allowed consume's token (`{ store, keys, callId }`).
    pub fn release(
        &mut self,
        out: &mut [f64],
        token: JsValue,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        let text = |name: &str| {
            Reflect::get(&token, &JsValue::from_str(name))
                .ok()
                .and_then(|v| v.as_string())
                .unwrap_or_default()
        };
        let (store, call_id) = (text("store"), text("callId"));
        let keys = Reflect::get(&token, &JsValue::from_str("keys"))
            .ok()
            .filter(Array::is_array)
            .map(|k| {
                Array::from(&k)
                    .iter()
                    .map(|s| s.as_string().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        self.go(out, |c, out| {
            c.release(out, calls::token_of(&store, keys, call_id)?, now)
        })
    }

    /// Starts a fixed window's hit.
    pub fn hit(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        decay_ms: f64,
        amount: f64,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.hit(out, key_of(&key, KeyPosition::Key)?, decay_ms, amount, now)
        })
    }

    /// Starts an atomic attempt.
    pub fn attempt(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        max: f64,
        decay_ms: f64,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.attempt(out, key_of(&key, KeyPosition::Key)?, max, decay_ms, now)
        })
    }

    /// Starts an atomic attempt costing `cost` hits (`Op::AttemptCost`).
    #[wasm_bindgen(js_name = attemptCost)]
    pub fn attempt_cost(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        max: f64,
        decay_ms: f64,
        cost: f64,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            let key = key_of(&key, KeyPosition::Key)?;
            c.attempt_cost(out, key, max, decay_ms, cost, now)
        })
    }

    /// Starts a fixed window's read.
    pub fn read(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        query: String,
        max: f64,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.read(out, key_of(&key, KeyPosition::Key)?, &query, max, now)
        })
    }

    /// Starts a reset of a fixed window's count.
    #[wasm_bindgen(js_name = resetAttempts)]
    pub fn reset_attempts(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.reset_attempts(out, key_of(&key, KeyPosition::Key)?, now)
        })
    }

    /// Starts a clear of a fixed window.
    pub fn clear(
        &mut self,
        out: &mut [f64],
        #[wasm_bindgen(unchecked_param_type = "string")] key: JsString,
        now: Option<f64>,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            c.clear(out, key_of(&key, KeyPosition::Key)?, now)
        })
    }

    /// Feeds a reply as the client gave it.
    pub fn feed(
        &mut self,
        out: &mut [f64],
        id: u32,
        reply: JsValue,
    ) -> Result<Option<String>, JsValue> {
        let reply = reply_of(&reply, 0);
        self.go(out, |c, out| c.feed(out, id, Fed::Reply(reply)))
    }

    /// Feeds a reply that is an array of `len` numbers, written into the record from `pieces` on.
    #[wasm_bindgen(js_name = feedRecord)]
    pub fn feed_record(
        &mut self,
        out: &mut [f64],
        id: u32,
        len: u32,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| {
            let numbers = calls::numbers_in(out, len);
            c.feed_numbers(out, id, &numbers.0[..numbers.1])
        })
    }

    /// Feeds the rows of a SQL command's last statement.
    #[wasm_bindgen(js_name = feedRows)]
    pub fn feed_rows(
        &mut self,
        out: &mut [f64],
        id: u32,
        rows: JsValue,
    ) -> Result<Option<String>, JsValue> {
        let rows = rows_of(&rows);
        self.go(out, |c, out| c.feed(out, id, Fed::Rows(rows)))
    }

    /// Feeds the client's failure (its message).
    pub fn fail(
        &mut self,
        out: &mut [f64],
        id: u32,
        message: String,
    ) -> Result<Option<String>, JsValue> {
        self.go(out, |c, out| c.fail(out, id, message))
    }

    /// `KEYS` of a step whose pieces did not fit the record.
    pub fn keys(&mut self, id: u32) -> Result<Vec<String>, JsValue> {
        self.calls.keys(id).map_err(thrown)
    }

    /// `ARGV` of a step whose pieces did not fit the record.
    pub fn args(&mut self, id: u32) -> Result<Vec<String>, JsValue> {
        self.calls.args(id).map_err(thrown)
    }

    /// A `Sql` step's statements.
    pub fn statements(&mut self, id: u32) -> Result<Array, JsValue> {
        let statements = self.calls.statements(id).map_err(thrown)?;
        Ok(statements.iter().map(statement).collect())
    }

    /// A held allowed consume's release token, or null.
    #[wasm_bindgen(js_name = releaseToken)]
    pub fn release_token(&self, id: u32) -> Result<JsValue, JsValue> {
        let Some(token) = self.calls.release_token(id).map_err(thrown)? else {
            return Ok(JsValue::NULL);
        };
        let (store, keys, call_id) = calls::token_parts(token);
        let o = Object::new();
        set(&o, "store", store.into());
        set(&o, "keys", strings(keys).into());
        set(&o, "callId", call_id.into());
        Ok(o.into())
    }

    /// A held failed call's error.
    pub fn error(&self, id: u32) -> Result<JsValue, JsValue> {
        let e = calls::error_parts(self.calls.error(id).map_err(thrown)?);
        let o = Object::new();
        let opt = |v: Option<&str>| v.map_or(JsValue::NULL, JsValue::from_str);
        set(&o, "kind", e.kind.into());
        set(&o, "message", e.message.into());
        set(&o, "clientMessage", opt(e.client_message.as_deref()));
        set(&o, "source", opt(e.source));
        set(&o, "expected", opt(e.expected));
        set(&o, "got", opt(e.got.as_deref()));
        Ok(o.into())
    }

    /// A held call's failed give-backs.
    #[wasm_bindgen(js_name = giveBackFailures)]
    pub fn give_back_failures(&self, id: u32) -> Result<Array, JsValue> {
        let failures = self.calls.give_back_failures(id).map_err(thrown)?;
        Ok(failures
            .iter()
            .map(|f| {
                let o = Object::new();
                set(&o, "keys", strings(&f.keys).into());
                set(&o, "callId", f.call_id.as_str().into());
                set(&o, "message", f.message.as_str().into());
                JsValue::from(o)
            })
            .collect())
    }

    /// Frees call `id`.
    pub fn end(&mut self, id: u32) {
        self.calls.end(id);
    }

    /// Calls in progress or held.
    #[wasm_bindgen(js_name = inProgress)]
    pub fn in_progress(&self) -> u32 {
        self.calls.in_progress()
    }
}

fn set(o: &Object, name: &str, value: JsValue) {
    // Setting a property on a fresh plain object cannot fail.
    let _ = Reflect::set(o, &JsValue::from_str(name), &value);
}

fn strings(items: &[String]) -> Array {
    items.iter().map(|s| JsValue::from_str(s)).collect()
}

fn statement(s: &Statement) -> JsValue {
    let o = Object::new();
    set(&o, "sql", s.sql.as_str().into());
    let params: Array = s.params.iter().map(param).collect();
    set(&o, "params", params.into());
    o.into()
}

fn param(value: &SqlValue) -> JsValue {
    match value {
        SqlValue::Null => JsValue::NULL,
        SqlValue::Bool(b) => (*b).into(),
        SqlValue::Int(i) => (*i as f64).into(),
        SqlValue::Text(s) => s.as_str().into(),
        SqlValue::Ints(v) => v
            .iter()
            .map(|&i| JsValue::from(i as f64))
            .collect::<Array>()
            .into(),
        SqlValue::Texts(v) => strings(v).into(),
    }
}

// ---- Reading what the client gave: JS values into the core's Reply and SqlValue -------------------

/// A value that is no number, string, null or array, as text: a `Uint8Array`'s bytes (lossy UTF-8),
/// an Error's message as `(error) …`, anything else as `String(value)` does.
fn text_of(value: &JsValue) -> String {
    if let Some(bytes) = value.dyn_ref::<Uint8Array>() {
        return String::from_utf8_lossy(&bytes.to_vec()).into_owned();
    }
    if let Some(error) = value.dyn_ref::<js_sys::Error>() {
        return format!("(error) {}", String::from(error.message()));
    }
    // `[value].join('')` is `String(value)` for everything but null and undefined (read before).
    String::from(Array::of1(value).join(""))
}

fn reply_of(value: &JsValue, depth: u32) -> Reply {
    if value.is_null() || value.is_undefined() {
        Reply::Nil
    } else if let Some(n) = value.as_f64() {
        calls::reply_number(n)
    } else if let Some(s) = value.as_string() {
        Reply::Text(s)
    } else if value.is_bigint() {
        let text = text_of(value);
        text.parse::<i64>().map_or(Reply::Text(text), Reply::Int)
    } else if Array::is_array(value) {
        if depth >= 8 {
            Reply::Text("[…]".to_owned())
        } else {
            Reply::Array(
                Array::from(value)
                    .iter()
                    .map(|item| reply_of(&item, depth + 1))
                    .collect(),
            )
        }
    } else {
        Reply::Text(text_of(value))
    }
}

fn sql_value(value: &JsValue) -> SqlValue {
    if value.is_null() || value.is_undefined() {
        SqlValue::Null
    } else if let Some(b) = value.as_bool() {
        SqlValue::Bool(b)
    } else if let Some(n) = value.as_f64() {
        calls::number_or_text(n).map_or_else(SqlValue::Text, SqlValue::Int)
    } else if let Some(s) = value.as_string() {
        SqlValue::Text(s)
    } else if value.is_bigint() {
        let text = text_of(value);
        text.parse::<i64>()
            .map_or(SqlValue::Text(text), SqlValue::Int)
    } else if Array::is_array(value) {
        calls::sql_list(Array::from(value).iter().map(|v| sql_value(&v)).collect())
    } else {
        SqlValue::Text(text_of(value))
    }
}

/// Rows: an array of rows, each an array of values or an object of them (in column order). Anything
/// else becomes one row holding its text, which no statement answers (the machine names it).
fn rows_of(value: &JsValue) -> Vec<Vec<SqlValue>> {
    if !Array::is_array(value) {
        return vec![vec![SqlValue::Text(text_of(value))]];
    }
    Array::from(value)
        .iter()
        .map(|row| {
            if Array::is_array(&row) {
                Array::from(&row).iter().map(|c| sql_value(&c)).collect()
            } else if row.is_object() {
                Object::values(row.unchecked_ref::<Object>())
                    .iter()
                    .map(|c| sql_value(&c))
                    .collect()
            } else {
                vec![SqlValue::Text(text_of(&row))]
            }
        })
        .collect()
}

/// The Redis scripts, each as its SHA1 then its source, in the slots `ts/redis.ts` reads (the sliding
/// log, the fixed window, the lock, GCRA, the counter, the weighted call and attempt, the mixed batch).
#[wasm_bindgen(js_name = redisScripts)]
pub fn redis_scripts() -> Vec<String> {
    calls::redis_scripts()
}
