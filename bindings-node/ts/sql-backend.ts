/**
 * The SQL part of the backend boundary: an **optional** interface next to {@link Backend}, so an engine
 * build without it (the wasm-bindgen package, for now) still satisfies the core one. `PostgresStore` and
 * `SqliteStore` check for it and say so when it is missing. Their calls, schema, connection setup and
 * purge are {@link BackendCalls} (`ts/redis-backend.ts`). An invalid name prefix throws code
 * `invalid_argument:prefix`.
 * @module
 */
import type { Backend } from './backend';
import type { BackendCalls } from './redis-backend';

/** A {@link Backend} that can also start PostgreSQL and SQLite calls. */
export interface SqlBackend {
  /**
   * PostgreSQL calls for the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters).
   * `durable`: every call waits for its commit's WAL flush (default: the call's own transaction skips
   * it, `synchronous_commit = off` locally).
   */
  createPostgres(record: Float64Array, prefix: string, durable?: boolean): BackendCalls;
  /** SQLite calls for the tables named by `prefix`. */
  createSqlite(record: Float64Array, prefix: string): BackendCalls;
}

/** Whether `backend` implements {@link SqlBackend} too. */
export function hasSql(backend: Backend): backend is Backend & SqlBackend {
  const b = backend as Partial<SqlBackend>;
  return typeof b.createPostgres === 'function' && typeof b.createSqlite === 'function';
}
