/**
 * Cooldown stores: the abstract {@link CooldownStore} any store extends, and {@link MemoryStore}, the
 * embedded default that counts in this process with the Rust engine.
 * @module
 */
import { checkRecordLayout, RECORD_LENGTH, Slot, type Backend, type BackendStore } from './backend';
import { checkEntries, checkInteger, checkKey, checkLimitShape, checkNow } from './check';
import { fromBackend, InvalidArgumentError, typeError } from './errors';
import { memoryLockDriver, withLock, type Lock as LockType, type LockBackend, type LockDriver, type WithLockOptions } from './lock';
import { Lock } from './lock';
import { nativeBackend } from './native';
import type { AttemptResult, Awaitable, BatchVerdict, Clock, CooldownLimit, Entry, Verdict } from './types';

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
   * A lock on `key` held for `ttl` seconds once taken, owned by `owner` (default: a random token; pass
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

  /** Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. */
  override consume(key: string, limit: CooldownLimit): Verdict {
    checkKey(key);
    checkLimitShape(limit);
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
  peek(key: string, limit: CooldownLimit): Verdict {
    checkKey(key);
    checkLimitShape(limit);
    const now = this.now();
    let result: number;
    try {
      result = this.native.peek(key, limit.uses, limit.windowMs, now);
    } catch (e) {
      throw fromBackend(e, limit.uses, limit.windowMs);
    }
    return verdictOf(result, now, this.record);
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
   */
  override consumeMany(entries: readonly Entry[]): BatchVerdict {
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
   */
  attempt(key: string, max: number, decayMs: number): AttemptResult {
    checkKey(key);
    checkInteger('max', max);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    const now = this.now();
    let count: number;
    try {
      count = this.native.attempt(key, max, decayMs, now);
    } catch (e) {
      throw fromBackend(e, undefined, decayMs);
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
