/**
 * {@link RateLimiter}: the seed framework's fixed-window rate limiter API, on any store that offers the
 * fixed-window operations.
 * @module
 */
import { checkInteger } from './check';
import { InvalidLimitError, invalidLimit, typeError } from './errors';
import { DECAY_RANGE, Limit, secondsToMs } from './limit';
import { MemoryStore } from './store';
import type { AttemptResult, Awaitable } from './types';

/**
 * The fixed-window operations a store offers (`MemoryStore` has them all). A window opens at a key's
 * first hit and lasts `decayMs`; hits inside it do not move it.
 */
export interface FixedWindowStore {
  /** Adds `amount` hits (negative gives back) and returns the count. */
  hit(key: string, decayMs: number, amount?: number): Awaitable<number>;
  /** Hits in the current window; 0 when none. */
  attempts(key: string): Awaitable<number>;
  /** Whether `max` or more hits are counted in a window that still runs. */
  tooManyAttempts(key: string, max: number): Awaitable<boolean>;
  /** `max` minus the hits, floored at 0. */
  remaining(key: string, max: number): Awaitable<number>;
  /** Zeroes the count, keeping the window. */
  resetAttempts(key: string): Awaitable<void>;
  /** Removes the count and the window. */
  clear(key: string): Awaitable<void>;
  /** Whole seconds until the window ends, rounded up; 0 when none. */
  availableIn(key: string): Awaitable<number>;
  /** Atomically: one hit if fewer than `max` are counted (the built-in stores have it). */
  attempt?(key: string, max: number, decayMs: number): Awaitable<AttemptResult>;
}

/** What a named limiter's callback returns: one limit or several. */
export type LimiterCallback = (...args: any[]) => Limit | readonly Limit[] | Promise<Limit | readonly Limit[]>;

/**
 * Rate limiting with fixed windows, as the seed framework's `RateLimiter`: named limiters, `attempt`,
 * `hit`, `tooManyAttempts` and the rest, counted by a store (a new {@link MemoryStore} by default).
 *
 * Windows are exact to the millisecond (`decaySeconds` may be fractional); `availableIn` rounds the
 * remaining time up to whole seconds.
 *
 * Numbers are checked with the names used here: `maxAttempts` and `amount` must be safe integers
 * ({@link InvalidArgumentError} otherwise), `decaySeconds` a whole number of milliseconds from 1 to
 * 4320000000000000 once multiplied by 1000 ({@link InvalidLimitError} with `argument: 'decaySeconds'`);
 * a value that is not a number is a `TypeError`.
 */
export class RateLimiter {
  /** The store counting the hits. */
  readonly store: FixedWindowStore;
  private readonly limiters = new Map<string, LimiterCallback>();

  constructor(store: FixedWindowStore = new MemoryStore()) {
    this.store = store;
  }

  /** Registers a named limiter: `callback` receives the call site's arguments and returns limits. */
  for(name: string, callback: LimiterCallback): this {
    if (typeof callback !== 'function') throw typeError('callback must be a function', callback);
    this.limiters.set(name, callback);
    return this;
  }

  /**
   * The callback registered as `name`, as given (`limiter()` resolves it). The HTTP middleware hands
   * its limits to the core, which rewrites shared keys itself. @internal
   */
  callback(name: string): LimiterCallback | undefined {
    return this.limiters.get(name);
  }

  /**
   * Resolves a named limiter: runs its callback and returns its limits as an array, with every limit
   * whose key another shares rewritten to its {@link Limit.fallbackKey}. `undefined` if unregistered.
   */
  limiter(name: string): ((...args: unknown[]) => Promise<Limit[]>) | undefined {
    const callback = this.limiters.get(name);
    if (callback === undefined) return undefined;
    return async (...args: unknown[]) => {
      const result = await callback(...args);
      const limits: Limit[] = Array.isArray(result) ? [...(result as readonly Limit[])] : [result as Limit];
      const seen = new Map<string, number>();
      for (const limit of limits) seen.set(limit.key, (seen.get(limit.key) ?? 0) + 1);
      for (const limit of limits) {
        if ((seen.get(limit.key) ?? 0) > 1) limit.key = limit.fallbackKey();
      }
      return limits;
    };
  }

  /**
   * Runs `callback` unless `key` is limited: returns `false` when limited, else the callback's result
   * (`true` when it returned `undefined` or `null`).
   *
   * Unlike the seed, the attempt is counted *before* the callback runs, in one step with the check, so
   * two concurrent attempts can never both take the last one: exactly `maxAttempts` callbacks run per
   * window (the store's atomic `attempt`; a store without one counts, and gives a refused hit back).
   */
  async attempt<T>(
    key: string,
    maxAttempts: number,
    callback: () => T | Promise<T>,
    decaySeconds = 60,
  ): Promise<T | true | false> {
    checkInteger('maxAttempts', maxAttempts);
    if (this.store.attempt !== undefined) {
      if (typeof decaySeconds !== 'number') throw typeError('decaySeconds must be a number', decaySeconds);
      const attempted = await this.decaying(decaySeconds, () => this.store.attempt!(key, maxAttempts, secondsToMs(decaySeconds)));
      return attempted.allowed ? ((await callback()) ?? true) : false;
    }
    const count = await this.increment(key, decaySeconds, 1);
    if (count > maxAttempts) {
      await this.store.hit(key, secondsToMs(decaySeconds), -1);
      return false;
    }
    const result = await callback();
    return result ?? true;
  }

  /** Whether `key` has `maxAttempts` or more hits in a window that still runs. */
  async tooManyAttempts(key: string, maxAttempts: number): Promise<boolean> {
    checkInteger('maxAttempts', maxAttempts);
    return this.store.tooManyAttempts(key, maxAttempts);
  }

  /** One hit: `increment(key, decaySeconds, 1)`. */
  async hit(key: string, decaySeconds = 60): Promise<number> {
    return this.increment(key, decaySeconds, 1);
  }

  /** Adds `amount` hits to `key`'s window (opening one of `decaySeconds` if none runs). */
  async increment(key: string, decaySeconds = 60, amount = 1): Promise<number> {
    if (typeof decaySeconds !== 'number') throw typeError('decaySeconds must be a number', decaySeconds);
    checkInteger('amount', amount);
    return this.decaying(decaySeconds, () => this.store.hit(key, secondsToMs(decaySeconds), amount));
  }

  /** Runs a store call given `decaySeconds` in ms: an invalid decay is named as the caller gave it. */
  private async decaying<T>(decaySeconds: number, f: () => Awaitable<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      // The store names the decay it was given in milliseconds; the caller gave seconds.
      if (e instanceof InvalidLimitError && e.field === 'windowMs') throw invalidLimit('windowMs', 'decaySeconds', decaySeconds, DECAY_RANGE);
      throw e;
    }
  }

  /** Gives `amount` hits back: `increment` with `-amount`. */
  async decrement(key: string, decaySeconds = 60, amount = 1): Promise<number> {
    checkInteger('amount', amount);
    return this.increment(key, decaySeconds, -amount);
  }

  /** Hits counted for `key`; 0 when none. */
  async attempts(key: string): Promise<number> {
    return this.store.attempts(key);
  }

  /** Zeroes `key`'s count, keeping its window. */
  async resetAttempts(key: string): Promise<void> {
    await this.store.resetAttempts(key);
  }

  /** `maxAttempts` minus the hits, floored at 0. */
  async remaining(key: string, maxAttempts: number): Promise<number> {
    checkInteger('maxAttempts', maxAttempts);
    return this.store.remaining(key, maxAttempts);
  }

  /** Alias of {@link remaining}. */
  async retriesLeft(key: string, maxAttempts: number): Promise<number> {
    return this.remaining(key, maxAttempts);
  }

  /** Removes `key`'s count and window. */
  async clear(key: string): Promise<void> {
    await this.store.clear(key);
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when none. */
  async availableIn(key: string): Promise<number> {
    return this.store.availableIn(key);
  }
}
