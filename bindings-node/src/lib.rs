//! The Node addon of ratewindow: a thin napi shell. The memory store's backend (`NativeStore`) forwards
//! to `ratewindow-js-glue`, which the wasm-bindgen package shares; the networked stores drive the core's
//! call machines (`call.rs`, `redis.rs`, `sql.rs`).
//!
//! It implements the `Backend` / `BackendStore` interfaces documented in `ts/backend.ts`: strings and
//! numbers cross, each answer is one number with the rest written into the store's record (a
//! `Float64Array`, laid out by `ratewindow_js_glue::record`), and every export runs inside
//! [`std::panic::catch_unwind`] so a panic becomes a thrown JS error (code `panic`), never an abort.

use std::panic::{catch_unwind, AssertUnwindSafe};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratewindow_core::{Limit, MemoryStore};
use ratewindow_js_glue::{record, Failure, JsStore, Record};

mod key;
use key::Key;

pub mod call;
pub mod redis;
mod sql;
// The HTTP middleware's decisions (ts/http/).
pub mod http;
// The failure guard (ts/guard.ts).
pub mod guard;
// The lock (ts/lock.ts).
pub mod lock;
// The sharded store's protocol (ts/shard.ts).
pub mod shard;

/// What every export returns: on failure a JS `Error` whose `code` is the status string
/// (`invalid_limit:uses`, `invalid_limit:window_ms`, `invalid_argument:<field>` or `panic`, see
/// `ts/backend.ts`).
type Res<T> = Result<T, String>;

/// A JS error with `code` and `message`.
fn coded(code: &str, message: String) -> Error<String> {
    Error::new(code.to_owned(), message)
}

/// The glue's failure as a JS error.
#[cold]
fn thrown(f: Failure) -> Error<String> {
    Error::new(f.code, f.message)
}

/// Runs `f`, turning a panic into a JS error with code `panic`, so none unwinds into Node.
#[inline(always)]
fn guard<T>(f: impl FnOnce() -> Res<T>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|payload| Err(thrown(Failure::panic("", &*payload))))
}

/// The glue's answer inside [`guard`].
#[inline(always)]
fn glue<T>(f: impl FnOnce() -> ratewindow_js_glue::Res<T>) -> Result<T, String> {
    guard(|| f().map_err(thrown))
}

/// A cooldown limit from JS numbers, refused naming the field as JS spells it.
#[inline(always)]
fn limit(uses: f64, window_ms: f64) -> Result<Limit, String> {
    ratewindow_js_glue::number::limit(uses, window_ms).map_err(thrown)
}

/// One memory store (`ratewindow_js_glue::JsStore`) and the record its answers are written into.
#[napi]
pub struct NativeStore {
    store: JsStore,
    record: Float64Array,
}

impl NativeStore {
    /// The record, as the glue writes it (its length was checked when the store was made).
    #[inline(always)]
    fn out(&mut self) -> (&mut JsStore, &mut Record) {
        // SAFETY: the Float64Array is kept alive by the reference napi-rs holds for this struct, and JS
        // runs nothing while this call runs, so nothing else reads or writes it meanwhile.
        let slice = unsafe { self.record.as_mut() };
        let out = <&mut Record>::try_from(slice).expect("length checked in the constructor");
        (&mut self.store, out)
    }
}

#[napi]
impl NativeStore {
    /// An empty store writing its answers into `record` (`ts/backend.ts`: `RECORD_LENGTH` slots).
    #[napi(constructor)]
    pub fn new(record: Float64Array) -> Result<Self, String> {
        if record.len() != record::LEN {
            return Err(coded(
                "invalid_argument:record",
                format!(
                    "a store's record holds {} numbers, not {}",
                    record::LEN,
                    record.len()
                ),
            ));
        }
        Ok(NativeStore {
            store: JsStore::new(MemoryStore::new()),
            record,
        })
    }

    /// `0` when allowed, else the retry timestamp; the quota in the record.
    #[napi]
    pub fn consume(
        &mut self,
        key: Key,
        uses: f64,
        window_ms: f64,
        now: f64,
    ) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.consume(key.get()?, uses, window_ms, now, out)
        })
    }

    /// Like `consume`, recording nothing.
    #[napi]
    pub fn peek(&mut self, key: Key, uses: f64, window_ms: f64, now: f64) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.peek(key.get()?, uses, window_ms, now, out)
        })
    }

    /// Appends an entry to the pending batch; an invalid limit clears it.
    #[napi]
    pub fn batch_push(&mut self, key: Key, uses: f64, window_ms: f64) -> Result<(), String> {
        glue(|| match key.entry(self.store.batch_len()) {
            Ok(key) => self.store.batch_push(key, uses, window_ms),
            Err(e) => {
                // Refused like an invalid limit: the batch is emptied.
                self.store.batch_clear();
                Err(e)
            }
        })
    }

    /// Consumes the pending batch: a release handle (> 0) or minus the retry timestamp.
    #[napi]
    pub fn batch_consume(&mut self, now: f64) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.batch_consume(now, out)
        })
    }

    /// Peeks the pending batch: `0` or minus the retry timestamp.
    #[napi]
    pub fn batch_peek(&mut self, now: f64) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.batch_peek(now, out)
        })
    }

    /// Discards the pending batch.
    #[napi]
    pub fn batch_clear(&mut self) -> Result<(), String> {
        guard(|| {
            self.store.batch_clear();
            Ok(())
        })
    }

    /// Gives back the calls of an allowed batch (once; unknown handles do nothing).
    #[napi]
    pub fn release(&mut self, handle: f64, now: f64) -> Result<(), String> {
        glue(|| self.store.release(handle, now))
    }

    /// Forgets a release handle without releasing.
    #[napi]
    pub fn drop_release(&mut self, handle: f64) -> Result<(), String> {
        guard(|| {
            self.store.drop_release(handle);
            Ok(())
        })
    }

    /// How many release handles are held.
    #[napi]
    pub fn release_handles(&self) -> u32 {
        self.store.release_handles()
    }

    /// Fixed window: the count after adding `amount`.
    #[napi]
    pub fn hit(&self, key: Key, decay_ms: f64, amount: f64, now: f64) -> Result<f64, String> {
        glue(|| self.store.hit(key.get()?, decay_ms, amount, now))
    }

    /// Fixed window: the count after adding `amount`; `resetAfterMs` in the record.
    #[napi]
    pub fn hit_window(
        &mut self,
        key: Key,
        decay_ms: f64,
        amount: f64,
        now: f64,
    ) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.hit_window(key.get()?, decay_ms, amount, now, out)
        })
    }

    /// Fixed window, atomically: one hit counted only below `max`; the count, with `allowed` and
    /// `resetAfterMs` in the record.
    #[napi]
    pub fn attempt(&mut self, key: Key, max: f64, decay_ms: f64, now: f64) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.attempt(key.get()?, max, decay_ms, now, out)
        })
    }

    /// [`Self::attempt`] costing `cost` hits: counted only when the count plus `cost` is at most `max`.
    #[napi]
    pub fn attempt_cost(
        &mut self,
        key: Key,
        max: f64,
        decay_ms: f64,
        cost: f64,
        now: f64,
    ) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.attempt_cost(key.get()?, max, decay_ms, cost, now, out)
        })
    }

    /// Hits in the current window.
    #[napi]
    pub fn attempts(&self, key: Key, now: f64) -> Result<f64, String> {
        glue(|| self.store.attempts(key.get()?, now))
    }

    /// Whether `max` or more hits are counted in a live window.
    #[napi]
    pub fn too_many_attempts(&self, key: Key, max: f64, now: f64) -> Result<bool, String> {
        glue(|| self.store.too_many_attempts(key.get()?, max, now))
    }

    /// `max` minus the hits, floored at 0.
    #[napi]
    pub fn remaining(&self, key: Key, max: f64, now: f64) -> Result<f64, String> {
        glue(|| self.store.remaining(key.get()?, max, now))
    }

    /// Whole seconds until the window ends, rounded up.
    #[napi]
    pub fn available_in(&self, key: Key, now: f64) -> Result<f64, String> {
        glue(|| self.store.available_in(key.get()?, now))
    }

    /// Milliseconds until the window ends.
    #[napi]
    pub fn available_in_ms(&self, key: Key, now: f64) -> Result<f64, String> {
        glue(|| self.store.available_in_ms(key.get()?, now))
    }

    /// Zeroes the count, keeping the window.
    #[napi]
    pub fn reset_attempts(&self, key: Key, now: f64) -> Result<(), String> {
        glue(|| self.store.reset_attempts(key.get()?, now))
    }

    /// Removes the count and the window.
    #[napi]
    pub fn clear(&self, key: Key) -> Result<(), String> {
        glue(|| {
            self.store.clear(key.get()?);
            Ok(())
        })
    }

    /// Removes every expired key.
    #[napi]
    pub fn purge(&self, now: f64) -> Result<(), String> {
        glue(|| self.store.purge(now))
    }

    /// Keys held.
    #[napi]
    pub fn size(&self) -> Result<f64, String> {
        guard(|| Ok(self.store.size()))
    }

    /// GCRA (`kind` 1) or counter (`kind` 2) consume: `0` when allowed, else the retry timestamp; the
    /// quota in the record.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn rate_consume(
        &mut self,
        key: Key,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: f64,
    ) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.rate_consume(key.get()?, kind, uses, window_ms, burst, cost, now, out)
        })
    }

    /// Like `rateConsume`, recording nothing.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn rate_peek(
        &mut self,
        key: Key,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
        now: f64,
    ) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.rate_peek(key.get()?, kind, uses, window_ms, burst, cost, now, out)
        })
    }

    /// Forgets a GCRA bucket (`kind` 1) or a counter (`kind` 2).
    #[napi]
    pub fn rate_reset(&self, key: Key, kind: u32) -> Result<(), String> {
        glue(|| self.store.rate_reset(key.get()?, kind))
    }

    /// Appends an entry of any algorithm (`kind` 0 sliding, 1 GCRA, 2 counter) to the pending mixed
    /// batch; a refusal clears it.
    #[napi]
    pub fn mixed_push(
        &mut self,
        key: Key,
        kind: u32,
        uses: f64,
        window_ms: f64,
        burst: f64,
        cost: f64,
    ) -> Result<(), String> {
        glue(|| match key.entry(self.store.mixed_len()) {
            Ok(key) => self
                .store
                .mixed_push(key, kind, uses, window_ms, burst, cost),
            Err(e) => {
                self.store.mixed_clear();
                Err(e)
            }
        })
    }

    /// Consumes the pending mixed batch: a release handle (> 0) or minus the retry timestamp.
    #[napi]
    pub fn mixed_consume(&mut self, now: f64) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.mixed_consume(now, out)
        })
    }

    /// Peeks the pending mixed batch: `0` or minus the retry timestamp.
    #[napi]
    pub fn mixed_peek(&mut self, now: f64) -> Result<f64, String> {
        glue(|| {
            let (store, out) = self.out();
            store.mixed_peek(now, out)
        })
    }

    /// Discards the pending mixed batch.
    #[napi]
    pub fn mixed_clear(&mut self) -> Result<(), String> {
        guard(|| {
            self.store.mixed_clear();
            Ok(())
        })
    }
}

/// The names of the record's slots, in order (`ts/backend.ts` checks them against its own on load).
#[napi]
pub fn record_layout() -> Vec<&'static str> {
    record::NAMES.to_vec()
}

/// Validates a limit with the core.
#[napi]
pub fn check_limit(uses: f64, window_ms: f64) -> Result<(), String> {
    guard(|| limit(uses, window_ms).map(|_| ()))
}

/// Validates a GCRA (`kind` 1) or counter (`kind` 2) limit with the core.
#[napi]
pub fn check_rate(kind: u32, uses: f64, window_ms: f64, burst: f64) -> Result<(), String> {
    glue(|| ratewindow_js_glue::rates::check_rate(kind, uses, window_ms, burst))
}

/// Does nothing: the bare cost of a call into the addon.
#[napi]
pub fn noop() -> u32 {
    0
}

/// TEST ONLY (hidden from users: not re-exported by the TypeScript layer): panics inside the addon to
/// prove the panic becomes a JS error with code `panic` instead of aborting Node. The panic message is
/// kept off stderr for this deliberate panic only.
#[napi(js_name = "__panicForTest")]
pub fn panic_for_test(message: String) -> Result<(), String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = guard(|| panic!("{message}"));
    std::panic::set_hook(hook);
    result
}
