/**
 * The Redis part of the backend boundary: an **optional** interface next to {@link Backend}, so an engine
 * build without it (the wasm-bindgen package, for now) still satisfies the core one. `RedisStore` checks
 * for it and says so when it is missing.
 *
 * It plans and decodes only (`ratewindow_core::redis`): the TypeScript layer runs each plan with the
 * user's client and hands the reply back. Only strings, numbers and flat arrays of them cross.
 *
 * ## Rules every implementation follows
 * - A plan is `{ keys, args }`; which script it runs is known to the caller (`sliding` for
 *   consume / peek / release, `fixed` for the fixed-window ops), whose source and SHA1 come from
 *   {@link RedisBackend.redisScripts}.
 * - Limits arrive as the host numbers the user gave; an invalid one throws a `BackendError` with code
 *   `invalid_limit:uses` / `invalid_limit:window_ms`, as in `ts/backend.ts`. A panic throws code `panic`.
 * - A reply crosses as `numbers` (when it is an array of numbers, the shape every script answers) or
 *   else as `json` (the reply as JSON: `null`, integers, strings, arrays). Exactly one is given.
 * - Decoders return a number; a reply of the wrong shape returns `NaN`, and
 *   {@link BackendRedis.replyError} then gives the core's `ReplyError`.
 * @module
 */
import type { Backend } from './backend';

/** What a Redis plan holds besides its script. */
export interface RedisPlanData {
  /** `KEYS`. */
  keys: string[];
  /** `ARGV`. */
  args: string[];
}

/** One store's key options (`RedisOptions`) and the details of the last reply it decoded. */
export interface BackendRedis {
  /** `plan_consume_many` of the entries given as three parallel arrays, under the call id `callId`. */
  planConsume(callId: string, keys: string[], uses: number[], windows: number[]): RedisPlanData;
  /**
   * {@link planConsume} of one entry (such a plan has exactly one key) as one string: its first
   * character is a separator found in no part, and each part (`key`, then the args) follows one.
   */
  planConsumeOne(callId: string, key: string, uses: number, windowMs: number): string;
  /** `plan_peek_many`. */
  planPeek(keys: string[], uses: number[], windows: number[]): RedisPlanData;
  /** `plan_release` of call `callId` recorded under the Redis keys `keys` (a consume plan's keys). */
  planRelease(callId: string, keys: string[]): RedisPlanData;
  /**
   * The fixed script: `op` is `hit` (`plan_hit` with `decayMs`, validated by `Window::from_f64`, and
   * `amount`), `get`, `reset` or `clear` (`decayMs` and `amount` ignored).
   */
  planFixed(op: string, key: string, decayMs: number, amount: number): RedisPlanData;
  /**
   * `decode_batch` of a consume or peek reply of `entries` entries: `0` allowed; `> 0` refused, the
   * server's `retry_timestamp` ({@link retryAfterMs} and {@link blocked} give the rest); `NaN` for a
   * reply of the wrong shape.
   */
  decodeBatch(numbers: number[] | null | undefined, json: string | null | undefined, entries: number): number;
  /** {@link decodeBatch} of a reply of exactly five numbers, passed one by one (the script's shape). */
  decodeBatch5(a: number, b: number, c: number, d: number, e: number, entries: number): number;
  /** `decode_release`: members removed, or `NaN`. */
  decodeRelease(numbers: number[] | null | undefined, json: string | null | undefined): number;
  /** `decode_window`: the count (`0` without a window; {@link msLeft} the time left), or `NaN`. */
  decodeWindow(numbers: number[] | null | undefined, json: string | null | undefined): number;
  /** `retry_after_ms` of the last refusal decoded (the server's clock). */
  retryAfterMs(): number;
  /** `blocked` of the last refusal decoded. */
  blocked(): number;
  /** Milliseconds left in the last window decoded (`0` without one). */
  msLeft(): number;
  /** The last reply error as `[script, expected, got, message]`, taken (empty once read). */
  replyError(): string[];
}

/** A {@link Backend} that can also plan for Redis. */
export interface RedisBackend {
  /**
   * A store's planner: keys start with `prefix`; with `hashTagBefore`, each key's part before that
   * separator is its Cluster hash tag. An empty separator throws code `invalid_argument:hashTag`.
   */
  createRedis(prefix: string, hashTagBefore: string | null): BackendRedis;
  /** `[sliding sha1, sliding source, fixed sha1, fixed source]`. */
  redisScripts(): string[];
}

/** Whether `backend` implements {@link RedisBackend} too. */
export function hasRedis(backend: Backend): backend is Backend & RedisBackend {
  const b = backend as Partial<RedisBackend>;
  return typeof b.createRedis === 'function' && typeof b.redisScripts === 'function';
}
