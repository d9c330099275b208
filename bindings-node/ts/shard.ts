/**
 * The sharded store: shared counts for a multi-process (or multi-worker) app with no database. Each
 * shard's {@link ShardedStore} asks the manager, which counts every shard's calls in its own store, over
 * the IPC channel the processes already have: `process.send` (child processes, `cluster` workers,
 * discord.js' `ShardingManager` in process mode) or a `worker_threads` port (`parentPort`, its worker
 * mode). The manager answers with {@link serveShards}.
 *
 * ```ts
 * // manager
 * const store = new MemoryStore();
 * manager.on('shardCreate', (shard) => shard.on('spawn', (child) => serveShards(store, child)));
 * // each shard
 * const cooldowns = new ShardedStore({ timeoutMs: 2000 });
 * const verdict = await cooldowns.consume(`click:${user}`, { uses: 3, windowMs: 10_000 });
 * ```
 *
 * The counts live in the manager, so a shard that restarts keeps them; they start again when the
 * manager restarts. A manager that does not answer within `timeoutMs` is a store failure
 * ({@link ShardError}, a `StoreError`: `guard()` answers it with its policy). Outside sharding (no IPC
 * channel and no parent port) the store counts in this process, in a {@link MemoryStore}.
 *
 * Every operation is one message and one answer: the protocol (its JSON, its ids, the checks of both
 * sides) is the engine's (`ratewindow_core::shard`); this module only moves the text.
 * @module
 */
import { join } from 'node:path';
import * as workerThreads from 'node:worker_threads';

import { checkEntries, checkInteger, checkKey, checkLimitShape, costOf, mixesRates, rateKind } from './check';
import { fromBackend, InternalError, InvalidArgumentError, InvalidLimitError, typeError } from './errors';
import { Lock, withLock, type LockBackend, type LockDriver, type WithLockOptions } from './lock';
import { CooldownStore, getDefaultBackend, MemoryStore } from './store';
import { StoreError, StoreReplyError } from './store-errors';
import type { AnyLimit, AttemptResult, Awaitable, BatchVerdict, CallOptions, CooldownLimit, CounterLimit, Entry, GcraLimit, HitResult, Verdict } from './types';

/** Why a sharded call failed (see `ratewindow_core::shard::FailureKind`). */
export type ShardFailureKind =
  | 'malformed'
  | 'unknown'
  | 'unsupported'
  | 'store'
  | 'reply'
  | 'internal'
  | 'timeout'
  | 'closed';

/**
 * A sharded call failed: the manager did not answer within `timeoutMs` (`kind: 'timeout'`), the
 * channel closed (`closed`), the manager could not read the request (`malformed`, `unknown`: another
 * version of ratewindow), its store has no such operation (`unsupported`) or failed (`store`,
 * `reply`). A `StoreError`, so the failure guard treats it as a store failure.
 */
export class ShardError extends StoreError {
  /** Why. */
  readonly kind: ShardFailureKind;

  constructor(kind: ShardFailureKind, message: string) {
    super(message);
    this.kind = kind;
  }
}

// --- the addon's protocol functions (src/shard.rs) ---------------------------------------------

interface RequestText {
  id: number;
  text: string;
}
interface FailureJs {
  id: number;
  kind: string;
  message: string;
  field?: string | null;
  storeFailure: boolean;
}
interface AnswerJs {
  id: number;
  kind: 'verdict' | 'number' | 'bool' | 'unit' | 'hit' | 'attempt' | 'owner' | 'error';
  allowed?: boolean | null;
  retryAfterMs?: number | null;
  retryTimestamp?: number | null;
  limit?: number | null;
  remaining?: number | null;
  refillAfterMs?: number | null;
  resetAfterMs?: number | null;
  blocked?: number | null;
  release?: number | null;
  value?: number | null;
  flag?: boolean | null;
  owner?: string | null;
  error?: FailureJs | null;
}
interface NativeShardClient {
  single(op: string, key: string, a: number, b: number, cost?: number): RequestText;
  rate(op: string, key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number): RequestText;
  batch(op: string, keys: string[], uses: number[], windows: number[], kinds?: number[], bursts?: number[], costs?: number[]): RequestText;
  lock(op: string, key: string, owner: string, ttl: number): RequestText;
  answer(text: string): AnswerJs | null;
  forget(id: number, timeoutMs?: number): FailureJs | null;
  close(): FailureJs[];
  readonly inFlight: number;
}
interface ShardCallJs {
  id: number;
  op: string;
  key?: string | null;
  /** A limit of any algorithm (`burst` set for GCRA; neither field for the sliding log). */
  limit?: AnyLimit | null;
  /** Entries with their `cost` only above 1. */
  entries?: Entry[] | null;
  decayMs?: number | null;
  amount?: number | null;
  max?: number | null;
  token?: number | null;
  /** A call's cost, only above 1. */
  cost?: number | null;
  owner?: string | null;
  ttl?: number | null;
  holdMs: number;
  refused?: string | null;
}
interface ShardNative {
  NativeShardClient: new () => NativeShardClient;
  shardDecode(text: string): ShardCallJs;
  shardAnswerVerdict(id: number, op: string, verdict: object, batch: boolean, token?: number): string;
  shardAnswerNumber(id: number, op: string, value: number): string;
  shardAnswerBool(id: number, value: boolean): string;
  shardAnswerUnit(id: number): string;
  shardAnswerOwner(id: number, owner?: string | null): string;
  shardAnswerHit(id: number, op: string, count: number, resetAfterMs: number): string;
  shardAnswerAttempt(id: number, op: string, allowed: boolean, count: number, resetAfterMs: number): string;
  shardAnswerError(id: number, kind: string, message: string, field?: string): string;
}

let native: ShardNative | undefined;
function addon(): ShardNative {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (native ??= require(join(__dirname, '..', 'loader.cjs')) as ShardNative);
}

// --- channels ----------------------------------------------------------------------------------

/** The key of the object every message of the protocol travels in (other messages are left alone). */
export const SHARD_MESSAGE_KEY = 'ratewindowShard';

/** A message of the protocol: `{ ratewindowShard: '<json>' }`. */
export interface ShardMessage {
  readonly [SHARD_MESSAGE_KEY]: string;
}

function textOf(message: unknown): string | undefined {
  if (typeof message !== 'object' || message === null) return undefined;
  const text = (message as Record<string, unknown>)[SHARD_MESSAGE_KEY];
  return typeof text === 'string' ? text : undefined;
}

/** A channel to a process or worker: what `process`, a `ChildProcess`, a `cluster` worker have. */
export interface ProcessChannelLike {
  send(message: unknown, ...rest: unknown[]): unknown;
  on(event: 'message', listener: (message: unknown) => void): unknown;
  off?(event: 'message', listener: (message: unknown) => void): unknown;
  removeListener?(event: 'message', listener: (message: unknown) => void): unknown;
}

/** A `worker_threads` `Worker`, `MessagePort` or `parentPort`. */
export interface PortLike {
  postMessage(message: unknown): void;
  on(event: 'message', listener: (message: unknown) => void): unknown;
  off?(event: 'message', listener: (message: unknown) => void): unknown;
  removeListener?(event: 'message', listener: (message: unknown) => void): unknown;
}

/** Either kind of channel. */
export type ShardChannelLike = ProcessChannelLike | PortLike;

function sender(channel: ShardChannelLike, onFailure?: (error: Error) => void): (text: string) => void {
  if (typeof (channel as ProcessChannelLike).send === 'function') {
    const ch = channel as ProcessChannelLike;
    // The callback form: a closed channel is reported there, never as an unhandled 'error' event.
    const done = (e: Error | null) => {
      if (e) onFailure?.(e);
    };
    return (text) => {
      ch.send({ [SHARD_MESSAGE_KEY]: text }, undefined, undefined, done);
    };
  }
  if (typeof (channel as PortLike).postMessage === 'function') {
    const port = channel as PortLike;
    return (text) => port.postMessage({ [SHARD_MESSAGE_KEY]: text });
  }
  throw typeError('channel must have send() (a process, child process or cluster worker) or postMessage() (a worker or port)', channel);
}

function unlisten(channel: ShardChannelLike, listener: (message: unknown) => void): void {
  if (typeof channel.off === 'function') channel.off('message', listener);
  else channel.removeListener?.('message', listener);
}

/** The channel this process shares with its parent, if any. */
function parentChannel(): ShardChannelLike | undefined {
  if (typeof process.send === 'function') return process as unknown as ProcessChannelLike;
  if (!workerThreads.isMainThread && workerThreads.parentPort !== null) return workerThreads.parentPort;
  return undefined;
}

// --- the shard's side --------------------------------------------------------------------------

interface Pending {
  resolve(value: AnswerJs): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * One channel's requests: one client (ids, what each expects) and one listener, shared by every
 * {@link ShardedStore} on the channel. The listener is attached only while a request is under way, so
 * an idle shard's channel does not keep the process alive.
 */
class Link {
  readonly client: NativeShardClient;
  private readonly pending = new Map<number, Pending>();
  private readonly send: (text: string) => void;
  private listening = false;

  constructor(private readonly channel: ShardChannelLike) {
    this.client = new (addon().NativeShardClient)();
    this.send = sender(channel, () => this.closeAll());
  }

  private readonly onDisconnect = (): void => this.closeAll();

  private readonly onMessage = (message: unknown): void => {
    const text = textOf(message);
    if (text === undefined) return;
    const answer = this.client.answer(text);
    if (answer === null) return;
    const p = this.pending.get(answer.id);
    if (p === undefined) return;
    this.pending.delete(answer.id);
    clearTimeout(p.timer);
    this.idle();
    p.resolve(answer);
  };

  private idle(): void {
    if (this.pending.size === 0 && this.listening) {
      this.listening = false;
      unlisten(this.channel, this.onMessage);
      if (this.channel === (process as unknown)) process.off('disconnect', this.onDisconnect);
    }
  }

  private closeAll(): void {
    for (const f of this.client.close()) {
      const p = this.pending.get(f.id);
      if (p === undefined) continue;
      this.pending.delete(f.id);
      clearTimeout(p.timer);
      p.reject(errorOf(f));
    }
    this.idle();
  }

  ask(request: RequestText, timeoutMs: number): Promise<AnswerJs> {
    return new Promise<AnswerJs>((resolve, reject) => {
      if (this.channel === (process as unknown) && process.connected === false) {
        const f = this.client.forget(request.id);
        reject(f === null ? new ShardError('closed', 'the channel to the shard manager is closed') : errorOf(f));
        return;
      }
      const timer = setTimeout(() => {
        this.pending.delete(request.id);
        const f = this.client.forget(request.id, timeoutMs);
        this.idle();
        if (f !== null) reject(errorOf(f));
      }, timeoutMs);
      this.pending.set(request.id, { resolve, reject, timer });
      if (!this.listening) {
        this.listening = true;
        this.channel.on('message', this.onMessage);
        // Only while a request is under way, so an idle shard's channel does not hold its process.
        if (this.channel === (process as unknown)) process.on('disconnect', this.onDisconnect);
      }
      try {
        this.send(request.text);
      } catch (e) {
        this.pending.delete(request.id);
        clearTimeout(timer);
        this.client.forget(request.id);
        this.idle();
        reject(new ShardError('closed', `could not send to the shard manager: ${e instanceof Error ? e.message : String(e)}`));
      }
    });
  }
}

const links = new WeakMap<object, Link>();
function linkOf(channel: ShardChannelLike): Link {
  let link = links.get(channel);
  if (link === undefined) links.set(channel, (link = new Link(channel)));
  return link;
}

/** The arguments a refusal names (a limit's `uses`, `windowMs`, `burst`, a call's `cost`; `decay` for a fixed window's). */
interface Args {
  uses?: unknown;
  windowMs?: unknown;
  burst?: unknown;
  cost?: unknown;
  decay?: boolean;
}

/** The typed error of a failure the engine read from an answer (or made: a timeout, a closed channel). */
function errorOf(f: FailureJs, args?: Args): Error {
  switch (f.kind) {
    case 'invalid_limit': {
      const uses = f.field === 'uses';
      const argument = uses ? 'uses' : args?.decay ? 'decayMs' : 'windowMs';
      const message = f.message.replace(/^invalid (uses|window_ms):/, `invalid ${argument}:`);
      return new InvalidLimitError(uses ? 'uses' : 'windowMs', uses ? args?.uses : args?.windowMs, message, argument);
    }
    case 'invalid_argument':
      return new InvalidArgumentError(f.field ?? 'argument', undefined, f.message);
    case 'type':
      return new TypeError(f.message);
    case 'internal':
      return new InternalError(f.message);
    default:
      return new ShardError(f.kind as ShardFailureKind, f.message);
  }
}

function verdictOf(a: AnswerJs, batch: boolean): BatchVerdict {
  const out: { -readonly [K in keyof BatchVerdict]: BatchVerdict[K] } = { allowed: a.allowed === true, retryAfterMs: a.retryAfterMs ?? 0 };
  if (a.retryTimestamp != null) out.retryTimestamp = a.retryTimestamp;
  if (a.limit != null) out.limit = a.limit;
  if (a.remaining != null) out.remaining = a.remaining;
  if (a.refillAfterMs != null) out.refillAfterMs = a.refillAfterMs;
  if (a.resetAfterMs != null) out.resetAfterMs = a.resetAfterMs;
  if (batch && a.blocked != null) out.blocked = a.blocked;
  return out;
}

/** Options of a {@link ShardedStore}. */
export interface ShardedStoreOptions {
  /**
   * How long a call waits for the manager, in ms (default 5000); then it fails with a
   * {@link ShardError} of kind `timeout`.
   */
  readonly timeoutMs?: number;
  /**
   * The channel to the manager (default: this process's IPC channel, `process.send`, else the
   * `worker_threads` `parentPort`). Pass a `MessagePort` to talk over a port of your own.
   */
  readonly channel?: ShardChannelLike;
  /**
   * Outside sharding (no channel): the store that counts in this process (default: a new
   * {@link MemoryStore}).
   */
  readonly local?: MemoryStore;
}

/**
 * A cooldown store whose counts live in the shard manager: every call is one message to the manager
 * and one answer, over the channel this process already shares with it. Offers everything
 * {@link MemoryStore} does (the batches with `release()`, `peek`, the fixed-window operations), each
 * answering a promise when sharded.
 *
 * Outside sharding — no `process.send` and no `parentPort`, nor a `channel` given — it counts in this
 * process, in a {@link MemoryStore}, answering at once.
 */
export class ShardedStore extends CooldownStore {
  /** Whether calls go to a manager (`false`: counted in this process). */
  readonly sharded: boolean;
  /** How long a call waits for the manager, in ms. */
  readonly timeoutMs: number;
  private readonly link: Link | undefined;
  private readonly local: MemoryStore | undefined;

  constructor(options: ShardedStoreOptions = {}) {
    super();
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const timeoutMs = options.timeoutMs ?? 5000;
    if (typeof timeoutMs !== 'number') throw typeError('timeoutMs must be a number', timeoutMs);
    if (!(Number.isSafeInteger(timeoutMs) && timeoutMs >= 1 && timeoutMs <= 2 ** 31 - 1)) {
      throw new InvalidArgumentError('timeoutMs', timeoutMs, `invalid timeoutMs: ${String(timeoutMs)} (expected a whole number of milliseconds from 1 to 2147483647)`);
    }
    this.timeoutMs = timeoutMs;
    const channel = options.channel ?? parentChannel();
    if (channel === undefined) {
      this.sharded = false;
      this.local = options.local ?? new MemoryStore();
      this.link = undefined;
    } else {
      sender(channel); // refuses a channel of the wrong kind now
      this.sharded = true;
      this.local = undefined;
      this.link = linkOf(channel);
    }
  }

  private limitChecked(limit: CooldownLimit): void {
    checkLimitShape(limit);
    try {
      getDefaultBackend().checkLimit(limit.uses, limit.windowMs);
    } catch (e) {
      throw fromBackend(e, limit.uses, limit.windowMs);
    }
  }

  private decayChecked(decayMs: unknown): number {
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    try {
      getDefaultBackend().checkLimit(1, decayMs);
    } catch (e) {
      throw fromBackend(e, undefined, decayMs);
    }
    return decayMs;
  }

  private async ask<T>(request: () => RequestText, then: (a: AnswerJs) => T, args?: Args): Promise<T> {
    let r: RequestText;
    try {
      r = request();
    } catch (e) {
      throw fromBackend(e, args?.uses, args?.windowMs, args?.burst, args?.cost);
    }
    const a = await this.link!.ask(r, this.timeoutMs);
    if (a.kind === 'error') throw errorOf(a.error!, args);
    return then(a);
  }

  private single<T>(op: string, key: string, a: number, b: number, then: (a: AnswerJs) => T, args?: Args): Promise<T> {
    return this.ask(() => this.link!.client.single(op, key, a, b), then, args);
  }

  /** A call under a GCRA or counter limit (`kind` 1 or 2), or a sliding-log call with a cost (`kind` 0). */
  private rate<T>(op: 'consume' | 'peek' | 'reset', key: string, kind: number, limit: GcraLimit, cost: number, then: (a: AnswerJs) => T): Promise<T> {
    const burst = kind === 1 ? (limit.burst ?? limit.uses) : 0;
    return this.ask(() => this.link!.client.rate(op, key, kind, limit.uses, limit.windowMs, burst, cost), then, { uses: limit.uses, windowMs: limit.windowMs, burst: limit.burst, cost });
  }

  /** One call, consumed or peeked: the sliding log's plain request, else {@link rate}. */
  private one(op: 'consume' | 'peek', key: string, limit: AnyLimit, options: CallOptions | undefined): Promise<Verdict> {
    checkKey(key);
    const kind = rateKind(limit);
    if (kind === 0) checkLimitShape(limit);
    const cost = costOf(options);
    if (kind !== 0 || cost !== 1) return this.rate(op, key, kind, limit as GcraLimit, cost, (a) => verdictOf(a, false));
    this.limitChecked(limit);
    return this.single(op, key, limit.uses, limit.windowMs, (a) => verdictOf(a, false), limit);
  }

  /**
   * Counts one call to `key` under `limit` (the sliding log, a {@link GcraLimit} or a
   * {@link CounterLimit}), costing `options.cost` (default 1), in the manager: allowed and recorded, or
   * refused with the wait.
   */
  override consume(key: string, limit: AnyLimit, options?: CallOptions): Awaitable<Verdict> {
    if (this.local) return this.local.consume(key, limit, options);
    return this.one('consume', key, limit, options);
  }

  /** The verdict {@link consume} would give, recording nothing. */
  peek(key: string, limit: AnyLimit, options?: CallOptions): Awaitable<Verdict> {
    if (this.local) return this.local.peek(key, limit, options);
    return this.one('peek', key, limit, options);
  }

  /**
   * Forgets `key`'s GCRA bucket or counter (by `limit`'s algorithm) in the manager: its next call finds
   * every use there.
   * @throws {TypeError} for a sliding-log limit (its calls are given back by a batch's `release()`).
   */
  reset(key: string, limit: GcraLimit | CounterLimit): Awaitable<void> {
    if (this.local) return this.local.reset(key, limit);
    checkKey(key);
    const kind = rateKind(limit);
    if (kind === 0) throw typeError("reset takes a GCRA or counter limit ({ algorithm: 'gcra' | 'counter', ... })", limit);
    return this.rate('reset', key, kind, limit as GcraLimit, 1, () => undefined);
  }

  /** A batch mixing algorithms or with costs, checked in full (as the memory store checks it) before it is sent. */
  private mixedRequest(op: 'consumeMany' | 'peekMany', entries: readonly Entry[]): () => RequestText {
    const keys: string[] = [];
    const uses: number[] = [];
    const windows: number[] = [];
    const kinds: number[] = [];
    const bursts: number[] = [];
    const costs: number[] = [];
    for (const entry of entries) {
      if (typeof entry !== 'object' || entry === null) throw typeError('each entry must be { key, limit, cost? }', entry);
      checkKey(entry.key);
      const kind = rateKind(entry.limit);
      if (kind === 0) checkLimitShape(entry.limit);
      const limit = entry.limit as GcraLimit;
      keys.push(entry.key);
      uses.push(limit.uses);
      windows.push(limit.windowMs);
      kinds.push(kind);
      bursts.push(kind === 1 ? (limit.burst ?? limit.uses) : 0);
      costs.push(costOf(entry));
    }
    return () => {
      try {
        return this.link!.client.batch(op, keys, uses, windows, kinds, bursts, costs);
      } catch (e) {
        // The refusal names its entry (`entries[2].burst`): the typed error carries that entry's value.
        const at = Number(/entries\[(\d+)\]/.exec((e as Error | null)?.message ?? '')?.[1] ?? -1);
        const limit = entries[at]?.limit as GcraLimit | undefined;
        throw fromBackend(e, limit?.uses, limit?.windowMs, limit?.burst, at >= 0 ? costOf(entries[at]) : undefined);
      }
    };
  }

  private batch(op: 'consumeMany' | 'peekMany', entries: readonly Entry[]): Promise<BatchVerdict> {
    let request: () => RequestText;
    if (Array.isArray(entries) && mixesRates(entries)) {
      request = this.mixedRequest(op, entries);
    } else {
      checkEntries(entries);
      const keys: string[] = [];
      const uses: number[] = [];
      const windows: number[] = [];
      for (const { key, limit } of entries) {
        this.limitChecked(limit);
        keys.push(key);
        uses.push(limit.uses);
        windows.push(limit.windowMs);
      }
      request = () => this.link!.client.batch(op, keys, uses, windows);
    }
    return this.ask(
      request,
      (a) => {
        const v = verdictOf(a, true);
        if (op === 'consumeMany' && a.allowed === true && a.release != null) {
          const token = a.release;
          let pending = true;
          const release = (): Promise<void> | void => {
            if (!pending) return;
            pending = false;
            return this.single('release', '', token, 0, () => undefined);
          };
          Object.defineProperty(v, 'release', { value: release, enumerable: false });
        }
        return v;
      },
    );
  }

  /**
   * Counts one call against every entry at once (all or nothing). An allowed verdict carries
   * `release()` (not enumerable): it asks the manager to give back exactly this call. Entries may mix
   * algorithms and carry costs, as on the memory store.
   */
  override consumeMany(entries: readonly Entry[]): Awaitable<BatchVerdict> {
    if (this.local) return this.local.consumeMany(entries);
    return this.batch('consumeMany', entries);
  }

  /** The verdict {@link consumeMany} would give, recording nothing. */
  override peekMany(entries: readonly Entry[]): Awaitable<BatchVerdict> {
    if (this.local) return this.local.peekMany(entries);
    return this.batch('peekMany', entries);
  }

  /** Fixed window: adds `amount` hits to `key` and returns the count (see {@link MemoryStore.hit}). */
  hit(key: string, decayMs: number, amount = 1): Awaitable<number> {
    if (this.local) return this.local.hit(key, decayMs, amount);
    checkKey(key);
    this.decayChecked(decayMs);
    checkInteger('amount', amount);
    return this.single('hit', key, decayMs, amount, (a) => a.value!, { windowMs: decayMs, decay: true });
  }

  /** {@link hit}, answering the count and the milliseconds until the window ends together. */
  hitWindow(key: string, decayMs: number, amount = 1): Awaitable<HitResult> {
    if (this.local) return this.local.hitWindow(key, decayMs, amount);
    checkKey(key);
    this.decayChecked(decayMs);
    checkInteger('amount', amount);
    return this.single('hitWindow', key, decayMs, amount, (a) => ({ count: a.value!, resetAfterMs: a.resetAfterMs! }), { windowMs: decayMs, decay: true });
  }

  /**
   * Fixed window, atomically: one hit if `key` has fewer than `max` (`options.cost` hits, counted only
   * when the count plus `cost` is at most `max`; see {@link MemoryStore.attempt}).
   */
  attempt(key: string, max: number, decayMs: number, options?: CallOptions): Awaitable<AttemptResult> {
    if (this.local) return this.local.attempt(key, max, decayMs, options);
    checkKey(key);
    checkInteger('max', max);
    this.decayChecked(decayMs);
    const cost = costOf(options);
    const args = { windowMs: decayMs, decay: true, cost };
    return this.ask(
      () => this.link!.client.single('attempt', key, max, decayMs, cost === 1 ? undefined : cost),
      (a) => ({ allowed: a.allowed === true, count: a.value!, resetAfterMs: a.resetAfterMs! }),
      args,
    );
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  attempts(key: string): Awaitable<number> {
    if (this.local) return this.local.attempts(key);
    checkKey(key);
    return this.single('attempts', key, 0, 0, (a) => a.value!);
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  tooManyAttempts(key: string, max: number): Awaitable<boolean> {
    if (this.local) return this.local.tooManyAttempts(key, max);
    checkKey(key);
    checkInteger('max', max);
    return this.single('tooManyAttempts', key, max, 0, (a) => a.flag === true);
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  remaining(key: string, max: number): Awaitable<number> {
    if (this.local) return this.local.remaining(key, max);
    checkKey(key);
    checkInteger('max', max);
    return this.single('remaining', key, max, 0, (a) => a.value!);
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  availableIn(key: string): Awaitable<number> {
    if (this.local) return this.local.availableIn(key);
    checkKey(key);
    return this.single('availableIn', key, 0, 0, (a) => a.value!);
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  availableInMs(key: string): Awaitable<number> {
    if (this.local) return this.local.availableInMs(key);
    checkKey(key);
    return this.single('availableInMs', key, 0, 0, (a) => a.value!);
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  resetAttempts(key: string): Awaitable<void> {
    if (this.local) return this.local.resetAttempts(key);
    checkKey(key);
    return this.single('resetAttempts', key, 0, 0, () => undefined);
  }

  /** Removes `key`'s count and window. */
  clear(key: string): Awaitable<void> {
    if (this.local) return this.local.clear(key);
    checkKey(key);
    return this.single('clear', key, 0, 0, () => undefined);
  }

  private lockDriver(): LockDriver {
    const ask = (op: string, key: string, owner: string | undefined, ttl: number) =>
      this.ask(
        // The manager builds a Lock to run the step on: a force release or an owner query has no owner
        // of its own, so it is given a placeholder token (neither uses it).
        () => this.link!.client.lock(op, key, owner ?? 'ratewindow-shard', ttl),
        (a) => a,
      );
    return {
      backend: getDefaultBackend() as LockBackend,
      lockRun: async (op, key, owner, ttl) => (await ask(`lock${op[0]!.toUpperCase()}${op.slice(1)}`, key, owner, ttl)).flag === true,
      lockOwner: async (key) => (await ask('lockOwner', key, undefined, 1)).owner ?? null,
    };
  }

  /**
   * A lock on `key` held for `ttl` seconds once taken, owned by `owner` (default: a fresh token).
   * Sharded, every operation is one message to the manager, which runs it on its store's lock, so the
   * lock is exclusive across every shard; outside sharding, the local store's.
   */
  lock(key: string, ttl: number, owner?: string): Lock {
    if (this.local) return this.local.lock(key, ttl, owner);
    return new Lock(this.lockDriver(), key, ttl, owner);
  }

  /** Runs `fn` holding the lock `key` (see `withLock`). */
  withLock<T>(key: string, ttl: number, fn: () => T | Promise<T>, options?: WithLockOptions): Promise<T> {
    return withLock(this, key, ttl, fn, options);
  }
}

// --- the manager's side ------------------------------------------------------------------------

/** What {@link serveShards} returns. */
export interface ShardServer {
  /** Requests answered so far (refused ones included). */
  readonly answered: number;
  /** Allowed batches whose `release()` the manager still holds. */
  readonly held: number;
  /** Stops answering this channel (requests under way still get their answer). */
  close(): void;
}

/** Options of {@link serveShards}. */
export interface ServeShardsOptions {
  /** Called with each request the manager refused (malformed, unknown) and each store failure. */
  readonly onError?: (error: ShardError) => void;
}

type AnyStore = CooldownStore & Record<string, unknown>;

/** The answer kind of an error a manager's store threw (how it crosses to the shard). */
function failureOf(e: unknown): { kind: string; field?: string } {
  if (e instanceof ShardError) return { kind: e.kind };
  if (e instanceof InvalidLimitError) return { kind: 'invalid_limit', field: e.field === 'uses' ? 'uses' : 'window_ms' };
  if (e instanceof InvalidArgumentError) return { kind: 'invalid_argument', field: e.field };
  if (e instanceof TypeError) return { kind: 'type' };
  if (e instanceof InternalError) return { kind: 'internal' };
  if (e instanceof StoreReplyError) return { kind: 'reply' };
  return { kind: 'store' };
}

/**
 * Answers the shards on `channel` from `store` (any ratewindow store: memory, Redis, PostgreSQL,
 * SQLite, a guarded one, or one of your own): a `ChildProcess` or `cluster` worker (`send`), or a
 * `worker_threads` `Worker` / `MessagePort` (`postMessage`). Call it for every channel — with
 * discord.js, on each shard's `spawn` event, so a respawned shard is served too. A request the
 * manager cannot read is answered with a typed error; the manager keeps serving.
 */
export function serveShards(store: CooldownStore, channel: ShardChannelLike, options: ServeShardsOptions = {}): ShardServer {
  if (!(store instanceof CooldownStore) && (typeof store !== 'object' || store === null || typeof (store as CooldownStore).consume !== 'function')) {
    throw typeError('store must be a cooldown store', store);
  }
  const n = addon();
  const s = store as AnyStore;
  const onError = options.onError;
  let closed = false;
  let answered = 0;
  let nextToken = 0;
  /** Allowed batches' give-backs by token, in the order they were made, with when they stop mattering. */
  const holds = new Map<number, { release: () => Awaitable<void>; until: number }>();
  const send = sender(channel);

  const reply = (text: string): void => {
    answered++;
    try {
      send(text);
    } catch {
      // The shard is gone; its request died with it.
    }
  };
  const fail = (id: number, e: unknown): void => {
    const { kind, field } = failureOf(e);
    const message = e instanceof Error ? e.message : String(e);
    if (onError && kind === 'store') onError(new ShardError('store', message));
    reply(n.shardAnswerError(id, kind, message, field));
  };
  const sweep = (now: number): void => {
    for (const [token, hold] of holds) {
      if (hold.until > now) break;
      holds.delete(token);
    }
  };
  const method = (name: string): ((...args: unknown[]) => unknown) | undefined => {
    const f = s[name];
    return typeof f === 'function' ? (f as (...args: unknown[]) => unknown).bind(store) : undefined;
  };

  const run = (c: ShardCallJs): unknown => {
    if (c.op === 'release') {
      const hold = holds.get(c.token!);
      holds.delete(c.token!);
      return hold?.release();
    }
    if (c.op.startsWith('lock')) {
      const lock = method('lock');
      if (lock === undefined) throw new ShardError('unsupported', "the manager's store has no lock()");
      const l = lock(c.key, c.ttl, c.owner) as Record<string, () => unknown>;
      switch (c.op) {
        case 'lockAcquire':
          return l.acquire!.call(l);
        case 'lockRelease':
          return l.release!.call(l);
        case 'lockForceRelease':
          return l.forceRelease!.call(l);
        default:
          return l.currentOwner!.call(l);
      }
    }
    const f = method(c.op);
    if (f === undefined) throw new ShardError('unsupported', `the manager's store has no ${c.op}()`);
    // A cost passes only above 1, so a store of the user's own without costs serves every other call.
    const options = c.cost == null ? undefined : { cost: c.cost };
    switch (c.op) {
      case 'consume':
      case 'peek':
        return options === undefined ? f(c.key, c.limit) : f(c.key, c.limit, options);
      case 'reset':
        return f(c.key, c.limit);
      case 'consumeMany':
      case 'peekMany':
        return f(c.entries);
      case 'hit':
      case 'hitWindow':
        return f(c.key, c.decayMs, c.amount);
      case 'attempt':
        return options === undefined ? f(c.key, c.max, c.decayMs) : f(c.key, c.max, c.decayMs, options);
      case 'tooManyAttempts':
      case 'remaining':
        return f(c.key, c.max);
      default:
        return f(c.key);
    }
  };

  const encode = (c: ShardCallJs, v: unknown): string => {
    switch (c.op) {
      case 'consume':
      case 'peek':
      case 'consumeMany':
      case 'peekMany': {
        if (typeof v !== 'object' || v === null) return n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with ${typeof v}`);
        const batch = c.op === 'consumeMany' || c.op === 'peekMany';
        let token: number | undefined;
        const release = (v as BatchVerdict).release;
        if (c.op === 'consumeMany' && (v as BatchVerdict).allowed === true && typeof release === 'function') {
          const now = Date.now();
          sweep(now);
          token = ++nextToken;
          holds.set(token, { release, until: now + c.holdMs });
        }
        return n.shardAnswerVerdict(c.id, c.op, v, batch, token);
      }
      case 'hit':
      case 'attempts':
      case 'remaining':
      case 'availableIn':
      case 'availableInMs':
        return typeof v === 'number' ? n.shardAnswerNumber(c.id, c.op, v) : n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with ${typeof v}`);
      case 'lockOwner':
        return v === null || typeof v === 'string' ? n.shardAnswerOwner(c.id, v) : n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with ${typeof v}`);
      case 'lockAcquire':
      case 'lockRelease':
      case 'lockForceRelease':
      case 'tooManyAttempts':
        return typeof v === 'boolean' ? n.shardAnswerBool(c.id, v) : n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with ${typeof v}`);
      case 'hitWindow': {
        const h = v as HitResult | null;
        return h !== null && typeof h === 'object' && typeof h.count === 'number' && typeof h.resetAfterMs === 'number'
          ? n.shardAnswerHit(c.id, c.op, h.count, h.resetAfterMs)
          : n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with ${typeof v}`);
      }
      case 'attempt': {
        const t = v as AttemptResult | null;
        return t !== null && typeof t === 'object' && typeof t.allowed === 'boolean' && typeof t.count === 'number' && typeof t.resetAfterMs === 'number'
          ? n.shardAnswerAttempt(c.id, c.op, t.allowed, t.count, t.resetAfterMs)
          : n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with ${typeof v}`);
      }
      default:
        return n.shardAnswerUnit(c.id);
    }
  };

  const settle = (c: ShardCallJs, v: unknown): void => {
    let text: string;
    try {
      text = encode(c, v);
    } catch (e) {
      text = n.shardAnswerError(c.id, 'reply', `the manager's store answered ${c.op} with a value of the wrong shape: ${e instanceof Error ? e.message : String(e)}`);
    }
    reply(text);
  };

  const onMessage = (message: unknown): void => {
    if (closed) return;
    const text = textOf(message);
    if (text === undefined) return;
    let c: ShardCallJs;
    try {
      c = n.shardDecode(text);
    } catch (e) {
      fail(0, e);
      return;
    }
    if (c.refused != null) {
      onError?.(new ShardError('malformed', `refused a request: ${c.refused}`));
      reply(c.refused);
      return;
    }
    let out: unknown;
    try {
      out = run(c);
    } catch (e) {
      fail(c.id, e);
      return;
    }
    if (out !== null && typeof out === 'object' && typeof (out as PromiseLike<unknown>).then === 'function') {
      (out as PromiseLike<unknown>).then(
        (v) => settle(c, v),
        (e: unknown) => fail(c.id, e),
      );
    } else {
      settle(c, out);
    }
  };

  channel.on('message', onMessage);
  return {
    get answered() {
      return answered;
    },
    get held() {
      return holds.size;
    },
    close() {
      closed = true;
      unlisten(channel, onMessage);
      holds.clear();
    },
  };
}
