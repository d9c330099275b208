/**
 * The data ratewindow passes around: limits, entries and verdicts. Verdicts are plain, frozen data, so
 * they compare with `deepEqual` and serialise with `JSON.stringify`.
 * @module
 */

/** A value, or a promise of it: stores that do I/O answer with promises, the memory store at once. */
export type Awaitable<T> = T | PromiseLike<T>;

/**
 * `uses` calls allowed within `windowMs` milliseconds (a sliding window): the shape every cooldown
 * method takes. A plain object literal works; so does a {@link Limit} of the rate limiter API.
 *
 * `uses` must be a whole number from 1 to 4294967295, `windowMs` a whole number from 1 to
 * 4320000000000000; anything else is refused with an `InvalidLimitError`.
 */
export interface CooldownLimit {
  /** Calls allowed per window. */
  readonly uses: number;
  /** The window, in milliseconds. */
  readonly windowMs: number;
}

/**
 * GCRA, the token bucket kept as one time per key (governor's and redis-cell's algorithm; Upstash calls
 * it `tokenBucket`): `uses` per `windowMs` on average, up to `burst` at once (default `uses`). Build one
 * with `gcraLimit(uses, windowMs, burst?)`, or write the object literal. Counted by the memory store;
 * see docs/algorithms.md.
 */
export interface GcraLimit extends CooldownLimit {
  /** Marks the limit as GCRA. */
  readonly algorithm: 'gcra';
  /** The most uses at once (a full bucket); default `uses`. */
  readonly burst?: number;
}

/**
 * The sliding-window counter (Upstash's `slidingWindow`, `limits`' `SlidingWindowCounter`): about `uses`
 * per any `windowMs`, estimated from two fixed windows in constant memory per key. Build one with
 * `counterLimit(uses, windowMs)`. Counted by the memory store; see docs/algorithms.md for its error bound.
 */
export interface CounterLimit extends CooldownLimit {
  /** Marks the limit as a sliding-window counter. */
  readonly algorithm: 'counter';
}

/**
 * Any limit a store's `consume`, `peek` and batches take: a plain `{ uses, windowMs }` (or
 * `algorithm: 'sliding'`) is the exact sliding log; {@link GcraLimit} and {@link CounterLimit} name the
 * other two algorithms.
 */
export type AnyLimit = CooldownLimit | GcraLimit | CounterLimit;

/** Options of one call. */
export interface CallOptions {
  /**
   * The uses the call takes (default 1): a whole number from 1 to the limit's `burst` (GCRA) or `uses`.
   * Anything else is an `InvalidArgumentError` naming `cost`.
   */
  readonly cost?: number;
}

/** One entry of a batch: a key, the limit it is counted against, and what the call costs it. */
export interface Entry {
  /** The key counted. */
  readonly key: string;
  /** Its limit (entries of different algorithms mix in one all-or-nothing batch on the memory store). */
  readonly limit: AnyLimit;
  /** The uses the call takes from this entry (default 1). */
  readonly cost?: number;
}

/** The answer to one call. */
export interface Verdict {
  /** Whether the call was allowed (and, for a consume, recorded). */
  readonly allowed: boolean;
  /** Milliseconds until the next call is allowed; 0 when allowed, at least 1 when refused. */
  readonly retryAfterMs: number;
  /**
   * When refused: when the next call is allowed, in Unix ms on the store's clock, the same for every
   * refusal in one wait. Absent when allowed (and from stores that cannot tell).
   */
  readonly retryTimestamp?: number;
  /**
   * The tightest entry's `uses` (the entry with the fewest uses left after the call; ties keep the
   * first). The quota fields are given by the built-in stores; a store of your own may leave them out.
   */
  readonly limit?: number;
  /** Uses that entry has left after this call. */
  readonly remaining?: number;
  /** Milliseconds until that entry gets a use back; 0 when none is used. */
  readonly refillAfterMs?: number;
  /** Milliseconds until that entry's window is empty; 0 when it is. */
  readonly resetAfterMs?: number;
}

/** The answer to a batch: every entry at once. */
export interface BatchVerdict extends Verdict {
  /** When refused: the index of the entry with the longest wait (ties keep the first). */
  readonly blocked?: number;
  /**
   * On an allowed consume, when the store supports it: gives back exactly the call this verdict
   * recorded. Idempotent. Not enumerable, so verdicts compare and serialise as data.
   */
  readonly release?: () => Awaitable<void>;
}

/** The answer to a fixed-window `hitWindow`: the count after the hit and when its window ends. */
export interface HitResult {
  /** Hits in the window after this one. */
  readonly count: number;
  /** Milliseconds until the window ends. */
  readonly resetAfterMs: number;
}

/** The answer to a fixed-window `attempt`: one hit counted atomically while fewer than `max` were. */
export interface AttemptResult {
  /** Whether the hit was counted. */
  readonly allowed: boolean;
  /** Hits in the window after the call. */
  readonly count: number;
  /** Milliseconds until the window ends; 0 when none runs. */
  readonly resetAfterMs: number;
}

/** A source of time in whole Unix milliseconds. The memory store reads `Date.now()` by default. */
export interface Clock {
  /** The current time, a whole number of milliseconds >= 0. */
  now(): number;
}
