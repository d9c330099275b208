/**
 * {@link SqliteStore}: cooldowns and fixed windows counted in a SQLite file through the user's own
 * synchronous driver: `better-sqlite3` (v12) or `node:sqlite` (`DatabaseSync`, where Node has it).
 *
 * ```ts
 * import Database from 'better-sqlite3';
 * import { SqliteStore } from 'ratewindow';
 * const store = new SqliteStore(new Database('limits.db'));
 * store.installSchema(); // once per file; idempotent
 * const verdict = store.consume(`click:${user}`, { uses: 3, windowMs: 10_000 }); // no promise
 * ```
 * @module
 */
import type { Backend } from './backend';
import { checkInteger, checkNow } from './check';
import { CallStore, engineError } from './drive';
import { InvalidArgumentError, typeError } from './errors';
import { CALL_RECORD_LENGTH, type BackendCalls, type SqlStatement, type StepKind } from './redis-backend';
import { prefixOption, sqlBackend, storeError } from './sql';
import type { Clock } from './types';

/** A prepared statement of `better-sqlite3` or `node:sqlite`: the methods the store uses. */
export interface SqliteStatementLike {
  run(...params: any[]): unknown;
  all(...params: any[]): unknown[];
  /** better-sqlite3: rows as arrays. */
  raw?(toggle?: boolean): unknown;
}

/** A `better-sqlite3` `Database` or a `node:sqlite` `DatabaseSync`: the methods the store uses. */
export interface SqliteDatabaseLike {
  prepare(sql: string): SqliteStatementLike;
  exec(sql: string): unknown;
}

/** Options of a {@link SqliteStore}. */
export interface SqliteStoreOptions {
  /**
   * The name prefix of the tables (default `ratewindow`: `ratewindow_calls`, `ratewindow_windows`):
   * `[a-z_][a-z0-9_]*`, at most 40 characters.
   */
  readonly prefix?: string;
  /**
   * How long a call waits for another connection's write before failing with a `StoreError`
   * (`PRAGMA busy_timeout`, set on the connection by the constructor; default 5000 ms).
   */
  readonly busyTimeoutMs?: number;
  /** The clock (default: `Date.now()`). SQLite runs on one host, so the host's clock is the store's. */
  readonly clock?: Clock;
  /** The engine build (default: the native addon). */
  readonly backend?: Backend;
}

/** What {@link SqliteStore.purge} deleted. */
export interface SqlitePurgeResult {
  /** Rows of calls that had left their windows. */
  readonly calls: number;
  /** Fixed windows that had ended. */
  readonly windows: number;
}

interface Prepared {
  readonly statement: SqliteStatementLike;
  /** Whether it answers rows (better-sqlite3 says; node:sqlite's `all()` answers `[]` for the others). */
  readonly reader: boolean;
}

/** Kept prepared statements (a batch's statements vary with its number of keys). */
const CACHE_LIMIT = 256;

/**
 * Counts in a SQLite database through the user's synchronous driver, answering at once (no promise).
 * Each consume runs in one `BEGIN IMMEDIATE` transaction, so processes sharing the file take turns
 * and cannot both take the last use; the busy timeout makes a call wait for another's write. A batch
 * records against all its entries or none.
 *
 * A failed statement (a busy timeout, a full disk, a closed database) throws a `StoreError` whose
 * `cause` is the driver's error, after `ROLLBACK`: nothing of the call was recorded. Do not call it
 * inside a transaction of your own on the same connection (SQLite has no nested `BEGIN`).
 *
 * Rows leave as their keys are used; call {@link purge} now and then (e.g. hourly) to delete the rest.
 * WAL mode (`PRAGMA journal_mode = WAL`, the user's choice) makes calls much cheaper.
 */
export class SqliteStore extends CallStore<true> {
  protected readonly calls: BackendCalls;
  protected readonly record = new Float64Array(CALL_RECORD_LENGTH);
  protected readonly backend: Backend;
  protected readonly sync = true;
  private readonly db: SqliteDatabaseLike;
  private readonly clock: Clock | undefined;
  /** Prepared statements by SQL. */
  private readonly prepared = new Map<string, Prepared>();

  /** A store over `db` (a `better-sqlite3` `Database` or a `node:sqlite` `DatabaseSync`). */
  constructor(db: SqliteDatabaseLike, options: SqliteStoreOptions = {}) {
    super();
    if (typeof db !== 'object' || db === null || typeof db.prepare !== 'function' || typeof db.exec !== 'function') {
      throw typeError('SqliteStore takes a better-sqlite3 Database or a node:sqlite DatabaseSync', db);
    }
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    this.db = db;
    this.clock = options.clock;
    const backend = sqlBackend(options.backend, 'SqliteStore');
    this.backend = backend;
    try {
      this.calls = backend.createSqlite(this.record, prefixOption(options.prefix));
    } catch (e) {
      throw engineError(e, backend);
    }
    let timeout: number | null = null;
    if (options.busyTimeoutMs !== undefined) {
      timeout = checkInteger('busyTimeoutMs', options.busyTimeoutMs);
      if (timeout < 0 || timeout > 0xffffffff) throw new InvalidArgumentError('busyTimeoutMs', timeout);
    }
    try {
      db.exec(this.calls.connectionSetup(timeout));
    } catch (e) {
      throw storeError(e, 'setting the busy timeout');
    }
  }

  /** The schema's SQL (tables and indexes; idempotent). */
  get schema(): string {
    return this.calls.schema();
  }

  /** Creates the tables and indexes if missing. Idempotent. */
  installSchema(): void {
    try {
      this.db.exec(this.calls.schema());
    } catch (e) {
      throw storeError(e, 'installing the schema');
    }
  }

  protected override now(): number {
    return this.clock === undefined ? Date.now() : checkNow(this.clock.now());
  }

  /** GCRA and counter calls are decided on the host clock too. */
  protected override rateClock(): number {
    return this.now();
  }

  private prepare(sql: string): Prepared {
    let p = this.prepared.get(sql);
    if (p === undefined) {
      const statement = this.db.prepare(sql);
      const reader = (statement as { reader?: unknown }).reader !== false;
      if (reader && typeof statement.raw === 'function') statement.raw(true);
      p = { statement, reader };
      if (this.prepared.size >= CACHE_LIMIT) this.prepared.clear();
      this.prepared.set(sql, p);
    }
    return p;
  }

  /** A call's statements, in order on this connection; the rows of the last. */
  protected override runCommand(_kind: StepKind, id: number): unknown {
    const statements = this.calls.statements(id);
    const last = statements.length - 1;
    for (let i = 0; i < last; i++) this.exec(statements[i]!);
    const { statement, reader } = this.prepare(statements[last]!.sql);
    if (!reader) {
      statement.run(...statements[last]!.params);
      return [];
    }
    return statement.all(...statements[last]!.params);
  }

  private exec(s: SqlStatement): unknown {
    const { statement, reader } = this.prepare(s.sql);
    return reader ? statement.all(...s.params) : statement.run(...s.params);
  }

  /**
   * Deletes every row whose calls have left their windows, every ended fixed window, every lock
   * whose TTL ended, every GCRA bucket full again and every counter whose counts weigh nothing (by the
   * store's clock; those are not counted). Never needed for correctness
   * (rows leave as their keys are used); it bounds the
   * file for keys that are never used again. Schedule it, e.g. hourly:
   * `setInterval(() => store.purge(), 3_600_000).unref()`.
   */
  purge(): SqlitePurgeResult {
    const [calls, windows, ...rest] = this.calls.purge(this.now());
    try {
      const changes = (s: SqlStatement) => Number((this.exec(s) as { changes?: number | bigint }).changes ?? 0);
      const counts = { calls: changes(calls!), windows: changes(windows!) };
      for (const s of rest) changes(s); // expired locks, full GCRA buckets, spent counters
      return counts;
    } catch (e) {
      throw storeError(e, 'purge');
    }
  }
}
