/**
 * What the PostgreSQL and SQLite stores share: argument checks, entries as parallel arrays, verdicts
 * from the engine's encoding, and the mapping of errors.
 * @module
 * @internal
 */
import type { Backend } from './backend';
import { fromBackend, InvalidArgumentError, RateWindowError, typeError } from './errors';
import { hasSql, type SqlBackend } from './sql-backend';
import { cooldownLimit, getDefaultBackend } from './store';
import { describe, StoreError, StoreReplyError } from './store-errors';
import type { BatchVerdict, CooldownLimit, Entry, Verdict } from './types';

/** A statement as the engine planned it. */
export interface SqlStatement {
  readonly sql: string;
  readonly params: unknown[];
}

/** The release an allowed consume keeps: the keys it recorded under and its call id. */
export type SqlReleaseData = { keys: string[]; call_id: string };

/** The verdict of every allowed single call: one frozen object, shared. */
export const ALLOWED: Verdict = Object.freeze({ allowed: true, retryAfterMs: 0 });

/** The backend a SQL store runs on, checked to plan SQL. */
export function sqlBackend(backend: Backend | undefined, store: string): Backend & SqlBackend {
  const b = backend ?? getDefaultBackend();
  if (!hasSql(b)) {
    throw new TypeError(`${store}: the engine build '${b.kind}' cannot plan SQL (use the native addon)`);
  }
  return b;
}

/** The name prefix option, checked for its type (the engine checks its characters). */
export function prefixOption(prefix: unknown): string {
  if (prefix === undefined) return 'ratewindow';
  if (typeof prefix !== 'string') throw typeError('prefix must be a string', prefix);
  return prefix;
}

export function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw typeError('key must be a string', key);
}

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

export function checkInteger(field: string, value: unknown): number {
  if (typeof value !== 'number') throw typeError(`${field} must be a number`, value);
  if (!Number.isSafeInteger(value)) throw new InvalidArgumentError(field, value);
  return value;
}

/** A batch's entries, checked in full, as the three parallel arrays the engine takes. */
export function columns(entries: unknown): [string[], number[], number[]] {
  if (!Array.isArray(entries)) throw typeError('entries must be an array of { key, limit }', entries);
  const keys: string[] = [];
  const uses: number[] = [];
  const windows: number[] = [];
  for (const entry of entries as unknown[]) {
    if (typeof entry !== 'object' || entry === null) throw typeError('each entry must be { key, limit }', entry);
    const { key, limit } = entry as Entry;
    checkKey(key);
    checkLimitShape(limit);
    keys.push(key);
    uses.push(limit.uses);
    windows.push(limit.windowMs);
  }
  return [keys, uses, windows];
}

/**
 * Maps what the engine threw while planning or decoding: an invalid limit names the entry's values
 * (found by checking each with the engine), rows of the wrong shape become a {@link StoreReplyError}.
 */
export function engineError(error: unknown, backend: Backend, uses: readonly number[] = [], windows: readonly number[] = []): Error {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('invalid_limit')) {
    for (let i = 0; i < uses.length; i++) cooldownLimit(uses[i]!, windows[i]!, backend);
  }
  if (code === 'store_reply') {
    const message = error instanceof Error ? error.message : String(error);
    try {
      const { statement, expected, got } = JSON.parse(message) as { statement: string; expected: string; got: string };
      return new StoreReplyError(statement, expected, got, `unexpected rows from ${statement}: expected ${expected}, got ${got}`);
    } catch {
      return new StoreReplyError('unknown', 'rows', message, `unexpected rows: ${message}`);
    }
  }
  if (typeof code === 'string' && code.startsWith('invalid_argument')) {
    return new TypeError(error instanceof Error ? error.message : String(error));
  }
  return fromBackend(error, uses[0], windows[0]);
}

/** What the driver threw, as a {@link StoreError} with it as `cause` (ratewindow's own errors pass). */
export function storeError(error: unknown, what: string): Error {
  if (error instanceof RateWindowError || error instanceof TypeError) return error;
  return new StoreError(`${what} failed: ${describe(error)}`, { cause: error });
}

/** A refusal in the engine's encoding `[retryTimestamp, retryAfterMs, blocked]`. */
export function refusal(v: readonly number[], batch: boolean): BatchVerdict {
  return batch
    ? { allowed: false, retryAfterMs: v[1]!, retryTimestamp: v[0]!, blocked: v[2]! }
    : { allowed: false, retryAfterMs: v[1]!, retryTimestamp: v[0]! };
}

/** An allowed batch verdict carrying `release` (not enumerable). */
export function allowedWithRelease<R>(release: () => R): BatchVerdict {
  const verdict = { allowed: true, retryAfterMs: 0 };
  Object.defineProperty(verdict, 'release', { value: release, enumerable: false });
  return Object.freeze(verdict);
}

/** Rows as arrays of column values (drivers give arrays or objects keyed by column, in column order). */
export function rowsJson(rows: unknown): string {
  let value: unknown = rows ?? null;
  if (Array.isArray(rows)) {
    let arrays = true;
    for (const row of rows) if (!Array.isArray(row)) arrays = false;
    if (!arrays) value = rows.map((row) => (Array.isArray(row) || row === null || typeof row !== 'object' ? row : Object.values(row)));
  }
  try {
    return JSON.stringify(value);
  } catch {
    // BigInt columns (a driver reading integers as bigint) cross as text, which the decoders accept.
    return JSON.stringify(value, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  }
}
