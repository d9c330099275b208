/**
 * {@link PostgresStore}: cooldowns and fixed windows counted in PostgreSQL through the user's own
 * `pg` pool (or any function that runs a statement and returns its rows).
 *
 * ```ts
 * import pg from 'pg';
 * import { PostgresStore } from 'ratewindow';
 * const pool = new pg.Pool();
 * const store = PostgresStore.using(pool);
 * await store.installSchema(); // once per database; idempotent
 * const verdict = await store.consume(`click:${user}`, { uses: 3, windowMs: 10_000 });
 * ```
 * @module
 */
import { randomUUID } from 'node:crypto';

import type { Backend } from './backend';
import type { BackendPostgres, SqlBackend } from './sql-backend';
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
import { typeError } from './errors';
import type { BatchVerdict, CooldownLimit, Entry, Verdict } from './types';

/**
 * Runs one statement (`$1`-style placeholders) with its parameters and resolves to its rows: arrays of
 * column values, or objects keyed by column name (in column order), as node-postgres gives them (its
 * whole result, with `rows`, is accepted too).
 *
 * ```ts
 * const query = (sql, params) => pool.query(sql, params).then((r) => r.rows);
 * ```
 */
export type PostgresQuery = (sql: string, params: unknown[]) => PromiseLike<readonly unknown[] | { rows: readonly unknown[] }>;

/**
 * A node-postgres `Pool` or `Client` (or anything with the same `query`): it is called as
 * `query({ text, values, rowMode: 'array' })`. Statements without parameters (the schema) are sent
 * without `values`, so several statements may run in one.
 */
export interface PgQueryable {
  query(config: { text: string; values?: unknown[]; rowMode: 'array' }): PromiseLike<{ rows: unknown }>;
}

/** Options of a {@link PostgresStore}. */
export interface PostgresStoreOptions {
  /**
   * The name prefix of the tables and functions (default `ratewindow`: `ratewindow_calls`,
   * `ratewindow_windows`, `ratewindow_consume`, `ratewindow_window`): `[a-z_][a-z0-9_]*`, at most 40
   * characters. Include a schema by setting the connection's `search_path`.
   */
  readonly prefix?: string;
  /**
   * Whether each call waits for its commit's WAL flush (the server's `synchronous_commit`). Default
   * `false`: each call's statement sets `synchronous_commit = off` for the transaction it runs in, so a
   * call does not wait for the flush (the database stays consistent; a server crash can lose the last
   * moments' calls — the right trade for rate limits). Pass `true` when your query function runs the
   * statements inside a transaction of yours: the relaxed setting would apply to your commit too.
   */
  readonly durable?: boolean;
  /** The engine build (default: the native addon). */
  readonly backend?: Backend;
}

/** What {@link PostgresStore.purge} deleted. */
export interface PurgeResult {
  /** Rows of calls that had left their windows. */
  readonly calls: number;
  /** Fixed windows that had ended. */
  readonly windows: number;
}

function runner(client: PostgresQuery | PgQueryable): PostgresQuery {
  if (typeof client === 'function') return client;
  if (typeof client === 'object' && client !== null && typeof (client as PgQueryable).query === 'function') {
    const q = client as PgQueryable;
    return (text, values) =>
      Promise.resolve(
        q.query(values.length > 0 ? { text, values, rowMode: 'array' } : { text, rowMode: 'array' }),
      ).then((result) => (Array.isArray(result) ? [] : ((result?.rows as unknown[]) ?? [])));
  }
  throw typeError('PostgresStore.using takes a pg Pool or Client, or a query(sql, params) function', client);
}

/**
 * Counts in PostgreSQL: **one statement, one round trip per call** however many entries it carries,
 * through functions the schema installs. Each call is one transaction that takes each key's advisory
 * lock in a fixed order (two batches never deadlock), times itself by the server's `clock_timestamp()`
 * (hosts with skewed clocks agree), and records against all its entries or none.
 *
 * Never opens a connection: it runs statements through the pool (or query function) it is given. A
 * failed statement or a lost connection rejects with a `StoreError` whose `cause` is the driver's
 * error; the statement was one transaction, so nothing of the call was recorded.
 *
 * Rows leave as their keys are used; call {@link purge} now and then (e.g. hourly) to delete the rest.
 */
export class PostgresStore extends CooldownStore {
  private readonly query: PostgresQuery;
  private readonly plans: BackendPostgres;
  private readonly backend: Backend & SqlBackend;

  private constructor(query: PostgresQuery, options: PostgresStoreOptions) {
    super();
    this.query = query;
    this.backend = sqlBackend(options.backend, 'PostgresStore');
    try {
      if (options.durable !== undefined && typeof options.durable !== 'boolean') {
        throw typeError('durable must be a boolean', options.durable);
      }
      this.plans = this.backend.createPostgres(prefixOption(options.prefix), options.durable ?? false);
    } catch (e) {
      throw engineError(e, this.backend);
    }
  }

  /**
   * A store over the user's node-postgres `Pool` (or `Client`), or over a `query(sql, params)` function
   * that resolves to the rows.
   */
  static using(client: PostgresQuery | PgQueryable, options: PostgresStoreOptions = {}): PostgresStore {
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    return new PostgresStore(runner(client), options);
  }

  /** The schema's SQL (tables, indexes, the two functions; idempotent), to run with a migration tool. */
  get schema(): string {
    return this.plans.schema();
  }

  /**
   * Installs the schema: creates the tables, indexes and functions if missing (replacing the
   * functions). Idempotent and safe to run from several processes at once.
   */
  async installSchema(): Promise<void> {
    await this.run({ sql: this.plans.schema(), params: [] }, 'installing the schema');
  }

  private async run(statement: SqlStatement, what: string): Promise<string> {
    let rows: unknown;
    try {
      rows = await this.query(statement.sql, statement.params);
    } catch (e) {
      throw storeError(e, what);
    }
    // A query function that returned node-postgres' whole result instead of its rows works too.
    if (!Array.isArray(rows) && Array.isArray((rows as { rows?: unknown } | null)?.rows)) {
      rows = (rows as { rows: unknown[] }).rows;
    }
    return rowsJson(rows);
  }

  private async batch(statement: SqlStatement, entries: number, what: string): Promise<number[]> {
    const rows = await this.run(statement, what);
    try {
      return this.plans.decodeBatch(rows, entries);
    } catch (e) {
      throw engineError(e, this.backend);
    }
  }

  /** Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. */
  override async consume(key: string, limit: CooldownLimit): Promise<Verdict> {
    checkKey(key);
    checkLimitShape(limit);
    let planned: string;
    try {
      planned = this.plans.planConsume(randomUUID(), [key], [limit.uses], [limit.windowMs]);
    } catch (e) {
      throw engineError(e, this.backend, [limit.uses], [limit.windowMs]);
    }
    const [statement] = JSON.parse(planned) as [SqlStatement, SqlReleaseData];
    const v = await this.batch(statement, 1, 'consume');
    return v.length === 0 ? ALLOWED : refusal(v, false);
  }

  /** The verdict {@link consume} would give, recording nothing. */
  async peek(key: string, limit: CooldownLimit): Promise<Verdict> {
    checkKey(key);
    checkLimitShape(limit);
    const v = await this.peekPlanned([key], [limit.uses], [limit.windowMs]);
    return v.length === 0 ? ALLOWED : refusal(v, false);
  }

  /**
   * Counts one call against every entry at once, all or nothing; a refusal names `blocked`, the entry
   * with the longest wait. An allowed verdict carries `release()` (not enumerable), which gives back
   * exactly this call (one `DELETE`; resolves when done; once).
   */
  override async consumeMany(entries: readonly Entry[]): Promise<BatchVerdict> {
    const [keys, uses, windows] = columns(entries);
    let planned: string;
    try {
      planned = this.plans.planConsume(randomUUID(), keys, uses, windows);
    } catch (e) {
      throw engineError(e, this.backend, uses, windows);
    }
    const [statement, release] = JSON.parse(planned) as [SqlStatement, SqlReleaseData];
    const v = await this.batch(statement, keys.length, 'consumeMany');
    if (v.length > 0) return refusal(v, true);
    let pending: SqlReleaseData | undefined = release;
    return allowedWithRelease(async () => {
      if (pending === undefined) return;
      const plan = JSON.parse(this.plans.planRelease(JSON.stringify(pending))) as SqlStatement;
      pending = undefined;
      await this.run(plan, 'release');
    });
  }

  /** The verdict {@link consumeMany} would give, recording nothing. */
  override async peekMany(entries: readonly Entry[]): Promise<BatchVerdict> {
    const [keys, uses, windows] = columns(entries);
    const v = await this.peekPlanned(keys, uses, windows);
    return v.length === 0 ? ALLOWED : refusal(v, true);
  }

  private async peekPlanned(keys: string[], uses: number[], windows: number[]): Promise<number[]> {
    let planned: string;
    try {
      planned = this.plans.planPeek(keys, uses, windows);
    } catch (e) {
      throw engineError(e, this.backend, uses, windows);
    }
    return this.batch(JSON.parse(planned) as SqlStatement, keys.length, 'peek');
  }

  private async window(op: string, key: string, decayMs = 1, amount = 0): Promise<number[]> {
    checkKey(key);
    let planned: string;
    try {
      planned = this.plans.planWindow(op, key, decayMs, amount);
    } catch (e) {
      throw engineError(e, this.backend, [1], [decayMs]);
    }
    const rows = await this.run(JSON.parse(planned) as SqlStatement, op);
    try {
      return this.plans.decodeWindow(rows);
    } catch (e) {
      throw engineError(e, this.backend);
    }
  }

  /**
   * Fixed window: adds `amount` hits to `key` (negative gives back) and returns the count. The first
   * hit opens a window of `decayMs` ms (the server's clock); hits inside it do not move it.
   */
  async hit(key: string, decayMs: number, amount = 1): Promise<number> {
    checkKey(key);
    if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
    checkInteger('amount', amount);
    return (await this.window('hit', key, decayMs, amount))[0] ?? 0;
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  async attempts(key: string): Promise<number> {
    return (await this.window('get', key))[0] ?? 0;
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  async tooManyAttempts(key: string, max: number): Promise<boolean> {
    checkKey(key);
    checkInteger('max', max);
    const w = await this.window('get', key);
    return w.length > 0 && w[0]! >= max;
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  async remaining(key: string, max: number): Promise<number> {
    checkKey(key);
    checkInteger('max', max);
    return Math.max(0, max - (await this.attempts(key)));
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  async availableIn(key: string): Promise<number> {
    return (await this.window('get', key))[2] ?? 0;
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  async availableInMs(key: string): Promise<number> {
    return (await this.window('get', key))[1] ?? 0;
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  async resetAttempts(key: string): Promise<void> {
    await this.window('reset', key);
  }

  /** Removes `key`'s count and window; its next hit opens a new window. */
  async clear(key: string): Promise<void> {
    await this.window('clear', key);
  }

  /**
   * Deletes every row whose calls have left their windows and every ended fixed window, by the
   * server's clock, in one statement. Never needed for correctness (rows leave as their keys are
   * used); it bounds the tables for keys that are never used again. Schedule it, e.g. hourly:
   * `setInterval(() => store.purge().catch(log), 3_600_000).unref()`, or with pg_cron.
   */
  async purge(): Promise<PurgeResult> {
    const rows = await this.run(JSON.parse(this.plans.planPurge()) as SqlStatement, 'purge');
    let counts: number[];
    try {
      counts = this.plans.decodePurge(rows);
    } catch (e) {
      throw engineError(e, this.backend);
    }
    return { calls: counts[0]!, windows: counts[1]! };
  }
}
