/**
 * Errors of stores that count in a server through the user's own client (Redis, and the SQL stores):
 * every one is a {@link RateWindowError} with a stable `code`.
 * @module
 */
import { RateWindowError } from './errors';

/** The codes of {@link StoreError} and its subclasses. */
export type StoreErrorCode = 'ERR_RATEWINDOW_STORE' | 'ERR_RATEWINDOW_STORE_REPLY' | 'ERR_RATEWINDOW_STORE_GIVE_BACK';

/**
 * The user's client failed a call (connection refused or lost, a timeout, a server error): the
 * client's own error is `cause`, untouched. Whether the call ran on the server is unknown when the
 * client cannot tell (a timeout), but a call is one script, so it counted all its entries or none, and
 * ratewindow never resent it.
 */
export class StoreError extends RateWindowError {
  constructor(message: string, options?: { cause?: unknown }, code: StoreErrorCode = 'ERR_RATEWINDOW_STORE') {
    super(code, message, options);
  }
}

/**
 * The server answered something a ratewindow script never answers (another script under the same
 * SHA1, a proxy rewriting replies, a client decoding replies its own way): no verdict is guessed.
 */
export class StoreReplyError extends StoreError {
  /** Whose reply: the script (`sliding`, `fixed`) or statement that answered. */
  readonly source: string;
  /** What the reply should have been. */
  readonly expected: string;
  /** What came, rendered briefly. */
  readonly got: string;

  constructor(source: string, expected: string, got: string, message: string) {
    super(message, undefined, 'ERR_RATEWINDOW_STORE_REPLY');
    this.source = source;
    this.expected = expected;
    this.got = got;
  }
}

/**
 * A call counted apart on a Redis Cluster (its keys span slots, no `hashTag`) was refused or failed,
 * and giving back the uses it had already counted failed too: those uses stay counted until they leave
 * their windows. The refusal (or the call's own error) still reaches the caller; this error goes to
 * the store's `onGiveBackError` (by default `process.emitWarning`). `cause` is the client's error.
 */
export class GiveBackError extends StoreError {
  /** The Redis keys the call could not be given back from. */
  readonly keys: readonly string[];
  /** The call's id: its member in each of those keys (`ZREM key callId` removes it by hand). */
  readonly callId: string;

  constructor(keys: readonly string[], callId: string, cause: unknown) {
    super(`could not give back call ${callId} on ${keys.join(', ')}: ${describe(cause)}`, { cause }, 'ERR_RATEWINDOW_STORE_GIVE_BACK');
    this.keys = Object.freeze([...keys]);
    this.callId = callId;
  }
}

/** A thrown value as text. @internal */
export function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
