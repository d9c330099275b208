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
import { randomUUID } from 'node:crypto';

import type { Backend } from './backend';
import { InvalidArgumentError, typeError } from './errors';
import type { BackendSqlite, SqlBackend } from './sql-backend';
import {
  ALLOWED,
  allowedWithRelease,
  columns,
  engineError,
  prefixOption,
  refusal,
  rowsJson,
  sqlBackend,
  storeError,
  type SqlReleaseData,
  type SqlStatement,
} from './sql';
import { checkInteger, checkKey, checkLimitShape } from './check';
import { CooldownStore } from './store';
import type { BatchVerdict, Clock, CooldownLimit, Entry, Verdict } from './types';

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
  readonly arrays: boolean;
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
export class SqliteStore extends CooldownStore {
  private readonly db: SqliteDatabaseLike;
  private readonly plans: BackendSqlite;
  private readonly backend: Backend & SqlBackend;
  private readonly clock: Clock | undefined;
  /** Prepared statements by SQL: those whose rows are read, and those only run. */
  private readonly readers = new Map<string, Prepared>();
  private readonly writers = new Map<string, Prepared>();

  /** A store over `db` (a `better-sqlite3` `Database` or a `node:sqlite` `DatabaseSync`). */
  constructor(db: SqliteDatabaseLike, options: SqliteStoreOptions = {}) {
    super();
    if (typeof db !== 'object' || db === null || typeof db.prepare !== 'function' || typeof db.exec !== 'function') {
      throw typeError('SqliteStore takes a better-sqlite3 Database or a node:sqlite DatabaseSync', db);
    }
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    this.db = db;
    this.clock = options.clock;
    this.backend = sqlBackend(options.backend, 'SqliteStore');
    try {
      this.plans = this.backend.createSqlite(prefixOption(options.prefix));
    } catch (e) {
      throw engineError(e, this.backend);
    }
    let setup = this.plans.connectionSetup();
    if (options.busyTimeoutMs !== undefined) {
      const ms = checkInteger('busyTimeoutMs', options.busyTimeoutMs);
      if (ms < 0) throw new InvalidArgumentError('busyTimeoutMs', ms);
      setup = `PRAGMA busy_timeout = ${ms}`;
    }
    try {
      db.exec(setup);
    } catch (e) {
      throw storeError(e, 'setting the busy timeout');
    }
  }

  /** The schema's SQL (tables and indexes; idempotent). */
  get schema(): string {
    return this.plans.schema();
  }

  /** Creates the tables and indexes if missing. Idempotent. */
  installSchema(): void {
    try {
      this.db.exec(this.plans.schema());
    } catch (e) {
      throw storeError(e, 'installing the schema');
    }
  }

  private now(): number {
    if (this.clock === undefined) return Date.now();
    const now = this.clock.now();
    if (typeof now !== 'number') throw typeError('clock.now() must return a number', now);
    if (!(now >= 0 && Number.isSafeInteger(now))) throw new InvalidArgumentError('now', now);
    return now;
  }

  private prepare(sql: string, reader: boolean): Prepared {
    const cache = reader ? this.readers : this.writers;
    let p = cache.get(sql);
    if (p === undefined) {
      const statement = this.db.prepare(sql);
      let arrays = false;
      if (reader && typeof statement.raw === 'function') {
        statement.raw(true);
        arrays = true;
      }
      p = { statement, arrays };
      if (cache.size >= CACHE_LIMIT) cache.clear();
      cache.set(sql, p);
    }
    return p;
  }

  private exec(statement: SqlStatement): unknown {
    return this.prepare(statement.sql, false).statement.run(...statement.params);
  }

  /** Runs the statements before the decision and returns the last one's rows as JSON. */
  private select(statements: readonly SqlStatement[]): string {
    const last = statements.length - 1;
    for (let i = 0; i < last; i++) this.exec(statements[i]!);
    const { statement, arrays } = this.prepare(statements[last]!.sql, true);
    const rows = statement.all(...statements[last]!.params);
    return rowsJson(arrays ? rows : rows.map((row) => Object.values(row as object)));
  }

  /**
   * Runs one call: `begin` plans it, its statements run, `decide` takes the rows and plans the rest,
   * which runs. Any error after `BEGIN IMMEDIATE` rolls the transaction back.
   */
  private call<T extends { statements: SqlStatement[] }>(what: string, begin: () => string, decide: (rows: string) => string): T {
    const first = JSON.parse(begin()) as SqlStatement[];
    const began = first[0]?.sql === 'BEGIN IMMEDIATE';
    try {
      let decided: T;
      try {
        decided = JSON.parse(decide(this.select(first))) as T;
      } catch (e) {
        throw (e as { code?: unknown } | null)?.code === 'store_reply' ? engineError(e, this.backend) : e;
      }
      for (const statement of decided.statements) this.exec(statement);
      return decided;
    } catch (e) {
      if (began) {
        try {
          this.db.exec('ROLLBACK');
        } catch {
          // SQLite already rolled back (some errors end the transaction themselves).
        }
      }
      throw storeError(e, what);
    }
  }

  private sliding(what: string, keys: string[], uses: number[], windows: number[], consume: boolean) {
    const now = this.now();
    const begin = () => {
      try {
        return consume
          ? this.plans.beginConsume(randomUUID(), keys, uses, windows, now)
          : this.plans.beginPeek(keys, uses, windows, now);
      } catch (e) {
        throw engineError(e, this.backend, uses, windows);
      }
    };
    return this.call<{ verdict: number[]; statements: SqlStatement[]; release: SqlReleaseData | null }>(
      what,
      begin,
      (rows) => this.plans.decide(rows),
    );
  }

  /** Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. */
  override consume(key: string, limit: CooldownLimit): Verdict {
    checkKey(key);
    checkLimitShape(limit);
    const { verdict } = this.sliding('consume', [key], [limit.uses], [limit.windowMs], true);
    return verdict.length === 0 ? ALLOWED : refusal(verdict, false);
  }

  /** The verdict {@link consume} would give, recording nothing. */
  peek(key: string, limit: CooldownLimit): Verdict {
    checkKey(key);
    checkLimitShape(limit);
    const { verdict } = this.sliding('peek', [key], [limit.uses], [limit.windowMs], false);
    return verdict.length === 0 ? ALLOWED : refusal(verdict, false);
  }

  /**
   * Counts one call against every entry at once, all or nothing; a refusal names `blocked`, the entry
   * with the longest wait. An allowed verdict carries `release()` (not enumerable), which gives back
   * exactly this call, once.
   */
  override consumeMany(entries: readonly Entry[]): BatchVerdict {
    const [keys, uses, windows] = columns(entries);
    const { verdict, release } = this.sliding('consumeMany', keys, uses, windows, true);
    if (verdict.length > 0) return refusal(verdict, true);
    let pending = release ?? undefined;
    return allowedWithRelease(() => {
      if (pending === undefined) return;
      const plan = JSON.parse(this.plans.planRelease(JSON.stringify(pending))) as SqlStatement;
      pending = undefined;
      try {
        this.exec(plan);
      } catch (e) {
        throw storeError(e, 'release');
      }
    });
  }

  /** The verdict {@link consumeMany} would give, recording nothing. */
  override peekMany(entries: readonly Entry[]): BatchVerdict {
    const [keys, uses, windows] = columns(entries);
    const { verdict } = this.sliding('peekMany', keys, uses, windows, false);
    return verdict.length === 0 ? ALLOWED : refusal(verdict, true);
  }

  private window(op: string, key: string, decayMs = 1, amount = 0): number[] {
    checkKey(key);
    const now = this.now();
    const begin = () => {
      try {
        return this.plans.beginWindow(op, key, decayMs, amount, now);
      } catch (e) {
        throw engineError(e, this.backend, [1], [decayMs]);
      }
    };
    return this.call<{ window: number[]; statements: SqlStatement[] }>(op, begin, (rows) =>
      this.plans.decideWindow(rows),
    ).window;
  }

  /**
   * Fixed window: adds `amount` hits to `key` (negative gives back) and returns the count. The first
   * hit opens a window of `decayMs` ms; hits inside it do not move it.
   */
  hit(key: string, decayMs: number, amount = 1): number {
    checkKey(key);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    checkInteger('amount', amount);
    return this.window('hit', key, decayMs, amount)[0] ?? 0;
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  attempts(key: string): number {
    return this.window('get', key)[0] ?? 0;
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  tooManyAttempts(key: string, max: number): boolean {
    checkKey(key);
    checkInteger('max', max);
    const w = this.window('get', key);
    return w.length > 0 && w[0]! >= max;
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  remaining(key: string, max: number): number {
    checkKey(key);
    checkInteger('max', max);
    return Math.max(0, max - this.attempts(key));
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  availableIn(key: string): number {
    return this.window('get', key)[2] ?? 0;
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  availableInMs(key: string): number {
    return this.window('get', key)[1] ?? 0;
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  resetAttempts(key: string): void {
    this.window('reset', key);
  }

  /** Removes `key`'s count and window; its next hit opens a new window. */
  clear(key: string): void {
    checkKey(key);
    try {
      this.exec(JSON.parse(this.plans.planClear(key)) as SqlStatement);
    } catch (e) {
      throw storeError(e, 'clear');
    }
  }

  /**
   * Deletes every row whose calls have left their windows and every ended fixed window (by the
   * store's clock). Never needed for correctness (rows leave as their keys are used); it bounds the
   * file for keys that are never used again. Schedule it, e.g. hourly:
   * `setInterval(() => store.purge(), 3_600_000).unref()`.
   */
  purge(): SqlitePurgeResult {
    const [calls, windows] = JSON.parse(this.plans.planPurge(this.now())) as [SqlStatement, SqlStatement];
    try {
      const changes = (s: SqlStatement) => Number((this.exec(s) as { changes?: number | bigint }).changes ?? 0);
      return { calls: changes(calls), windows: changes(windows) };
    } catch (e) {
      throw storeError(e, 'purge');
    }
  }
}
