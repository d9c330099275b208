/**
 * The backend boundary: what an engine build (the napi addon, or the wasm-bindgen package) exports to
 * the TypeScript layer.
 *
 * Everything above this file (`CooldownStore`, `MemoryStore`, `RateLimiter`, `Limit`, the errors and the
 * conformance kit) talks to the engine only through {@link Backend}, so the same TypeScript runs on
 * either build. Only strings and numbers cross: the TypeScript layer builds every object users see.
 *
 * ## Rules every implementation follows
 *
 * - **Times** (`now`) are whole Unix milliseconds. The TypeScript layer has already checked that they
 *   are safe non-negative integers; an implementation converts them with a saturating cast.
 * - **Limits** arrive as the two host numbers `uses` and `windowMs` *as the user gave them* (possibly
 *   NaN, negative, fractional, huge). The implementation validates them with the core
 *   (`Limit::from_f64`, `Window::from_f64` for a fixed window's decay) and on failure throws a
 *   {@link BackendError} with code `invalid_limit:uses` or `invalid_limit:window_ms` and the core's
 *   message. A failing call changes nothing.
 * - **Counts, amounts and maxima** (`amount`, `max`) have been checked by the TypeScript layer to be
 *   safe integers; convert them with a saturating cast to `i64`.
 * - **Panics** never cross: every export runs inside `catch_unwind` (or the wasm equivalent) and a
 *   panic becomes a thrown {@link BackendError} with code `panic`.
 * - **Verdict encoding** (single calls): `0` means allowed; a positive number is a refusal and is the
 *   `retry_timestamp` (always >= 1). The TypeScript layer derives `retryAfterMs = max(1, ts - now)`,
 *   which is exactly the core's `Verdict::refused(now, ts)`.
 * - **Batch encoding**: see {@link BackendStore.batchConsume}.
 *
 * @module
 */

/** Error codes a backend may put on the errors it throws (`error.code`). */
export type BackendErrorCode = 'invalid_limit:uses' | 'invalid_limit:window_ms' | 'panic';

/**
 * What a backend throws: a plain `Error` whose `code` is a {@link BackendErrorCode} and whose `message`
 * is the core's message (e.g. `invalid uses: NaN (expected a whole number from 1 to 4294967295)`).
 * The TypeScript layer maps it to a `RateWindowError` subclass; any other thrown value is a bug and is
 * wrapped as an internal error.
 */
export interface BackendError extends Error {
  /** Which failure this is. */
  readonly code: BackendErrorCode | string;
}

/**
 * One `ratewindow_core::MemoryStore` and the release handles of its allowed batches.
 *
 * Single-threaded by contract: the TypeScript layer never awaits between {@link batchPush} and
 * {@link batchConsume} / {@link batchPeek}, so one pending batch per store suffices.
 */
export interface BackendStore {
  /**
   * `MemoryStore::consume(key, Limit::from_f64(uses, windowMs)?, now)`.
   * @returns `0` when allowed (and recorded), else the refusal's `retry_timestamp` (>= 1).
   * @throws {BackendError} `invalid_limit:*` when the limit is invalid (nothing is recorded).
   */
  consume(key: string, uses: number, windowMs: number, now: number): number;

  /** `MemoryStore::peek`: like {@link consume}, recording and creating nothing. */
  peek(key: string, uses: number, windowMs: number, now: number): number;

  /**
   * Appends one entry to this store's pending batch (validated now).
   * @throws {BackendError} `invalid_limit:*`; the pending batch is then cleared.
   */
  batchPush(key: string, uses: number, windowMs: number): void;

  /**
   * Runs `MemoryStore::consume_many` on the pending batch at `now`, then clears the batch.
   * @returns
   *  - `> 0`: allowed; the number is a release handle (a positive integer, never reused by this store)
   *    to pass to {@link release} or {@link dropRelease}.
   *  - `< 0`: refused; `-result` is the `retry_timestamp`, and {@link batchBlocked} gives `blocked`.
   *  (`0` is never returned by this method.)
   */
  batchConsume(now: number): number;

  /**
   * Runs `MemoryStore::peek_many` on the pending batch at `now`, then clears the batch.
   * @returns `0` when allowed; `< 0` when refused, as {@link batchConsume}.
   */
  batchPeek(now: number): number;

  /** Discards the pending batch (used when the TypeScript layer abandons one half-built). */
  batchClear(): void;

  /** The `blocked` index of the last refused {@link batchConsume} / {@link batchPeek}. */
  batchBlocked(): number;

  /**
   * `MemoryStore::release` of the handle's `Release` at `now`, taking it out of the handle table:
   * releasing a handle twice, or a dropped or unknown handle, does nothing.
   */
  release(handle: number, now: number): void;

  /** Forgets a release handle without releasing (its verdict was garbage-collected). Idempotent. */
  dropRelease(handle: number): void;

  /** How many release handles the store holds (for leak tests). */
  releaseHandles(): number;

  /**
   * `MemoryStore::hit(key, Window::from_f64(decayMs)?, amount, now)`.
   * @returns the count after the hit (may be negative).
   * @throws {BackendError} `invalid_limit:window_ms` for an invalid decay.
   */
  hit(key: string, decayMs: number, amount: number, now: number): number;

  /** `MemoryStore::attempts`. */
  attempts(key: string, now: number): number;

  /** `MemoryStore::too_many_attempts`, as `1` (true) or `0` (false). */
  tooManyAttempts(key: string, max: number, now: number): number;

  /** `MemoryStore::remaining`. */
  remaining(key: string, max: number, now: number): number;

  /** `MemoryStore::available_in`: whole seconds, rounded up. */
  availableIn(key: string, now: number): number;

  /** `MemoryStore::available_in_ms`. */
  availableInMs(key: string, now: number): number;

  /** `MemoryStore::reset_attempts`. */
  resetAttempts(key: string, now: number): void;

  /** `MemoryStore::clear`. */
  clear(key: string): void;

  /** `MemoryStore::purge`. */
  purge(now: number): void;

  /** `MemoryStore::len`. */
  size(): number;
}

/** An engine build: the factory of stores plus the module-level functions. */
export interface Backend {
  /** `'native'` for the napi addon, `'wasm'` for the wasm-bindgen package. */
  readonly kind: string;

  /** A new, empty store (`MemoryStore::new()`). */
  createStore(): BackendStore;

  /**
   * Validates a limit with `Limit::from_f64(uses, windowMs)`.
   * @throws {BackendError} `invalid_limit:*` when it cannot be built.
   */
  checkLimit(uses: number, windowMs: number): void;

  /** Does nothing and returns `0`: measures the bare cost of crossing into the backend. */
  noop(): number;

  /**
   * TEST ONLY: panics inside the backend. Must throw a {@link BackendError} with code `panic` and leave
   * the process running. Never call it outside tests.
   */
  panicForTest(message: string): void;
}
