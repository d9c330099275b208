/**
 * The SQL part of the backend boundary: an **optional** interface next to {@link Backend}, so an engine
 * build without it (the wasm-bindgen package, for now) still satisfies the core one. `PostgresStore` and
 * `SqliteStore` check for it and say so when it is missing. Their calls cross the call boundary of
 * `ts/redis-backend.ts` ({@link BackendCalls}); besides them: the schema, the connection setup and the
 * purge. An invalid name prefix throws code `invalid_argument:prefix`.
 * @module
 */
import type { Backend } from './backend';
import type { BackendCalls, SqlStatement } from './redis-backend';

/** PostgreSQL calls under one name prefix (`ratewindow_core::sql::Postgres`). */
export interface BackendPostgres extends BackendCalls {
  /** The schema: tables, indexes and the functions, in one transaction. Idempotent. */
  schema(): string;
  /** The purge: one statement answering one row (calls deleted, windows deleted). */
  purge(): SqlStatement;
  /** The purge's counts from its rows (code `store_reply` for rows of the wrong shape). */
  purged(rows: unknown): { calls: number; windows: number };
}

/** SQLite calls under one name prefix (`ratewindow_core::sql::Sqlite`), on the host's clock. */
export interface BackendSqlite extends BackendCalls {
  /** The schema (tables and indexes), for `exec`. Idempotent. */
  schema(): string;
  /** What to `exec` on every connection: the busy timeout (the engine's default without one). */
  connectionSetup(busyTimeoutMs?: number | null): string;
  /** The purge at `now`: statements each deleting rows (their `changes` count them). */
  purge(now: number): SqlStatement[];
}

/** A {@link Backend} that can also start PostgreSQL and SQLite calls. */
export interface SqlBackend {
  /**
   * PostgreSQL calls for the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters).
   * `durable`: every call waits for its commit's WAL flush (default: the call's own transaction skips
   * it, `synchronous_commit = off` locally).
   */
  createPostgres(prefix: string, durable?: boolean): BackendPostgres;
  /** SQLite calls for the tables named by `prefix`. */
  createSqlite(prefix: string): BackendSqlite;
}

/** Whether `backend` implements {@link SqlBackend} too. */
export function hasSql(backend: Backend): backend is Backend & SqlBackend {
  const b = backend as Partial<SqlBackend>;
  return typeof b.createPostgres === 'function' && typeof b.createSqlite === 'function';
}
