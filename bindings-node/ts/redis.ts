/**
 * {@link RedisStore}: counts in Redis (Valkey, KeyDB, Redis Cluster) through the user's own client.
 * The engine's call machine decides every step (the script, `EVALSHA` or the source after `NOSCRIPT`,
 * a Cluster's key-by-key fallback after `CROSSSLOT`) and decodes each reply; this file only runs the
 * scripts with the user's client. Each call is one script, one round trip, timed by the server.
 *
 * ```ts
 * import { createClient } from 'redis';
 * const client = await createClient().connect();
 * const store = RedisStore.using((script, keys, args) => client.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args]), {
 *   evalsha: (sha1, keys, args) => client.sendCommand(['EVALSHA', sha1, String(keys.length), ...keys, ...args]),
 * });
 * ```
 * @module
 */
import type { Backend } from './backend';
import { CallStore, engineError } from './drive';
import { typeError } from './errors';
import { CALL_RECORD_LENGTH, CallSlot, hasRedis, type BackendCalls, type StepKind } from './redis-backend';
import { getDefaultBackend } from './store';
import type { LockBackend, PreparedLock } from './lock';
import { answerMap, RedisLockPlan, type PreparedLockHost } from './redis-lock';
import type { GiveBackError } from './store-errors';
import type { CallPlan } from './redis-plan';

/**
 * Runs a Lua script with the user's client (`EVAL script numkeys ...keys ...args`) and resolves to its
 * reply as the client decodes it (numbers and arrays of them, for ratewindow's scripts). The store
 * plans a key's single consume, attempt and GCRA / counter call once and sends the same `keys` array
 * (and, but for a consume's call id, the same arguments) for each of them: read the arrays, never
 * change or keep them.
 */
export type RedisRun = (script: string, keys: string[], args: string[]) => PromiseLike<unknown> | unknown;

/** Runs a loaded script by its SHA1 (`EVALSHA sha1 numkeys ...keys ...args`). */
export type RedisEvalSha = (sha1: string, keys: string[], args: string[]) => PromiseLike<unknown> | unknown;

/**
 * Runs one plain command, `args` as is: its name, its one key (`args[1]`, what a Cluster client routes
 * by), its arguments — the lock's `['SET', key, owner, 'NX', 'PX', ttlMs]`, `['DEL', key]`, `['GET', key]`.
 * Resolves to the reply as the client decodes it (`'OK'`, `null`, a number, a string). A lock sends
 * the same array for each of its acquires (and the same keys and arguments to `evalsha` / `run` for
 * each of its releases): read them, never change them.
 */
export type RedisCommand = (args: string[]) => PromiseLike<unknown> | unknown;

/** Options of {@link RedisStore.using}. */
export interface RedisStoreOptions {
  /**
   * Runs scripts by SHA1: each call then sends the 40-byte SHA1, and the full script only when the
   * server answers `NOSCRIPT` (after a restart, a failover or `SCRIPT FLUSH`). Any other error is never
   * retried: the script may have run.
   */
  readonly evalsha?: RedisEvalSha;
  /**
   * Runs a plain command (see {@link RedisCommand}). With it a lock's `acquire` is a plain `SET key
   * owner NX PX ttl` (no script on the server: ~1.5x cheaper for Redis than the same `SET` inside a
   * script), `forceRelease` a `DEL` and `currentOwner` a `GET`; `release` stays the compare-and-delete
   * script. Without it every lock operation runs the lock script (the same behaviour, one script a
   * call). Nothing else uses it.
   */
  readonly command?: RedisCommand;
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

/**
 * A cooldown store in Redis, through your own client: exact sliding windows counted by a Lua script on
 * the server, all the entries of a call in one step, timed by the server's `TIME` so every host
 * agrees. Also the fixed-window operations (with an atomic `attempt`), so {@link RateLimiter} runs on
 * it unchanged.
 *
 * Build it with {@link RedisStore.using}. Every method answers with a promise; a failure of your client
 * rejects with a {@link StoreError} whose `cause` is the client's error, and a reply no ratewindow
 * script gives with a {@link StoreReplyError}.
 */
export class RedisStore extends CallStore<false> {
  protected readonly calls: BackendCalls;
  protected readonly record = new Float64Array(CALL_RECORD_LENGTH);
  protected readonly backend: Backend;
  protected readonly sync = false;
  protected override readonly reportsGiveBacks = true;
  private readonly run: RedisRun;
  private readonly evalsha: RedisEvalSha | undefined;
  private readonly command: RedisCommand | undefined;
  private readonly sliding: ScriptRef;
  private readonly fixed: ScriptRef;
  private readonly lockScript: ScriptRef;
  /** GCRA's and the counter's scripts (`Script` slots 4 and 5; empty in a build without them). */
  private readonly gcraScript: ScriptRef;
  private readonly counterScript: ScriptRef;
  private readonly weightedScript: ScriptRef;
  private readonly weightedAttemptScript: ScriptRef;
  /** A batch mixing algorithms: its read and compare-and-set write (`Script` slot 8). */
  private readonly mixedScript: ScriptRef;
  private readonly onGiveBackError: ((error: GiveBackError) => void) | undefined;

  /**
   * A store running its scripts with `run(script, keys, args)` (and `evalsha(sha1, keys, args)` when
   * given; `command(args)` for the lock's plain commands). One-liners for node-redis and ioredis,
   * single server and cluster:
   *
   * ```ts
   * // node-redis 6, createClient(): sendCommand, the cheapest shape (it skips evalSha's argument parser)
   * RedisStore.using((s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), {
   *   evalsha: (sha, keys, args) => client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
   *   command: (args) => client.sendCommand(args),
   * });
   * // node-redis 6, createCluster({ rootNodes }): eval / evalSha, which route by the first key
   * RedisStore.using((s, keys, args) => cluster.eval(s, { keys, arguments: args }), {
   *   evalsha: (sha, keys, args) => cluster.evalSha(sha, { keys, arguments: args }),
   *   command: (args) => cluster.sendCommand(args[1], false, args),
   * });
   * // ioredis 6: new Redis() or new Cluster([...]); it flattens array arguments, so no spread is needed
   * RedisStore.using((s, keys, args) => redis.eval(s, keys.length, keys, args), {
   *   evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, keys, args),
   *   command: (args) => redis.call(args[0]!, args.slice(1)),
   * });
   * ```
   * (Measured on one client, 64 calls in flight: node-redis' `sendCommand` costs ~10 % less CPU a call
   * than `evalSha`, ioredis' arrays ~5 % less than spreading them; `bench/node/redis.mjs` uses these.)
   */
  static using(run: RedisRun, options: RedisStoreOptions = {}): RedisStore {
    return new RedisStore(run, options);
  }

  /** Same as {@link RedisStore.using}. */
  constructor(run: RedisRun, options: RedisStoreOptions = {}) {
    super();
    if (typeof run !== 'function') throw typeError('run must be a function (script, keys, args) => reply', run);
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const { evalsha, command, prefix = 'ratewindow:', hashTag, onGiveBackError, backend = getDefaultBackend() } = options;
    if (evalsha !== undefined && typeof evalsha !== 'function') throw typeError('evalsha must be a function', evalsha);
    if (command !== undefined && typeof command !== 'function') throw typeError('command must be a function (args) => reply', command);
    if (typeof prefix !== 'string') throw typeError('prefix must be a string', prefix);
    if (hashTag !== undefined && typeof hashTag !== 'string') throw typeError('hashTag must be a string (a separator)', hashTag);
    if (onGiveBackError !== undefined && typeof onGiveBackError !== 'function') {
      throw typeError('onGiveBackError must be a function', onGiveBackError);
    }
    if (!hasRedis(backend)) throw new TypeError(`the ${backend.kind} engine build has no Redis planner`);
    this.backend = backend;
    try {
      this.calls = backend.createRedis(this.record, prefix, hashTag ?? null, evalsha !== undefined, command !== undefined);
    } catch (e) {
      throw engineError(e, backend);
    }
    const [slidingSha1, slidingSource, fixedSha1, fixedSource, lockSha1, lockSource, gcraSha1, gcraSource, counterSha1, counterSource, weightedSha1, weightedSource, weightedAttemptSha1, weightedAttemptSource, mixedSha1, mixedSource] =
      backend.redisScripts();
    this.sliding = Object.freeze({ sha1: slidingSha1!, source: slidingSource! });
    this.fixed = Object.freeze({ sha1: fixedSha1!, source: fixedSource! });
    this.lockScript = Object.freeze({ sha1: lockSha1 ?? '', source: lockSource ?? '' });
    this.gcraScript = Object.freeze({ sha1: gcraSha1 ?? '', source: gcraSource ?? '' });
    this.counterScript = Object.freeze({ sha1: counterSha1 ?? '', source: counterSource ?? '' });
    this.weightedScript = Object.freeze({ sha1: weightedSha1 ?? '', source: weightedSource ?? '' });
    this.weightedAttemptScript = Object.freeze({ sha1: weightedAttemptSha1 ?? '', source: weightedAttemptSource ?? '' });
    this.mixedScript = Object.freeze({ sha1: mixedSha1 ?? '', source: mixedSource ?? '' });
    this.run = run;
    this.evalsha = evalsha;
    this.command = command;
    this.onGiveBackError = onGiveBackError;
    this.usePlans();
  }

  /** A planned call's command (`ts/redis-plan.ts`): its keys and `args`, by SHA1 when it may. */
  protected override sendPlanned(p: CallPlan, args: string[]): unknown {
    const which = p.script;
    const script =
      which === 0 ? this.sliding : which === 1 ? this.fixed : which === 4 ? this.gcraScript : which === 5 ? this.counterScript : which === 6 ? this.weightedScript : this.weightedAttemptScript;
    return p.bySha1 && this.evalsha !== undefined ? this.evalsha(script.sha1, p.keys, args) : this.run(script.source, p.keys, args);
  }

  /** The scripts' SHA1s, e.g. to `SCRIPT LOAD` them ahead of a failover. */
  get scripts(): { readonly sliding: ScriptRef; readonly fixed: ScriptRef } {
    return { sliding: this.sliding, fixed: this.fixed };
  }

  /**
   * Runs the step just answered: its pieces (`command`, cut by the lengths in the record) as keys and
   * args; a plain command's (`Script` slot 3, asked for only when {@link RedisStoreOptions.command} was
   * given) as the command itself.
   */
  protected override runCommand(_kind: StepKind, id: number, command: string | null): unknown {
    const r = this.record;
    const which = r[CallSlot.Script];
    if (which === 3) return this.plain(id, command);
    const script =
      which === 0 ? this.sliding : which === 1 ? this.fixed : which === 2 ? this.lockScript : which === 4 ? this.gcraScript : which === 5 ? this.counterScript : which === 6 ? this.weightedScript : which === 8 ? this.mixedScript : this.weightedAttemptScript;
    const nKeys = r[CallSlot.Keys]!;
    let keys: string[];
    let args: string[];
    if (nKeys < 0 || command === null) {
      keys = this.calls.keys(id);
      args = this.calls.args(id);
    } else {
      const s = command;
      const nArgs = r[CallSlot.Args]!;
      let at = 0;
      keys = [];
      for (let i = 0; i < nKeys; i++) keys.push(s.slice(at, (at += r[CallSlot.Pieces + i]!)));
      args = [];
      for (let i = nKeys; i < nKeys + nArgs; i++) args.push(s.slice(at, (at += r[CallSlot.Pieces + i]!)));
    }
    return r[CallSlot.BySha1] === 1 && this.evalsha !== undefined ? this.evalsha(script.sha1, keys, args) : this.run(script.source, keys, args);
  }

  /** A plain command's pieces (no keys: its name, key and arguments), run by `command`. */
  private plain(id: number, command: string | null): unknown {
    const r = this.record;
    const n = r[CallSlot.Args]!;
    let args: string[];
    if (n < 0 || command === null) {
      args = this.calls.args(id);
    } else {
      args = new Array<string>(n);
      let at = 0;
      for (let i = 0; i < n; i++) args[i] = command.slice(at, (at += r[CallSlot.Pieces + i]!));
    }
    return this.command!(args);
  }

  /**
   * With `command`, a lock's acquire and release are planned once by the engine and sent again for
   * each operation (`ts/redis-lock.ts`); without it (or in a build without the plan) each is a call.
   */
  protected override prepareLock(key: string, owner: string, ttl: number, given: boolean): PreparedLock | undefined {
    const host = (this.lockHost ??= this.makeLockHost());
    if (host === null) return undefined;
    const plans = this.lockPlans;
    let plan = plans.get(key);
    if (plan === undefined || plan.ttl !== ttl) {
      // A refused owner or TTL throws code `invalid_argument:*`, which `Lock` names the field of.
      plan = RedisLockPlan.of(host, key, ttl, this.record, this.calls.lockCommands!(key, owner, ttl));
      if (plan === undefined) return undefined;
      if (plans.size >= 4096) plans.clear();
      plans.set(key, plan);
    } else if (given) {
      (this.backend as LockBackend).checkLock!(ttl, owner);
    }
    return plan;
  }

  /** The lock plans of the last keys, one a key (its last TTL's; a few thousand at most: dropped when full). */
  private readonly lockPlans = new Map<string, RedisLockPlan>();

  /** What this store's planned locks send with (made at the first lock); null: the store plans none. */
  private lockHost: PreparedLockHost | null | undefined;

  private makeLockHost(): PreparedLockHost | null {
    const backend = this.backend as LockBackend;
    const command = this.command;
    if (command === undefined || typeof this.calls.lockCommands !== 'function' || typeof backend.lockAnswers !== 'function') return null;
    const evalsha = this.evalsha;
    const run = this.run;
    const script = this.lockScript;
    return {
      sendAcquire: command,
      sendRelease: (bySha1, keys, args) => (bySha1 && evalsha !== undefined ? evalsha(script.sha1, keys, args) : run(script.source, keys, args)),
      acquireAnswers: answerMap(backend.lockAnswers(true)),
      releaseAnswers: answerMap(backend.lockAnswers(false)),
      answered: (op, key, owner, ttl, reply, failed) => this.lockAnswered(op, key, owner, ttl, reply, failed),
    };
  }

  protected override giveBackFailed(error: GiveBackError): void {
    if (this.onGiveBackError === undefined) super.giveBackFailed(error);
    else this.onGiveBackError(error);
  }
}
