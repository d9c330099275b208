//! The Node addon of ratewindow: conversions and forwarding into `ratewindow-core`, nothing else.
//!
//! It implements the `Backend` / `BackendStore` interfaces documented in `ts/backend.ts`: only strings
//! and numbers cross, verdicts are encoded as one number, and every export runs inside
//! [`std::panic::catch_unwind`] so a panic becomes a thrown JS error (code `panic`), never an abort.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratewindow_core::{Entry, Limit, LimitError, MemoryStore, Release, Window};

mod key;
use key::Key;

mod call;
pub mod redis;
mod sql;

/// What every export returns: on failure a JS `Error` whose `code` is the status string
/// (`invalid_limit:uses`, `invalid_limit:window_ms` or `panic`, see `ts/backend.ts`).
type Res<T> = Result<T, String>;

/// A JS error with `code` and `message`.
fn coded(code: &str, message: String) -> Error<String> {
    Error::new(code.to_owned(), message)
}

/// Runs `f`, turning a panic into a JS error with code `panic`, so none unwinds into Node.
#[inline(always)]
fn guard<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
        Err(coded("panic", format!("ratewindow panicked: {message}")))
    })
}

/// The core's limit error as a JS error with code `invalid_limit:<field>` and the core's message.
fn limit_error(e: LimitError) -> Error<String> {
    coded(&format!("invalid_limit:{}", e.field.name()), e.to_string())
}

/// A time or count the TypeScript layer already checked to be a safe integer (saturating, never panics).
#[inline(always)]
fn ms(v: f64) -> u64 {
    v as u64
}

#[inline(always)]
fn limit(uses: f64, window_ms: f64) -> Res<Limit> {
    Limit::from_f64(uses, window_ms).map_err(limit_error)
}

/// One core `MemoryStore`, its pending batch and the releases of its allowed batches.
#[napi]
pub struct NativeStore {
    store: MemoryStore,
    batch: Vec<Entry>,
    blocked: u32,
    releases: HashMap<u64, Release>,
    next_handle: u64,
}

#[napi]
impl NativeStore {
    /// An empty store.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        NativeStore {
            store: MemoryStore::new(),
            batch: Vec::new(),
            blocked: 0,
            releases: HashMap::new(),
            next_handle: 1,
        }
    }

    /// `0` when allowed, else the retry timestamp.
    #[napi]
    pub fn consume(&self, key: Key, uses: f64, window_ms: f64, now: f64) -> Result<f64, String> {
        guard(|| {
            let v = self
                .store
                .consume(key.as_str(), limit(uses, window_ms)?, ms(now));
            Ok(v.retry_timestamp.map_or(0.0, |t| t as f64))
        })
    }

    /// Like `consume`, recording nothing.
    #[napi]
    pub fn peek(&self, key: Key, uses: f64, window_ms: f64, now: f64) -> Result<f64, String> {
        guard(|| {
            let v = self
                .store
                .peek(key.as_str(), limit(uses, window_ms)?, ms(now));
            Ok(v.retry_timestamp.map_or(0.0, |t| t as f64))
        })
    }

    /// Appends an entry to the pending batch; an invalid limit clears it.
    #[napi]
    pub fn batch_push(&mut self, key: Key, uses: f64, window_ms: f64) -> Result<(), String> {
        guard(|| match limit(uses, window_ms) {
            Ok(l) => {
                self.batch.push(Entry::new(key.as_str(), l));
                Ok(())
            }
            Err(e) => {
                self.batch.clear();
                Err(e)
            }
        })
    }

    /// Consumes the pending batch: a release handle (> 0) or minus the retry timestamp.
    #[napi]
    pub fn batch_consume(&mut self, now: f64) -> Result<f64, String> {
        guard(|| {
            // Taken out first, so even a panic cannot leave entries behind for the next batch.
            let mut batch = std::mem::take(&mut self.batch);
            let consumed = self.store.consume_many(&batch, ms(now));
            batch.clear();
            self.batch = batch;
            match consumed.release {
                Some(release) => {
                    let handle = self.next_handle;
                    self.next_handle += 1;
                    self.releases.insert(handle, release);
                    Ok(handle as f64)
                }
                None => {
                    Ok(self.refused(consumed.verdict.blocked, consumed.verdict.retry_timestamp))
                }
            }
        })
    }

    /// Peeks the pending batch: `0` or minus the retry timestamp.
    #[napi]
    pub fn batch_peek(&mut self, now: f64) -> Result<f64, String> {
        guard(|| {
            let mut batch = std::mem::take(&mut self.batch);
            let verdict = self.store.peek_many(&batch, ms(now));
            batch.clear();
            self.batch = batch;
            Ok(if verdict.allowed {
                0.0
            } else {
                self.refused(verdict.blocked, verdict.retry_timestamp)
            })
        })
    }

    fn refused(&mut self, blocked: Option<usize>, retry_timestamp: Option<u64>) -> f64 {
        self.blocked = blocked.unwrap_or(0) as u32;
        -(retry_timestamp.unwrap_or(1) as f64)
    }

    /// Discards the pending batch.
    #[napi]
    pub fn batch_clear(&mut self) -> Result<(), String> {
        guard(|| {
            self.batch.clear();
            Ok(())
        })
    }

    /// `blocked` of the last refused batch.
    #[napi]
    pub fn batch_blocked(&self) -> u32 {
        self.blocked
    }

    /// Gives back the calls of an allowed batch (once; unknown handles do nothing).
    #[napi]
    pub fn release(&mut self, handle: f64, now: f64) -> Result<(), String> {
        guard(|| {
            if let Some(release) = self.releases.remove(&ms(handle)) {
                self.store.release(release, ms(now));
            }
            Ok(())
        })
    }

    /// Forgets a release handle without releasing.
    #[napi]
    pub fn drop_release(&mut self, handle: f64) -> Result<(), String> {
        guard(|| {
            self.releases.remove(&ms(handle));
            Ok(())
        })
    }

    /// How many release handles are held.
    #[napi]
    pub fn release_handles(&self) -> u32 {
        self.releases.len() as u32
    }

    /// Fixed window: the count after adding `amount`.
    #[napi]
    pub fn hit(&self, key: Key, decay_ms: f64, amount: f64, now: f64) -> Result<f64, String> {
        guard(|| {
            let decay = Window::from_f64(decay_ms).map_err(limit_error)?;
            Ok(self.store.hit(key.as_str(), decay, amount as i64, ms(now)) as f64)
        })
    }

    /// Hits in the current window.
    #[napi]
    pub fn attempts(&self, key: Key, now: f64) -> Result<f64, String> {
        guard(|| Ok(self.store.attempts(key.as_str(), ms(now)) as f64))
    }

    /// `1` when `max` or more hits are counted in a live window.
    #[napi]
    pub fn too_many_attempts(&self, key: Key, max: f64, now: f64) -> Result<u32, String> {
        guard(|| {
            Ok(self
                .store
                .too_many_attempts(key.as_str(), max as i64, ms(now)) as u32)
        })
    }

    /// `max` minus the hits, floored at 0.
    #[napi]
    pub fn remaining(&self, key: Key, max: f64, now: f64) -> Result<f64, String> {
        guard(|| Ok(self.store.remaining(key.as_str(), max as i64, ms(now)) as f64))
    }

    /// Whole seconds until the window ends, rounded up.
    #[napi]
    pub fn available_in(&self, key: Key, now: f64) -> Result<f64, String> {
        guard(|| Ok(self.store.available_in(key.as_str(), ms(now)) as f64))
    }

    /// Milliseconds until the window ends.
    #[napi]
    pub fn available_in_ms(&self, key: Key, now: f64) -> Result<f64, String> {
        guard(|| Ok(self.store.available_in_ms(key.as_str(), ms(now)) as f64))
    }

    /// Zeroes the count, keeping the window.
    #[napi]
    pub fn reset_attempts(&self, key: Key, now: f64) -> Result<(), String> {
        guard(|| {
            self.store.reset_attempts(key.as_str(), ms(now));
            Ok(())
        })
    }

    /// Removes the count and the window.
    #[napi]
    pub fn clear(&self, key: Key) -> Result<(), String> {
        guard(|| {
            self.store.clear(key.as_str());
            Ok(())
        })
    }

    /// Removes every expired key.
    #[napi]
    pub fn purge(&self, now: f64) -> Result<(), String> {
        guard(|| {
            self.store.purge(ms(now));
            Ok(())
        })
    }

    /// Keys held.
    #[napi]
    pub fn size(&self) -> Result<f64, String> {
        guard(|| Ok(self.store.len() as f64))
    }
}

/// Validates a limit with the core.
#[napi]
pub fn check_limit(uses: f64, window_ms: f64) -> Result<(), String> {
    guard(|| limit(uses, window_ms).map(|_| ()))
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
