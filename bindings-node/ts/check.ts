/**
 * The argument checks every store and the rate limiter share, in one place. Each throws before anything
 * reaches the engine or a backend:
 * - a wrong *type* is a `TypeError` (a string where a number belongs, a missing limit ...);
 * - a number of the right type that cannot be used is a typed {@link InvalidArgumentError} (a count that
 *   is not a safe integer) — limits themselves are checked by the engine, which throws
 *   {@link InvalidLimitError}.
 *
 * Every check names the argument as the caller spells it (`key`, `amount`, `max`, `maxAttempts` ...).
 * @module
 * @internal
 */
import { InvalidArgumentError, typeError, UnsupportedError } from './errors';
import type { AnyLimit, CooldownLimit, CounterLimit, Entry, GcraLimit } from './types';

/**
 * `key` must be a string.
 * @throws {TypeError} otherwise.
 */
export function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw typeError('key must be a string', key);
}

/**
 * `limit` must be an object with numeric `uses` and `windowMs` (whether they are in range is the engine's
 * check, with its {@link InvalidLimitError}).
 * @throws {TypeError} otherwise.
 */
export function checkLimitShape(limit: unknown): asserts limit is CooldownLimit {
  if (
    typeof limit !== 'object' ||
    limit === null ||
    typeof (limit as CooldownLimit).uses !== 'number' ||
    typeof (limit as CooldownLimit).windowMs !== 'number'
  ) {
    throw typeError('limit must be an object { uses: number, windowMs: number }', limit);
  }
  const algorithm = (limit as { algorithm?: unknown }).algorithm;
  if (algorithm !== undefined && algorithm !== 'sliding') {
    if (algorithm === 'gcra' || algorithm === 'counter') throw new UnsupportedError(algorithm);
    throw typeError("limit.algorithm must be 'sliding', 'gcra' or 'counter'", algorithm);
  }
}

/**
 * The engine's kind of a GCRA (`1`) or counter (`2`) limit, checked for shape (`uses`, `windowMs` and a
 * GCRA's optional `burst` numbers); `0` for any other value (the sliding log: {@link checkLimitShape}
 * checks it).
 * @throws {TypeError} for a GCRA or counter limit of the wrong shape.
 */
export function rateKind(limit: unknown): 0 | 1 | 2 {
  if (typeof limit !== 'object' || limit === null) return 0;
  const algorithm = (limit as { algorithm?: unknown }).algorithm;
  if (algorithm !== 'gcra' && algorithm !== 'counter') return 0;
  const l = limit as GcraLimit | CounterLimit;
  if (typeof l.uses !== 'number' || typeof l.windowMs !== 'number') {
    throw typeError(`limit must be an object { algorithm: '${algorithm}', uses: number, windowMs: number }`, limit);
  }
  if (algorithm === 'counter') return 2;
  const burst = (l as GcraLimit).burst;
  if (burst !== undefined && typeof burst !== 'number') throw typeError('limit.burst must be a number', burst);
  return 1;
}

/**
 * A call's `cost` (default 1) from `options`; its range is the engine's check.
 * @throws {TypeError} when `options` is not an object or `cost` not a number.
 */
export function costOf(options: unknown): number {
  if (options === undefined) return 1;
  if (typeof options !== 'object' || options === null) throw typeError('options must be an object { cost?: number }', options);
  const cost = (options as { cost?: unknown }).cost;
  if (cost === undefined) return 1;
  if (typeof cost !== 'number') throw typeError('cost must be a number', cost);
  return cost;
}

/** Whether any entry of a batch names a GCRA or counter limit (checked for shape) or a cost other than 1. */
export function mixesRates(entries: readonly Entry[]): boolean {
  let rates = false;
  for (const entry of entries) {
    if (rateKind((entry as { limit?: AnyLimit }).limit) !== 0) rates = true;
    // A sliding-log entry with a cost is counted by the same path (a weighted call, not a cost of 1).
    const cost = (entry as { cost?: unknown } | null)?.cost;
    if (cost !== undefined && cost !== 1) rates = true;
  }
  return rates;
}

/**
 * `entries` must be an array of `{ key, limit }`, each checked with {@link checkKey} and
 * {@link checkLimitShape}. Checks them all before returning, so a batch is never half-built.
 * @throws {TypeError} otherwise.
 */
export function checkEntries(entries: unknown): asserts entries is readonly Entry[] {
  if (!Array.isArray(entries)) throw typeError('entries must be an array of { key, limit }', entries);
  for (const entry of entries) {
    if (typeof entry !== 'object' || entry === null) throw typeError('each entry must be { key, limit }', entry);
    checkKey((entry as Entry).key);
    checkLimitShape((entry as Entry).limit);
  }
}

/**
 * `value`, the argument `field` (`amount`, `max`, `maxAttempts`, `busyTimeoutMs` ...), must be a safe
 * integer. Returns it.
 * @throws {TypeError} when it is not a number.
 * @throws {InvalidArgumentError} when it is a number but not a safe integer (NaN, 1.5, 2 ** 60 ...).
 */
export function checkInteger(field: string, value: unknown): number {
  if (typeof value !== 'number') throw typeError(`${field} must be a number`, value);
  if (!Number.isSafeInteger(value)) throw new InvalidArgumentError(field, value);
  return value;
}

/**
 * `now`, a clock's reading, must be a safe integer >= 0 (whole Unix milliseconds). Returns it.
 * @throws {TypeError} when it is not a number.
 * @throws {InvalidArgumentError} otherwise (field `now`).
 */
export function checkNow(now: unknown): number {
  if (typeof now !== 'number') throw typeError('clock.now() must return a number', now);
  if (!(now >= 0 && Number.isSafeInteger(now))) throw new InvalidArgumentError('now', now);
  return now;
}
