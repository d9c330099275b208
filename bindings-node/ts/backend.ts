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
 * - **Times** (`now`) are whole Unix milliseconds, safe non-negative integers (checked as below).
 * - **Limits** arrive as the two host numbers `uses` and `windowMs` *as the user gave them* (possibly
 *   NaN, negative, fractional, huge). The implementation validates them with the core
 *   (`Limit::from_f64`, `Window::from_f64` for a fixed window's decay) and on failure throws a
 *   {@link BackendError} with code `invalid_limit:uses` or `invalid_limit:window_ms` and the core's
 *   message. A failing call changes nothing.
 * - **Counts, amounts and maxima** (`amount`, `max`) and times are checked again by the engine (the
 *   TypeScript layer checks them first): a number that is not a safe integer (or a negative time) is
 *   refused with a {@link BackendError} coded `invalid_argument:<field>`, the field as JS spells it.
 * - **Panics** never cross: every export runs inside `catch_unwind` (or the wasm equivalent) and a
 *   panic becomes a thrown {@link BackendError} with code `panic`.
 * - **Answers**: each call returns its primary number and writes the rest of its answer into the
 *   store's *record*, the `Float64Array` of {@link RECORD_LENGTH} slots given to
 *   {@link Backend.createStore}, at the indices below (read them right after the call). Single verdicts:
 *   `0` means allowed, a positive number is a refusal's `retry_timestamp` (>= 1), and the TypeScript
 *   layer derives `retryAfterMs = max(1, ts - now)`, exactly the core's `Verdict::refused(now, ts)`;
 *   the quota is in the record. Batches: see {@link BackendStore.batchConsume}.
 * - Both builds forward to one Rust crate, `ratewindow-js-glue` (`bindings-js-glue/`), which validates
 *   every number and lays the record out; `recordLayout()` names its slots, checked against
 *   {@link RECORD_SLOTS} when a backend is first used.
 *
 * @module
 */

/** Error codes a backend may put on the errors it throws (`error.code`). */
export type BackendErrorCode = 'invalid_limit:uses' | 'invalid_limit:window_ms' | 'invalid_limit:burst' | `invalid_argument:${string}` | 'panic';

/** The record's slots, by name: where each call writes the parts of its answer it does not return. */
export const RECORD_SLOTS = Object.freeze(['limit', 'remaining', 'refillAfterMs', 'resetAfterMs', 'blocked', 'allowed'] as const);
/**
 * Where each part of an answer goes in the record (the indices of {@link RECORD_SLOTS}). A `const enum`,
 * so that reading a slot compiles to a literal index: through a module's exported constants the reads
 * cost ~5% of a memory-store consume.
 */
export const enum Slot {
  /** `limit`: the tightest entry's uses (a verdict). */
  Limit = 0,
  /** `remaining`: the uses it has left after the call (a verdict). */
  Remaining = 1,
  /** `refillAfterMs`: ms until it gets a use back (a verdict). */
  RefillAfterMs = 2,
  /** `resetAfterMs`: ms until its window is empty (a verdict), or until a fixed window ends (`hitWindow`, `attempt`). */
  ResetAfterMs = 3,
  /** `blocked`: the entry with the longest wait (a refused batch). */
  Blocked = 4,
  /** `allowed`: `1` when the attempt was counted, else `0` (`attempt`). */
  Allowed = 5,
}
/** Slots in a record. */
export const RECORD_LENGTH = RECORD_SLOTS.length;

const checked = new WeakSet<Backend>();

/**
 * Checks once per backend that its record has the slots this file reads ({@link RECORD_SLOTS}).
 * @throws {Error} when the build under it lays the record out otherwise.
 */
export function checkRecordLayout(backend: Backend): void {
  if (checked.has(backend)) return;
  const names = backend.recordLayout();
  if (names.length !== RECORD_LENGTH || names.some((n, i) => n !== RECORD_SLOTS[i])) {
    throw new Error(`ratewindow: the ${backend.kind} engine's record is [${names.join(', ')}], this layer reads [${RECORD_SLOTS.join(', ')}]: rebuild them together`);
  }
  checked.add(backend);
}

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
 * {@link batchConsume} / {@link batchPeek}, nor between a call and reading the record it wrote, so one
 * pending batch and one record per store suffice.
 */
export interface BackendStore {
  /**
   * `MemoryStore::consume(key, Limit::from_f64(uses, windowMs)?, now)`.
   * @returns `0` when allowed (and recorded), else the refusal's `retry_timestamp` (>= 1); the quota
   *   (`limit`, `remaining`, `refillAfterMs`, `resetAfterMs`) in the record.
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
   *  - `< 0`: refused; `-result` is the `retry_timestamp`, and the record's `blocked` the entry with
   *    the longest wait.
   *  (`0` is never returned by this method.) The quota is in the record either way.
   */
  batchConsume(now: number): number;

  /**
   * Runs `MemoryStore::peek_many` on the pending batch at `now`, then clears the batch.
   * @returns `0` when allowed; `< 0` when refused, as {@link batchConsume}.
   */
  batchPeek(now: number): number;

  /** Discards the pending batch (used when the TypeScript layer abandons one half-built). */
  batchClear(): void;

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

  /**
   * `MemoryStore::hit_window`: {@link hit}, with the ms until the window ends in the record's
   * `resetAfterMs`.
   */
  hitWindow(key: string, decayMs: number, amount: number, now: number): number;

  /**
   * `MemoryStore::attempt(key, max, Window::from_f64(decayMs)?, now)`: one hit counted, atomically, only
   * while fewer than `max` are.
   * @returns the count after the call; `allowed` (1 or 0) and `resetAfterMs` in the record.
   * @throws {BackendError} `invalid_limit:window_ms` for an invalid decay.
   */
  attempt(key: string, max: number, decayMs: number, now: number): number;
  /** {@link attempt} costing `cost` hits (`MemoryStore::attempt_cost`; code `invalid_argument:cost`). Absent from a build without weights. */
  attemptCost?(key: string, max: number, decayMs: number, cost: number, now: number): number;

  /** `MemoryStore::attempts`. */
  attempts(key: string, now: number): number;

  /** `MemoryStore::too_many_attempts`. */
  tooManyAttempts(key: string, max: number, now: number): boolean;

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

  // GCRA and the sliding-window counter (`ratewindow_js_glue::rates`): the napi addon and the
  // wasm-bindgen build have them; a backend without them makes the TypeScript layer throw
  // `UnsupportedError`. `kind` is `1` for GCRA, `2` for the counter (`0`: the sliding log, in a mixed
  // batch); `burst` is read for GCRA only. Refusals: `invalid_limit:uses|window_ms|burst`,
  // `invalid_argument:cost` (a batch's message names `entries[i].<field>`).

  /**
   * `MemoryStore::gcra_consume` / `counter_consume`: as {@link consume}, `0` or the retry timestamp, the
   * quota in the record.
   */
  rateConsume?(key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number, now: number): number;

  /** `MemoryStore::gcra_peek` / `counter_peek`: like {@link rateConsume}, recording nothing. */
  ratePeek?(key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number, now: number): number;

  /** `MemoryStore::gcra_reset` / `counter_reset`. */
  rateReset?(key: string, kind: number): void;

  /** Appends an entry of any algorithm to the pending mixed batch; a refusal clears it. */
  mixedPush?(key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number): void;

  /** `MemoryStore::consume_mixed` of the pending mixed batch, answered as {@link batchConsume}. */
  mixedConsume?(now: number): number;

  /** `MemoryStore::peek_mixed` of the pending mixed batch, answered as {@link batchPeek}. */
  mixedPeek?(now: number): number;

  /** Discards the pending mixed batch. */
  mixedClear?(): void;
}

/** An engine build: the factory of stores plus the module-level functions. */
export interface Backend {
  /** `'native'` for the napi addon, `'wasm'` for the wasm-bindgen package. */
  readonly kind: string;

  /**
   * A new, empty store (`MemoryStore::new()`) writing its answers into `record` (a `Float64Array` of
   * {@link RECORD_LENGTH} slots).
   */
  createStore(record: Float64Array): BackendStore;

  /** The names of the record's slots, in order (see {@link checkRecordLayout}). */
  recordLayout(): readonly string[];

  /**
   * Validates a limit with `Limit::from_f64(uses, windowMs)`.
   * @throws {BackendError} `invalid_limit:*` when it cannot be built.
   */
  checkLimit(uses: number, windowMs: number): void;

  /**
   * Validates a GCRA (`kind` 1) or counter (`kind` 2) limit with the core; absent from a build without
   * them (the wasm-bindgen package).
   * @throws {BackendError} `invalid_limit:*` when it cannot be built.
   */
  checkRate?(kind: number, uses: number, windowMs: number, burst: number): void;

  /** Does nothing and returns `0`: measures the bare cost of crossing into the backend. */
  noop(): number;

  /**
   * TEST ONLY: panics inside the backend. Must throw a {@link BackendError} with code `panic` and leave
   * the process running. Never call it outside tests.
   */
  panicForTest(message: string): void;
}
