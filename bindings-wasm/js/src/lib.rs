//! The wasm-bindgen build of ratewindow: `ratewindow-core` for JavaScript runtimes where a native addon
//! cannot load (edge workers, Deno, browsers).
//!
//! It implements the same `Backend` / `BackendStore` boundary as the napi addon
//! (`bindings-node/ts/backend.ts`), so the Node package's TypeScript layer runs on it unchanged: only
//! strings and numbers cross, milliseconds are JS numbers (never `BigInt`), verdicts are encoded as one
//! number, and an invalid limit is thrown as a JS `Error` whose `code` is `invalid_limit:<field>`.
//!
//! Nothing here panics on bad input: every host number is validated by the core (`Limit::from_f64`,
//! `Window::from_f64`) or converted with a saturating cast. On `wasm32-unknown-unknown` a panic aborts
//! (there is no unwinding to catch), so the JS wrapper (`js/backend.mjs`) turns the trap into an error with
//! code `panic`; [`take_panic_message`] gives it the message the panic hook kept.

use std::cell::RefCell;
use std::collections::HashMap;

use ratewindow_core::{Entry, Limit, LimitError, MemoryStore, Release, Window};
use wasm_bindgen::prelude::*;

/// A JS `Error` with `code` set: what every failing export throws.
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
        ratewindow_core::LimitField::Uses => "invalid_limit:uses",
        ratewindow_core::LimitField::WindowMs => "invalid_limit:window_ms",
    };
    coded(code, &e.to_string())
}

/// A time, count or handle the TypeScript layer already checked to be a safe integer. `as` saturates
/// (NaN becomes 0), so this never panics.
#[inline(always)]
fn ms(v: f64) -> u64 {
    v as u64
}

#[inline(always)]
fn limit(uses: f64, window_ms: f64) -> Result<Limit, JsValue> {
    Limit::from_f64(uses, window_ms).map_err(limit_error)
}

/// Encodes a single verdict: `0` when allowed, else the retry timestamp (>= 1).
#[inline(always)]
fn encode(retry_timestamp: Option<u64>) -> f64 {
    retry_timestamp.map_or(0.0, |t| t as f64)
}

thread_local! {
    /// The message of the last panic, kept by the hook for the JS side to read after the trap.
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
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

/// One core `MemoryStore`, its pending batch and the releases of its allowed batches: the
/// `BackendStore` of `bindings-node/ts/backend.ts`.
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
    /// An empty store (`MemoryStore::new()`).
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

    /// `0` when allowed (and recorded), else the refusal's retry timestamp.
    pub fn consume(&self, key: &str, uses: f64, window_ms: f64, now: f64) -> Result<f64, JsValue> {
        Ok(encode(
            self.store
                .consume(key, limit(uses, window_ms)?, ms(now))
                .retry_timestamp,
        ))
    }

    /// Like `consume`, recording and creating nothing.
    pub fn peek(&self, key: &str, uses: f64, window_ms: f64, now: f64) -> Result<f64, JsValue> {
        Ok(encode(
            self.store
                .peek(key, limit(uses, window_ms)?, ms(now))
                .retry_timestamp,
        ))
    }

    /// Appends an entry to the pending batch; an invalid limit clears the batch.
    #[wasm_bindgen(js_name = batchPush)]
    pub fn batch_push(&mut self, key: String, uses: f64, window_ms: f64) -> Result<(), JsValue> {
        match limit(uses, window_ms) {
            Ok(l) => {
                self.batch.push(Entry::new(key, l));
                Ok(())
            }
            Err(e) => {
                self.batch.clear();
                Err(e)
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

    /// Fixed window: adds `amount` hits (negative gives back) and returns the count.
    pub fn hit(&self, key: &str, decay_ms: f64, amount: f64, now: f64) -> Result<f64, JsValue> {
        let decay = Window::from_f64(decay_ms).map_err(limit_error)?;
        Ok(self.store.hit(key, decay, amount as i64, ms(now)) as f64)
    }

    /// Hits counted in the current window.
    pub fn attempts(&self, key: &str, now: f64) -> f64 {
        self.store.attempts(key, ms(now)) as f64
    }

    /// `1` when `max` or more hits are counted in a live window, else `0`.
    #[wasm_bindgen(js_name = tooManyAttempts)]
    pub fn too_many_attempts(&self, key: &str, max: f64, now: f64) -> u32 {
        self.store.too_many_attempts(key, max as i64, ms(now)) as u32
    }

    /// `max` minus the hits, floored at 0.
    pub fn remaining(&self, key: &str, max: f64, now: f64) -> f64 {
        self.store.remaining(key, max as i64, ms(now)) as f64
    }

    /// Whole seconds until the window ends, rounded up; 0 when none.
    #[wasm_bindgen(js_name = availableIn)]
    pub fn available_in(&self, key: &str, now: f64) -> f64 {
        self.store.available_in(key, ms(now)) as f64
    }

    /// Milliseconds until the window ends; 0 when none.
    #[wasm_bindgen(js_name = availableInMs)]
    pub fn available_in_ms(&self, key: &str, now: f64) -> f64 {
        self.store.available_in_ms(key, ms(now)) as f64
    }

    /// Zeroes the count, keeping the window.
    #[wasm_bindgen(js_name = resetAttempts)]
    pub fn reset_attempts(&self, key: &str, now: f64) {
        self.store.reset_attempts(key, ms(now));
    }

    /// Removes the count and the window.
    pub fn clear(&self, key: &str) {
        self.store.clear(key);
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
    limit(uses, window_ms).map(|_| ())
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
