/**
 * Errors of ratewindow. Every one is an `Error` subclass with a stable `code` to branch on; wrong
 * argument types are plain `TypeError`s.
 * @module
 */

/** Stable codes carried by {@link RateWindowError}s. */
export type RateWindowErrorCode =
  | 'ERR_RATEWINDOW_INVALID_LIMIT'
  | 'ERR_RATEWINDOW_INVALID_ARGUMENT'
  | 'ERR_RATEWINDOW_INTERNAL'
  | 'ERR_RATEWINDOW_STORE'
  | 'ERR_RATEWINDOW_STORE_REPLY'
  | 'ERR_RATEWINDOW_STORE_GIVE_BACK'
  | 'ERR_RATEWINDOW_LOCK_TIMEOUT'
  | 'ERR_RATEWINDOW_UNSUPPORTED';

/** The base class of every ratewindow error: `instanceof RateWindowError` catches them all. */
export class RateWindowError extends Error {
  /** A stable code, e.g. `ERR_RATEWINDOW_INVALID_LIMIT`. */
  readonly code: RateWindowErrorCode;

  constructor(code: RateWindowErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** The engine's limit fields, as TypeScript spells them (`burst`: a GCRA limit's). */
export type LimitField = 'uses' | 'windowMs' | 'burst';

/** What each limit field accepts, in words (the engine's ranges). @internal */
export const LIMIT_RANGES: Readonly<Record<LimitField, string>> = Object.freeze({
  uses: 'a whole number from 1 to 4294967295',
  windowMs: 'a whole number of milliseconds from 1 to 4320000000000000',
  burst: 'a whole number from 1 to 4294967295, with burst x windowMs at most 2^53 - 1',
});

/**
 * A limit (or a fixed window's decay) the engine cannot hold: `uses` must be a whole number from 1 to
 * 4294967295, `windowMs` a whole number of milliseconds from 1 to 4320000000000000. The check is the
 * engine's own, identical in every language.
 *
 * `field` is the engine's field (stable, to branch on); `argument` is the name the caller gave the
 * number, which the message starts with: `uses` and `windowMs` for a cooldown limit, `decayMs` for a
 * store's `hit`, `maxAttempts` and `decaySeconds` (or `decayMinutes` ...) for a {@link Limit} and the
 * rate limiter.
 */
export class InvalidLimitError extends RateWindowError {
  /** The refused field: `uses`, or `windowMs` (a fixed window's decay included), or a GCRA limit's `burst`. */
  readonly field: LimitField;
  /** The refused value, exactly as given (NaN, -1, 1.5 ...). */
  readonly value: unknown;
  /** The argument as the caller spelled it (`windowMs`, `decayMs`, `maxAttempts`, `decaySeconds` ...). */
  readonly argument: string;

  constructor(field: LimitField, value: unknown, message: string, argument: string = field) {
    super('ERR_RATEWINDOW_INVALID_LIMIT', message);
    this.field = field;
    this.value = value;
    this.argument = argument;
  }
}

/**
 * An {@link InvalidLimitError} for `value`, given as `argument` (refused as the engine's `field`), with the
 * message `invalid <argument>: <value> (expected <expected>)`.
 * @internal
 */
export function invalidLimit(field: LimitField, argument: string, value: unknown, expected: string = LIMIT_RANGES[field]): InvalidLimitError {
  return new InvalidLimitError(field, value, `invalid ${argument}: ${String(value)} (expected ${expected})`, argument);
}

/**
 * A number that must be a whole, safe integer is not: a clock's reading (`now`, also >= 0), a
 * fixed-window `amount` or `max` (`maxAttempts` in the rate limiter), a store option such as
 * `busyTimeoutMs`. `field` is the argument's name as TypeScript spells it. Also a key that is not
 * valid Unicode (a lone surrogate): `field` is `key`, or `entries[3].key` in a batch, and the message
 * is the engine's.
 */
export class InvalidArgumentError extends RateWindowError {
  /** The argument's name: `now`, `amount`, `max`, `maxAttempts` ... */
  readonly field: string;
  /** The refused value, as given. */
  readonly value: unknown;

  constructor(field: string, value: unknown, message?: string) {
    super('ERR_RATEWINDOW_INVALID_ARGUMENT', message ?? `invalid ${field}: ${String(value)} (expected a safe integer${field === 'now' ? ' >= 0' : ''})`);
    this.field = field;
    this.value = value;
  }
}

/**
 * The store cannot count this kind of limit: a GCRA or sliding-window counter limit given to a store that
 * counts the sliding log only (the Redis, PostgreSQL, SQLite and sharded stores, and the wasm-bindgen
 * build of the memory store, for now). `algorithm` is the limit's (`gcra`, `counter`).
 */
export class UnsupportedError extends RateWindowError {
  /** The algorithm refused. */
  readonly algorithm: string;

  constructor(algorithm: string, message?: string) {
    super('ERR_RATEWINDOW_UNSUPPORTED', message ?? `this store does not count ${algorithm} limits (the memory store does; see docs/algorithms.md)`);
    this.algorithm = algorithm;
  }
}

/** A bug inside the engine (a Rust panic, caught before it could cross into Node). Please report it. */
export class InternalError extends RateWindowError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_RATEWINDOW_INTERNAL', message, options);
  }
}

/**
 * Maps what a backend threw to a ratewindow error. `uses` and `windowMs` are the values the caller gave,
 * so the error carries them as they were. The message names the field as TypeScript spells it
 * (`windowMs`, not the engine's `window_ms`); called with a `windowMs` but no `uses` — a fixed window's
 * decay, as every store's `hit` calls it — it names `decayMs`. `burst` and `cost` are a GCRA or counter
 * call's (`invalid_limit:burst`, `invalid_argument:cost`).
 * @internal
 */
export function fromBackend(error: unknown, uses?: unknown, windowMs?: unknown, burst?: unknown, cost?: unknown): Error {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : String(error);
  switch (code) {
    case 'invalid_limit:uses':
      return new InvalidLimitError('uses', uses, renamed(message, 'uses', 'uses'), 'uses');
    case 'invalid_limit:window_ms': {
      const argument = uses === undefined && windowMs !== undefined ? 'decayMs' : 'windowMs';
      return new InvalidLimitError('windowMs', windowMs, renamed(message, 'window_ms', argument), argument);
    }
    case 'panic':
      return new InternalError(message, { cause: error });
    case 'invalid_limit:burst':
      return new InvalidLimitError('burst', burst, message, 'burst');
    case 'invalid_argument:cost': {
      // A call's cost (`entries[3].cost` in a batch's message).
      const field = /^invalid (\S+):/.exec(message)?.[1] ?? 'cost';
      return new InvalidArgumentError(field, cost, message);
    }
    case 'invalid_argument:key': {
      // A key that is not valid Unicode; the engine's message names its position (`entries[3].key`).
      const field = /^invalid (\S+):/.exec(message)?.[1] ?? 'key';
      return new InvalidArgumentError(field, undefined, message);
    }
    default:
      return error instanceof Error ? error : new InternalError(message, { cause: error });
  }
}

/** The engine's message `invalid <engine name>: ...` with the name the caller knows. */
function renamed(message: string, engineName: string, argument: string): string {
  const prefix = `invalid ${engineName}:`;
  return message.startsWith(prefix) ? `invalid ${argument}:${message.slice(prefix.length)}` : message;
}

/** @internal */
export function typeError(what: string, value: unknown): TypeError {
  const got = value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value;
  return new TypeError(`${what} (got ${got})`);
}
