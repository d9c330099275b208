/**
 * `ratewindow/express-rate-limit`: any ratewindow store as an
 * [express-rate-limit](https://github.com/express-rate-limit/express-rate-limit) `Store`, so an app
 * on express-rate-limit keeps its middleware and options and changes one line:
 *
 * ```ts
 * import { rateLimit } from 'express-rate-limit';
 * import { RedisStore } from 'ratewindow';
 * import { RateWindowStore } from 'ratewindow/express-rate-limit';
 *
 * app.use(rateLimit({
 *   windowMs: 60_000, limit: 100,
 *   store: new RateWindowStore(RedisStore.using((s, keys, args) => client.eval(s, { keys, arguments: args }))),
 * }));
 * ```
 *
 * It counts with the store's fixed windows (`hitWindow`: a window opens at a key's first hit and lasts
 * `windowMs`), which is what express-rate-limit's own stores count, so `totalHits` and `resetTime` mean
 * what they meant.
 * @module
 */
import { typeError } from '../errors';
import { MemoryStore } from '../store';
import type { Awaitable, HitResult } from '../types';

/** The fixed-window operations the adapter uses (every built-in store has them). */
export interface HitWindowStore {
  hitWindow(key: string, decayMs: number, amount?: number): Awaitable<HitResult>;
  attempts(key: string): Awaitable<number>;
  availableInMs(key: string): Awaitable<number>;
  clear(key: string): Awaitable<void>;
}

/** What express-rate-limit's `Store.increment` and `get` answer (its `ClientRateLimitInfo`). */
export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** Options of {@link RateWindowStore}. */
export interface RateWindowStoreOptions {
  /**
   * Put before every key (default `erl:`). express-rate-limit refuses one store shared by two
   * limiters: give each limiter its own `RateWindowStore`, with its own prefix when they share the
   * underlying store.
   */
  readonly prefix?: string;
}

/**
 * An express-rate-limit `Store` counting in a ratewindow store (`MemoryStore`, `RedisStore`,
 * `PostgresStore`, `SqliteStore`, or your own with the fixed-window operations).
 */
export class RateWindowStore {
  /** The store counting the hits. */
  readonly store: HitWindowStore;
  /** Put before every key; express-rate-limit reads it to tell limiters apart. */
  readonly prefix: string;
  /** Whether the counts live in this process only (a `MemoryStore`): express-rate-limit reads it. */
  readonly localKeys: boolean;
  private windowMs = 60_000;

  constructor(store: HitWindowStore, options: RateWindowStoreOptions = {}) {
    if (typeof store !== 'object' || store === null || typeof store.hitWindow !== 'function') {
      throw typeError('store must be a ratewindow store with hitWindow (MemoryStore, RedisStore ...)', store);
    }
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const { prefix = 'erl:' } = options;
    if (typeof prefix !== 'string') throw typeError('prefix must be a string', prefix);
    this.store = store;
    this.prefix = prefix;
    this.localKeys = store instanceof MemoryStore;
  }

  /** Called by express-rate-limit with its options: the window is its `windowMs`. */
  init(options: { windowMs: number }): void {
    this.windowMs = options.windowMs;
  }

  /** Counts one hit: the hits in the key's window and when it ends. */
  async increment(key: string): Promise<ClientRateLimitInfo> {
    const { count, resetAfterMs } = await this.store.hitWindow(this.prefix + key, this.windowMs, 1);
    return { totalHits: count, resetTime: new Date(Date.now() + resetAfterMs) };
  }

  /**
   * Gives one hit back (express-rate-limit's `skipFailedRequests` / `skipSuccessfulRequests`), unless
   * the key has none in a running window (its window ended meanwhile), as express-rate-limit's stores do.
   */
  async decrement(key: string): Promise<void> {
    const k = this.prefix + key;
    if ((await this.store.attempts(k)) > 0) await this.store.hitWindow(k, this.windowMs, -1);
  }

  /** Forgets the key. */
  async resetKey(key: string): Promise<void> {
    await this.store.clear(this.prefix + key);
  }

  /** The key's hits and when its window ends; undefined when no window runs. */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const k = this.prefix + key;
    const [hits, ms] = await Promise.all([this.store.attempts(k), this.store.availableInMs(k)]);
    return ms === 0 ? undefined : { totalHits: hits, resetTime: new Date(Date.now() + ms) };
  }
}
