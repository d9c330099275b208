/**
 * The lock: mutual exclusion by key, with an owner token and a required TTL, on every store (memory,
 * Redis, PostgreSQL, SQLite). Every operation is one atomic step decided by the engine
 * (`ratewindow_core::lock`); `block`'s schedule (when to try again, when to give up) is the engine's
 * too — this layer only sleeps.
 *
 * ```ts
 * const lock = store.lock('rebuild-feed', 30);          // TTL: 30 s; owner: a fresh token
 * if (await lock.acquire()) {
 *   try { await rebuildFeed(); } finally { await lock.release(); }
 * }
 * await lock.block(5);                                   // waits up to 5 s, else LockTimeoutError
 * await store.withLock('rebuild-feed', 30, () => rebuildFeed());
 * // Another process frees it with the owner token:
 * await otherStore.lock('rebuild-feed', 30, lock.owner).release();
 * ```
 * @module
 */

import { checkKey } from './check';
import { InternalError, InvalidArgumentError, RateWindowError } from './errors';
import type { Awaitable } from './types';

/** The engine's lock parts a backend may carry (the napi addon does; see `src/lock.rs`). */
export interface LockBackend {
  /** Checks a TTL (seconds) and an owner token; throws code `invalid_argument:ttl` / `owner`. */
  checkLock?(ttl: number, owner: string): void;
  /** `block`'s schedule from `now` (ms); throws code `invalid_argument:seconds` / `retryMs`. */
  createLockWait?(seconds: number, retryMs: number, now: number): { afterRefusal(now: number): number };
  /** The memory store's locks. */
  createLocks?(): MemoryLocksLike;
  /**
   * Every reply that answers a prepared lock's command (`acquire`: its `SET … NX`; else the release
   * script), with its answer: `text` a string reply, else `int` an integer one, else nil (see
   * `ts/redis-lock.ts`). Any other reply is no answer.
   */
  lockAnswers?(acquire: boolean): Array<{ text?: string | null; int?: number | null; answer: boolean }>;
}

/**
 * A key's acquire and release on one TTL planned once by the engine (a Redis store with plain
 * commands), shared by every lock on that key and TTL: each operation sends the planned command with
 * the lock's owner in it. See `ts/redis-lock.ts`.
 */
export interface PreparedLock {
  acquire(owner: string): Promise<boolean>;
  release(owner: string): Promise<boolean>;
}

/** The memory store's locks (the addon's `NativeLocks`). */
export interface MemoryLocksLike {
  run(op: 'acquire' | 'release' | 'forceRelease', key: string, owner: string | null | undefined, ttl: number, now: number): boolean;
  owner(key: string, now: number): string | null | undefined;
}

/**
 * How a store runs lock operations (each one atomic step on the store).
 * @internal
 */
export interface LockDriver {
  readonly backend: LockBackend;
  /** The last TTL the engine passed with a generated owner token (`Lock`'s memo; none at first). */
  checkedTtl?: number;
  /** `acquire` (owner, ttl), `release` (owner) or `forceRelease`: whether it took or freed the lock. */
  lockRun(op: 'acquire' | 'release' | 'forceRelease', key: string, owner: string | undefined, ttl: number): Awaitable<boolean>;
  /** Who holds `key`: the owner token, or null. */
  lockOwner(key: string): Awaitable<string | null>;
  /**
   * The plan of a lock's acquire and release (kept by the store per key and TTL), checking its TTL and
   * owner as `checkLock` does (throws code `invalid_argument:ttl` / `owner`; a generated owner,
   * `given` false, is a prefix and a counter: valid): undefined when the store runs each operation as a call.
   */
  prepare?(key: string, owner: string, ttl: number, given: boolean): PreparedLock | undefined;
}

/** A lock argument refused by the engine, as the package's error naming the field. */
function lockArgumentError(e: unknown, values: Record<string, unknown>): Error {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('invalid_argument:')) {
    const field = code.slice('invalid_argument:'.length);
    return new InvalidArgumentError(field, values[field], (e as Error).message);
  }
  return e instanceof Error ? e : new InternalError(String(e));
}

function need<K extends keyof LockBackend>(backend: LockBackend, part: K): NonNullable<LockBackend[K]> {
  const f = backend[part];
  if (typeof f !== 'function') throw new TypeError('this engine build has no lock (rebuild the addon)');
  return f.bind(backend) as NonNullable<LockBackend[K]>;
}

/** Thrown by {@link Lock.block} (and {@link withLock}) when the wait ends without the lock. */
export class LockTimeoutError extends RateWindowError {
  /** The lock's key. */
  readonly key: string;
  /** How long it waited, in seconds. */
  readonly seconds: number;

  constructor(key: string, seconds: number) {
    super('ERR_RATEWINDOW_LOCK_TIMEOUT', `Timed out waiting to acquire lock "${key}" (waited ${seconds} s).`);
    this.key = key;
    this.seconds = seconds;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** This process's owner-token prefix: 16 random bytes (Web Crypto) in hex and a `:`, made at the first token. */
let tokenPrefix: string | undefined;
/** Owner tokens made so far in this process. */
let tokenCount = 0;

/**
 * A fresh owner token: this process's random prefix (128 bits, made once) and a counter, e.g.
 * `9b1c…4e0f:17`. Unique across processes and locks as a random UUID is (`randomUUID`, the seed's
 * token: 122 random bits each), at a fraction of its cost (no random bytes a token). Tokens are not
 * secrets either way: they keep an expired holder from freeing its successor's lock, and whoever can
 * reach the store can force a release. A process started from another's memory (a fork without exec,
 * a restored snapshot) would share its prefix: Node starts every child, worker and cluster worker
 * afresh.
 */
function ownerToken(): string {
  let prefix = tokenPrefix;
  if (prefix === undefined) {
    const b = globalThis.crypto.getRandomValues(new Uint8Array(16));
    prefix = '';
    for (const x of b) prefix += (x < 16 ? '0' : '') + x.toString(16);
    tokenPrefix = prefix += ':';
  }
  return prefix + tokenCount++;
}

/**
 * One lock on a store: the key, the owner token (a fresh one unless given: pass another lock's `owner` to
 * restore it in another process) and the TTL in seconds (required: a crashed holder's lock frees
 * itself when it ends, on the store's clock). Not re-entrant: acquiring a lock you hold answers false.
 */
export class Lock {
  /** The lock's key. */
  readonly key: string;
  /** This lock's owner token: keep it to release the lock from another process. */
  readonly owner: string;
  /** How long a taken lock is held unless released, in seconds. */
  readonly ttl: number;
  private readonly driver: LockDriver;
  /** The key's acquire and release planned once (a Redis store with plain commands), else none. */
  private readonly prepared: PreparedLock | undefined;

  /** @internal Use `store.lock(key, ttl, owner?)`. */
  constructor(driver: LockDriver, key: string, ttl: number, owner?: string) {
    checkKey(key);
    if (typeof ttl !== 'number') throw new InvalidArgumentError('ttl', ttl, `invalid ttl: ${String(ttl)} (expected a number of seconds above 0)`);
    if (owner !== undefined && typeof owner !== 'string') throw new InvalidArgumentError('owner', owner, `invalid owner: ${String(owner)} (expected a string)`);
    // Web Crypto's random bytes for the prefix (Node >= 19, browsers, Deno, workers): the wasm package
    // shares this file.
    const token = owner ?? ownerToken();
    // A store that plans the lock's commands checks the TTL and the owner as it plans them.
    let prepared: PreparedLock | undefined;
    if (driver.prepare !== undefined) {
      try {
        prepared = driver.prepare(key, token, ttl, owner !== undefined);
      } catch (e) {
        throw lockArgumentError(e, { ttl, owner: token });
      }
    }
    this.prepared = prepared;
    // Else the engine checks the TTL and the owner. A TTL it passed with a generated token passes again
    // with any other (every token is a prefix and a counter, far below the owner's 256 bytes): that
    // check is not repeated per lock.
    if (prepared === undefined && (owner !== undefined || ttl !== driver.checkedTtl)) {
      try {
        need(driver.backend, 'checkLock')(ttl, token);
      } catch (e) {
        throw lockArgumentError(e, { ttl, owner: token });
      }
      if (owner === undefined) driver.checkedTtl = ttl;
    }
    this.driver = driver;
    this.key = key;
    this.ttl = ttl;
    this.owner = token;
  }

  /** Tries once: true if this lock now holds the key (false while anyone holds it, this lock included). */
  acquire(): Promise<boolean> {
    const prepared = this.prepared;
    return prepared !== undefined ? prepared.acquire(this.owner) : this.run('acquire', this.owner);
  }

  /**
   * One operation through the driver, as a promise (a synchronous store's answer resolved, a throw
   * rejected): the store's own promise when it gives one, so no extra promise or tick is added.
   */
  private run(op: 'acquire' | 'release' | 'forceRelease', owner: string | undefined): Promise<boolean> {
    try {
      const answer = this.driver.lockRun(op, this.key, owner, this.ttl);
      return answer instanceof Promise ? answer : Promise.resolve(answer);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Waits for the lock: tries at once, then every `retryMs` ms (the last try when `seconds` end), and
   * throws {@link LockTimeoutError} if it never got it. `seconds` 0 is one try; `Infinity` waits for
   * ever (the seed's `acquire`).
   */
  async block(seconds: number, retryMs = 250): Promise<void> {
    let wait: { afterRefusal(now: number): number };
    try {
      wait = need(this.driver.backend, 'createLockWait')(seconds, retryMs, Date.now());
    } catch (e) {
      throw lockArgumentError(e, { seconds, retryMs });
    }
    for (;;) {
      if (await this.acquire()) return;
      const pause = wait.afterRefusal(Date.now());
      if (pause < 0) throw new LockTimeoutError(this.key, seconds);
      await sleep(pause);
    }
  }

  /** Frees the lock if this owner holds it (compare and delete, one step): whether it did. */
  release(): Promise<boolean> {
    const prepared = this.prepared;
    return prepared !== undefined ? prepared.release(this.owner) : this.run('release', this.owner);
  }

  /** Frees the lock whoever holds it: whether a held lock was freed. */
  forceRelease(): Promise<boolean> {
    return this.run('forceRelease', undefined);
  }

  /** Who holds the key now: an owner token, or null. */
  async currentOwner(): Promise<string | null> {
    return this.driver.lockOwner(this.key);
  }

  /** Whether this lock's owner holds the key now. */
  async isOwned(): Promise<boolean> {
    return (await this.currentOwner()) === this.owner;
  }
}

/** Options of {@link withLock}. */
export interface WithLockOptions {
  /** Seconds to wait for the lock (default 0: one try). `Infinity`: no limit. */
  wait?: number;
  /** Milliseconds between tries (default 250). */
  retryMs?: number;
  /** The owner token (default: a fresh one, see {@link Lock.owner}). */
  owner?: string;
}

/** A store that makes locks. */
export interface LockStore {
  lock(key: string, ttl: number, owner?: string): Lock;
}

/**
 * Runs `fn` holding the lock `key` (TTL `ttl` seconds): waits up to `options.wait` seconds for it
 * ({@link LockTimeoutError} after), and releases it when `fn` settles, whether it returned or threw.
 */
export async function withLock<T>(store: LockStore, key: string, ttl: number, fn: () => T | Promise<T>, options: WithLockOptions = {}): Promise<T> {
  const lock = store.lock(key, ttl, options.owner);
  await lock.block(options.wait ?? 0, options.retryMs ?? 250);
  try {
    return await fn();
  } finally {
    await lock.release();
  }
}

/**
 * The memory store's lock driver: the engine's lock table, timed by the store's clock.
 * @internal
 */
export function memoryLockDriver(backend: LockBackend, now: () => number): LockDriver {
  let locks: MemoryLocksLike | undefined;
  const table = (): MemoryLocksLike => (locks ??= need(backend, 'createLocks')());
  return {
    backend,
    lockRun: (op, key, owner, ttl) => table().run(op, key, owner ?? null, ttl, now()),
    lockOwner: (key) => table().owner(key, now()) ?? null,
  };
}
