/**
 * The SQL part of the backend boundary: an **optional** interface next to {@link Backend}, so an engine
 * build without it (the wasm-bindgen package, for now) still satisfies the core one. `PostgresStore` and
 * `SqliteStore` check for it and say so when it is missing.
 *
 * It plans and decodes only (`ratewindow_core::sql`): the TypeScript layer runs each statement with the
 * user's driver and hands the rows back. Only strings, numbers and flat arrays of them cross.
 *
 * ## Rules every implementation follows
 * - A statement crosses as JSON `{"sql": string, "params": [...]}`; a list of them as a JSON array.
 *   Parameters are `null`, booleans, integers, strings, or arrays of integers or of strings.
 * - Rows cross back as JSON: an array of rows, each an array of column values as the driver gave them
 *   (node-postgres gives `bigint` as a string; both are accepted).
 * - Entries arrive as three parallel arrays (keys, uses, windows) of the host values the user gave; an
 *   invalid limit throws a `BackendError` with code `invalid_limit:uses` / `invalid_limit:window_ms` (as
 *   in `ts/backend.ts`), an invalid name prefix `invalid_argument:prefix`, a panic `panic`.
 * - A batch verdict is `[]` when allowed, else `[retryTimestamp, retryAfterMs, blocked]`; a window is
 *   `[]` when the key has none, else `[count, msLeft, availableInSecs]`.
 * - Rows of the wrong shape throw code `store_reply`, whose message is JSON
 *   `{"statement", "expected", "got"}` (the core's `RowError`).
 * @module
 */
import type { Backend } from './backend';

/** PostgreSQL plans and decoders under one name prefix (`ratewindow_core::sql::Postgres`). */
export interface BackendPostgres {
  /** The schema: tables, indexes and the two functions, in one transaction. Idempotent. */
  schema(): string;
  /** `plan_consume_many` under the call id `callId`: JSON `[statement, release]`. */
  planConsume(callId: string, keys: string[], uses: number[], windows: number[]): string;
  /** `plan_peek_many`: JSON statement. */
  planPeek(keys: string[], uses: number[], windows: number[]): string;
  /** `plan_release` of the JSON release {@link planConsume} gave: JSON statement. */
  planRelease(releaseJson: string): string;
  /** `op` is `hit` (`decayMs` validated by `Window::from_f64`, `amount`), `get`, `reset` or `clear`. */
  planWindow(op: string, key: string, decayMs: number, amount: number): string;
  /** `plan_purge`: JSON statement (one row: calls deleted, windows deleted). */
  planPurge(): string;
  /** `decode_batch` of a consume or peek of `entries` entries. */
  decodeBatch(rowsJson: string, entries: number): number[];
  /** `decode_window`. */
  decodeWindow(rowsJson: string): number[];
  /** `decode_purge`: `[calls, windows]`. */
  decodePurge(rowsJson: string): number[];
}

/**
 * SQLite plans and decoders under one name prefix (`ratewindow_core::sql::Sqlite`), holding the one call
 * under way between `begin*` and `decide*` (the TypeScript layer runs them without awaiting).
 */
export interface BackendSqlite {
  /** The schema (tables and indexes), for `exec`. Idempotent. */
  schema(): string;
  /** `Sqlite::CONNECTION_SETUP`: run on every connection. */
  connectionSetup(): string;
  /** `begin_consume` at `now`: JSON array of the statements to run first. */
  beginConsume(callId: string, keys: string[], uses: number[], windows: number[], now: number): string;
  /** `begin_peek` at `now`: JSON array (one `SELECT`). */
  beginPeek(keys: string[], uses: number[], windows: number[], now: number): string;
  /** `decide` from the rows of the last statement: JSON `{verdict, statements, release}`. */
  decide(rowsJson: string): string;
  /** `plan_release` of the JSON release {@link decide} gave: JSON statement. */
  planRelease(releaseJson: string): string;
  /** `begin_hit` / `begin_get_window` / `begin_reset_attempts` (`op`: `hit`, `get`, `reset`). */
  beginWindow(op: string, key: string, decayMs: number, amount: number, now: number): string;
  /** `decide` of the window call: JSON `{window, statements}`. */
  decideWindow(rowsJson: string): string;
  /** `plan_clear`: JSON statement. */
  planClear(key: string): string;
  /** `plan_purge(now)`: JSON array of statements. */
  planPurge(now: number): string;
}

/** A {@link Backend} that can also plan for PostgreSQL and SQLite. */
export interface SqlBackend {
  /**
   * PostgreSQL plans for the objects named by `prefix` (`[a-z_][a-z0-9_]*`, at most 40 characters).
   * `durable` plans every call to wait for its commit's WAL flush (default: the call's own transaction
   * skips it, `synchronous_commit = off` locally).
   */
  createPostgres(prefix: string, durable?: boolean): BackendPostgres;
  /** SQLite plans for the tables named by `prefix`. */
  createSqlite(prefix: string): BackendSqlite;
}

/** Whether `backend` implements {@link SqlBackend} too. */
export function hasSql(backend: Backend): backend is Backend & SqlBackend {
  const b = backend as Partial<SqlBackend>;
  return typeof b.createPostgres === 'function' && typeof b.createSqlite === 'function';
}
