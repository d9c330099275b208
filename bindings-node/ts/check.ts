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
import { InvalidArgumentError, typeError } from './errors';
import type { CooldownLimit, Entry } from './types';

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
