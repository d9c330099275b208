//! What the two JavaScript builds of ratewindow share: the napi addon (`bindings-node/src/lib.rs`) and
//! the wasm-bindgen package (`bindings-wasm/js/src/lib.rs`) are thin shells that read their host's
//! arguments and forward here, so the memory store's backend is written once.
//!
//! - [`number`]: JS numbers (`f64`) into the core's types, refused with the field named as JS spells
//!   it (`uses`, `windowMs`, `decayMs`, `amount`, `max`, `now`);
//! - [`key`]: a key's UTF-8 as each build reads it (a stack buffer filled by V8, or a buffer in linear
//!   memory filled by `TextEncoder`);
//! - [`record`]: the layout of the record every answer is written into (`ts/backend.ts` reads it by
//!   the same names);
//! - [`calls`]: the networked stores' call boundary (Redis, PostgreSQL, SQLite): the core's call
//!   machines kept by id, each step answered in the fewest crossings;
//! - [`store`]: one memory store's operations, as the `BackendStore` of `bindings-node/ts/backend.ts`;
//! - `rates` (cargo feature `rates`, the napi addon's): GCRA and the sliding-window counter on it, and
//!   batches mixing them with the sliding log;
//! - [`Failure`]: what a shell throws, a JS `Error` with `code` and `message`.
//!
//! Nothing here panics on host input: every number is checked or converted with a saturating cast.

pub mod calls;
pub mod guard;
pub mod key;
pub mod lock;
pub mod number;
#[cfg(feature = "rates")]
pub mod rates;
pub mod record;
pub mod store;

pub use record::Record;
pub use store::JsStore;

/// A refusal to hand to JS as an `Error` whose `code` is [`Failure::code`] (see `BackendErrorCode` in
/// `bindings-node/ts/backend.ts`) and whose `message` is [`Failure::message`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `invalid_limit:uses`, `invalid_limit:window_ms` (the engine's field: a window or a decay),
    /// `invalid_argument:<field>` (`amount`, `max`, `now`) or `panic`.
    pub code: String,
    /// The message, naming the field as JS spells it: `invalid windowMs: NaN (expected ...)`.
    pub message: String,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Failure {
        Failure {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The failure of a panic caught (napi) or trapped (wasm), from its payload.
    #[cold]
    pub fn panic(build: &str, payload: &(dyn std::any::Any + Send)) -> Failure {
        Failure::new(
            "panic",
            format!("ratewindow{build} panicked: {}", panic_message(payload)),
        )
    }
}

/// A panic's message: its `&str` or `String` payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_owned())
}

/// What every operation answers: the value, or the failure to throw.
pub type Res<T> = Result<T, Failure>;
