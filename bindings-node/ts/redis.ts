/**
 * {@link RedisStore}: counts in Redis (Valkey, KeyDB, Redis Cluster) through the user's own client.
 * The engine plans each call (a Lua script, its keys and arguments) and decodes the reply; this file
 * awaits the user's client in between. Each call is one script, one round trip, timed by the server.
 *
 * ```ts
 * import { createClient } from 'redis';
 * const client = await createClient().connect();
 * const store = RedisStore.using((script, keys, args) => client.eval(script, { keys, arguments: args }), {
 *   evalsha: (sha1, keys, args) => client.evalSha(sha1, { keys, arguments: args }),
 * });
 * ```
 * @module
 */
import { randomUUID } from 'node:crypto';

import type { Backend } from './backend';
import { checkEntries, checkInteger, checkKey, checkLimitShape } from './check';
import { fromBackend, typeError } from './errors';
import { hasRedis, type BackendRedis, type RedisPlanData } from './redis-backend';
import { CooldownStore, getDefaultBackend } from './store';
import { describe, GiveBackError, StoreError, StoreReplyError } from './store-errors';
import type { BatchVerdict, CooldownLimit, Entry, Verdict } from './types';

/**
 * Runs a Lua script with the user's client (`EVAL script numkeys ...keys ...args`) and resolves to its
 * reply as the client decodes it (numbers and arrays of them, for ratewindow's scripts).
 */
export type RedisRun = (script: string, keys: string[], args: string[]) => PromiseLike<unknown> | unknown;

/** Runs a loaded script by its SHA1 (`EVALSHA sha1 numkeys ...keys ...args`). */
export type RedisEvalSha = (sha1: string, keys: string[], args: string[]) => PromiseLike<unknown> | unknown;

/** Options of {@link RedisStore.using}. */
export interface RedisStoreOptions {
  /**
   * Runs scripts by SHA1: each call then sends the 40-byte SHA1, and the full script only when the
   * server answers `NOSCRIPT` (after a restart, a failover or `SCRIPT FLUSH`). Any other error is never
   * retried: the script may have run.
   */
  readonly evalsha?: RedisEvalSha;
  /** What every Redis key starts with (default `ratewindow:`), e.g. `mybot:` to keep two apps apart. */
  readonly prefix?: string;
  /**
   * Redis Cluster: the part of each key before this separator becomes its hash tag, so `click:alice`
   * and `click` share the slot of `{click}` and a batch of them is one step again. Without it, a batch
   * whose keys span slots is counted key by key (see the README).
   */
  readonly hashTag?: string;
  /**
   * Receives a {@link GiveBackError} when a batch counted key by key (on a cluster, without `hashTag`)
   * was refused or failed and giving back what it had counted failed too. Default: `process.emitWarning`.
   */
  readonly onGiveBackError?: (error: GiveBackError) => void;
  /** The engine build (default: the native addon). It must implement the Redis planner. */
  readonly backend?: Backend;
}

interface ScriptRef {
  readonly sha1: string;
  readonly source: string;
}

const ALLOWED: Verdict = Object.freeze({ allowed: true, retryAfterMs: 0 });

function message(error: unknown): string {
  if (error instanceof Error) return error.message;
  return typeof error === 'string' ? error : '';
}

/** The server's `NOSCRIPT`: the script is not loaded; sending it in full is safe (nothing ran). */
function isNoScript(error: unknown): boolean {
  return message(error).startsWith('NOSCRIPT');
}

/** The cluster's `CROSSSLOT`: the keys span slots; the server refused before running anything. */
function isCrossSlot(error: unknown): boolean {
  return message(error).startsWith('CROSSSLOT');
}

function storeError(error: unknown): StoreError {
  return new StoreError(`the Redis client failed: ${describe(error)}`, { cause: error });
}

/** A reply as JSON of `null`, integers, strings and arrays (for a reply that is not an array of numbers). */
function replyValue(value: unknown, depth: number): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === 'number') return Number.isSafeInteger(value) ? value : String(value);
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint') {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : String(value);
  }
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString();
  if (Array.isArray(value)) return depth > 8 ? '[…]' : value.map((v) => replyValue(v, depth + 1));
  if (value instanceof Error) return `(error) ${value.message}`;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function isNumbers(reply: unknown): reply is number[] {
  if (!Array.isArray(reply)) return false;
  for (let i = 0; i < reply.length; i++) if (typeof reply[i] !== 'number') return false;
  return true;
}

const json = (reply: unknown) => JSON.stringify(replyValue(reply, 0));

/** A thrown value that came out of the engine, as a ratewindow error. */
function engineError(error: unknown, uses?: unknown, windowMs?: unknown): Error {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('invalid_argument:')) {
    return new TypeError(message(error));
  }
  return fromBackend(error, uses, windowMs);
}

/** The entries' indices grouped by key, in order of first appearance. */
function byKey(entries: readonly Entry[]): number[][] {
  const groups = new Map<string, number[]>();
  entries.forEach((entry, i) => {
    const group = groups.get(entry.key);
    if (group) group.push(i);
    else groups.set(entry.key, [i]);
  });
  return [...groups.values()];
}

interface Refusal {
  readonly retryTimestamp: number;
  readonly retryAfterMs: number;
  readonly blocked: number;
}

/**
 * A cooldown store in Redis, through your own client: exact sliding windows counted by a Lua script on
 * the server, all the entries of a call in one step, timed by the server's `TIME` so every host
 * agrees. Also the fixed-window operations, so {@link RateLimiter} runs on it unchanged.
 *
 * Build it with {@link RedisStore.using}. Every method answers with a promise; a failure of your client
 * rejects with a {@link StoreError} whose `cause` is the client's error, and a reply no ratewindow
 * script gives with a {@link StoreReplyError}.
 */
export class RedisStore extends CooldownStore {
  private readonly run: RedisRun;
  private readonly evalsha: RedisEvalSha | undefined;
  private readonly planner: BackendRedis;
  private readonly sliding: ScriptRef;
  private readonly fixedScript: ScriptRef;
  private readonly onGiveBackError: (error: GiveBackError) => void;

  /**
   * A store running its scripts with `run(script, keys, args)` (and `evalsha(sha1, keys, args)` when
   * given). One-liners for node-redis and ioredis, single server and cluster:
   *
   * ```ts
   * // node-redis 6: createClient() or createCluster({ rootNodes })
   * RedisStore.using((s, keys, args) => client.eval(s, { keys, arguments: args }),
   *   { evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }) });
   * // ioredis 6: new Redis() or new Cluster([...])
   * RedisStore.using((s, keys, args) => redis.eval(s, keys.length, ...keys, ...args),
   *   { evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, ...keys, ...args) });
   * ```
   */
  static using(run: RedisRun, options: RedisStoreOptions = {}): RedisStore {
    return new RedisStore(run, options);
  }

  /** Same as {@link RedisStore.using}. */
  constructor(run: RedisRun, options: RedisStoreOptions = {}) {
    super();
    if (typeof run !== 'function') throw typeError('run must be a function (script, keys, args) => reply', run);
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const { evalsha, prefix = 'ratewindow:', hashTag, onGiveBackError, backend = getDefaultBackend() } = options;
    if (evalsha !== undefined && typeof evalsha !== 'function') throw typeError('evalsha must be a function', evalsha);
    if (typeof prefix !== 'string') throw typeError('prefix must be a string', prefix);
    if (hashTag !== undefined && typeof hashTag !== 'string') throw typeError('hashTag must be a string (a separator)', hashTag);
    if (onGiveBackError !== undefined && typeof onGiveBackError !== 'function') {
      throw typeError('onGiveBackError must be a function', onGiveBackError);
    }
    if (!hasRedis(backend)) throw new TypeError(`the ${backend.kind} engine build has no Redis planner`);
    try {
      this.planner = backend.createRedis(prefix, hashTag ?? null);
    } catch (e) {
      throw engineError(e);
    }
    const [slidingSha1, slidingSource, fixedSha1, fixedSource] = backend.redisScripts();
    this.sliding = Object.freeze({ sha1: slidingSha1!, source: slidingSource! });
    this.fixedScript = Object.freeze({ sha1: fixedSha1!, source: fixedSource! });
    this.run = run;
    this.evalsha = evalsha;
    this.onGiveBackError = onGiveBackError ?? ((error) => process.emitWarning(error));
  }

  /** The scripts' SHA1s, e.g. to `SCRIPT LOAD` them ahead of a failover. */
  get scripts(): { readonly sliding: ScriptRef; readonly fixed: ScriptRef } {
    return { sliding: this.sliding, fixed: this.fixedScript };
  }

  /** Runs a plan: by SHA1 first when `evalsha` was given, in full only on `NOSCRIPT`. Throws the client's error. */
  private async exec(script: ScriptRef, plan: RedisPlanData): Promise<unknown> {
    const evalsha = this.evalsha;
    if (evalsha !== undefined) {
      try {
        return await evalsha(script.sha1, plan.keys, plan.args);
      } catch (e) {
        if (!isNoScript(e)) throw e;
      }
    }
    return await this.run(script.source, plan.keys, plan.args);
  }

  private replyError(): StoreReplyError {
    const [source = 'redis', expected = '', got = '', text = 'unexpected reply'] = this.planner.replyError();
    return new StoreReplyError(source, expected, got, text);
  }

  /** Decodes a consume / peek reply: `null` when allowed, else the refusal. */
  private decodeBatch(reply: unknown, entries: number): Refusal | null {
    const p = this.planner;
    const ts = !isNumbers(reply)
      ? p.decodeBatch(null, json(reply), entries)
      : reply.length === 5
        ? p.decodeBatch5(reply[0]!, reply[1]!, reply[2]!, reply[3]!, reply[4]!, entries)
        : p.decodeBatch(reply, null, entries);
    if (ts === 0) return null;
    if (!(ts > 0)) throw this.replyError();
    return { retryTimestamp: ts, retryAfterMs: p.retryAfterMs(), blocked: p.blocked() };
  }

  /** Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. */
  override async consume(key: string, limit: CooldownLimit): Promise<Verdict> {
    checkKey(key);
    checkLimitShape(limit);
    let flat: string[];
    try {
      const joined = this.planner.planConsumeOne(randomUUID(), key, limit.uses, limit.windowMs);
      flat = joined.slice(1).split(joined[0]!);
    } catch (e) {
      throw engineError(e, limit.uses, limit.windowMs);
    }
    let reply: unknown;
    try {
      reply = await this.exec(this.sliding, { keys: [flat[0]!], args: flat.slice(1) });
    } catch (e) {
      throw storeError(e);
    }
    const refusal = this.decodeBatch(reply, 1);
    if (refusal === null) return ALLOWED;
    return { allowed: false, retryAfterMs: refusal.retryAfterMs, retryTimestamp: refusal.retryTimestamp };
  }

  /** The verdict {@link consume} would give, recording and creating nothing. */
  async peek(key: string, limit: CooldownLimit): Promise<Verdict> {
    const v = await this.peekMany([{ key, limit }]);
    return v.allowed ? ALLOWED : { allowed: false, retryAfterMs: v.retryAfterMs, retryTimestamp: v.retryTimestamp! };
  }

  private planEntries(entries: readonly Entry[], indices: readonly number[] | null, callId: string | null): RedisPlanData {
    const n = indices === null ? entries.length : indices.length;
    const keys = new Array<string>(n);
    const uses = new Array<number>(n);
    const windows = new Array<number>(n);
    for (let j = 0; j < n; j++) {
      const entry = entries[indices === null ? j : indices[j]!]!;
      keys[j] = entry.key;
      uses[j] = entry.limit.uses;
      windows[j] = entry.limit.windowMs;
    }
    try {
      return callId === null ? this.planner.planPeek(keys, uses, windows) : this.planner.planConsume(callId, keys, uses, windows);
    } catch (e) {
      const code = (e as { code?: unknown } | null)?.code;
      // Name the first entry whose limit the engine refused.
      if (code === 'invalid_limit:uses' || code === 'invalid_limit:window_ms') {
        for (let j = 0; j < n; j++) {
          try {
            this.planner.planPeek([keys[j]!], [uses[j]!], [windows[j]!]);
          } catch (inner) {
            throw engineError(inner, uses[j], windows[j]);
          }
        }
      }
      throw engineError(e);
    }
  }

  /**
   * Counts one call against every entry at once: recorded against all of them only if none refuses.
   * A refusal names `blocked`, the entry with the longest wait, and that wait (on the server's clock).
   * An allowed verdict carries `release()` (not enumerable), which gives back exactly this call.
   */
  override async consumeMany(entries: readonly Entry[]): Promise<BatchVerdict> {
    checkEntries(entries);
    const callId = randomUUID();
    if (entries.length === 0) return this.allowed([], callId);
    const plan = this.planEntries(entries, null, callId);
    let reply: unknown;
    try {
      reply = await this.exec(this.sliding, plan);
    } catch (e) {
      if (plan.keys.length > 1 && isCrossSlot(e)) return this.consumeApart(entries, callId);
      throw storeError(e);
    }
    const refusal = this.decodeBatch(reply, entries.length);
    if (refusal === null) return this.allowed([plan.keys], callId);
    return { allowed: false, ...refusal };
  }

  /**
   * A call whose keys span Cluster slots: each key counted by a script of its own, in order. On a
   * refusal or an error, what was counted is given back (a failed give-back goes to `onGiveBackError`;
   * the refusal or error stands), and a refusal names the longest wait of the keys not yet counted.
   */
  private async consumeApart(entries: readonly Entry[], callId: string): Promise<BatchVerdict> {
    const groups = byKey(entries);
    const counted: string[] = [];
    for (let g = 0; g < groups.length; g++) {
      const group = groups[g]!;
      const plan = this.planEntries(entries, group, callId);
      let refusal: Refusal | null;
      try {
        refusal = this.decodeBatch(await this.exec(this.sliding, plan), group.length);
      } catch (e) {
        // The script may have run (a timeout): its give-back removes nothing if it did not.
        await this.giveBack([...counted, ...plan.keys], callId);
        throw e instanceof StoreReplyError ? e : storeError(e);
      }
      if (refusal !== null) {
        await this.giveBack(counted, callId);
        return this.longest({ ...refusal, blocked: group[refusal.blocked]! }, entries, groups.slice(g + 1));
      }
      counted.push(...plan.keys);
    }
    return this.allowed(
      counted.map((k) => [k]),
      callId,
    );
  }

  /** The longest wait of `first` and the peeks of `groups` (ties keep the earliest). */
  private async longest(first: Refusal | null, entries: readonly Entry[], groups: readonly number[][]): Promise<BatchVerdict> {
    const peeks = await Promise.all(
      groups.map(async (group) => {
        let refusal: Refusal | null;
        try {
          refusal = this.decodeBatch(await this.exec(this.sliding, this.planEntries(entries, group, null)), group.length);
        } catch (e) {
          throw e instanceof StoreReplyError ? e : storeError(e);
        }
        return refusal === null ? null : { ...refusal, blocked: group[refusal.blocked]! };
      }),
    );
    let best = first;
    for (const p of peeks) if (p !== null && (best === null || p.retryTimestamp > best.retryTimestamp)) best = p;
    if (best === null) return ALLOWED;
    return { allowed: false, retryAfterMs: best.retryAfterMs, retryTimestamp: best.retryTimestamp, blocked: best.blocked };
  }

  /** Gives call `callId` back from each of `keys` (one script per key); reports what failed. Never throws. */
  private async giveBack(keys: readonly string[], callId: string): Promise<void> {
    await Promise.all(
      keys.map(async (key) => {
        try {
          await this.exec(this.sliding, this.planner.planRelease(callId, [key]));
        } catch (e) {
          try {
            this.onGiveBackError(new GiveBackError([key], callId, e));
          } catch {
            // A reporter that throws has nowhere else to report to.
          }
        }
      }),
    );
  }

  /** An allowed batch verdict whose `release` gives the call back from each group of keys. */
  private allowed(groups: string[][], callId: string): BatchVerdict {
    let pending: string[][] | null = groups;
    const release = async (): Promise<void> => {
      const todo = pending;
      if (todo === null) return;
      pending = null;
      const failed: string[][] = [];
      let cause: unknown;
      for (const keys of todo) {
        if (keys.length === 0) continue;
        try {
          await this.releaseKeys(keys, callId);
        } catch (e) {
          failed.push(keys);
          cause = e;
        }
      }
      if (failed.length > 0) {
        // What failed may be released again; a member already removed is not removed twice.
        pending = failed;
        throw cause instanceof StoreError ? cause : storeError(cause);
      }
    };
    const verdict = { allowed: true, retryAfterMs: 0 };
    Object.defineProperty(verdict, 'release', { value: release, enumerable: false });
    return Object.freeze(verdict);
  }

  private async releaseKeys(keys: string[], callId: string): Promise<void> {
    let reply: unknown;
    try {
      reply = await this.exec(this.sliding, this.planner.planRelease(callId, keys));
    } catch (e) {
      if (keys.length > 1 && isCrossSlot(e)) {
        for (const key of keys) await this.releaseKeys([key], callId);
        return;
      }
      throw e;
    }
    const p = this.planner;
    const removed = isNumbers(reply) ? p.decodeRelease(reply, null) : p.decodeRelease(null, json(reply));
    if (!(removed >= 0)) throw this.replyError();
  }

  /** The verdict {@link consumeMany} would give, recording, trimming and creating nothing. */
  override async peekMany(entries: readonly Entry[]): Promise<BatchVerdict> {
    checkEntries(entries);
    if (entries.length === 0) return ALLOWED;
    const plan = this.planEntries(entries, null, null);
    let reply: unknown;
    try {
      reply = await this.exec(this.sliding, plan);
    } catch (e) {
      if (plan.keys.length > 1 && isCrossSlot(e)) return this.longest(null, entries, byKey(entries));
      throw storeError(e);
    }
    const refusal = this.decodeBatch(reply, entries.length);
    return refusal === null ? ALLOWED : { allowed: false, ...refusal };
  }

  /** Runs a fixed-window op and decodes the window it answers (count 0 and msLeft 0 without one). */
  private async window(op: string, key: string, decayMs = 0, amount = 0): Promise<{ count: number; msLeft: number }> {
    checkKey(key);
    let plan: RedisPlanData;
    try {
      plan = this.planner.planFixed(op, key, decayMs, amount);
    } catch (e) {
      throw engineError(e, undefined, decayMs);
    }
    let reply: unknown;
    try {
      reply = await this.exec(this.fixedScript, plan);
    } catch (e) {
      throw storeError(e);
    }
    const p = this.planner;
    const count = isNumbers(reply) ? p.decodeWindow(reply, null) : p.decodeWindow(null, json(reply));
    if (Number.isNaN(count)) throw this.replyError();
    return { count, msLeft: p.msLeft() };
  }

  /**
   * Fixed window: adds `amount` hits to `key` (a negative amount gives hits back) and returns the
   * count. The first hit opens a window of `decayMs` milliseconds on the server's clock; hits inside it
   * do not move it; once it has ended the count starts from zero.
   */
  async hit(key: string, decayMs: number, amount = 1): Promise<number> {
    checkKey(key);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    checkInteger('amount', amount);
    return (await this.window('hit', key, decayMs, amount)).count;
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  async attempts(key: string): Promise<number> {
    return (await this.window('get', key)).count;
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  async tooManyAttempts(key: string, max: number): Promise<boolean> {
    checkKey(key);
    checkInteger('max', max);
    const w = await this.window('get', key);
    return w.msLeft > 0 && w.count >= max;
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  async remaining(key: string, max: number): Promise<number> {
    checkKey(key);
    checkInteger('max', max);
    return Math.max(0, max - (await this.window('get', key)).count);
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  async availableIn(key: string): Promise<number> {
    return Math.ceil((await this.window('get', key)).msLeft / 1000);
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  async availableInMs(key: string): Promise<number> {
    return (await this.window('get', key)).msLeft;
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  async resetAttempts(key: string): Promise<void> {
    await this.window('reset', key);
  }

  /** Removes `key`'s count and window; its next hit opens a new window. */
  async clear(key: string): Promise<void> {
    await this.window('clear', key);
  }
}
