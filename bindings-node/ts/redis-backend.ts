/**
 * The call boundary of the stores that talk to a server through the user's client, and its Redis part:
 * **optional** interfaces next to {@link Backend}, so an engine build without them (a user's own) still
 * satisfies the core one; the napi addon and the wasm-bindgen package both have them. `RedisStore`
 * checks for them and says so when missing.
 *
 * A planner starts a call (the engine's call machine, `ratewindow_core::call`) for each
 * operation; `ts/drive.ts` drives it. Each crossing answers the most it can: a start or a feed gives the
 * next Redis command as one string and leaves the rest (the step, or the whole outcome) in the store's
 * call record; the reply or rows cross as the client gave them, a failure as its message.
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

/** What a step is (`StepKind` of `ratewindow_js_glue::calls`): a command to run, or how the call ended. */
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
  /** A lock's holder: read it with `lockOwner(id)`. */
  Owner = 9,
}

/**
 * The slots of a store's call record (`ratewindow_js_glue::calls`, checked against `callRecordLayout()`
 * when the addon loads): every start, feed and failure writes the call's id, its step and, once the
 * call is done, its whole outcome here. Literal indices: a const enum costs nothing at run time.
 */
export const enum CallSlot {
  Id = 0,
  Kind = 1,
  /** 1 while the call is kept (more to read: `end` frees it), 0 once freed. */
  Held = 2,
  BySha1 = 3,
  /** 0 sliding, 1 fixed, 2 lock; 3 a plain command (no script: the pieces are its name, key and arguments). */
  Script = 4,
  /** The key count; -1 when the pieces did not fit (read `keys(id)` and `args(id)`). */
  Keys = 5,
  Args = 6,
  Allowed = 7,
  RetryAfterMs = 8,
  /** NaN: none. */
  RetryTimestamp = 9,
  /** NaN: none. */
  Blocked = 10,
  Limit = 11,
  Remaining = 12,
  RefillAfterMs = 13,
  ResetAfterMs = 14,
  /** A hit's or attempt's count, an `Int`, a `Bool` (1 or 0). */
  Value = 15,
  /** Failed give-backs to read with `giveBackFailures(id)`. */
  GiveBacks = 16,
  /** 1: `releaseToken(id)` has the token (an allowed consume's, or a failed one's that may have counted). */
  Release = 17,
  /** The first piece's length; the keys' then the arguments' follow. */
  Pieces = 18,
}

/** Numbers in a call record. */
export const CALL_RECORD_LENGTH = 64;

/** How many numbers of a reply fit the call record (from `CallSlot.Pieces` on). */
export const CALL_RECORD_NUMBERS = 46;

/** The slot names up to `pieces`, in order (what `callRecordLayout()` answers). */
export const CALL_RECORD_LAYOUT: readonly string[] = Object.freeze([
  'id', 'kind', 'held', 'bySha1', 'script', 'keys', 'args', 'allowed', 'retryAfterMs', 'retryTimestamp', 'blocked',
  'limit', 'remaining', 'refillAfterMs', 'resetAfterMs', 'value', 'giveBacks', 'release', 'pieces',
]);

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
 * One store's call machines (`NativeCalls` of `src/call.rs`, `WasmCalls` of the wasm package), writing
 * into the call record they were made with. Each operation starts a call; it, each feed and each
 * failure answer the call's next Redis command as one string (the keys then the arguments, each
 * piece's length in the record from `CallSlot.Pieces`; `null` for any other step) and write the
 * step's kind, the call's id and, once done, its outcome into the record. A call left `Held` has more
 * to read (`error`, `releaseToken`, `giveBackFailures`) and is freed by `end`.
 */
export interface BackendCalls {
  /** A consume of the entries (three parallel arrays); `release`: keep its token. */
  consume(keys: string[], uses: number[], windows: number[], release: boolean, now?: number | null): string | null;
  /** A consume of one entry, keeping its token only with `release` (the failure guard asks). */
  consumeOne(key: string, uses: number, windowMs: number, now?: number | null, release?: boolean): string | null;
  peek(keys: string[], uses: number[], windows: number[], now?: number | null): string | null;
  /**
   * A weighted sliding-log call (`op` 0 consume, 1 peek), entry `i` costing `costs[i]` (code
   * `invalid_argument:cost`, the message naming `cost`, or `entries[i].cost` with `batch`); `release`:
   * keep an allowed consume's token. Absent from a build without weights.
   */
  weighted?(op: number, keys: string[], uses: number[], windows: number[], costs: number[], batch: boolean, release: boolean, now?: number | null): string | null;
  /**
   * A batch mixing algorithms (`op` 0 consume, 1 peek): entry `i` is `keys[i]` under `kinds[i]` (0 the
   * sliding log, 1 GCRA, 2 the counter), `bursts[i]` for GCRA, on SQLite, Redis and PostgreSQL;
   * an entry's bad field is named `entries[i].<field>`. Absent from a build without rates.
   */
  mixed?(op: number, keys: string[], kinds: number[], uses: number[], windows: number[], bursts: number[], costs: number[], now?: number | null): string | null;
  release(token: BackendRelease, now?: number | null): string | null;
  hit(key: string, decayMs: number, amount: number, now?: number | null): string | null;
  attempt(key: string, max: number, decayMs: number, now?: number | null): string | null;
  /** An attempt costing `cost` hits (`Op::AttemptCost`; code `invalid_argument:cost`). Absent from a build without weights. */
  attemptCost?(key: string, max: number, decayMs: number, cost: number, now?: number | null): string | null;
  read(key: string, query: WindowQuery, max: number, now?: number | null): string | null;
  resetAttempts(key: string, now?: number | null): string | null;
  clear(key: string, now?: number | null): string | null;
  /**
   * A GCRA (`kind` 1) or counter (`kind` 2) operation, `op` 0 consume, 1 peek, 2 reset, the numbers as
   * the user gave them (refused as the memory store's `rateConsume`); `now` times it instead of the
   * server's clock. Absent from a build without them; a store that cannot count them throws code
   * `invalid_argument:store`.
   */
  rate?(op: number, key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number, now?: number | null): string | null;
  /** A lock operation (`acquire`, `release`, `forceRelease`, `owner`); see `ts/lock.ts`. */
  lock?(op: string, key: string, owner: string | null, ttl: number, now?: number | null): string | null;
  /** A held lock `Owner` outcome: the holder's token. */
  lockOwner?(id: number): string | null | undefined;
  /**
   * A Redis lock's commands planned once (its owner and TTL checked, code `invalid_argument:*`): the
   * acquire's `SET` arguments, then the release script's keys and arguments, joined; in the record
   * `Value` the acquire's piece count, `Keys` / `Args` the release's, `BySha1`, the pieces' lengths from
   * `Pieces`. Null when every lock operation is a call (see `ts/redis-lock.ts`).
   */
  lockCommands?(key: string, owner: string, ttl: number): string | null;

  /** A reply that is a string (a script's one-text answer), read without the generic walk. Absent from older builds. */
  feedText?(id: number, text: string): string | null;
  /**
   * Redis: a call planned once (`ts/redis-plan.ts`): a single consume costing 1, an attempt costing 1,
   * a GCRA / counter operation; its command's pieces as a start's, `value` the call id's piece (-1
   * none, -2 no plan). `prepared()` then gives the operation to hand back with each reply. Absent
   * from builds without them.
   */
  prepareConsume?(key: string, uses: number, windowMs: number): string | null;
  prepareAttempt?(key: string, max: number, decayMs: number): string | null;
  prepareRate?(op: number, key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number): string | null;
  prepared?(): object;
  /** The prefix of a planned consume's call ids (16 hex digits): `prefix + n.toString(16)`. */
  preparedIds?(): string;
  /**
   * The text the Redis key of every planned consume (`kind` 0) or attempt (3) starts with, the user's
   * key following it as it is; null when the store's keys are not so. A new key's command is then
   * planned from another key's of the same limit, without a crossing. Absent from older builds.
   */
  preparedKeyPrefix?(kind: number): string | null;
  /**
   * The reply to a planned call's command sent as call `n`: its call started and fed in one crossing.
   * `key`: the key the command was sent for when it was planned from another key's (read only when
   * the reply is no answer).
   */
  answerRecord?(prepared: object, n: number, len: number, key?: string): string | null;
  answerText?(prepared: object, n: number, text: string, key?: string): string | null;
  answer?(prepared: object, n: number, reply: unknown, key?: string): string | null;
  answerFailed?(prepared: object, n: number, message: string, key?: string): string | null;
  /** A reply, as the client gave it. */
  feed(id: number, reply: unknown): string | null;
  /**
   * The fast path of {@link feed}: a reply that is an array of `len` numbers (at most
   * {@link CALL_RECORD_NUMBERS}), written into the call record from `CallSlot.Pieces` on.
   */
  feedRecord(id: number, len: number): string | null;
  /** The rows of a `Sql` step's last statement (arrays of values, or objects in column order). */
  feedRows(id: number, rows: unknown): string | null;
  /** The client's failure: its error message. */
  fail(id: number, message: string): string | null;

  /** `Script` step whose pieces did not fit the record: `KEYS`, `ARGV`. */
  keys(id: number): string[];
  args(id: number): string[];
  /** `Sql` step: the statements, in order on one connection. */
  statements(id: number): SqlStatement[];

  /** A held allowed consume asked with its release: what gives it back. */
  releaseToken(id: number): BackendRelease | null | undefined;
  /** A held failed call: why. */
  error(id: number): CallErrorInfo;
  /** A held call's give-backs that failed on the way (Redis Cluster only). */
  giveBackFailures(id: number): GiveBackFailure[];
  /** Frees call `id`. */
  end(id: number): void;
  /** Calls started and not yet freed (for leak tests). */
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
   * A store's calls, writing into `record` ({@link CALL_RECORD_LENGTH} numbers): keys start with `prefix`; with `hashTagBefore`, each key's part before that
   * separator is its Cluster hash tag (an empty one throws code `invalid_argument:hashTag`); `evalsha`:
   * the host can run scripts by SHA1 (default true); `commands`: it can run plain commands (default
   * false; a build that ignores it asks for scripts only).
   */
  createRedis(record: Float64Array, prefix: string, hashTagBefore: string | null, evalsha?: boolean, commands?: boolean): BackendCalls;
  /**
   * `[sliding sha1, sliding source, fixed sha1, fixed source, lock sha1, lock source]`, then `gcra sha1,
   * gcra source, counter sha1, counter source` in a build with GCRA and the counter.
   */
  redisScripts(): string[];
}

/** Whether `backend` implements {@link RedisBackend} too. */
export function hasRedis(backend: Backend): backend is Backend & RedisBackend {
  const b = backend as Partial<RedisBackend>;
  return typeof b.createRedis === 'function' && typeof b.redisScripts === 'function';
}
