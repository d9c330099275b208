//! The wasm-bindgen build of ratewindow: `ratewindow-core` for JavaScript runtimes where a native addon
//! cannot load (edge workers, Deno, browsers).
//!
//! A thin shell: the memory store's backend is `ratewindow_js_glue::JsStore`, which the napi addon
//! shares, behind the `Backend` / `BackendStore` boundary (`bindings-node/ts/backend.ts`) that the
//! wrapper `ts/wasm.ts` completes, so the Node package's TypeScript layer runs on it unchanged.
//! Milliseconds are JS numbers (`f64`), never `BigInt`.
//!
//! ## The protocol with `ts/wasm.ts`
//!
//! The hot calls take and return numbers only, so a call allocates nothing on either side:
//! - **Keys** are written by the wrapper as UTF-8 into this module's key buffer ([`key_buffer`]) and
//!   passed as their byte length.
//! - **Answers**: each call returns its primary number and writes the rest into the module's record
//!   ([`record_address`], laid out by `ratewindow_js_glue::record`), which the wrapper copies into the
//!   store's own record.
//! - **Refusals** (an invalid limit, a number that is not a safe integer) are thrown as a JS `Error`
//!   with `code` (`invalid_limit:uses`, `invalid_limit:window_ms`, `invalid_argument:<field>`) and the
//!   glue's message. A call that fails changes nothing.
//!
//! Nothing here panics on host input. On `wasm32-unknown-unknown` a panic aborts (there is no
//! unwinding to catch), so the wrapper turns a trap into an error with code `panic`;
//! [`take_panic_message`] gives it the message the panic hook kept.

use std::cell::RefCell;

use ratewindow_core::input::KeyPosition;
use ratewindow_core::MemoryStore;
use ratewindow_js_glue::key::{KeyBuffer, KeyIssue};
use ratewindow_js_glue::{record, store, Failure, JsStore, Record};
use wasm_bindgen::prelude::*;

/// The networked stores' call boundary (Redis, PostgreSQL, SQLite), shared with the napi addon.
pub mod calls;

/// The glue's failure as a JS `Error` with `code` set.
#[cold]
fn thrown(f: Failure) -> JsValue {
    let error = js_sys::Error::new(&f.message);
    // Setting a property on a fresh Error object cannot fail; ignore the Result rather than unwrap it.
    let _ = js_sys::Reflect::set(
        &error,
        &JsValue::from_str("code"),
        &JsValue::from_str(&f.code),
    );
    error.into()
}

thread_local! {
    /// Where the wrapper writes each call's key (UTF-8).
    static KEY: RefCell<KeyBuffer> = RefCell::new(KeyBuffer::default());
    /// Where each call writes the rest of its answer; the wrapper reads it right after the call.
    static RECORD: RefCell<Record> = const { RefCell::new([0.0; record::LEN]) };
    /// The message of the last panic, kept by the hook for the JS side to read after the trap.
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f` on the key the wrapper wrote (its first `len` bytes) and the record; a key that is not
/// valid Unicode (the wrapper flags it and writes its UTF-16) is refused naming `key`.
#[inline(always)]
fn with_key<T>(
    len: u32,
    f: impl FnOnce(&str, &mut Record) -> ratewindow_js_glue::Res<T>,
) -> Result<T, JsValue> {
    with_key_at(len, KeyPosition::Key, f)
}

/// [`with_key`] for the key at `position` (a batch's entry).
#[inline(always)]
fn with_key_at<T>(
    len: u32,
    position: KeyPosition,
    f: impl FnOnce(&str, &mut Record) -> ratewindow_js_glue::Res<T>,
) -> Result<T, JsValue> {
    KEY.with(|buffer| {
        let buffer = buffer
            .try_borrow()
            .map_err(|_| thrown(KeyIssue::Unreadable.failure(position)))?;
        let key = buffer
            .key(len)
            .map_err(|issue| thrown(issue.failure(position)))?;
        RECORD.with(|r| f(key, &mut r.borrow_mut()).map_err(thrown))
    })
}

/// Runs `f` on the record.
#[inline(always)]
fn with_record<T>(f: impl FnOnce(&mut Record) -> ratewindow_js_glue::Res<T>) -> Result<T, JsValue> {
    RECORD.with(|r| f(&mut r.borrow_mut()).map_err(thrown))
}

/// Makes the key buffer hold at least `capacity` bytes, keeping the bytes it holds, and returns its
/// address in linear memory. The address changes only when this grows it.
#[wasm_bindgen(js_name = keyBuffer)]
pub fn key_buffer(capacity: u32) -> u32 {
    KEY.with(|buffer| buffer.borrow_mut().reserve(capacity as usize) as u32)
}

/// The address of the record in linear memory (`recordLayout()` slots of 8 bytes); it never moves.
#[wasm_bindgen(js_name = recordAddress)]
pub fn record_address() -> u32 {
    RECORD.with(|r| r.as_ptr() as u32)
}

/// The names of the record's slots, in order (`ts/backend.ts` checks them against its own).
#[wasm_bindgen(js_name = recordLayout)]
pub fn record_layout() -> Vec<String> {
    record::NAMES.iter().map(|n| (*n).to_owned()).collect()
}

/// Installs the panic hook that keeps the message (runs once, when the module is instantiated).
#[wasm_bindgen(start)]
fn start() {
    std::panic::set_hook(Box::new(|info| {
        let message = ratewindow_js_glue::panic_message(info.payload());
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

/// One memory store (`ratewindow_js_glue::JsStore`). Each method is one `BackendStore` method of
/// `bindings-node/ts/backend.ts`, with the key passed as its length in the key buffer and the rest of
/// the answer in the record.
#[wasm_bindgen]
pub struct WasmStore(JsStore);

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
        // One shard: a wasm instance runs one thread, so more shards only cost memory.
        WasmStore(JsStore::new(MemoryStore::with_shards(1)))
    }

    /// `0` when allowed (and recorded), else the retry timestamp; the quota in the record.
    pub fn consume(
        &self,
        key_len: u32,
        uses: f64,
        window_ms: f64,
        now: f64,
    ) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0.consume(key, uses, window_ms, now, out)
        })
    }

    /// Like `consume`, recording and creating nothing.
    pub fn peek(&self, key_len: u32, uses: f64, window_ms: f64, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0.peek(key, uses, window_ms, now, out)
        })
    }

    /// Appends an entry to the pending batch (an invalid limit clears it).
    #[wasm_bindgen(js_name = batchPush)]
    pub fn batch_push(&mut self, key_len: u32, uses: f64, window_ms: f64) -> Result<(), JsValue> {
        let entry = KeyPosition::Entry(self.0.batch_len());
        let pushed = with_key_at(key_len, entry, |key, _| {
            self.0.batch_push(key, uses, window_ms)
        });
        if pushed.is_err() {
            self.0.batch_clear();
        }
        pushed
    }

    /// Consumes the pending batch and clears it: a release handle (> 0) when allowed, else minus the
    /// retry timestamp (`blocked` in the record); the quota in the record.
    #[wasm_bindgen(js_name = batchConsume)]
    pub fn batch_consume(&mut self, now: f64) -> Result<f64, JsValue> {
        with_record(|out| self.0.batch_consume(now, out))
    }

    /// Peeks the pending batch and clears it: `0` when allowed, else minus the retry timestamp.
    #[wasm_bindgen(js_name = batchPeek)]
    pub fn batch_peek(&mut self, now: f64) -> Result<f64, JsValue> {
        with_record(|out| self.0.batch_peek(now, out))
    }

    /// Discards the pending batch.
    #[wasm_bindgen(js_name = batchClear)]
    pub fn batch_clear(&mut self) {
        self.0.batch_clear();
    }

    /// Gives back the calls of an allowed batch, once; an unknown or dropped handle does nothing.
    pub fn release(&mut self, handle: f64, now: f64) -> Result<(), JsValue> {
        self.0.release(handle, now).map_err(thrown)
    }

    /// Forgets a release handle without releasing. Idempotent.
    #[wasm_bindgen(js_name = dropRelease)]
    pub fn drop_release(&mut self, handle: f64) {
        self.0.drop_release(handle);
    }

    /// How many release handles the store holds.
    #[wasm_bindgen(js_name = releaseHandles)]
    pub fn release_handles(&self) -> u32 {
        self.0.release_handles()
    }

    /// Fixed window: adds `amount` hits (negative gives back) and returns the count.
    pub fn hit(&self, key_len: u32, decay_ms: f64, amount: f64, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, _| self.0.hit(key, decay_ms, amount, now))
    }

    /// `hit`, with the ms until the window ends in the record.
    #[wasm_bindgen(js_name = hitWindow)]
    pub fn hit_window(
        &self,
        key_len: u32,
        decay_ms: f64,
        amount: f64,
        now: f64,
    ) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0.hit_window(key, decay_ms, amount, now, out)
        })
    }

    /// One hit counted, atomically, only below `max`: the count, with `allowed` and `resetAfterMs` in
    /// the record.
    pub fn attempt(&self, key_len: u32, max: f64, decay_ms: f64, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0.attempt(key, max, decay_ms, now, out)
        })
    }

    /// [`Self::attempt`] costing `cost` hits: counted only when the count plus `cost` is at most
    /// `max` (`invalid_argument:cost` unless a whole number from 1).
    #[wasm_bindgen(js_name = attemptCost)]
    pub fn attempt_cost(
        &self,
        key_len: u32,
        max: f64,
        decay_ms: f64,
        cost: f64,
        now: f64,
    ) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0.attempt_cost(key, max, decay_ms, cost, now, out)
        })
    }

    /// Hits counted in the current window.
    pub fn attempts(&self, key_len: u32, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, _| self.0.attempts(key, now))
    }

    /// Whether `max` or more hits are counted in a live window.
    #[wasm_bindgen(js_name = tooManyAttempts)]
    pub fn too_many_attempts(&self, key_len: u32, max: f64, now: f64) -> Result<bool, JsValue> {
        with_key(key_len, |key, _| self.0.too_many_attempts(key, max, now))
    }

    /// `max` minus the hits, floored at 0.
    pub fn remaining(&self, key_len: u32, max: f64, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, _| self.0.remaining(key, max, now))
    }

    /// Whole seconds until the window ends, rounded up; 0 when none.
    #[wasm_bindgen(js_name = availableIn)]
    pub fn available_in(&self, key_len: u32, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, _| self.0.available_in(key, now))
    }

    /// Milliseconds until the window ends; 0 when none.
    #[wasm_bindgen(js_name = availableInMs)]
    pub fn available_in_ms(&self, key_len: u32, now: f64) -> Result<f64, JsValue> {
        with_key(key_len, |key, _| self.0.available_in_ms(key, now))
    }

    /// Zeroes the count, keeping the window.
    #[wasm_bindgen(js_name = resetAttempts)]
    pub fn reset_attempts(&self, key_len: u32, now: f64) -> Result<(), JsValue> {
        with_key(key_len, |key, _| self.0.reset_attempts(key, now))
    }

    /// Removes the count and the window.
    pub fn clear(&self, key_len: u32) -> Result<(), JsValue> {
        with_key(key_len, |key, _| {
            self.0.clear(key);
            Ok(())
        })
    }

    /// Removes every expired key.
    pub fn purge(&self, now: f64) -> Result<(), JsValue> {
        self.0.purge(now).map_err(thrown)
    }

    /// How many keys the store holds.
    pub fn size(&self) -> f64 {
        self.0.size()
    }

    /// GCRA (`kind` 1) or counter (`kind` 2) consume costing `cost` uses: `0` when allowed (and
    /// recorded), else the retry timestamp; the quota in the record.
    #[wasm_bindgen(js_name = rateConsume)]
    #[allow(clippy::too_many_arguments)]
    pub fn rate_consume(
        &self,
        key_len: u32,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: f64,
    ) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0
                .rate_consume(key, kind, uses, window_ms, burst, cost, now, out)
        })
    }

    /// Like `rateConsume`, recording and creating nothing.
    #[wasm_bindgen(js_name = ratePeek)]
    #[allow(clippy::too_many_arguments)]
    pub fn rate_peek(
        &self,
        key_len: u32,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: f64,
    ) -> Result<f64, JsValue> {
        with_key(key_len, |key, out| {
            self.0
                .rate_peek(key, kind, uses, window_ms, burst, cost, now, out)
        })
    }

    /// Forgets a GCRA bucket (`kind` 1) or a counter (`kind` 2).
    #[wasm_bindgen(js_name = rateReset)]
    pub fn rate_reset(&self, key_len: u32, kind: u32) -> Result<(), JsValue> {
        with_key(key_len, |key, _| self.0.rate_reset(key, kind))
    }

    /// Appends an entry of any algorithm (`kind` 0 sliding, 1 GCRA, 2 counter) to the pending mixed
    /// batch; a refusal clears it.
    #[wasm_bindgen(js_name = mixedPush)]
    pub fn mixed_push(
        &mut self,
        key_len: u32,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
    ) -> Result<(), JsValue> {
        let entry = KeyPosition::Entry(self.0.mixed_len());
        let pushed = with_key_at(key_len, entry, |key, _| {
            self.0.mixed_push(key, kind, uses, window_ms, burst, cost)
        });
        if pushed.is_err() {
            self.0.mixed_clear();
        }
        pushed
    }

    /// Consumes the pending mixed batch: a release handle (> 0) or minus the retry timestamp.
    #[wasm_bindgen(js_name = mixedConsume)]
    pub fn mixed_consume(&mut self, now: f64) -> Result<f64, JsValue> {
        with_record(|out| self.0.mixed_consume(now, out))
    }

    /// Peeks the pending mixed batch: `0` or minus the retry timestamp.
    #[wasm_bindgen(js_name = mixedPeek)]
    pub fn mixed_peek(&mut self, now: f64) -> Result<f64, JsValue> {
        with_record(|out| self.0.mixed_peek(now, out))
    }

    /// Discards the pending mixed batch.
    #[wasm_bindgen(js_name = mixedClear)]
    pub fn mixed_clear(&mut self) {
        self.0.mixed_clear();
    }
}

/// Validates a GCRA (`kind` 1) or counter (`kind` 2) limit; throws `invalid_limit:<field>`.
#[wasm_bindgen(js_name = checkRate)]
pub fn check_rate(kind: u32, uses: f64, window_ms: f64, burst: f64) -> Result<(), JsValue> {
    ratewindow_js_glue::rates::check_rate(kind, uses, window_ms, burst).map_err(thrown)
}

/// Validates a limit; throws `invalid_limit:<field>` when it cannot be built.
#[wasm_bindgen(js_name = checkLimit)]
pub fn check_limit(uses: f64, window_ms: f64) -> Result<(), JsValue> {
    store::check_limit(uses, window_ms).map_err(thrown)
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
