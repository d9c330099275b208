/**
 * The call boundary of the stores that talk to a server through the user's client, and its Redis part:
 * **optional** interfaces next to {@link Backend}, so an engine build without them (the wasm-bindgen
 * package, for now) still satisfies the core one. `RedisStore` checks for them and says so when missing.
 *
 * A planner starts a call (the engine's call machine, `ratewindow_core::call`) for each
 * operation; `ts/drive.ts` drives it. Each crossing is typed and small: the step's kind, then typed
 * getters of what that kind has; the reply or rows as the client gave them, a failure as its message.
 *
 * ## Rules every implementation follows
 * - Limits arrive as the host numbers the user gave; an invalid one throws a `BackendError` with code
 *   `invalid_limit:uses` / `invalid_limit:window_ms` (as in `ts/backend.ts`); a panic throws code `panic`.
 * - Counts and maxima (`amount`, `max`) have been checked to be safe integers.
 * - A call never throws for what the client did: a failure, a reply of the wrong shape, a give-back
 *   that failed all arrive in the outcome step.
 * @module
 */
import type { Backend } from './backend';

/** A SQL parameter as the engine gives it. */
export type SqlParam = null | boolean | number | string | number[] | string[];

/** A statement of a `sql` step. */
export interface SqlStatement {
  /** The text, in the dialect's placeholder style. */
  sql: string;
  /** Its parameters. */
  params: SqlParam[];
}

/** A give-back that failed on a Redis Cluster (keys, the call's id, the client's message). */
export interface GiveBackFailure {
  keys: string[];
  callId: string;
  message: string;
}

/** What gives an allowed consume back (the engine's token): kept as it is, handed to `release`. */
export interface BackendRelease {
  store: string;
  keys: string[];
  callId: string;
}

/** What a step is (`StepKind` of `src/call.rs`): a command to run, or how the call ended. */
export const enum StepKind {
  Script = 0,
  Sql = 1,
  Verdict = 2,
  Hit = 3,
  Attempt = 4,
  Int = 5,
  Bool = 6,
  Unit = 7,
  Error = 8,
}

/** Why a call failed: the engine's stable kind (`store`, `reply`, `protocol`, `unsupported`) and details. */
export interface CallErrorInfo {
  kind: string;
  message: string;
  /** `store`: the client's own message (the failure that stands). */
  clientMessage?: string | null;
  /** `reply`: whose reply, what it should have been, what came. */
  source?: string | null;
  expected?: string | null;
  got?: string | null;
}

/** What a fixed-window read answers. */
export type WindowQuery = 'attempts' | 'tooManyAttempts' | 'remaining' | 'availableIn' | 'availableInMs';

/**
 * One store's call machines (`NativeCalls` of `src/call.rs`). Each operation starts a call and answers
 * its id (`now`: SQLite's clock; the others answer by the server's and ignore it). `next` gives the
 * kind of the call's first step and each feed the kind of the next one; typed getters of the id give
 * what that kind has; `end` frees the call once its outcome is read.
 */
export interface BackendCalls {
  /** A consume of the entries (three parallel arrays) under `callId`; `release`: keep its token. */
  consume(callId: string, keys: string[], uses: number[], windows: number[], release: boolean, now?: number | null): number;
  /** A consume of one entry, keeping no token. */
  consumeOne(callId: string, key: string, uses: number, windowMs: number, now?: number | null): number;
  peek(keys: string[], uses: number[], windows: number[], now?: number | null): number;
  release(token: BackendRelease, now?: number | null): number;
  hit(key: string, decayMs: number, amount: number, now?: number | null): number;
  attempt(key: string, max: number, decayMs: number, now?: number | null): number;
  read(key: string, query: WindowQuery, max: number, now?: number | null): number;
  resetAttempts(key: string, now?: number | null): number;
  clear(key: string, now?: number | null): number;

  /** The kind of call `id`'s first step. */
  next(id: number): number;
  /** A reply, as the client gave it. */
  feed(id: number, reply: unknown): number;
  /** The fast path of {@link feed}: a reply that is an array of `len` (at most 9) numbers, one by one. */
  feedNumbers(id: number, len: number, n0: number, n1: number, n2: number, n3: number, n4: number, n5: number, n6: number, n7: number, n8: number): number;
  /** The rows of a `Sql` step's last statement (arrays of values, or objects in column order). */
  feedRows(id: number, rows: unknown): number;
  /** The client's failure: its error message. */
  fail(id: number, message: string): number;

  /** `Script` step: the script's name (`sliding`, `fixed`), whether by SHA1, `KEYS`, `ARGV`. */
  script(id: number): string;
  bySha1(id: number): boolean;
  keys(id: number): string[];
  args(id: number): string[];
  /** `Sql` step: the statements, in order on one connection. */
  statements(id: number): SqlStatement[];

  /** Outcomes: the verdict's fields (`allowed` also an attempt's). */
  allowed(id: number): boolean;
  retryAfterMs(id: number): number;
  retryTimestamp(id: number): number | null | undefined;
  blocked(id: number): number | null | undefined;
  limit(id: number): number;
  remaining(id: number): number;
  refillAfterMs(id: number): number;
  /** A verdict's, a hit's or an attempt's. */
  resetAfterMs(id: number): number;
  /** An allowed consume asked with its release: what gives it back. */
  releaseToken(id: number): BackendRelease | null | undefined;
  /** A hit's or an attempt's count. */
  count(id: number): number;
  int(id: number): number;
  bool(id: number): boolean;
  error(id: number): CallErrorInfo;
  /** Give-backs that failed on the way (Redis Cluster only). */
  giveBackFailures(id: number): GiveBackFailure[] | null | undefined;
  /** Frees call `id`. */
  end(id: number): void;
  /** Calls started and not yet ended (for leak tests). */
  inProgress(): number;

  /** SQL: the schema (idempotent). */
  schema(): string;
  /** SQLite: what to `exec` on every connection (the busy timeout; the engine's default without one). */
  connectionSetup(busyTimeoutMs?: number | null): string;
  /** SQL: the purge (not a call): PostgreSQL one statement, SQLite (at `now`) one per table. */
  purge(now?: number | null): SqlStatement[];
  /** PostgreSQL: the purge's counts from its rows (code `store_reply` for rows of the wrong shape). */
  purged(rows: unknown): { calls: number; windows: number };
}

/** A {@link Backend} that can also start Redis calls. */
export interface RedisBackend {
  /**
   * A store's calls: keys start with `prefix`; with `hashTagBefore`, each key's part before that
   * separator is its Cluster hash tag (an empty one throws code `invalid_argument:hashTag`); `evalsha`:
   * the host can run scripts by SHA1 (default true).
   */
  createRedis(prefix: string, hashTagBefore: string | null, evalsha?: boolean): BackendCalls;
  /** `[sliding sha1, sliding source, fixed sha1, fixed source]`. */
  redisScripts(): string[];
}

/** Whether `backend` implements {@link RedisBackend} too. */
export function hasRedis(backend: Backend): backend is Backend & RedisBackend {
  const b = backend as Partial<RedisBackend>;
  return typeof b.createRedis === 'function' && typeof b.redisScripts === 'function';
}
