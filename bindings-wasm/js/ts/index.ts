/**
 * `@ratewindow/wasm`: ratewindow for JavaScript runtimes where a native addon cannot load (browsers,
 * Deno, edge workers), with the same API as the `ratewindow` Node package: `MemoryStore`,
 * `RateLimiter`, `Limit` and the errors, counted by the same Rust engine compiled to WebAssembly.
 *
 * The module must be instantiated once before the first store is made: `await init()` fetches
 * `ratewindow_wasm_bg.wasm` next to the glue (or pass a `URL`, `Response`, bytes or a compiled
 * `WebAssembly.Module`), and `initSync(bytesOrModule)` does it synchronously (Cloudflare Workers
 * import the `.wasm` as a module and pass it here). Under Node the package's `node` entry does it on
 * import.
 *
 * ```ts
 * import { init, MemoryStore } from '@ratewindow/wasm';
 * await init();
 * const store = new MemoryStore();
 * const verdict = store.consume('click:alice', { uses: 3, windowMs: 10_000 });
 * ```
 * @module
 */
import initGlue, { initSync as initGlueSync, type InitInput } from '../pkg/ratewindow_wasm.js';
import type { Backend } from './layer/backend.js';
import type { RedisBackend } from './layer/redis-backend.js';
import type { SqlBackend } from './layer/sql-backend.js';
import { setDefaultBackend } from './layer/store.js';
import { createWasmBackend, type WasmExports } from './wasm.js';

// The Node package's API: the embedded store, the rate limiter, and the networked stores, which drive
// the core's call machines through this module's call boundary (src/calls.rs) as they do the addon's.
export type {
  AnyLimit, AttemptResult, Awaitable, BatchVerdict, CallOptions, Clock, CooldownLimit, CounterLimit, Entry, GcraLimit, Verdict,
} from './layer/types.js';
export { CooldownStore, MemoryStore, cooldownLimit, counterLimit, gcraLimit } from './layer/store.js';
export type { MemoryStoreOptions } from './layer/store.js';
export { GlobalLimit, Limit, Unlimited } from './layer/limit.js';
export type { AfterCallback, ResponseCallback } from './layer/limit.js';
export { RateLimiter } from './layer/rate-limiter.js';
export type { FixedWindowStore, LimiterCallback } from './layer/rate-limiter.js';
export { InternalError, InvalidArgumentError, InvalidLimitError, RateWindowError, UnsupportedError } from './layer/errors.js';
export type { RateWindowErrorCode } from './layer/errors.js';
export type { Backend, BackendStore } from './layer/backend.js';
export { RedisStore } from './layer/redis.js';
export type { RedisEvalSha, RedisRun, RedisStoreOptions } from './layer/redis.js';
export { GiveBackError, StoreError, StoreReplyError } from './layer/store-errors.js';
export type { StoreErrorCode } from './layer/store-errors.js';
export { PostgresStore } from './layer/postgres.js';
export type { PgQueryable, PostgresQuery, PostgresStoreOptions, PurgeResult } from './layer/postgres.js';
export { SqliteStore } from './layer/sqlite.js';
export type { SqliteDatabaseLike, SqlitePurgeResult, SqliteStatementLike, SqliteStoreOptions } from './layer/sqlite.js';

let ready: Backend | undefined;

function backend(): Backend {
  if (ready === undefined) {
    throw new Error('@ratewindow/wasm is not initialised: call `await init()` (or `initSync(module)`) first');
  }
  return ready;
}

/** The engine's call boundary (every wasm build has it). */
function networked(): RedisBackend & SqlBackend {
  return backend() as Backend & RedisBackend & SqlBackend;
}

/** Stands for the engine until it is instantiated; each store then comes straight from it. */
const lazy: Backend = Object.freeze({
  kind: 'wasm',
  createStore: (record: Float64Array) => backend().createStore(record),
  recordLayout: () => backend().recordLayout(),
  checkLimit: (uses: number, windowMs: number) => backend().checkLimit(uses, windowMs),
  checkRate: (kind: number, uses: number, windowMs: number, burst: number) => backend().checkRate?.(kind, uses, windowMs, burst),
  noop: () => backend().noop(),
  panicForTest: (message: string) => backend().panicForTest(message),
  createRedis: (record: Float64Array, prefix: string, hashTagBefore: string | null, evalsha?: boolean) =>
    networked().createRedis(record, prefix, hashTagBefore, evalsha),
  redisScripts: () => networked().redisScripts(),
  createPostgres: (record: Float64Array, prefix: string, durable?: boolean) => networked().createPostgres(record, prefix, durable),
  createSqlite: (record: Float64Array, prefix: string) => networked().createSqlite(record, prefix),
} satisfies Backend & RedisBackend & SqlBackend);
setDefaultBackend(lazy);

/**
 * A compiled `WebAssembly.Module`. Typed as `object` so that the typings need no DOM library (a Node
 * project's `lib` rarely has `WebAssembly`).
 */
export type CompiledModule = object;

/** The `.wasm` file's bytes. */
export type WasmBytes = ArrayBuffer | ArrayBufferView;

/** What {@link init} accepts: where the `.wasm` is, its bytes, or the compiled module. */
export type WasmSource = string | URL | Request | Response | WasmBytes | CompiledModule;

/**
 * Instantiates the engine (once; later calls return at once). Without an argument the `.wasm` is
 * fetched from next to the glue (`new URL('ratewindow_wasm_bg.wasm', import.meta.url)`).
 */
export async function init(source?: WasmSource | Promise<WasmSource>): Promise<void> {
  if (ready !== undefined) return;
  const exports = await initGlue(
    source === undefined ? undefined : { module_or_path: source as InitInput | Promise<InitInput> },
  );
  ready ??= createWasmBackend(exports as unknown as WasmExports);
}

/** Instantiates the engine synchronously from the `.wasm` bytes or a compiled module (once). */
export function initSync(source: WasmBytes | CompiledModule): void {
  if (ready !== undefined) return;
  const module = source as BufferSource | WebAssembly.Module;
  ready = createWasmBackend(initGlueSync({ module }) as unknown as WasmExports);
}

/** The engine as a {@link Backend} (for `createApi`-style wiring and tests); throws before init. */
export function wasmBackend(): Backend {
  return backend();
}
