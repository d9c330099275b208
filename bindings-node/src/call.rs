//! The call boundary: a store's planner ([`crate::redis::NativeRedis`], [`crate::sql::NativePostgres`],
//! [`crate::sql::NativeSqlite`]) starts a [`NativeCall`] for one operation; the TypeScript driver
//! (`ts/drive.ts`) asks it for the next step, runs the command with the user's client, feeds back the
//! reply, the rows or the client's error message, and ends with the outcome. Everything that decides
//! lives in the core's call machines (`ratewindow_core::call`); this file only converts values.
//!
//! One typed shape crosses each way: a step is a [`NativeStep`] (a command, or the outcome), a reply
//! or rows cross as the JS values the client gave (walked here, never as JSON), a failure as the
//! client's message.

use std::ptr;

use napi::bindgen_prelude::{Either6, FromNapiValue, JsValue, Null, Result, Unknown};
use napi::sys;
use napi_derive::napi;
use ratewindow_core::call::{Call, CallError, Command, Fed, GiveBackFailure, Next, Op, Outcome};
use ratewindow_core::call::{ReleaseToken, WindowQuery};
use ratewindow_core::redis::Reply;
use ratewindow_core::sql::{SqlValue, Statement};
use ratewindow_core::{Entry, Window};

use crate::{coded, guard, limit, limit_error, Res};

/// What gives an allowed consume's call back: opaque; hand it to the planner's `release`.
#[napi]
pub struct NativeRelease {
    token: ReleaseToken,
}

/// A statement of a SQL command: its text and parameters, in the dialect's placeholder style.
#[napi(object, object_from_js = false)]
pub struct NativeStatement {
    /// The SQL text.
    pub sql: String,
    /// Its parameters, in order (napi's typegen needs the type written out, not an alias).
    #[allow(clippy::type_complexity)]
    pub params: Vec<Either6<Null, bool, f64, String, Vec<f64>, Vec<String>>>,
}

/// A give-back that failed (Redis Cluster): the keys, the call's id, the client's message.
#[napi(object, object_from_js = false)]
pub struct NativeGiveBack {
    /// The Redis keys whose member could not be removed.
    pub keys: Vec<String>,
    /// The call's id.
    pub call_id: String,
    /// The client's message.
    pub message: String,
}

/// One step of a call: a command to run (`kind` `script` or `sql`) or the outcome (`verdict`, `hit`,
/// `attempt`, `int`, `bool`, `unit`, `error`). Only the fields of its kind are set.
#[napi(object, object_from_js = false)]
#[derive(Default)]
pub struct NativeStep {
    /// What this step is.
    pub kind: String,
    /// `script`: the script's name (`sliding`, `fixed`).
    pub script: Option<String>,
    /// `script`: `EVALSHA` with its SHA1 (true) or `EVAL` with its source (false).
    pub by_sha1: Option<bool>,
    /// `script`: `KEYS`.
    pub keys: Option<Vec<String>>,
    /// `script`: `ARGV`.
    pub args: Option<Vec<String>>,
    /// `sql`: the statements, run in order on one connection; feed the rows of the last.
    pub statements: Option<Vec<NativeStatement>>,
    /// `verdict`, `attempt`: whether allowed (counted).
    pub allowed: Option<bool>,
    /// `verdict`: ms until the next call is allowed.
    pub retry_after_ms: Option<f64>,
    /// `verdict`, refused: when the next call is allowed (the store's clock, ms).
    pub retry_timestamp: Option<f64>,
    /// `verdict`, refused: the entry with the longest wait.
    pub blocked: Option<u32>,
    /// `verdict`: the tightest entry's uses.
    pub limit: Option<f64>,
    /// `verdict`: the uses it has left.
    pub remaining: Option<f64>,
    /// `verdict`: ms until it gets a use back.
    pub refill_after_ms: Option<f64>,
    /// `verdict`, `hit`, `attempt`: ms until the window is empty (ends).
    pub reset_after_ms: Option<f64>,
    /// `verdict`, an allowed consume asked with its release: what gives it back.
    pub release: Option<NativeRelease>,
    /// `hit`, `attempt`: the count after the call.
    pub count: Option<f64>,
    /// `int`: the number.
    pub int: Option<f64>,
    /// `bool`: the answer.
    pub bool: Option<bool>,
    /// `error`: the stable kind (`store`, `reply`, `protocol`, `unsupported`).
    pub error_kind: Option<String>,
    /// `error`: the core's message.
    pub message: Option<String>,
    /// `error` of kind `store`: the client's own message (the failure that stands).
    pub client_message: Option<String>,
    /// `error` of kind `reply`: whose reply (the script or statement).
    pub source: Option<String>,
    /// `error` of kind `reply`: what it should have been.
    pub expected: Option<String>,
    /// `error` of kind `reply`: what came, rendered briefly.
    pub got: Option<String>,
    /// Any outcome: give-backs that failed on the way (Redis Cluster only).
    pub give_back_failures: Option<Vec<NativeGiveBack>>,
}

/// One store operation in progress (a core [`Call`]).
#[napi]
pub struct NativeCall {
    call: Call,
    keep_release: bool,
}

impl NativeCall {
    pub(crate) fn new(call: Call) -> NativeCall {
        NativeCall {
            call,
            keep_release: true,
        }
    }

    pub(crate) fn dropping_release(call: Call) -> NativeCall {
        NativeCall {
            call,
            keep_release: false,
        }
    }

    fn step(&mut self) -> NativeStep {
        let result = match self.call.next() {
            Next::Run(Command::Script {
                script,
                keys,
                args,
                by_sha1,
            }) => {
                return NativeStep {
                    kind: "script".to_owned(),
                    script: Some(script.name.to_owned()),
                    by_sha1: Some(by_sha1),
                    keys: Some(keys.to_vec()),
                    args: Some(args.to_vec()),
                    ..NativeStep::default()
                }
            }
            Next::Run(Command::Sql { statements }) => {
                return NativeStep {
                    kind: "sql".to_owned(),
                    statements: Some(statements.iter().map(statement).collect()),
                    ..NativeStep::default()
                }
            }
            Next::Done(result) => result,
        };
        let failures = self.call.take_give_back_failures();
        let mut step = match result {
            Ok(outcome) => self.outcome(outcome),
            Err(error) => failed(error),
        };
        if !failures.is_empty() {
            step.give_back_failures = Some(failures.into_iter().map(give_back).collect());
        }
        step
    }

    fn outcome(&self, outcome: Outcome) -> NativeStep {
        let kind = |kind: &str| NativeStep {
            kind: kind.to_owned(),
            ..NativeStep::default()
        };
        match outcome {
            Outcome::Verdict { verdict, release } => NativeStep {
                allowed: Some(verdict.allowed),
                retry_after_ms: Some(verdict.retry_after_ms as f64),
                retry_timestamp: verdict.retry_timestamp.map(|t| t as f64),
                blocked: verdict.blocked.map(|b| b as u32),
                limit: Some(verdict.quota.limit.into()),
                remaining: Some(verdict.quota.remaining.into()),
                refill_after_ms: Some(verdict.quota.refill_after_ms as f64),
                reset_after_ms: Some(verdict.quota.reset_after_ms as f64),
                release: release
                    .filter(|_| self.keep_release)
                    .map(|token| NativeRelease { token }),
                ..kind("verdict")
            },
            Outcome::Hit {
                count,
                reset_after_ms,
            } => NativeStep {
                count: Some(count as f64),
                reset_after_ms: Some(reset_after_ms as f64),
                ..kind("hit")
            },
            Outcome::Attempt {
                allowed,
                count,
                reset_after_ms,
            } => NativeStep {
                allowed: Some(allowed),
                count: Some(count as f64),
                reset_after_ms: Some(reset_after_ms as f64),
                ..kind("attempt")
            },
            Outcome::Int(n) => NativeStep {
                int: Some(n as f64),
                ..kind("int")
            },
            Outcome::Bool(b) => NativeStep {
                bool: Some(b),
                ..kind("bool")
            },
            Outcome::Unit => kind("unit"),
        }
    }
}

fn failed(error: CallError) -> NativeStep {
    let (source, expected, got) = match &error {
        CallError::Reply(e) => (Some(e.script), Some(e.expected), Some(e.got.clone())),
        CallError::Rows(e) => (Some(e.statement), Some(e.expected), Some(e.got.clone())),
        _ => (None, None, None),
    };
    let client_message = match &error {
        CallError::Store { message } => Some(message.clone()),
        _ => None,
    };
    NativeStep {
        kind: "error".to_owned(),
        error_kind: Some(error.kind().to_owned()),
        message: Some(error.to_string()),
        client_message,
        source: source.map(str::to_owned),
        expected: expected.map(str::to_owned),
        got,
        ..NativeStep::default()
    }
}

fn give_back(f: GiveBackFailure) -> NativeGiveBack {
    NativeGiveBack {
        keys: f.keys,
        call_id: f.call_id,
        message: f.message,
    }
}

pub(crate) fn statement(s: &Statement) -> NativeStatement {
    NativeStatement {
        sql: s.sql.clone(),
        params: s.params.iter().map(param).collect(),
    }
}

#[allow(clippy::type_complexity)]
fn param(value: &SqlValue) -> Either6<Null, bool, f64, String, Vec<f64>, Vec<String>> {
    match value {
        SqlValue::Null => Either6::A(Null),
        SqlValue::Bool(b) => Either6::B(*b),
        SqlValue::Int(i) => Either6::C(*i as f64),
        SqlValue::Text(s) => Either6::D(s.clone()),
        SqlValue::Ints(v) => Either6::E(v.iter().map(|&i| i as f64).collect()),
        SqlValue::Texts(v) => Either6::F(v.clone()),
    }
}

#[napi]
impl NativeCall {
    /// The first step (later ones come from the feeds).
    #[napi]
    pub fn next(&mut self) -> Result<NativeStep, String> {
        guard(|| Ok(self.step()))
    }

    /// Feeds a Redis reply as the client gave it (numbers, strings, null, arrays, Buffers, bigints);
    /// returns the next step.
    #[napi]
    pub fn feed(&mut self, reply: Unknown<'_>) -> Result<NativeStep, String> {
        guard(|| {
            let value = reply.value();
            // SAFETY: the value and its env come from this very call's arguments.
            let reply = unsafe { reply_of(value.env, value.value, 0)? };
            self.call.feed(Fed::Reply(reply));
            Ok(self.step())
        })
    }

    /// Feeds the rows of a SQL command's last statement (an array of rows, each an array of column
    /// values or an object of them in column order); returns the next step.
    #[napi]
    pub fn feed_rows(&mut self, rows: Unknown<'_>) -> Result<NativeStep, String> {
        guard(|| {
            let value = rows.value();
            // SAFETY: as in `feed`.
            let rows = unsafe { rows_of(value.env, value.value)? };
            self.call.feed(Fed::Rows(rows));
            Ok(self.step())
        })
    }

    /// Feeds the client's failure (its error message, as the client gives it); returns the next step.
    #[napi]
    pub fn fail(&mut self, message: String) -> Result<NativeStep, String> {
        guard(|| {
            self.call.fail(message);
            Ok(self.step())
        })
    }
}

// ---- Starting calls: the arguments of each op, converted and validated by the core ------------------

/// The entries of a call, given as three parallel arrays, validated by the core.
pub(crate) fn entries(keys: Vec<String>, uses: Vec<f64>, windows: Vec<f64>) -> Res<Vec<Entry>> {
    if keys.len() != uses.len() || keys.len() != windows.len() {
        return Err(coded(
            "invalid_argument:entries",
            "keys, uses and windows differ in length".to_owned(),
        ));
    }
    keys.into_iter()
        .zip(uses.into_iter().zip(windows))
        .map(|(key, (uses, window_ms))| Ok(Entry::new(key, limit(uses, window_ms)?)))
        .collect()
}

/// A fixed window's decay, validated by the core.
pub(crate) fn decay(decay_ms: f64) -> Res<Window> {
    Window::from_f64(decay_ms).map_err(limit_error)
}

/// What a read answers: `attempts`, `tooManyAttempts`, `remaining`, `availableIn`, `availableInMs`.
pub(crate) fn query(name: &str, max: f64) -> Res<WindowQuery> {
    let max = max as i64;
    Ok(match name {
        "attempts" => WindowQuery::Attempts,
        "tooManyAttempts" => WindowQuery::TooManyAttempts { max },
        "remaining" => WindowQuery::Remaining { max },
        "availableIn" => WindowQuery::AvailableIn,
        "availableInMs" => WindowQuery::AvailableInMs,
        _ => {
            return Err(coded(
                "invalid_argument:query",
                format!("unknown window query {name:?}"),
            ))
        }
    })
}

/// The release token an allowed consume gave.
pub(crate) fn token(release: &NativeRelease) -> ReleaseToken {
    release.token.clone()
}

/// Every op a planner starts, in one place: each planner's napi methods forward here.
pub(crate) trait Starter {
    /// Starts `op` at `now` (ms; only SQLite reads it).
    fn begin(&self, op: Op, now: f64) -> Call;

    fn consume(
        &self,
        call_id: String,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        release: bool,
        now: f64,
    ) -> Res<NativeCall> {
        guard(|| {
            let entries = entries(keys, uses, windows)?;
            let call = self.begin(Op::Consume { entries, call_id }, now);
            Ok(if release {
                NativeCall::new(call)
            } else {
                NativeCall::dropping_release(call)
            })
        })
    }

    fn peek(
        &self,
        keys: Vec<String>,
        uses: Vec<f64>,
        windows: Vec<f64>,
        now: f64,
    ) -> Res<NativeCall> {
        guard(|| {
            let entries = entries(keys, uses, windows)?;
            Ok(NativeCall::new(self.begin(Op::Peek { entries }, now)))
        })
    }

    fn release(&self, release: &NativeRelease, now: f64) -> Res<NativeCall> {
        guard(|| {
            let op = Op::Release {
                token: token(release),
            };
            Ok(NativeCall::new(self.begin(op, now)))
        })
    }

    fn hit(&self, key: String, decay_ms: f64, amount: f64, now: f64) -> Res<NativeCall> {
        guard(|| {
            let op = Op::Hit {
                key,
                decay: decay(decay_ms)?,
                amount: amount as i64,
            };
            Ok(NativeCall::new(self.begin(op, now)))
        })
    }

    fn attempt(&self, key: String, max: f64, decay_ms: f64, now: f64) -> Res<NativeCall> {
        guard(|| {
            let op = Op::Attempt {
                key,
                max: max as i64,
                decay: decay(decay_ms)?,
            };
            Ok(NativeCall::new(self.begin(op, now)))
        })
    }

    fn read(&self, key: String, name: String, max: f64, now: f64) -> Res<NativeCall> {
        guard(|| {
            let op = Op::Read {
                key,
                query: query(&name, max)?,
            };
            Ok(NativeCall::new(self.begin(op, now)))
        })
    }

    fn reset_attempts(&self, key: String, now: f64) -> Res<NativeCall> {
        guard(|| Ok(NativeCall::new(self.begin(Op::ResetAttempts { key }, now))))
    }

    fn clear(&self, key: String, now: f64) -> Res<NativeCall> {
        guard(|| Ok(NativeCall::new(self.begin(Op::Clear { key }, now))))
    }
}

// ---- Reading what the client gave: JS values into the core's Reply and SqlValue -------------------

/// `napi_bigint` (typeof answers it on every Node with BigInt; napi-sys names it only under `napi6`).
const NAPI_BIGINT: sys::napi_valuetype = 9;

fn ok(status: sys::napi_status) -> Res<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(coded(
            "panic",
            format!("ratewindow: reading a reply failed (napi status {status})"),
        ))
    }
}

unsafe fn type_of(env: sys::napi_env, value: sys::napi_value) -> Res<sys::napi_valuetype> {
    let mut t = 0;
    ok(sys::napi_typeof(env, value, &mut t))?;
    Ok(t)
}

/// The elements of `value` when it is an array.
unsafe fn elements(
    env: sys::napi_env,
    value: sys::napi_value,
) -> Res<Option<Vec<sys::napi_value>>> {
    let mut is = false;
    ok(sys::napi_is_array(env, value, &mut is))?;
    if !is {
        return Ok(None);
    }
    let mut len = 0u32;
    ok(sys::napi_get_array_length(env, value, &mut len))?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let mut item = ptr::null_mut();
        ok(sys::napi_get_element(env, value, i, &mut item))?;
        out.push(item);
    }
    Ok(Some(out))
}

/// A value that is no number, string, null or array, as text: a Buffer's bytes (lossy UTF-8), an
/// Error's message as `(error) …`, anything else as `String(value)` does.
unsafe fn text_of(env: sys::napi_env, value: sys::napi_value) -> Res<String> {
    let mut is = false;
    ok(sys::napi_is_buffer(env, value, &mut is))?;
    if is {
        let mut data = ptr::null_mut();
        let mut len = 0usize;
        ok(sys::napi_get_buffer_info(env, value, &mut data, &mut len))?;
        let bytes = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(data as *const u8, len)
        };
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    }
    ok(sys::napi_is_error(env, value, &mut is))?;
    let mut target = value;
    if is {
        ok(sys::napi_get_named_property(
            env,
            value,
            c"message".as_ptr(),
            &mut target,
        ))?;
    }
    let mut text = ptr::null_mut();
    ok(sys::napi_coerce_to_string(env, target, &mut text))?;
    let text = String::from_napi_value(env, text).map_err(|e| coded("panic", e.to_string()))?;
    Ok(if is { format!("(error) {text}") } else { text })
}

fn number(n: f64) -> std::result::Result<i64, String> {
    // Only whole numbers within i64 are integers; anything else is shown as it came.
    if n.fract() == 0.0 && n.abs() < 9.2e18 {
        Ok(n as i64)
    } else {
        Err(n.to_string())
    }
}

unsafe fn string(env: sys::napi_env, value: sys::napi_value) -> Res<String> {
    String::from_napi_value(env, value).map_err(|e| coded("panic", e.to_string()))
}

unsafe fn double(env: sys::napi_env, value: sys::napi_value) -> Res<f64> {
    let mut n = 0.0;
    ok(sys::napi_get_value_double(env, value, &mut n))?;
    Ok(n)
}

/// A bigint as an integer when it fits, else its digits.
unsafe fn bigint(
    env: sys::napi_env,
    value: sys::napi_value,
) -> Res<std::result::Result<i64, String>> {
    let text = text_of(env, value)?;
    Ok(text.parse::<i64>().map_err(|_| text))
}

unsafe fn reply_of(env: sys::napi_env, value: sys::napi_value, depth: u32) -> Res<Reply> {
    use sys::ValueType as T;
    Ok(match type_of(env, value)? {
        T::napi_undefined | T::napi_null => Reply::Nil,
        T::napi_number => number(double(env, value)?).map_or_else(Reply::Text, Reply::Int),
        T::napi_string => Reply::Text(string(env, value)?),
        NAPI_BIGINT => bigint(env, value)?.map_or_else(Reply::Text, Reply::Int),
        T::napi_object => match elements(env, value)? {
            Some(_) if depth >= 8 => Reply::Text("[…]".to_owned()),
            Some(items) => Reply::Array(
                items
                    .into_iter()
                    .map(|item| reply_of(env, item, depth + 1))
                    .collect::<Res<_>>()?,
            ),
            None => Reply::Text(text_of(env, value)?),
        },
        _ => Reply::Text(text_of(env, value)?),
    })
}

unsafe fn sql_value(env: sys::napi_env, value: sys::napi_value) -> Res<SqlValue> {
    use sys::ValueType as T;
    Ok(match type_of(env, value)? {
        T::napi_undefined | T::napi_null => SqlValue::Null,
        T::napi_boolean => {
            let mut b = false;
            ok(sys::napi_get_value_bool(env, value, &mut b))?;
            SqlValue::Bool(b)
        }
        T::napi_number => number(double(env, value)?).map_or_else(SqlValue::Text, SqlValue::Int),
        T::napi_string => SqlValue::Text(string(env, value)?),
        NAPI_BIGINT => bigint(env, value)?.map_or_else(SqlValue::Text, SqlValue::Int),
        T::napi_object => match elements(env, value)? {
            Some(items) => {
                let items = items
                    .into_iter()
                    .map(|item| sql_value(env, item))
                    .collect::<Res<Vec<_>>>()?;
                if items.iter().all(|v| matches!(v, SqlValue::Int(_))) {
                    SqlValue::Ints(
                        items
                            .into_iter()
                            .filter_map(|v| {
                                if let SqlValue::Int(i) = v {
                                    Some(i)
                                } else {
                                    None
                                }
                            })
                            .collect(),
                    )
                } else {
                    SqlValue::Texts(items.iter().map(ToString::to_string).collect())
                }
            }
            None => SqlValue::Text(text_of(env, value)?),
        },
        _ => SqlValue::Text(text_of(env, value)?),
    })
}

/// Rows: an array of rows, each an array of values or an object of them (in column order). Anything
/// else becomes one row holding its text, which no statement answers (the machine names it).
pub(crate) unsafe fn rows_of(
    env: sys::napi_env,
    value: sys::napi_value,
) -> Res<Vec<Vec<SqlValue>>> {
    let Some(rows) = elements(env, value)? else {
        return Ok(vec![vec![SqlValue::Text(text_of(env, value)?)]]);
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let columns = match elements(env, row)? {
            Some(columns) => columns,
            None if type_of(env, row)? == sys::ValueType::napi_object => {
                let mut names = ptr::null_mut();
                ok(sys::napi_get_property_names(env, row, &mut names))?;
                let mut columns = Vec::new();
                for name in elements(env, names)?.unwrap_or_default() {
                    let mut column = ptr::null_mut();
                    ok(sys::napi_get_property(env, row, name, &mut column))?;
                    columns.push(column);
                }
                columns
            }
            None => {
                out.push(vec![SqlValue::Text(text_of(env, row)?)]);
                continue;
            }
        };
        out.push(
            columns
                .into_iter()
                .map(|c| sql_value(env, c))
                .collect::<Res<_>>()?,
        );
    }
    Ok(out)
}
