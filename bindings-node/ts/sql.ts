/**
 * What the PostgreSQL and SQLite stores share besides the call driver (`ts/drive.ts`): the backend
 * check, the name prefix option, and a driver's failure outside a call (schema, purge) as a StoreError.
 * @module
 * @internal
 */
import type { Backend } from './backend';
import { RateWindowError, typeError } from './errors';
import { hasSql, type SqlBackend } from './sql-backend';
import { getDefaultBackend } from './store';
import { describe, StoreError } from './store-errors';

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

/** What the driver threw outside a call, as a {@link StoreError} with it as `cause`. */
export function storeError(error: unknown, what: string): Error {
  if (error instanceof RateWindowError || error instanceof TypeError) return error;
  return new StoreError(`${what} failed: ${describe(error)}`, { cause: error });
}
