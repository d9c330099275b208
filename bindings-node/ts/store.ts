/**
 * Cooldown stores: the abstract {@link CooldownStore} any store extends, and {@link MemoryStore}, the
 * embedded default that counts in this process with the Rust engine.
 * @module
 */
import { checkRecordLayout, RECORD_LENGTH, Slot, type Backend, type BackendStore } from './backend';
import { checkEntries, checkInteger, checkKey, checkLimitShape, checkNow, costOf, mixesRates, rateKind } from './check';
import { fromBackend, InvalidArgumentError, InvalidLimitError, typeError, UnsupportedError } from './errors';
import { memoryLockDriver, withLock, type Lock as LockType, type LockBackend, type LockDriver, type WithLockOptions } from './lock';
import { Lock } from './lock';
import { nativeBackend } from './native';
import type { AnyLimit, AttemptResult, Awaitable, BatchVerdict, CallOptions, Clock, CooldownLimit, CounterLimit, Entry, GcraLimit, Verdict } from './types';

/** The verdict of an allowed batch that has nothing to give back (the default `peekMany`). */
const ALLOWED_BATCH: BatchVerdict = Object.freeze({ allowed: true, retryAfterMs: 0 });

/**
 * A single verdict from the engine's answer (`0` allowed, else the retry timestamp) and the quota in
 * its record. Fresh verdicts are left unfrozen (freezing costs more than the engine's whole check).
 */
function verdictOf(result: number, now: number, r: Float64Array): Verdict {
  if (result === 0) {
    return {
      allowed: true,
      retryAfterMs: 0,
      limit: r[Slot.Limit]!,
      remaining: r[Slot.Remaining]!,
      refillAfterMs: r[Slot.RefillAfterMs]!,
      resetAfterMs: r[Slot.ResetAfterMs]!,
    };
  }
  return {
    allowed: false,
    retryAfterMs: result > now ? result - now : 1,
    retryTimestamp: result,
    limit: r[Slot.Limit]!,
    remaining: r[Slot.Remaining]!,
    refillAfterMs: r[Slot.RefillAfterMs]!,
    resetAfterMs: r[Slot.ResetAfterMs]!,
  };
}

/** A refused batch's verdict: minus the retry timestamp answered, `blocked` and the quota in the record. */
function refusedBatch(result: number, now: number, r: Float64Array): BatchVerdict {
  const retryTimestamp = -result;
  return {
    allowed: false,
    retryAfterMs: retryTimestamp > now ? retryTimestamp - now : 1,
    retryTimestamp,
    blocked: r[Slot.Blocked]!,
    limit: r[Slot.Limit]!,
    remaining: r[Slot.Remaining]!,
    refillAfterMs: r[Slot.RefillAfterMs]!,
    resetAfterMs: r[Slot.ResetAfterMs]!,
  };
}

/** The default `consumeMany`: `consume` for each entry in order, stopping at the first refusal. */
async function consumeInOrder(store: CooldownStore, entries: readonly Entry[]): Promise<BatchVerdict> {
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const verdict = await store.consume(entry.key, entry.limit);
    if (!verdict.allowed) {
      const out: { -readonly [K in keyof BatchVerdict]: BatchVerdict[K] } = {
        allowed: false,
        retryAfterMs: verdict.retryAfterMs,
      };
      if (verdict.retryTimestamp !== undefined) out.retryTimestamp = verdict.retryTimestamp;
      out.blocked = i;
      return Object.freeze(out);
    }
  }
  return ALLOWED_BATCH;
}

/**
 * A store of cooldowns: counts calls to keys within sliding windows.
 *
 * Implement {@link consume} in one step (the check and the record together) and the rest works:
 * the default {@link consumeMany} calls `consume` for each entry in order and stops at the first
 * refusal (so the entries before it stay counted), and the default {@link peekMany} allows every call.
 * Override both to count a batch all or nothing and to peek without recording, as the built-in stores
 * do. Check a store with `testStore` from `ratewindow/testing`.
 */
export abstract class CooldownStore {
  /** Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. */
  abstract consume(key: string, limit: CooldownLimit): Awaitable<Verdict>;

  /**
   * Counts one call against every entry. This default calls {@link consume} for each in order and stops
   * at the first refusal, whose index it names as `blocked`; the entries before it stay counted.
   */
  consumeMany(entries: readonly Entry[]): Awaitable<BatchVerdict> {
    if (!Array.isArray(entries)) throw typeError('entries must be an array of { key, limit }', entries);
    return consumeInOrder(this, entries);
  }

  /** The verdict {@link consumeMany} would give, recording nothing. This default allows every call. */
  peekMany(entries: readonly Entry[]): Awaitable<BatchVerdict> {
    if (!Array.isArray(entries)) throw typeError('entries must be an array of { key, limit }', entries);
    return ALLOWED_BATCH;
  }
}

/** Options of a {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /** The clock (default: `Date.now()`). Tests pass a manual one. */
  readonly clock?: Clock;
  /**
   * The engine build (default: the native addon). The test suite passes the wasm-bindgen build here to
   * run the same TypeScript on it.
   */
  readonly backend?: Backend;
}

let defaultBackend: Backend | undefined;

/**
 * The backend used by stores created without one (the native addon unless
 * {@link setDefaultBackend} chose another).
 * @internal
 */
export function getDefaultBackend(): Backend {
  return (defaultBackend ??= nativeBackend());
}

/**
 * Chooses the backend used by stores created without one (for the wasm-bindgen package's entry point
 * and the test suite).
 * @internal
 */
export function setDefaultBackend(backend: Backend): void {
  defaultBackend = backend;
}

/** Drops the engine's hold on a release once nothing can call it any more. */
const releases = new FinalizationRegistry<{ store: BackendStore; handle: number }>(({ store, handle }) => {
  try {
    store.dropRelease(handle);
  } catch {
    // A finalizer has no caller to tell; the handle is then merely kept.
  }
});

/**
 * The embedded store: counts in this process with the Rust engine's memory store (a sliding log per
 * key, exact to the millisecond), by the host's clock. Every method answers at once, without a promise.
 *
 * Keys expire eagerly: each call sweeps a few expired keys, so the store shrinks back as it is used.
 * There is no timer, so it never keeps a process alive.
 *
 * It also offers the fixed-window operations ({@link hit}, {@link attempts}, ...) that
 * {@link RateLimiter} is built on.
 *
 * ```ts
 * const store = new MemoryStore();
 * const verdict = store.consume('click:alice', { uses: 3, windowMs: 10_000 });
 * if (!verdict.allowed) console.log(`wait ${verdict.retryAfterMs} ms`);
 * ```
 */
export class MemoryStore extends CooldownStore {
  private readonly native: BackendStore;
  /** Where the engine writes the parts of each answer it does not return (see `backend.ts`). */
  private readonly record = new Float64Array(RECORD_LENGTH);
  private readonly clock: Clock | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    super();
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const backend = options.backend ?? getDefaultBackend();
    checkRecordLayout(backend);
    this.native = backend.createStore(this.record);
    this.clock = options.clock;
    this.locks = memoryLockDriver(backend as Backend & LockBackend, () => this.now());
  }

  /** The store's locks (the engine's table, timed by the store's clock). */
  private readonly locks: LockDriver;

  /**
   * A lock on `key` held for `ttl` seconds once taken, owned by `owner` (default: a fresh token; pass
   * another lock's `owner` to restore it). Exclusive within this process (the store's memory).
   */
  lock(key: string, ttl: number, owner?: string): LockType {
    return new Lock(this.locks, key, ttl, owner);
  }

  /** Runs `fn` holding the lock `key` (see {@link withLock}). */
  withLock<T>(key: string, ttl: number, fn: () => T | Promise<T>, options?: WithLockOptions): Promise<T> {
    return withLock(this, key, ttl, fn, options);
  }

  private now(): number {
    return this.clock === undefined ? Date.now() : checkNow(this.clock.now());
  }

  /**
   * Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. `limit` is a
   * sliding log (`{ uses, windowMs }`), a {@link GcraLimit} or a {@link CounterLimit}; `options.cost`
   * (GCRA and the counter) is the uses the call takes, default 1. Keys of different algorithms are
   * different keys.
   */
  override consume(key: string, limit: AnyLimit, options?: CallOptions): Verdict {
    checkKey(key);
    const kind = rateKind(limit);
    if (kind !== 0) return this.rate(true, key, kind, limit as GcraLimit, costOf(options));
    checkLimitShape(limit);
    if (options !== undefined && costOf(options) !== 1) return this.weighted(true, key, limit, costOf(options));
    const now = this.now();
    let result: number;
    try {
      result = this.native.consume(key, limit.uses, limit.windowMs, now);
    } catch (e) {
      throw fromBackend(e, limit.uses, limit.windowMs);
    }
    return verdictOf(result, now, this.record);
  }

  /** The verdict {@link consume} would give, recording and creating nothing. */
  peek(key: string, limit: AnyLimit, options?: CallOptions): Verdict {
    checkKey(key);
    const kind = rateKind(limit);
    if (kind !== 0) return this.rate(false, key, kind, limit as GcraLimit, costOf(options));
    checkLimitShape(limit);
    if (options !== undefined && costOf(options) !== 1) return this.weighted(false, key, limit, costOf(options));
    const now = this.now();
    let result: number;
    try {
      result = this.native.peek(key, limit.uses, limit.windowMs, now);
    } catch (e) {
      throw fromBackend(e, limit.uses, limit.windowMs);
    }
    return verdictOf(result, now, this.record);
  }

  /** The native methods of GCRA and the counter, or the refusal of a build without them. */
  private rates(algorithm: string): Required<BackendStore> {
    if (this.native.rateConsume === undefined) throw new UnsupportedError(algorithm, `this build of the memory store does not count ${algorithm} limits (the native addon does)`);
    return this.native as Required<BackendStore>;
  }

  /** A GCRA (`kind` 1) or counter (`kind` 2) consume or peek. */
  private rate(record: boolean, key: string, kind: 1 | 2, limit: GcraLimit, cost: number): Verdict {
    const native = this.rates(limit.algorithm);
    const burst = kind === 1 ? (limit.burst ?? limit.uses) : 0;
    const now = this.now();
    let result: number;
    try {
      result = record
        ? native.rateConsume(key, kind, limit.uses, limit.windowMs, burst, cost, now)
        : native.ratePeek(key, kind, limit.uses, limit.windowMs, burst, cost, now);
    } catch (e) {
      throw fromBackend(e, limit.uses, limit.windowMs, limit.burst, cost);
    }
    return verdictOf(result, now, this.record);
  }

  /** A sliding-log call costing `cost` uses: the engine's batch of one (its release handle dropped). */
  private weighted(record: boolean, key: string, limit: CooldownLimit, cost: number): Verdict {
    const native = this.rates('weighted sliding');
    try {
      native.mixedPush(key, 0, limit.uses, limit.windowMs, 0, cost);
    } catch (e) {
      native.mixedClear();
      // A batch of one: its refusal named as a single call's (`cost`, not `entries[0].cost`).
      const error = e as { message?: unknown };
      if (typeof error?.message === 'string') error.message = error.message.replace(/^invalid entries\[0\]\./, 'invalid ');
      throw fromBackend(e, limit.uses, limit.windowMs, undefined, cost);
    }
    const now = this.now();
    let result: number;
    try {
      result = record ? native.mixedConsume(now) : native.mixedPeek(now);
    } catch (e) {
      native.mixedClear();
      throw fromBackend(e);
    }
    if (result > 0) native.dropRelease(result);
    return verdictOf(result < 0 ? -result : 0, now, this.record);
  }

  /**
   * Forgets `key`'s GCRA bucket or counter (by `limit`'s algorithm): its next call finds every use there.
   * @throws {TypeError} for a sliding-log limit (its calls are given back by a batch's `release()`).
   */
  reset(key: string, limit: GcraLimit | CounterLimit): void {
    checkKey(key);
    const kind = rateKind(limit);
    if (kind === 0) throw typeError("reset takes a GCRA or counter limit ({ algorithm: 'gcra' | 'counter', ... })", limit);
    const native = this.rates(limit.algorithm);
    this.call(() => native.rateReset(key, kind));
  }

  /** Pushes a batch mixing algorithms (checked in full first), as {@link pushBatch}. */
  private pushMixed(entries: readonly Entry[]): Required<BackendStore> {
    const kinds: number[] = [];
    for (const entry of entries) {
      if (typeof entry !== 'object' || entry === null) throw typeError('each entry must be { key, limit, cost? }', entry);
      checkKey(entry.key);
      const kind = rateKind(entry.limit);
      if (kind === 0) checkLimitShape(entry.limit);
      costOf(entry);
      kinds.push(kind);
    }
    // A batch of sliding-log entries with costs takes the same path (the weighted sliding log).
    const rated = entries.find((e) => rateKind(e.limit) !== 0);
    const native = this.rates(rated === undefined ? 'weighted sliding' : (rated.limit as GcraLimit).algorithm);
    entries.forEach((entry, i) => {
      const limit = entry.limit as GcraLimit;
      const burst = kinds[i] === 1 ? (limit.burst ?? limit.uses) : 0;
      const cost = costOf(entry);
      try {
        native.mixedPush(entry.key, kinds[i]!, limit.uses, limit.windowMs, burst, cost);
      } catch (e) {
        native.mixedClear();
        throw fromBackend(e, limit.uses, limit.windowMs, limit.burst, cost);
      }
    });
    return native;
  }

  /** A mixed batch consumed (`record`) or peeked. */
  private mixed(entries: readonly Entry[], record: boolean): BatchVerdict {
    const native = this.pushMixed(entries);
    let now: number;
    let result: number;
    try {
      now = this.now();
      result = record ? native.mixedConsume(now) : native.mixedPeek(now);
    } catch (e) {
      native.mixedClear();
      throw e instanceof TypeError || e instanceof InvalidArgumentError || e instanceof InvalidLimitError ? e : fromBackend(e);
    }
    if (result < 0) return refusedBatch(result, now, this.record);
    return record ? this.allowedWithRelease(result) : verdictOf(0, now, this.record);
  }

  private pushBatch(entries: readonly Entry[]): void {
    // Checked in full before anything crosses, so a TypeError leaves no batch half-built.
    checkEntries(entries);
    for (const { key, limit } of entries) {
      try {
        this.native.batchPush(key, limit.uses, limit.windowMs);
      } catch (e) {
        this.native.batchClear();
        throw fromBackend(e, limit.uses, limit.windowMs);
      }
    }
  }

  /**
   * Counts one call against every entry at once: recorded against all of them only if none refuses.
   * A refusal names `blocked`, the entry with the longest wait, and that wait. An allowed verdict
   * carries `release()` (not enumerable), which gives back exactly this call.
   *
   * Entries may mix algorithms (a per-user {@link GcraLimit} and a global sliding log in one call), each
   * with its `cost`; entries naming one GCRA or counter key count one after another. `release()` then
   * gives back the sliding-log calls only.
   */
  override consumeMany(entries: readonly Entry[]): BatchVerdict {
    if (Array.isArray(entries) && mixesRates(entries)) return this.mixed(entries, true);
    this.pushBatch(entries);
    let now: number;
    let result: number;
    try {
      now = this.now();
      result = this.native.batchConsume(now);
    } catch (e) {
      this.native.batchClear();
      throw e instanceof TypeError || e instanceof InvalidArgumentError ? e : fromBackend(e);
    }
    if (result < 0) return refusedBatch(result, now, this.record);
    return this.allowedWithRelease(result);
  }

  private allowedWithRelease(handle: number): BatchVerdict {
    const native = this.native;
    let pending = handle;
    const release = (): void => {
      if (pending === 0) return;
      const now = this.now();
      const h = pending;
      pending = 0;
      releases.unregister(release);
      try {
        native.release(h, now);
      } catch (e) {
        throw fromBackend(e);
      }
    };
    releases.register(release, { store: native, handle }, release);
    const verdict = verdictOf(0, 0, this.record);
    Object.defineProperty(verdict, 'release', { value: release, enumerable: false });
    return Object.freeze(verdict);
  }

  /** The verdict {@link consumeMany} would give, recording, trimming and creating nothing. */
  override peekMany(entries: readonly Entry[]): BatchVerdict {
    if (Array.isArray(entries) && mixesRates(entries)) return this.mixed(entries, false);
    this.pushBatch(entries);
    let now: number;
    let result: number;
    try {
      now = this.now();
      result = this.native.batchPeek(now);
    } catch (e) {
      this.native.batchClear();
      throw e instanceof TypeError || e instanceof InvalidArgumentError ? e : fromBackend(e);
    }
    return result === 0 ? verdictOf(0, now, this.record) : refusedBatch(result, now, this.record);
  }

  /**
   * Fixed window: adds `amount` hits to `key` (a negative amount gives hits back) and returns the
   * count. The first hit opens a window of `decayMs` milliseconds; hits inside it do not move it; once
   * it has ended the count starts from zero.
   */
  hit(key: string, decayMs: number, amount = 1): number {
    checkKey(key);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    checkInteger('amount', amount);
    const now = this.now();
    try {
      return this.native.hit(key, decayMs, amount, now);
    } catch (e) {
      throw fromBackend(e, undefined, decayMs);
    }
  }

  /** {@link hit}, answering the count and the milliseconds until the window ends together. */
  hitWindow(key: string, decayMs: number, amount = 1): { readonly count: number; readonly resetAfterMs: number } {
    checkKey(key);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    checkInteger('amount', amount);
    const now = this.now();
    let count: number;
    try {
      count = this.native.hitWindow(key, decayMs, amount, now);
    } catch (e) {
      throw fromBackend(e, undefined, decayMs);
    }
    return { count, resetAfterMs: this.record[Slot.ResetAfterMs]! };
  }

  /**
   * Fixed window, atomically: counts one hit on `key` if it has fewer than `max` in its window (opening
   * one of `decayMs` ms if none runs), else nothing. Exactly `max` attempts are allowed per window.
   * With `options.cost`, the attempt takes `cost` hits, counted only when the count plus `cost` is at
   * most `max` (else nothing); a cost that is not a whole number from 1 is `InvalidArgumentError`.
   */
  attempt(key: string, max: number, decayMs: number, options?: CallOptions): AttemptResult {
    checkKey(key);
    checkInteger('max', max);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    const cost = options === undefined ? 1 : costOf(options);
    const now = this.now();
    let count: number;
    try {
      if (cost === 1) count = this.native.attempt(key, max, decayMs, now);
      else if (this.native.attemptCost === undefined) throw new UnsupportedError('weighted attempt', 'an attempt with a cost: not in this build (the native addon counts them)');
      else count = this.native.attemptCost(key, max, decayMs, cost, now);
    } catch (e) {
      if (e instanceof UnsupportedError) throw e;
      throw fromBackend(e, undefined, decayMs, undefined, cost);
    }
    return { allowed: this.record[Slot.Allowed] === 1, count, resetAfterMs: this.record[Slot.ResetAfterMs]! };
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  attempts(key: string): number {
    checkKey(key);
    return this.call(() => this.native.attempts(key, this.now()));
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  tooManyAttempts(key: string, max: number): boolean {
    checkKey(key);
    checkInteger('max', max);
    return this.call(() => this.native.tooManyAttempts(key, max, this.now()));
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  remaining(key: string, max: number): number {
    checkKey(key);
    checkInteger('max', max);
    return this.call(() => this.native.remaining(key, max, this.now()));
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  availableIn(key: string): number {
    checkKey(key);
    return this.call(() => this.native.availableIn(key, this.now()));
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  availableInMs(key: string): number {
    checkKey(key);
    return this.call(() => this.native.availableInMs(key, this.now()));
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  resetAttempts(key: string): void {
    checkKey(key);
    this.call(() => this.native.resetAttempts(key, this.now()));
  }

  /** Removes `key`'s count and window; its next hit opens a new window. */
  clear(key: string): void {
    checkKey(key);
    this.call(() => this.native.clear(key));
  }

  /** Removes every expired key now, in O(keys). Never needed for correctness. */
  purge(): void {
    this.call(() => this.native.purge(this.now()));
  }

  /** How many keys the store holds (expired ones not yet swept included). */
  get size(): number {
    return this.call(() => this.native.size());
  }

  private call<T>(f: () => T): T {
    try {
      return f();
    } catch (e) {
      throw e instanceof TypeError || e instanceof InvalidArgumentError ? e : fromBackend(e);
    }
  }
}

/**
 * Checks a limit with the engine and returns it as a frozen `{ uses, windowMs }`.
 * @throws {InvalidLimitError} when it cannot be held.
 */
export function cooldownLimit(uses: number, windowMs: number, backend: Backend = getDefaultBackend()): CooldownLimit {
  if (typeof uses !== 'number') throw typeError('uses must be a number', uses);
  if (typeof windowMs !== 'number') throw typeError('windowMs must be a number', windowMs);
  try {
    backend.checkLimit(uses, windowMs);
  } catch (e) {
    throw fromBackend(e, uses, windowMs);
  }
  return Object.freeze({ uses, windowMs });
}

/**
 * A GCRA limit (a token bucket: governor's `Quota`, Upstash's `tokenBucket`), checked with the engine:
 * `uses` per `windowMs` on average, up to `burst` at once (default `uses`). Returned frozen as
 * `{ algorithm: 'gcra', uses, windowMs, burst }`.
 * @throws {InvalidLimitError} naming `uses`, `windowMs` or `burst` when it cannot be held exactly.
 */
export function gcraLimit(uses: number, windowMs: number, burst: number = uses, backend: Backend = getDefaultBackend()): GcraLimit {
  if (typeof uses !== 'number') throw typeError('uses must be a number', uses);
  if (typeof windowMs !== 'number') throw typeError('windowMs must be a number', windowMs);
  if (typeof burst !== 'number') throw typeError('burst must be a number', burst);
  checkRate(backend, 1, uses, windowMs, burst);
  return Object.freeze({ algorithm: 'gcra', uses, windowMs, burst });
}

/**
 * A sliding-window counter limit (Upstash's `slidingWindow`, `limits`' `SlidingWindowCounter`), checked
 * with the engine: about `uses` per any `windowMs`, in constant memory per key. Returned frozen as
 * `{ algorithm: 'counter', uses, windowMs }`.
 * @throws {InvalidLimitError} naming `uses` or `windowMs` when it cannot be held exactly.
 */
export function counterLimit(uses: number, windowMs: number, backend: Backend = getDefaultBackend()): CounterLimit {
  if (typeof uses !== 'number') throw typeError('uses must be a number', uses);
  if (typeof windowMs !== 'number') throw typeError('windowMs must be a number', windowMs);
  checkRate(backend, 2, uses, windowMs, 0);
  return Object.freeze({ algorithm: 'counter', uses, windowMs });
}

function checkRate(backend: Backend, kind: 1 | 2, uses: number, windowMs: number, burst: number): void {
  const algorithm = kind === 1 ? 'gcra' : 'counter';
  if (backend.checkRate === undefined) throw new UnsupportedError(algorithm, `this build does not count ${algorithm} limits (the native addon does)`);
  try {
    backend.checkRate(kind, uses, windowMs, burst);
  } catch (e) {
    throw fromBackend(e, uses, windowMs, burst);
  }
}
