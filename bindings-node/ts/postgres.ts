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
import type { Backend } from './backend';
import { CallStore, engineError } from './drive';
import { typeError } from './errors';
import { CALL_RECORD_LENGTH, type BackendCalls, type SqlStatement, type StepKind } from './redis-backend';
import { sqlBackend, prefixOption, storeError } from './sql';

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
 * `query({ name, text, values, rowMode: 'array' })`, a named (prepared) statement per text. Statements
 * without parameters (the schema) are sent without `name` and `values`, so several statements may run
 * in one. Behind a pooler that cannot keep prepared statements (PgBouncer in transaction mode before
 * 1.21), pass a {@link PostgresQuery} function instead.
 */
export interface PgQueryable {
  query(config: { name?: string; text: string; values?: unknown[]; rowMode: 'array' }): PromiseLike<{ rows: unknown }>;
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

/** The rows of what a query resolved to: its rows, or node-postgres' whole result's `rows`. */
function rowsOf(rows: unknown): unknown {
  if (!Array.isArray(rows) && Array.isArray((rows as { rows?: unknown } | null)?.rows)) return (rows as { rows: unknown[] }).rows;
  return rows;
}

/** A name per statement text, process-wide: node-postgres prepares a named statement once per connection. */
const statementNames = new Map<string, string>();
function statementName(text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) statementNames.set(text, (name = `ratewindow_${statementNames.size + 1}`));
  return name;
}

/** A node-postgres result's rows (a multi-statement result, an array of results, has none to give). */
function pgRows(result: { rows: unknown }): unknown[] {
  return Array.isArray(result) ? [] : ((result?.rows as unknown[]) ?? []);
}

function runner(client: PostgresQuery | PgQueryable): PostgresQuery {
  if (typeof client === 'function') return client;
  if (typeof client === 'object' && client !== null && typeof (client as PgQueryable).query === 'function') {
    const q = client as PgQueryable;
    // Statements with parameters run as named (prepared) statements: parsed and planned once per
    // connection. The engine plans a few fixed texts per prefix, so the names stay few. The last
    // text's name is kept: a call's text arrives as a new string, and comparing it with the last one
    // costs less than hashing it for the map (the usual store runs one statement over and over).
    let lastText = '';
    let lastName = '';
    return (text, values) => {
      if (values.length === 0) return Promise.resolve(q.query({ text, rowMode: 'array' })).then(pgRows);
      if (text !== lastText) {
        lastName = statementName(text);
        lastText = text;
      }
      return Promise.resolve(q.query({ name: lastName, text: lastText, values, rowMode: 'array' })).then(pgRows);
    };
  }
  throw typeError('PostgresStore.using takes a pg Pool or Client, or a query(sql, params) function', client);
}

/**
 * Counts in PostgreSQL: **one statement, one round trip per call** however many entries it carries.
 * The log is a row per key. A one-entry call reads the key's row and answers a refusal from it (no
 * lock, no write); a call it lets through is written back by compare-and-set in the installed
 * `{prefix}_put1`. A batch runs `{prefix}_sliding`, which locks its keys' rows in key order (two
 * batches never deadlock). Every call is one transaction, times itself by the server's
 * `clock_timestamp()` (hosts with skewed clocks agree), and records against all its entries or none.
 *
 * Never opens a connection: it runs statements through the pool (or query function) it is given. A
 * failed statement or a lost connection rejects with a `StoreError` whose `cause` is the driver's
 * error; the statement was one transaction, so nothing of the call was recorded.
 *
 * Rows leave as their keys are used; call {@link purge} now and then (e.g. hourly) to delete the rest.
 */
export class PostgresStore extends CallStore<false> {
  protected readonly calls: BackendCalls;
  protected readonly record = new Float64Array(CALL_RECORD_LENGTH);
  protected readonly backend: Backend;
  protected readonly sync = false;
  private readonly query: PostgresQuery;

  private constructor(query: PostgresQuery, options: PostgresStoreOptions) {
    super();
    this.query = query;
    const backend = sqlBackend(options.backend, 'PostgresStore');
    this.backend = backend;
    if (options.durable !== undefined && typeof options.durable !== 'boolean') {
      throw typeError('durable must be a boolean', options.durable);
    }
    try {
      this.calls = backend.createPostgres(this.record, prefixOption(options.prefix), options.durable ?? false);
    } catch (e) {
      throw engineError(e, backend);
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

  /** The schema's SQL (tables, indexes, the functions; idempotent), to run with a migration tool. */
  get schema(): string {
    return this.calls.schema();
  }

  /**
   * Installs the schema: creates the tables, indexes and functions if missing (replacing the
   * functions). Idempotent and safe to run from several processes at once.
   */
  async installSchema(): Promise<void> {
    await this.statement({ sql: this.calls.schema(), params: [] }, 'installing the schema');
  }

  /** Runs one statement and resolves to its rows (node-postgres' whole result is accepted too). */
  private async statement(statement: SqlStatement, what?: string): Promise<unknown> {
    let rows: unknown;
    try {
      rows = await this.query(statement.sql, statement.params);
    } catch (e) {
      if (what === undefined) throw e;
      throw storeError(e, what);
    }
    return rowsOf(rows);
  }

  /**
   * A call's statements, in order; the rows of the last. The engine plans one per call: that one is
   * the client's promise with one `then` (no async frames on the usual path).
   */
  protected override runCommand(_kind: StepKind, id: number): Promise<unknown> {
    const statements = this.calls.statements(id);
    if (statements.length === 1) {
      const { sql, params } = statements[0]!;
      return Promise.resolve(this.query(sql, params)).then(rowsOf);
    }
    return this.runAll(statements);
  }

  private async runAll(statements: readonly SqlStatement[]): Promise<unknown> {
    let rows: unknown = [];
    for (const statement of statements) rows = await this.statement(statement);
    return rows;
  }

  /**
   * Deletes every row whose calls have left their windows, every ended fixed window, every lock
   * whose TTL ended, every GCRA bucket full again and every counter whose counts weigh nothing (those
   * not counted), by the server's clock, in one statement. Never needed for
   * correctness (rows leave as their keys are used); it bounds the tables for keys that are never used
   * again. Schedule it, e.g. hourly:
   * `setInterval(() => store.purge().catch(log), 3_600_000).unref()`, or with pg_cron.
   */
  async purge(): Promise<PurgeResult> {
    const rows = await this.statement(this.calls.purge()[0]!, 'purge');
    try {
      return this.calls.purged(rows);
    } catch (e) {
      throw engineError(e, this.backend);
    }
  }
}
