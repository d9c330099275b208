/**
 * The call boundary of the stores that talk to a server through the user's client, and its Redis part:
 * **optional** interfaces next to {@link Backend}, so an engine build without them (the wasm-bindgen
 * package, for now) still satisfies the core one. `RedisStore` checks for them and says so when missing.
 *
 * A planner starts a {@link BackendCall} (the engine's call machine, `ratewindow_core::call`) for each
 * operation; `ts/drive.ts` drives it. One typed shape crosses each way: a {@link Step} (a command to
 * run, or the outcome), the reply or rows as the client gave them, a failure as the client's message.
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

/** What gives an allowed consume back: opaque, handed to the planner's `release`. */
export type BackendRelease = object;

/**
 * One step of a call. A command: `script` (run `script` by SHA1 or in full with `keys` and `args`,
 * then feed the reply) or `sql` (run `statements` in order on one connection, then feed the rows of the
 * last). An outcome: `verdict`, `hit`, `attempt`, `int`, `bool`, `unit`, or `error` (`errorKind`
 * `store`, `reply`, `protocol`, `unsupported`). Only the fields of its kind are set.
 */
export interface Step {
  kind: string;
  script?: string;
  bySha1?: boolean;
  keys?: string[];
  args?: string[];
  statements?: SqlStatement[];
  allowed?: boolean;
  retryAfterMs?: number;
  retryTimestamp?: number;
  blocked?: number;
  limit?: number;
  remaining?: number;
  refillAfterMs?: number;
  resetAfterMs?: number;
  release?: BackendRelease;
  count?: number;
  int?: number;
  bool?: boolean;
  errorKind?: string;
  message?: string;
  clientMessage?: string;
  source?: string;
  expected?: string;
  got?: string;
  giveBackFailures?: GiveBackFailure[];
}

/** One operation in progress. Each feed returns the next step. */
export interface BackendCall {
  /** The first step. */
  next(): Step;
  /** A Redis reply, as the client gave it. */
  feed(reply: unknown): Step;
  /** The rows of a `sql` step's last statement (arrays of values, or objects in column order). */
  feedRows(rows: unknown): Step;
  /** The client's failure: its error message. */
  fail(message: string): Step;
}

/** What a fixed-window read answers. */
export type WindowQuery = 'attempts' | 'tooManyAttempts' | 'remaining' | 'availableIn' | 'availableInMs';

/**
 * A store's call machines: every operation of every store (SQLite takes the host clock's `now` last;
 * the others answer by the server's clock and take no `now`).
 */
export interface BackendCalls {
  /** A consume of the entries (three parallel arrays) under `callId`; `release`: keep its token. */
  consume(callId: string, keys: string[], uses: number[], windows: number[], release: boolean, now?: number): BackendCall;
  peek(keys: string[], uses: number[], windows: number[], now?: number): BackendCall;
  release(token: BackendRelease, now?: number): BackendCall;
  hit(key: string, decayMs: number, amount: number, now?: number): BackendCall;
  attempt(key: string, max: number, decayMs: number, now?: number): BackendCall;
  read(key: string, query: WindowQuery, max: number, now?: number): BackendCall;
  resetAttempts(key: string, now?: number): BackendCall;
  clear(key: string, now?: number): BackendCall;
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
