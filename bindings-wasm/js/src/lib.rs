//! The wasm-bindgen build of ratewindow: `ratewindow-core` for JavaScript runtimes where a native addon
//! cannot load (edge workers, Deno, browsers).
//!
//! It backs the same `Backend` / `BackendStore` boundary as the napi addon
//! (`bindings-node/ts/backend.ts`) through the thin wrapper `ts/wasm.ts`, so the Node package's
//! TypeScript layer runs on it unchanged. Milliseconds are JS numbers (`f64`), never `BigInt`.
//!
//! ## The protocol with `ts/wasm.ts`
//!
//! The hot calls take and return numbers only, so a call allocates nothing on either side:
//! - **Keys** are written by the wrapper as UTF-8 into this module's key buffer ([`key_buffer`]) and
//!   passed as their byte length.
//! - **Invalid limits** are answered with `NaN` (no verdict, count or flag is ever `NaN`); the wrapper
//!   then calls [`check_limit`] / [`check_window`], which throw the core's error as a JS `Error` with
//!   `code` `invalid_limit:uses` or `invalid_limit:window_ms`. A call that fails changes nothing.
//!
//! Nothing here panics on host input: every limit is validated by the core (`Limit::from_f64`,
//! `Window::from_f64`), every other number is converted with a saturating cast, and a key that is not
//! UTF-8 (the wrapper never writes one) is refused like an invalid limit. On `wasm32-unknown-unknown` a
//! panic aborts (there is no unwinding to catch), so the wrapper turns a trap into an error with code
//! `panic`; [`take_panic_message`] gives it the message the panic hook kept.

use std::cell::RefCell;
use std::collections::HashMap;

use ratewindow_core::{Entry, Limit, LimitError, LimitField, MemoryStore, Release, Window};
use wasm_bindgen::prelude::*;

/// A JS `Error` with `code` set: what the checking exports throw.
fn coded(code: &str, message: &str) -> JsValue {
    let error = js_sys::Error::new(message);
    // Setting a property on a fresh Error object cannot fail; ignore the Result rather than unwrap it.
    let _ = js_sys::Reflect::set(&error, &JsValue::from_str("code"), &JsValue::from_str(code));
    error.into()
}

/// The core's limit error as a JS error with code `invalid_limit:<field>` and the core's message.
#[cold]
fn limit_error(e: LimitError) -> JsValue {
    let code = match e.field {
        LimitField::Uses => "invalid_limit:uses",
        LimitField::WindowMs => "invalid_limit:window_ms",
    };
    coded(code, &e.to_string())
}

/// A time, count or handle the TypeScript layer already checked to be a safe integer. `as` saturates
/// (NaN becomes 0), so this never panics.
#[inline(always)]
fn ms(v: f64) -> u64 {
    v as u64
}

/// Encodes a single verdict: `0` when allowed, else the retry timestamp (>= 1).
#[inline(always)]
fn encode(retry_timestamp: Option<u64>) -> f64 {
    retry_timestamp.map_or(0.0, |t| t as f64)
}

/// What a hot call answers when its limit (or key) is refused: the wrapper then asks for the error.
const REFUSED: f64 = f64::NAN;

thread_local! {
    /// Where the wrapper writes each call's key (UTF-8); it only grows.
    static KEY: RefCell<Vec<u8>> = RefCell::new(vec![0; 256]);
    /// The message of the last panic, kept by the hook for the JS side to read after the trap.
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f` on the key the wrapper wrote (its first `len` bytes); `None` if they are not UTF-8 or out
/// of the buffer.
#[inline(always)]
fn with_key<T>(len: u32, f: impl FnOnce(&str) -> T) -> Option<T> {
    KEY.with(|buffer| {
        let buffer = buffer.try_borrow().ok()?;
        let key = std::str::from_utf8(buffer.get(..len as usize)?).ok()?;
        Some(f(key))
    })
}

/// Makes the key buffer hold at least `capacity` bytes, keeping the bytes it holds, and returns its
/// address in linear memory. The address changes only when this grows it.
#[wasm_bindgen(js_name = keyBuffer)]
pub fn key_buffer(capacity: u32) -> u32 {
    KEY.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        if buffer.len() < capacity as usize {
            buffer.resize(capacity as usize, 0);
        }
        buffer.as_mut_ptr() as u32
    })
}

/// Installs the panic hook that keeps the message (runs once, when the module is instantiated).
#[wasm_bindgen(start)]
fn start() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
        let _ = PANIC_MESSAGE.try_with(|m| {
            if let Ok(mut slot) = m.try_borrow_mut() {
                *slot = Some(message);
            }
        });
    }));
}

/// The message of the last panic (and forgets it); `undefined` when there was none.
#[wasm_bindgen(js_name = takePanicMessage)]
pub fn take_panic_message() -> Option<String> {
    PANIC_MESSAGE
        .try_with(|m| m.try_borrow_mut().ok().and_then(|mut slot| slot.take()))
        .ok()
        .flatten()
}

/// One core `MemoryStore`, its pending batch and the releases of its allowed batches. Each method is
/// one `BackendStore` method of `bindings-node/ts/backend.ts`, with the key passed as its length in
/// the key buffer and refusals answered as described in the crate docs.
#[wasm_bindgen]
pub struct WasmStore {
    store: MemoryStore,
    batch: Vec<Entry>,
    blocked: u32,
    releases: HashMap<u64, Release>,
    next_handle: u64,
}

impl Default for WasmStore {
    fn default() -> Self {
        WasmStore::new()
    }
}

#[wasm_bindgen]
impl WasmStore {
    /// An empty store.
    #[wasm_bindgen(constructor)]
    pub fn new() -> WasmStore {
        WasmStore {
            // One shard: a wasm instance runs one thread, so more shards only cost memory.
            store: MemoryStore::with_shards(1),
            batch: Vec::new(),
            blocked: 0,
            releases: HashMap::new(),
            next_handle: 1,
        }
    }

    /// `0` when allowed (and recorded), else the refusal's retry timestamp; `NaN` for an invalid limit.
    pub fn consume(&self, key_len: u32, uses: f64, window_ms: f64, now: f64) -> f64 {
        let Ok(limit) = Limit::from_f64(uses, window_ms) else {
            return REFUSED;
        };
        with_key(key_len, |key| {
            encode(self.store.consume(key, limit, ms(now)).retry_timestamp)
        })
        .unwrap_or(REFUSED)
    }

    /// Like `consume`, recording and creating nothing.
    pub fn peek(&self, key_len: u32, uses: f64, window_ms: f64, now: f64) -> f64 {
        let Ok(limit) = Limit::from_f64(uses, window_ms) else {
            return REFUSED;
        };
        with_key(key_len, |key| {
            encode(self.store.peek(key, limit, ms(now)).retry_timestamp)
        })
        .unwrap_or(REFUSED)
    }

    /// Appends an entry to the pending batch: `0`, or `NaN` for an invalid limit (which clears the
    /// pending batch).
    #[wasm_bindgen(js_name = batchPush)]
    pub fn batch_push(&mut self, key_len: u32, uses: f64, window_ms: f64) -> f64 {
        let entry = Limit::from_f64(uses, window_ms)
            .ok()
            .and_then(|limit| with_key(key_len, |key| Entry::new(key, limit)));
        match entry {
            Some(entry) => {
                self.batch.push(entry);
                0.0
            }
            None => {
                self.batch.clear();
                REFUSED
            }
        }
    }

    /// Consumes the pending batch and clears it: a release handle (> 0) when allowed, else minus the
    /// retry timestamp (`batchBlocked()` gives the blocking entry).
    #[wasm_bindgen(js_name = batchConsume)]
    pub fn batch_consume(&mut self, now: f64) -> f64 {
        let consumed = self.store.consume_many(&self.batch, ms(now));
        self.batch.clear();
        match consumed.release {
            Some(release) => {
                let handle = self.next_handle;
                self.next_handle += 1;
                self.releases.insert(handle, release);
                handle as f64
            }
            None => self.refused(consumed.verdict.blocked, consumed.verdict.retry_timestamp),
        }
    }

    /// Peeks the pending batch and clears it: `0` when allowed, else minus the retry timestamp.
    #[wasm_bindgen(js_name = batchPeek)]
    pub fn batch_peek(&mut self, now: f64) -> f64 {
        let verdict = self.store.peek_many(&self.batch, ms(now));
        self.batch.clear();
        if verdict.allowed {
            0.0
        } else {
            self.refused(verdict.blocked, verdict.retry_timestamp)
        }
    }

    fn refused(&mut self, blocked: Option<usize>, retry_timestamp: Option<u64>) -> f64 {
        self.blocked = blocked.unwrap_or(0) as u32;
        -(retry_timestamp.unwrap_or(1) as f64)
    }

    /// Discards the pending batch.
    #[wasm_bindgen(js_name = batchClear)]
    pub fn batch_clear(&mut self) {
        self.batch.clear();
    }

    /// The `blocked` index of the last refused batch.
    #[wasm_bindgen(js_name = batchBlocked)]
    pub fn batch_blocked(&self) -> u32 {
        self.blocked
    }

    /// Gives back the calls of an allowed batch, once; an unknown or dropped handle does nothing.
    pub fn release(&mut self, handle: f64, now: f64) {
        if let Some(release) = self.releases.remove(&ms(handle)) {
            self.store.release(release, ms(now));
        }
    }

    /// Forgets a release handle without releasing. Idempotent.
    #[wasm_bindgen(js_name = dropRelease)]
    pub fn drop_release(&mut self, handle: f64) {
        self.releases.remove(&ms(handle));
    }

    /// How many release handles the store holds.
    #[wasm_bindgen(js_name = releaseHandles)]
    pub fn release_handles(&self) -> u32 {
        self.releases.len() as u32
    }

    /// Fixed window: adds `amount` hits (negative gives back) and returns the count; `NaN` for an
    /// invalid decay.
    pub fn hit(&self, key_len: u32, decay_ms: f64, amount: f64, now: f64) -> f64 {
        let Ok(decay) = Window::from_f64(decay_ms) else {
            return REFUSED;
        };
        with_key(key_len, |key| {
            self.store.hit(key, decay, amount as i64, ms(now)) as f64
        })
        .unwrap_or(REFUSED)
    }

    /// Hits counted in the current window.
    pub fn attempts(&self, key_len: u32, now: f64) -> f64 {
        with_key(key_len, |key| self.store.attempts(key, ms(now)) as f64).unwrap_or(REFUSED)
    }

    /// `1` when `max` or more hits are counted in a live window, else `0`.
    #[wasm_bindgen(js_name = tooManyAttempts)]
    pub fn too_many_attempts(&self, key_len: u32, max: f64, now: f64) -> f64 {
        with_key(key_len, |key| {
            f64::from(u8::from(self.store.too_many_attempts(
                key,
                max as i64,
                ms(now),
            )))
        })
        .unwrap_or(REFUSED)
    }

    /// `max` minus the hits, floored at 0.
    pub fn remaining(&self, key_len: u32, max: f64, now: f64) -> f64 {
        with_key(key_len, |key| {
            self.store.remaining(key, max as i64, ms(now)) as f64
        })
        .unwrap_or(REFUSED)
    }

    /// Whole seconds until the window ends, rounded up; 0 when none.
    #[wasm_bindgen(js_name = availableIn)]
    pub fn available_in(&self, key_len: u32, now: f64) -> f64 {
        with_key(key_len, |key| self.store.available_in(key, ms(now)) as f64).unwrap_or(REFUSED)
    }

    /// Milliseconds until the window ends; 0 when none.
    #[wasm_bindgen(js_name = availableInMs)]
    pub fn available_in_ms(&self, key_len: u32, now: f64) -> f64 {
        with_key(key_len, |key| {
            self.store.available_in_ms(key, ms(now)) as f64
        })
        .unwrap_or(REFUSED)
    }

    /// Zeroes the count, keeping the window (`0`, or `NaN` for a key that is not UTF-8).
    #[wasm_bindgen(js_name = resetAttempts)]
    pub fn reset_attempts(&self, key_len: u32, now: f64) -> f64 {
        with_key(key_len, |key| {
            self.store.reset_attempts(key, ms(now));
            0.0
        })
        .unwrap_or(REFUSED)
    }

    /// Removes the count and the window (`0`, or `NaN` for a key that is not UTF-8).
    pub fn clear(&self, key_len: u32) -> f64 {
        with_key(key_len, |key| {
            self.store.clear(key);
            0.0
        })
        .unwrap_or(REFUSED)
    }

    /// Removes every expired key.
    pub fn purge(&self, now: f64) {
        self.store.purge(ms(now));
    }

    /// How many keys the store holds.
    pub fn size(&self) -> f64 {
        self.store.len() as f64
    }
}

/// Validates a limit with `Limit::from_f64`; throws `invalid_limit:<field>` when it cannot be built.
#[wasm_bindgen(js_name = checkLimit)]
pub fn check_limit(uses: f64, window_ms: f64) -> Result<(), JsValue> {
    Limit::from_f64(uses, window_ms)
        .map(|_| ())
        .map_err(limit_error)
}

/// Validates a fixed window's decay with `Window::from_f64`; throws `invalid_limit:window_ms`.
#[wasm_bindgen(js_name = checkWindow)]
pub fn check_window(decay_ms: f64) -> Result<(), JsValue> {
    Window::from_f64(decay_ms).map(|_| ()).map_err(limit_error)
}

/// Does nothing and returns `0`: the bare cost of a call into the module.
#[wasm_bindgen]
pub fn noop() -> u32 {
    0
}

/// TEST ONLY: panics inside the module, to prove the JS wrapper turns the trap into an error with code
/// `panic` and the module keeps working.
#[wasm_bindgen(js_name = panicForTest)]
pub fn panic_for_test(message: &str) {
    panic!("{message}");
}

#[cfg(test)]
mod tests {
    //! The parts that touch no JS value run on the host too: hostile numbers and keys never panic.
    use super::*;

    const HOSTILE: [f64; 12] = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        -1.0,
        0.5,
        1.5,
        9_007_199_254_740_992.0,
        1.8446744073709552e19,
        1e308,
        -1e308,
        4_320_000_000_000_001.0,
    ];

    fn write_key(key: &[u8]) -> u32 {
        key_buffer(key.len() as u32);
        KEY.with(|b| b.borrow_mut()[..key.len()].copy_from_slice(key));
        key.len() as u32
    }

    #[test]
    fn verdicts_counts_and_refusals() {
        let store = WasmStore::new();
        let k = write_key(b"user:1");
        assert_eq!(store.consume(k, 1.0, 1000.0, 0.0), 0.0);
        assert_eq!(store.consume(k, 1.0, 1000.0, 10.0), 1000.0);
        assert!(store.consume(k, f64::NAN, 1000.0, 10.0).is_nan());
        assert!(store.consume(k, 1.0, 0.0, 10.0).is_nan());
        let fixed = WasmStore::new();
        assert!(fixed.hit(k, -5.0, 1.0, 0.0).is_nan());
        assert_eq!(fixed.hit(k, 1000.0, 3.0, 0.0), 3.0);
        assert_eq!(fixed.attempts(k, 999.0), 3.0);
        assert_eq!(fixed.attempts(k, 1000.0), 0.0);
    }

    #[test]
    fn a_key_that_is_not_utf8_or_past_the_buffer_is_refused() {
        let store = WasmStore::new();
        let bad = write_key(&[0x66, 0xff, 0x6f]);
        assert!(store.consume(bad, 1.0, 1000.0, 0.0).is_nan());
        assert!(store.attempts(bad, 0.0).is_nan());
        let mut batch = WasmStore::new();
        assert!(batch.batch_push(bad, 1.0, 1000.0).is_nan());
        assert!(store.consume(u32::MAX, 1.0, 1000.0, 0.0).is_nan());
        assert_eq!(store.size(), 0.0);
    }

    #[test]
    fn hostile_numbers_never_panic() {
        let mut store = WasmStore::new();
        let k = write_key("é\u{1F600}".as_bytes());
        let numbers: Vec<f64> = [0.0, 1.0, 1000.0].into_iter().chain(HOSTILE).collect();
        for &a in &numbers {
            for &b in &numbers {
                store.consume(k, a, b, a);
                store.peek(k, a, b, b);
                store.hit(k, a, b, b);
                store.too_many_attempts(k, a, b);
                store.remaining(k, a, b);
                store.available_in(k, a);
                store.available_in_ms(k, b);
                store.reset_attempts(k, a);
                store.batch_push(k, a, b);
                store.batch_consume(a);
                store.release(a, b);
                store.drop_release(b);
                store.batch_peek(b);
                store.purge(a);
            }
        }
    }

    #[test]
    fn a_refused_push_clears_the_batch_and_a_release_is_taken_once() {
        let mut store = WasmStore::new();
        let k = write_key(b"a");
        assert_eq!(store.batch_push(k, 1.0, 1000.0), 0.0);
        assert!(store.batch_push(k, 0.0, 1000.0).is_nan());
        let handle = store.batch_consume(0.0);
        assert!(handle > 0.0);
        assert_eq!(store.size(), 0.0, "the cleared batch recorded nothing");
        store.batch_push(k, 1.0, 1000.0);
        let handle = store.batch_consume(1.0);
        store.batch_push(k, 1.0, 1000.0);
        assert_eq!(store.batch_consume(2.0), -1001.0);
        assert_eq!(store.batch_blocked(), 0);
        store.release(handle, 3.0);
        store.release(handle, 3.0);
        assert_eq!(
            store.release_handles(),
            1,
            "the first, empty batch's handle is still held"
        );
        store.batch_push(k, 1.0, 1000.0);
        assert!(store.batch_consume(4.0) > 0.0);
    }
}
