/**
 * The failure guard: wraps any cooldown store (ours or your own) so a store that is slow, down or still
 * connecting never hangs or crashes a caller. A call waits at most `timeoutMs`; then, or when the store
 * throws, a policy answers it (`'deny'`, `'allow'` or a fallback store), and the verdict says why
 * (`failed: 'timeout' | 'store-error' | 'not-ready'`, with the `cause`). A consume whose answer comes
 * after the guard refused it is given back (its verdict's `release()`), and so is one that failed after
 * its command may have run (ratewindow's stores give such an error a `release()` by the call's id), so
 * nobody loses a use for a call that never ran. `ready()` holds calls until the store has connected (up to `timeoutMs`);
 * `close()` waits for the calls and releases under way, then runs the store's shutdown hook.
 *
 * ```ts
 * import { guard, RedisStore } from 'ratewindow';
 * const store = guard(RedisStore.using(run, { evalsha }), { timeoutMs: 250, onFailure: 'deny', blockCache: true });
 * const verdict = await store.consume(`click:${user}`, { uses: 3, windowMs: 10_000 });
 * if (verdict.failed) log.warn('cooldown store', verdict.failed, verdict.cause);
 * ```
 *
 * Every decision (the policy's verdict, which errors are failures, what a late answer gets, the block
 * cache, the counters) is made by the engine (`ratewindow_core::guard`); this layer races the timer and
 * runs the stores.
 * @module
 */
import { join } from 'node:path';

import { checkEntries, checkKey, checkLimitShape } from './check';
import { consumeReleasable } from './drive';
import { fromBackend, InvalidArgumentError, typeError } from './errors';
import { CooldownStore } from './store';
import { StoreError } from './store-errors';
import type { Awaitable, BatchVerdict, CooldownLimit, Entry, Verdict } from './types';

/** Why the guard, not the store, answered a call. */
export type GuardFailure = 'timeout' | 'store-error' | 'not-ready';

/** What the guard adds to a verdict it made (a policy's, or the fallback store's). */
export interface GuardVerdictFields {
  /**
   * Present when the store did not answer the call: `timeout` (no answer within `timeoutMs`),
   * `store-error` (the store threw) or `not-ready` (it had not connected within `timeoutMs`, or the
   * guard is closed).
   */
  readonly failed?: GuardFailure;
  /** The error behind `failed` (the store's, or a `StoreError` for a timeout). Not enumerable. */
  readonly cause?: unknown;
}

/** A single verdict from a guarded store. */
export type GuardedVerdict = Verdict & GuardVerdictFields;
/** A batch verdict from a guarded store. */
export type GuardedBatchVerdict = BatchVerdict & GuardVerdictFields;

/** Which operation of the store a call ran. */
export type GuardOperation = 'consume' | 'consumeMany' | 'peek' | 'peekMany';

/** What {@link GuardOptions.onEvent} receives: one event per failure, fallback failure, and late release. */
export type GuardEvent =
  | {
      /** The store timed out, threw, or was not ready: the policy answered. */
      readonly type: 'failure';
      readonly failed: GuardFailure;
      readonly cause: unknown;
      readonly operation: GuardOperation;
      readonly entries: readonly Entry[];
    }
  | {
      /** The fallback store threw too: the call was refused as under `'deny'`. */
      readonly type: 'fallback-error';
      readonly cause: unknown;
      readonly operation: GuardOperation;
      readonly entries: readonly Entry[];
    }
  | {
      /**
       * A consume the guard had refused was counted by a late answer, or failed after its command may
       * have run, and was given back (`error` absent), or could not be (`error`: what the release
       * threw, or that the verdict had no `release`).
       */
      readonly type: 'late-release';
      readonly entries: readonly Entry[];
      readonly error?: unknown;
    };

/** Options of {@link guard}. */
export interface GuardOptions {
  /**
   * How long a call waits for the store (and, before {@link GuardedStore.ready} has finished, for the
   * store to connect), in ms: a whole number from 1 to 2147483648. Default 1000.
   */
  readonly timeoutMs?: number;
  /**
   * What a call gets when the store times out, throws or is not ready: `'deny'` (refused, with
   * `retryAfterMs` = `timeoutMs`; the default), `'allow'`, or a fallback store that counts while the
   * main one fails (e.g. `new MemoryStore()`; refused as under `'deny'` if it throws too). A late answer
   * is given back when the guard refused the call, and kept when it allowed it (the call ran).
   */
  readonly onFailure?: 'deny' | 'allow' | CooldownStore;
  /**
   * Remember refusals locally until their wait ends, per key and limit, and refuse calls before then
   * without a round trip (`true`: up to 100,000 entries, evicting the soonest to expire). Exact for the
   * sliding window, except that a release made by another process is not seen here (a release through
   * this guard forgets the entries at once). Default off.
   */
  readonly blockCache?: boolean | { readonly maxKeys?: number };
  /** Called for every failure, fallback failure and late release (never awaited; what it throws is ignored). */
  readonly onEvent?: (event: GuardEvent) => void;
}

/** A guard's counters (since it was made): what {@link GuardedStore.stats} answers. */
export interface GuardStats {
  /** Calls begun (consumes and peeks). */
  readonly calls: number;
  /** Calls answered allowed (by the store, `'allow'`, or the fallback). */
  readonly allowed: number;
  /** Calls answered refused (by the store, `'deny'`, the fallback or the block cache). */
  readonly refused: number;
  /** Calls the store did not answer within `timeoutMs`. */
  readonly timeouts: number;
  /** Calls whose store threw. */
  readonly storeErrors: number;
  /** Calls that came before the store was ready and waited longer than `timeoutMs` (or after `close()`). */
  readonly notReady: number;
  /**
   * Calls given back after the guard refused them: late answers that counted, and consumes that failed
   * after their command may have run (a reply cut after the script ran), given back by their call id.
   */
  readonly lateReleases: number;
  /** Late answers that could not be given back (the release threw, or the verdict had none). */
  readonly lateReleasesFailed: number;
  /** Calls answered by the fallback store. */
  readonly fallbackCalls: number;
  /** Calls refused by the block cache without a round trip. */
  readonly cacheHits: number;
}

/** The addon's guard (see `src/guard.rs`). */
interface NativeGuard {
  readonly caching: boolean;
  begin(): void;
  check(key: string, uses: number, windowMs: number, now: number): number;
  batchPush(key: string, uses: number, windowMs: number): void;
  batchClear(): void;
  checkBatch(now: number): number;
  answered(allowed: boolean): void;
  refused(key: string, uses: number, windowMs: number, started: number, retryAfterMs: number, retryTimestamp: number, resetAfterMs: number): void;
  forget(key: string, uses: number, windowMs: number): void;
  failed(failure: GuardFailure, begin: boolean): number;
  settled(allowed: boolean): void;
  settledMany(allowed: number, refused: number): void;
  fallbackAnswered(allowed: boolean): void;
  fallbackFailed(): void;
  late(answeredAllowed: boolean, lateAllowed: boolean): number;
  lateReleased(ok: boolean): void;
  stats(): number[];
  cached(): number;
}

interface GuardModule {
  NativeGuard: new (record: Float64Array, timeoutMs: number, policy: string | null, maxKeys: number | null) => NativeGuard;
  guardIsFailure(code: string): boolean;
  guardRecordLayout(): string[];
  guardStatsLayout(): string[];
}

/** The guard record's slots (`ratewindow_js_glue::guard::NAMES`). */
const RECORD = ['retryAfterMs', 'retryTimestamp', 'blocked', 'limit', 'remaining', 'refillAfterMs', 'resetAfterMs'] as const;
const R_RETRY_AFTER = 0;
const R_RETRY_TIMESTAMP = 1;
const R_BLOCKED = 2;
const R_LIMIT = 3;
const R_REMAINING = 4;
const R_REFILL = 5;
const R_RESET = 6;

/** Calls answered in time that the guard hands over to the engine's counters at once (a u32 apiece). */
const HAND_OVER = 1 << 20;

/** The counters, in the order the addon answers them. */
const STATS = [
  'calls',
  'allowed',
  'refused',
  'timeouts',
  'storeErrors',
  'notReady',
  'lateReleases',
  'lateReleasesFailed',
  'fallbackCalls',
  'cacheHits',
] as const satisfies readonly (keyof GuardStats)[];

let loaded: GuardModule | undefined;

/** The addon's guard, loaded once (the guard needs the native addon). */
function guardModule(): GuardModule {
  if (loaded) return loaded;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const m = require(join(__dirname, '..', 'loader.cjs')) as Partial<GuardModule>;
  if (typeof m.NativeGuard !== 'function' || typeof m.guardRecordLayout !== 'function' || typeof m.guardStatsLayout !== 'function') {
    throw new Error('ratewindow: this addon has no failure guard; rebuild the addon');
  }
  if (m.guardRecordLayout().join() !== RECORD.join() || m.guardStatsLayout().join() !== STATS.join()) {
    throw new Error(`ratewindow: the addon's guard record (${m.guardRecordLayout().join()}) is not this package's; rebuild the addon`);
  }
  return (loaded = m as GuardModule);
}

const isThenable = (v: unknown): v is PromiseLike<unknown> =>
  v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function';

/** An error's `code`, else its type's name: what the engine classifies. */
function errorCode(e: unknown): string {
  if (e === null || typeof e !== 'object') return '';
  const code = (e as { code?: unknown }).code;
  if (typeof code === 'string') return code;
  const name = (e as { name?: unknown }).name;
  return typeof name === 'string' ? name : '';
}

/** A call waiting for its deadline: the store's answer, or the store's readiness. */
interface Pending {
  readonly deadline: number;
  /** Answered (by the store, the policy, or the timeout). */
  done: boolean;
  /** Runs when the deadline passes first. */
  expire: () => void;
  /** Whether the verdict the guard gave allowed the call (for the late-answer rule); undefined until known. */
  answeredAllowed: boolean | undefined;
  /** The guard's verdict, while a fallback store is still answering. */
  answer: Promise<BatchVerdict> | undefined;
}

/** What a queue slot holds once its call is answered (the call itself is let go). */
const DONE: Pending = { deadline: 0, done: true, expire: () => {}, answeredAllowed: undefined, answer: undefined };

/**
 * A store guarded against its failures: the same cooldown methods as the store it wraps (`consume`,
 * `consumeMany`, `peek`, `peekMany`, each verdict's `release`), always answering with a promise, never
 * rejecting for a store failure (only for the caller's own mistakes: an invalid limit, a key that is
 * not a string). Made by {@link guard}.
 */
export class GuardedStore extends CooldownStore {
  /** The store guarded. */
  readonly store: CooldownStore;
  private readonly native: NativeGuard;
  /**
   * Calls answered in time by the store (without the cache), not yet handed to the engine's counters:
   * {@link stats} hands them over in one crossing (the happy path then crosses nothing of its own).
   */
  private settledAllowed = 0;
  private settledRefused = 0;
  private readonly record = new Float64Array(RECORD.length);
  private readonly timeoutMs: number;
  private readonly fallback: CooldownStore | undefined;
  private readonly onEvent: ((event: GuardEvent) => void) | undefined;
  private readonly caching: boolean;
  private readonly ownBatch: boolean;
  private readonly ownPeekMany: boolean;
  private readonly isFailure: (code: string) => boolean;

  /** Calls waiting for their deadline, in deadline order, and the first not yet expired. */
  private queue: Pending[] = [];
  private head = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;

  /** Store operations and releases under way (calls answered late included). */
  private busy = 0;
  private drained: (() => void)[] = [];

  private readyWait: Promise<void> | undefined;
  private readyError: unknown;
  private readyRun: Promise<void> | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(store: CooldownStore, options: GuardOptions = {}) {
    super();
    if (store === null || typeof store !== 'object' || typeof (store as { consume?: unknown }).consume !== 'function') {
      throw typeError('store must be a cooldown store (an object with consume)', store);
    }
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const { timeoutMs = 1000, onFailure = 'deny', blockCache = false, onEvent } = options;
    if (typeof timeoutMs !== 'number') throw typeError('timeoutMs must be a number', timeoutMs);
    let policy: string | null;
    if (typeof onFailure === 'string') policy = onFailure;
    else if (onFailure !== null && typeof onFailure === 'object' && typeof (onFailure as { consume?: unknown }).consume === 'function') {
      policy = null;
      this.fallback = onFailure;
    } else throw typeError("onFailure must be 'deny', 'allow' or a cooldown store", onFailure);
    let maxKeys: number | null = null;
    if (blockCache === true) maxKeys = 100_000;
    else if (blockCache !== false && blockCache !== undefined) {
      if (typeof blockCache !== 'object' || blockCache === null) throw typeError('blockCache must be a boolean or { maxKeys }', blockCache);
      const given = (blockCache as { maxKeys?: unknown }).maxKeys ?? 100_000;
      if (typeof given !== 'number') throw typeError('blockCache.maxKeys must be a number', given);
      maxKeys = given;
    }
    if (onEvent !== undefined && typeof onEvent !== 'function') throw typeError('onEvent must be a function', onEvent);
    const m = guardModule();
    try {
      this.native = new m.NativeGuard(this.record, timeoutMs, policy, maxKeys);
    } catch (e) {
      throw optionError(e, { timeoutMs, onFailure, maxKeys });
    }
    this.isFailure = m.guardIsFailure;
    this.store = store;
    this.timeoutMs = timeoutMs;
    this.onEvent = onEvent;
    this.caching = maxKeys !== null;
    this.ownBatch = typeof store.consumeMany === 'function' && store.consumeMany !== CooldownStore.prototype.consumeMany;
    this.ownPeekMany = typeof store.peekMany === 'function' && store.peekMany !== CooldownStore.prototype.peekMany;
    // A store with the default batch methods keeps them here too (each entry then a guarded consume),
    // so the conformance kit and callers see the same semantics as the store's.
    // (The default peekMany answers at once, not with a promise.)
    if (!this.ownBatch) this.consumeMany = CooldownStore.prototype.consumeMany as GuardedStore['consumeMany'];
    if (!this.ownPeekMany) this.peekMany = CooldownStore.prototype.peekMany as GuardedStore['peekMany'];
  }

  /** Counts one call to `key` under `limit` through the store, within `timeoutMs`. */
  override consume(key: string, limit: CooldownLimit): Promise<GuardedVerdict> {
    if (this.caching) return this.cachedOne('consume', key, limit);
    return this.call('consume', [{ key, limit }], true);
  }

  /** Counts one call against every entry through the store, within `timeoutMs`. */
  override consumeMany(entries: readonly Entry[]): Promise<GuardedBatchVerdict> {
    return this.call('consumeMany', entries, false);
  }

  /** The verdict {@link consume} would give, recording nothing, within `timeoutMs`. */
  peek(key: string, limit: CooldownLimit): Promise<GuardedVerdict> {
    if (this.caching) return this.cachedOne('peek', key, limit);
    return this.call('peek', [{ key, limit }], true);
  }

  /**
   * A call on one entry with the block cache: a remembered refusal is answered from one native call,
   * with nothing allocated but the verdict and its promise (no entries array); a miss goes to the
   * store.
   */
  private cachedOne(op: 'consume' | 'peek', key: string, limit: CooldownLimit): Promise<GuardedVerdict> {
    const started = performance.now();
    let wait: number;
    try {
      checkKey(key);
      checkLimitShape(limit);
      wait = this.native.check(key, limit.uses, limit.windowMs, started);
    } catch (e) {
      return Promise.reject(fromBackend(e, (limit as { uses?: number } | null)?.uses, (limit as { windowMs?: number } | null)?.windowMs));
    }
    if (wait > 0) return Promise.resolve(this.refusalFromRecord(true));
    return this.uncached(op, [{ key, limit }], true, started);
  }

  /** The verdict {@link consumeMany} would give, recording nothing, within `timeoutMs`. */
  override peekMany(entries: readonly Entry[]): Promise<GuardedBatchVerdict> {
    return this.call('peekMany', entries, false);
  }

  /** Hands the calls answered in time over to the engine's counters. */
  private handOver(): void {
    if (this.settledAllowed + this.settledRefused === 0) return;
    this.native.settledMany(this.settledAllowed, this.settledRefused);
    this.settledAllowed = 0;
    this.settledRefused = 0;
  }

  /** The counters. */
  stats(): GuardStats {
    this.handOver();
    const values = this.native.stats();
    const out: Record<string, number> = {};
    for (let i = 0; i < STATS.length; i++) out[STATS[i]!] = values[i]!;
    return Object.freeze(out) as unknown as GuardStats;
  }

  /** Entries the block cache holds (0 without a cache). */
  get cachedEntries(): number {
    return this.native.cached();
  }

  /**
   * Connects the store: runs `connect` (default: the store's own `onReady()`, if it has one). Calls
   * that come meanwhile wait for it up to `timeoutMs`, then meet the policy (`failed: 'not-ready'`).
   * If it throws, calls meet the policy at once until `ready()` succeeds; the promise rejects with
   * its error. Without a `connect` step the store is ready at once.
   */
  ready(connect?: () => Awaitable<unknown>): Promise<void> {
    if (connect !== undefined && typeof connect !== 'function') return Promise.reject(typeError('connect must be a function', connect));
    const own = (this.store as { onReady?: unknown }).onReady;
    const step = connect ?? (typeof own === 'function' ? () => (own as () => Awaitable<unknown>).call(this.store) : undefined);
    if (step === undefined) return Promise.resolve();
    if (this.readyRun !== undefined) return this.readyRun;
    this.readyError = undefined;
    const run = (async () => {
      await step();
    })();
    const settled = run.then(
      () => {
        this.readyError = undefined;
      },
      (e: unknown) => {
        this.readyError = e ?? new StoreError('the store failed to connect');
      },
    );
    this.readyWait = settled;
    this.readyRun = run.finally(() => {
      this.readyRun = undefined;
      if (this.readyWait === settled) this.readyWait = undefined;
    });
    return this.readyRun;
  }

  /**
   * Closes the guard: new calls meet the policy (`failed: 'not-ready'`); then it waits for the calls,
   * late answers and releases under way, and runs `shutdown` (default: the store's own
   * `onShutdown()`, if it has one), so the store closes after its last write. A store that never
   * answers a call holds `close()` until its client gives up (its own socket timeout). Called again,
   * it answers the same promise. `await using` calls it too.
   */
  close(shutdown?: () => Awaitable<unknown>): Promise<void> {
    if (this.closing) return this.closing;
    if (shutdown !== undefined && typeof shutdown !== 'function') return Promise.reject(typeError('shutdown must be a function', shutdown));
    this.closed = true;
    this.closing = (async () => {
      while (this.busy > 0) await new Promise<void>((resolve) => this.drained.push(resolve));
      // Nothing is under way: the deadline timer (if armed for answered calls) need not keep the process.
      if (this.timer !== undefined) {
        clearTimeout(this.timer);
        this.timer = undefined;
        this.queue = [];
        this.head = 0;
      }
      const own = (this.store as { onShutdown?: unknown }).onShutdown;
      if (shutdown !== undefined) await shutdown();
      else if (typeof own === 'function') await (own as () => Awaitable<unknown>).call(this.store);
    })();
    return this.closing;
  }

  /** {@link close}: what `await using store = guard(...)` calls at the end of its block. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // --- the call --------------------------------------------------------------------------------

  private call(op: GuardOperation, entries: readonly Entry[], single: boolean): Promise<BatchVerdict> {
    const started = performance.now();
    if (this.caching) {
      let wait: number;
      try {
        if (single) {
          const { key, limit } = entries[0]!;
          checkKey(key);
          checkLimitShape(limit);
          wait = this.native.check(key, limit.uses, limit.windowMs, started);
        } else {
          checkEntries(entries);
          for (let i = 0; i < entries.length; i++) {
            const { key, limit } = entries[i]!;
            this.native.batchPush(key, limit.uses, limit.windowMs);
          }
          wait = this.native.checkBatch(started);
        }
      } catch (e) {
        this.native.batchClear();
        const limit = single ? entries[0]!.limit : undefined;
        return Promise.reject(fromBackend(e, limit?.uses, limit?.windowMs));
      }
      if (wait > 0) return Promise.resolve(this.fromRecord(single));
    }
    return this.uncached(op, entries, single, started);
  }

  /** A call the block cache (if on) did not answer: to the store, once it is ready. */
  private uncached(op: GuardOperation, entries: readonly Entry[], single: boolean, started: number): Promise<BatchVerdict> {
    // Without the cache a call is counted when it is answered (one crossing: `settled`, `failed`).
    if (this.closed) return this.failure(op, entries, single, 'not-ready', new StoreError('the guard is closed'));
    if (this.readyWait !== undefined) return this.afterReady(op, entries, single, started);
    if (this.readyError !== undefined) return this.failure(op, entries, single, 'not-ready', this.readyError);
    return this.send(op, entries, single, started);
  }

  /** Runs the operation on the store and races its answer against the deadline. */
  private send(op: GuardOperation, entries: readonly Entry[], single: boolean, started: number): Promise<BatchVerdict> {
    let answer: Awaitable<BatchVerdict>;
    // The verdict's release is only needed once the guard has answered (a late answer).
    let pending: Pending | undefined;
    const wanted = op === 'consume' ? () => pending === undefined || pending.done : undefined;
    try {
      answer = this.invoke(this.store, op, entries, true, wanted);
    } catch (e) {
      return this.thrown(op, entries, single, e);
    }
    if (!isThenable(answer)) return Promise.resolve(this.settle(answer, entries, single, started));
    this.busy++;
    return new Promise<BatchVerdict>((resolve, reject) => {
      const p: Pending = {
        deadline: started + this.timeoutMs,
        done: false,
        answeredAllowed: undefined,
        answer: undefined,
        expire: () => {
          const out = this.failure(op, entries, single, 'timeout', new StoreError(`the store did not answer within ${this.timeoutMs} ms`));
          p.answer = out;
          void out.then((v) => (p.answeredAllowed = v.allowed), () => (p.answeredAllowed = false));
          out.then(resolve, reject);
        },
      };
      pending = p;
      this.schedule(p);
      answer.then(
        (v) => {
          if (!p.done) {
            p.done = true;
            this.idle();
            let out: BatchVerdict;
            try {
              out = this.settle(v, entries, single, started);
            } catch (e) {
              reject(e);
              return;
            }
            resolve(out);
          } else {
            this.lateAnswer(op, entries, v, p);
          }
        },
        (e: unknown) => {
          if (!p.done) {
            p.done = true;
            this.idle();
            this.thrown(op, entries, single, e).then(resolve, reject);
          } else {
            // A late failure: a consume that may have counted (its reply lost after the script ran)
            // is given back like a late answer that counted; anything else recorded nothing.
            const release = failedRelease(op, e);
            if (release !== undefined && this.isFailure(errorCode(e))) this.lateAnswer(op, entries, counted(release), p);
            else this.idle();
          }
        },
      );
    });
  }

  /** A call that came before the store was ready: waits for it up to the deadline. */
  private afterReady(op: GuardOperation, entries: readonly Entry[], single: boolean, started: number): Promise<BatchVerdict> {
    const wait = this.readyWait!;
    this.busy++;
    return new Promise<BatchVerdict>((resolve, reject) => {
      const p: Pending = {
        deadline: started + this.timeoutMs,
        done: false,
        answeredAllowed: undefined,
        answer: undefined,
        expire: () => {
          this.idle();
          this.failure(op, entries, single, 'not-ready', new StoreError(`the store was not ready within ${this.timeoutMs} ms`)).then(resolve, reject);
        },
      };
      this.schedule(p);
      void wait.then(() => {
        if (p.done) return;
        p.done = true;
        this.idle();
        const next =
          this.closed
            ? this.failure(op, entries, single, 'not-ready', new StoreError('the guard is closed'))
            : this.readyError !== undefined
              ? this.failure(op, entries, single, 'not-ready', this.readyError)
              : this.send(op, entries, single, performance.now());
        next.then(resolve, reject);
      });
    });
  }

  private invoke(store: CooldownStore, op: GuardOperation, entries: readonly Entry[], main: boolean, wanted?: () => boolean): Awaitable<BatchVerdict> {
    switch (op) {
      case 'consume': {
        const { key, limit } = entries[0]!;
        // A verdict needs `release` for a late answer (and a failure, for a call that may have
        // counted): ratewindow's stores give it to a single consume asked for it; another store's
        // own batch has it.
        const releasable = (store as { [consumeReleasable]?: unknown })[consumeReleasable];
        if (typeof releasable === 'function') {
          return (releasable as (k: string, l: CooldownLimit, w?: () => boolean) => Awaitable<BatchVerdict>).call(store, key, limit, wanted);
        }
        return (main ? this.ownBatch : hasOwnBatch(store)) ? store.consumeMany(entries) : store.consume(key, limit);
      }
      case 'consumeMany':
        return store.consumeMany(entries);
      case 'peek': {
        const { key, limit } = entries[0]!;
        const peek = (store as { peek?: unknown }).peek;
        return typeof peek === 'function'
          ? (peek as (k: string, l: CooldownLimit) => Awaitable<BatchVerdict>).call(store, key, limit)
          : store.peekMany(entries);
      }
      case 'peekMany':
        return store.peekMany(entries);
    }
  }

  /** The store answered in time: counted (a refusal cached), and the verdict as the caller sees it. */
  private settle(v: BatchVerdict, entries: readonly Entry[], single: boolean, started: number): BatchVerdict {
    if (v.allowed) {
      if (this.caching) this.native.answered(true);
      else if (++this.settledAllowed === HAND_OVER) this.handOver();
      return single || typeof v.release !== 'function' ? v : this.withRelease(v, v, entries, true);
    }
    if (this.caching) {
      const i = single ? 0 : v.blocked;
      const entry = typeof i === 'number' ? entries[i] : undefined;
      if (entry !== undefined && typeof v.retryAfterMs === 'number') {
        this.native.refused(
          entry.key,
          entry.limit.uses,
          entry.limit.windowMs,
          started,
          v.retryAfterMs,
          v.retryTimestamp ?? NaN,
          v.resetAfterMs ?? NaN,
        );
      } else this.native.answered(false);
    } else if (++this.settledRefused === HAND_OVER) this.handOver();
    return single ? singleOf(v) : v;
  }

  /**
   * The store threw: the caller's own mistake is rethrown, anything else meets the policy. A consume
   * that may have counted (the store's error carries `release()`: its reply was lost after the script
   * ran) is then given back when the guard refused it, and kept when it allowed it: the late-answer
   * rule, with the call counted.
   */
  private thrown(op: GuardOperation, entries: readonly Entry[], single: boolean, e: unknown): Promise<BatchVerdict> {
    if (!this.isFailure(errorCode(e))) return Promise.reject(e);
    const out = this.failure(op, entries, single, 'store-error', e);
    const release = failedRelease(op, e);
    if (release !== undefined) {
      this.busy++;
      out.then(
        (v) => this.lateAnswer(op, entries, counted(release), { ...DONE, answeredAllowed: v.allowed === true }),
        () => this.idle(),
      );
    }
    return out;
  }

  /** A failure: the policy's verdict, or the fallback store's. */
  private failure(op: GuardOperation, entries: readonly Entry[], single: boolean, failed: GuardFailure, cause: unknown): Promise<BatchVerdict> {
    this.emit({ type: 'failure', failed, cause, operation: op, entries });
    const r = this.native.failed(failed, !this.caching);
    if (r === 1) return Promise.resolve(marked({ allowed: true, retryAfterMs: 0 }, failed, cause));
    if (r === 0) return Promise.resolve(marked(this.refusalFromRecord(single), failed, cause));
    return this.viaFallback(op, entries, single, failed, cause);
  }

  private viaFallback(op: GuardOperation, entries: readonly Entry[], single: boolean, failed: GuardFailure, cause: unknown): Promise<BatchVerdict> {
    const fallback = this.fallback!;
    const answered = (v: BatchVerdict): BatchVerdict => {
      this.native.fallbackAnswered(v.allowed === true);
      const out = marked(single && !v.allowed ? singleOf(v) : { ...v }, failed, cause);
      if (!single && typeof v.release === 'function') return this.withRelease(out, v, entries, false);
      return out;
    };
    const refused = (e: unknown): BatchVerdict => {
      this.emit({ type: 'fallback-error', cause: e, operation: op, entries });
      this.native.fallbackFailed();
      return marked(this.refusalFromRecord(single), failed, cause);
    };
    let a: Awaitable<BatchVerdict>;
    try {
      a = this.invoke(fallback, op, entries, false);
    } catch (e) {
      return Promise.resolve(refused(e));
    }
    if (!isThenable(a)) return Promise.resolve(answered(a));
    return Promise.resolve(a).then(answered, refused);
  }

  /** A consume answered after the guard answered it: given back when the guard refused it. */
  private lateAnswer(op: GuardOperation, entries: readonly Entry[], v: BatchVerdict, p: Pending): void {
    if (op === 'peek' || op === 'peekMany' || v === null || typeof v !== 'object') {
      this.idle();
      return;
    }
    if (p.answeredAllowed === undefined && p.answer !== undefined) {
      // The fallback is still answering: decide once it has.
      const decide = () => this.lateAnswer(op, entries, v, { ...p, answer: undefined });
      p.answer.then(decide, decide);
      return;
    }
    const action = this.native.late(p.answeredAllowed === true, v.allowed === true);
    if (action !== 1) {
      this.idle();
      return;
    }
    const release = v.release;
    if (typeof release !== 'function') {
      this.lateReleased(entries, false, new StoreError("the store's verdict has no release(): the late call stays counted"));
      return;
    }
    let r: Awaitable<void>;
    try {
      r = release.call(v);
    } catch (e) {
      this.lateReleased(entries, false, e);
      return;
    }
    if (isThenable(r)) {
      r.then(
        () => this.lateReleased(entries, true, undefined),
        (e: unknown) => this.lateReleased(entries, false, e),
      );
    } else this.lateReleased(entries, true, undefined);
  }

  private lateReleased(entries: readonly Entry[], ok: boolean, error: unknown): void {
    this.native.lateReleased(ok);
    this.emit(ok ? { type: 'late-release', entries } : { type: 'late-release', entries, error });
    this.idle();
  }

  /** `out` with `release` giving back `v`'s call, tracked by `close()` (and, for the main store, forgetting the cache). */
  private withRelease(out: BatchVerdict, v: BatchVerdict, entries: readonly Entry[], main: boolean): BatchVerdict {
    const release = v.release!;
    const copy = out === v ? { ...v } : out;
    Object.defineProperty(copy, 'release', {
      value: () => {
        if (main && this.caching) for (const { key, limit } of entries) this.native.forget(key, limit.uses, limit.windowMs);
        const r = release.call(v);
        if (isThenable(r)) {
          this.busy++;
          const done = () => this.idle();
          r.then(done, done);
        }
        return r;
      },
      enumerable: false,
    });
    return copy;
  }

  /** The refusal the engine wrote into the record (a cache hit, `'deny'`, a failed fallback). */
  private refusalFromRecord(single: boolean): BatchVerdict {
    const r = this.record;
    const out: { -readonly [K in keyof BatchVerdict]: BatchVerdict[K] } = { allowed: false, retryAfterMs: r[R_RETRY_AFTER]! };
    const ts = r[R_RETRY_TIMESTAMP]!;
    if (!Number.isNaN(ts)) out.retryTimestamp = ts;
    const blocked = r[R_BLOCKED]!;
    if (!single && !Number.isNaN(blocked)) out.blocked = blocked;
    if (r[R_LIMIT]! > 0) {
      out.limit = r[R_LIMIT]!;
      out.remaining = r[R_REMAINING]!;
      out.refillAfterMs = r[R_REFILL]!;
      out.resetAfterMs = r[R_RESET]!;
    }
    return out;
  }

  private fromRecord(single: boolean): BatchVerdict {
    return this.refusalFromRecord(single);
  }

  private emit(event: GuardEvent): void {
    if (this.onEvent === undefined) return;
    try {
      this.onEvent(event);
    } catch {
      // The hook's own failure is not the call's.
    }
  }

  // --- the deadlines: one timer for all calls ----------------------------------------------------

  private schedule(p: Pending): void {
    // Answered calls at the head go first, so the queue holds about the calls in flight.
    const q = this.queue;
    while (this.head < q.length && q[this.head]!.done) q[this.head++] = DONE;
    if (this.head > 64 && this.head * 2 > q.length) {
      this.queue = q.slice(this.head);
      this.head = 0;
    }
    this.queue.push(p);
    if (this.timer === undefined) this.arm();
  }

  private arm(): void {
    const q = this.queue;
    while (this.head < q.length && q[this.head]!.done) q[this.head++] = DONE;
    if (this.head >= q.length) {
      this.queue = [];
      this.head = 0;
      this.timer = undefined;
      return;
    }
    if (this.head > 64 && this.head * 2 > q.length) {
      this.queue = q.slice(this.head);
      this.head = 0;
    }
    const delay = Math.max(0, this.queue[this.head]!.deadline - performance.now());
    this.timer = setTimeout(this.tick, Math.ceil(delay));
  }

  private readonly tick = (): void => {
    this.timer = undefined;
    const now = performance.now();
    const q = this.queue;
    while (this.head < q.length) {
      const p = q[this.head]!;
      if (!p.done) {
        if (p.deadline > now) break;
        p.done = true;
        p.expire();
      }
      q[this.head++] = DONE;
    }
    this.arm();
  };

  /** One store operation or release under way has finished. */
  private idle(): void {
    if (--this.busy === 0 && this.drained.length > 0) {
      const waiting = this.drained;
      this.drained = [];
      for (const resolve of waiting) resolve();
    }
  }
}

/**
 * Guards `store` against its failures: see {@link GuardOptions} and the module docs.
 *
 * ```ts
 * const store = guard(RedisStore.using(run, { evalsha }), { timeoutMs: 250, onFailure: new MemoryStore() });
 * await store.ready(() => client.connect());
 * // … on shutdown: waits for calls and late releases, then closes the client
 * await store.close(() => client.quit());
 * ```
 */
export function guard(store: CooldownStore, options: GuardOptions = {}): GuardedStore {
  return new GuardedStore(store, options);
}

/** A consume's failure that may have counted: the `release()` the store's error carries. */
function failedRelease(op: GuardOperation, e: unknown): (() => Awaitable<void>) | undefined {
  if ((op !== 'consume' && op !== 'consumeMany') || e === null || typeof e !== 'object') return undefined;
  const release = (e as { release?: unknown }).release;
  return typeof release === 'function' ? (release as () => Awaitable<void>) : undefined;
}

/** What a failed call that may have counted is to the late-answer rule: an answer that counted. */
function counted(release: () => Awaitable<void>): BatchVerdict {
  const v = { allowed: true, retryAfterMs: 0 };
  Object.defineProperty(v, 'release', { value: release, enumerable: false });
  return v;
}

function hasOwnBatch(store: CooldownStore): boolean {
  return typeof store.consumeMany === 'function' && store.consumeMany !== CooldownStore.prototype.consumeMany;
}

/** A single verdict from a batch one (without `blocked`). */
function singleOf(v: BatchVerdict): BatchVerdict {
  if (v.blocked === undefined) return v;
  const { blocked: _blocked, ...rest } = v;
  return rest;
}

/** `v` with `failed` (enumerable) and `cause` (not enumerable). */
function marked(v: BatchVerdict, failed: GuardFailure, cause: unknown): BatchVerdict {
  const out = v as BatchVerdict & { failed?: GuardFailure };
  (out as { failed?: GuardFailure }).failed = failed;
  Object.defineProperty(out, 'cause', { value: cause, enumerable: false });
  return out;
}

/** A guard option the engine refused, as an `InvalidArgumentError` naming it as TypeScript does. */
function optionError(e: unknown, given: { timeoutMs: unknown; onFailure: unknown; maxKeys: unknown }): Error {
  const code = (e as { code?: unknown } | null)?.code;
  const message = e instanceof Error ? e.message : String(e);
  switch (code) {
    case 'invalid_argument:timeout_ms':
      return new InvalidArgumentError('timeoutMs', given.timeoutMs, message);
    case 'invalid_argument:policy':
      return new InvalidArgumentError('onFailure', given.onFailure, message);
    case 'invalid_argument:max_keys':
      return new InvalidArgumentError('blockCache.maxKeys', given.maxKeys, message);
    default:
      return fromBackend(e);
  }
}
