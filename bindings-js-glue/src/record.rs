//! The record every answer of a memory store is written into: a fixed row of `f64` slots the JS side
//! allocates once per store (napi: a `Float64Array` the store keeps; wasm: a row in linear memory the
//! wrapper copies out). A call returns its primary number and leaves the rest here, so the hot path
//! builds no JS object in Rust. `bindings-node/ts/backend.ts` reads the slots by the names in
//! [`NAMES`], and each shell checks the two layouts agree when it loads (`recordLayout()`).

use ratewindow_core::Quota;

/// `limit`: the tightest entry's uses (a verdict).
pub const LIMIT: usize = 0;
/// `remaining`: the uses it has left after the call (a verdict).
pub const REMAINING: usize = 1;
/// `refillAfterMs`: ms until it gets a use back (a verdict).
pub const REFILL_AFTER_MS: usize = 2;
/// `resetAfterMs`: ms until its window is empty (a verdict), or until a fixed window ends (`hitWindow`,
/// `attempt`).
pub const RESET_AFTER_MS: usize = 3;
/// `blocked`: the entry with the longest wait (a refused batch).
pub const BLOCKED: usize = 4;
/// `allowed`: `1` when the attempt was counted, else `0` (`attempt`).
pub const ALLOWED: usize = 5;

/// Slots in a record.
pub const LEN: usize = 6;

/// The slots' names, in order, as `ts/backend.ts` spells them.
pub const NAMES: [&str; LEN] = [
    "limit",
    "remaining",
    "refillAfterMs",
    "resetAfterMs",
    "blocked",
    "allowed",
];

/// One record.
pub type Record = [f64; LEN];

/// Writes a verdict's quota.
#[inline(always)]
pub fn write_quota(out: &mut Record, quota: Quota) {
    out[LIMIT] = f64::from(quota.limit);
    out[REMAINING] = f64::from(quota.remaining);
    out[REFILL_AFTER_MS] = quota.refill_after_ms as f64;
    out[RESET_AFTER_MS] = quota.reset_after_ms as f64;
}
