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
  | 'ERR_RATEWINDOW_STORE_GIVE_BACK';

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

/**
 * A limit (or a fixed window's decay) the engine cannot hold: `uses` must be a whole number from 1 to
 * 4294967295, `windowMs` a whole number of milliseconds from 1 to 4320000000000000. The check is the
 * engine's own, identical in every language.
 */
export class InvalidLimitError extends RateWindowError {
  /** The refused field: `uses`, or `windowMs` (a fixed window's decay included). */
  readonly field: 'uses' | 'windowMs';
  /** The refused value, exactly as given (NaN, -1, 1.5 ...). */
  readonly value: unknown;

  constructor(field: 'uses' | 'windowMs', value: unknown, message: string) {
    super('ERR_RATEWINDOW_INVALID_LIMIT', message);
    this.field = field;
    this.value = value;
  }
}

/**
 * A number that must be a whole, safe integer is not: a clock's reading (`now`, also >= 0), a
 * fixed-window `amount` or `max`.
 */
export class InvalidArgumentError extends RateWindowError {
  /** The argument's name: `now`, `amount` or `max`. */
  readonly field: string;
  /** The refused value, as given. */
  readonly value: unknown;

  constructor(field: string, value: unknown) {
    super('ERR_RATEWINDOW_INVALID_ARGUMENT', `invalid ${field}: ${String(value)} (expected a safe integer${field === 'now' ? ' >= 0' : ''})`);
    this.field = field;
    this.value = value;
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
 * so the error carries them as they were.
 * @internal
 */
export function fromBackend(error: unknown, uses?: unknown, windowMs?: unknown): Error {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : String(error);
  switch (code) {
    case 'invalid_limit:uses':
      return new InvalidLimitError('uses', uses, message);
    case 'invalid_limit:window_ms':
      return new InvalidLimitError('windowMs', windowMs, message);
    case 'panic':
      return new InternalError(message, { cause: error });
    default:
      return error instanceof Error ? error : new InternalError(message, { cause: error });
  }
}

/** @internal */
export function typeError(what: string, value: unknown): TypeError {
  const got = value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value;
  return new TypeError(`${what} (got ${got})`);
}
