/**
 * The wasm-bindgen build of the engine as a {@link Backend}: the same boundary the napi addon
 * implements (`bindings-node/ts/backend.ts`), so the Node package's TypeScript layer runs on it
 * unchanged.
 *
 * The glue (`pkg/ratewindow_wasm.js`, made by wasm-bindgen `--target web`) needs its module
 * instantiated first; {@link createWasmBackend} takes the instance's exports as proof that it is.
 *
 * ## Calls that allocate nothing
 *
 * A key is written as UTF-8 straight into the module's key buffer (ASCII byte by byte, the rest by
 * `TextEncoder.encodeInto`; a key with a lone surrogate, which has no UTF-8, as its UTF-16 code units
 * with its length flagged, so the engine refuses it rather than count it as U+FFFD) and crosses as
 * its length; each call returns its primary number and leaves
 * the rest of its answer in the module's record (in linear memory), which the wrapper copies into the
 * store's own record. So the hot path creates no JS object and no Rust allocation for the key. A
 * refused number comes back as a thrown `Error` with `code`, made by the shared glue crate
 * (`ratewindow-js-glue`) exactly as the napi addon makes it.
 *
 * ## Panics
 *
 * The engine never panics on input (every host number is validated by the core or cast with
 * saturation), but on `wasm32-unknown-unknown` a panic would abort: the instance traps and
 * `catch_unwind` cannot help. So every call that enters the module goes through a `try`/`catch`
 * that turns a trap (`WebAssembly.RuntimeError`) into a {@link BackendError} with code `panic`,
 * carrying the message the module's panic hook kept, and resets the module's shadow stack pointer
 * (a trap leaves it where the aborted frames put it). A store whose call trapped may hold a
 * half-done step, so from then on it refuses every call with the same error; other stores and the
 * module stay usable.
 * @module
 */
import type { Backend, BackendError, BackendStore } from './layer/backend.js';
import {
  CALL_RECORD_LAYOUT,
  CALL_RECORD_LENGTH,
  type BackendCalls,
  type BackendRelease,
  type CallErrorInfo,
  type GiveBackFailure,
  type RedisBackend,
  type SqlStatement,
  type WindowQuery,
} from './layer/redis-backend.js';
import type { SqlBackend } from './layer/sql-backend.js';
import * as glue from '../pkg/ratewindow_wasm.js';

/** The raw exports of an instantiated module, as `initSync` / `init` return them. */
export interface WasmExports {
  readonly memory: WebAssembly.Memory;
  /** Exported by the build (`--export=__stack_pointer`, kept by `--keep-lld-exports`). */
  readonly __stack_pointer?: WebAssembly.Global;
  readonly [name: string]: unknown;
}

function coded(code: string, message: string): BackendError {
  return Object.assign(new Error(message), { code });
}

/**
 * Turns what a call into the module threw into what the boundary promises: a coded error passes as
 * it is; a trap becomes code `panic` (and the shadow stack is reset); anything else passes unchanged.
 */
function translate(error: unknown, stackBase: number | undefined, exports: WasmExports): unknown {
  if (!(error instanceof WebAssembly.RuntimeError)) return error;
  if (stackBase !== undefined && exports.__stack_pointer) exports.__stack_pointer.value = stackBase;
  let message: string | undefined;
  try {
    message = glue.takePanicMessage();
  } catch {
    // The message is a nicety: the trap itself is what the caller must learn of.
  }
  return Object.assign(coded('panic', `ratewindow (wasm) panicked: ${message ?? error.message}`), { cause: error });
}

/**
 * The writer of the module's key buffer, one per module instance (the glue is one, so this is module
 * state): every backend over the instance must share it, or one growing the buffer would leave
 * another writing where it used to be. Its view is remade when the buffer grows, or when the memory
 * grows, which detaches the old ArrayBuffer and leaves the view empty (cheaper to test than reading
 * `memory.buffer`).
 */
let keyWriter: ((key: string) => number) | undefined;

function makeKeyWriter(exports: WasmExports): (key: string) => number {
  const encoder = new TextEncoder();
  let capacity = 256;
  const remake = (): Uint8Array => {
    const address = glue.keyBuffer(capacity); // first: growing the buffer may grow the memory
    return new Uint8Array(exports.memory.buffer, address, capacity);
  };
  let view = remake();
  const reserve = (bytes: number): Uint8Array => {
    if (bytes > capacity) {
      capacity = Math.max(bytes, 2 * capacity);
      view = remake();
    } else if (view.byteLength === 0) {
      view = remake();
    }
    return view;
  };
  /** Writes `key` as UTF-8 into the key buffer and returns its length in bytes. */
  return (key: string): number => {
    const n = key.length;
    let out = reserve(n);
    let i = 0;
    for (; i < n; i++) {
      const c = key.charCodeAt(i);
      if (c > 0x7f) break;
      out[i] = c;
    }
    if (i === n) return n;
    if (!wellFormed(key)) {
      // A lone surrogate has no UTF-8 (encodeInto would write U+FFFD): the key's UTF-16 code units
      // instead, its length flagged, for the engine to refuse it naming the surrogate's index.
      out = reserve(2 * n);
      for (let j = 0; j < n; j++) {
        const c = key.charCodeAt(j);
        out[2 * j] = c & 0xff;
        out[2 * j + 1] = c >>> 8;
      }
      return 2 * n + UTF16_FLAG;
    }
    // A UTF-16 code unit never takes more than 3 bytes of UTF-8; growing keeps the bytes written.
    out = reserve(i + 3 * (n - i));
    return i + encoder.encodeInto(i === 0 ? key : key.slice(i), out.subarray(i)).written;
  };
}

/** Set in a key's length when the key buffer holds its UTF-16 (`ratewindow_js_glue::key::UTF16_FLAG`). */
const UTF16_FLAG = 0x80000000;

/** A lone surrogate: a high one not followed by a low one, or a low one not after a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether `key` is well-formed UTF-16 (`String.prototype.isWellFormed`, ES2024, where it exists). */
function wellFormed(key: string): boolean {
  const native = (key as { isWellFormed?: () => boolean }).isWellFormed;
  return native ? native.call(key) : !LONE_SURROGATE.test(key);
}

/**
 * The module's record, as a view remade when the memory grows (which detaches the old ArrayBuffer and
 * leaves the view empty), one per module instance like the key writer.
 */
let recordView: Float64Array | undefined;

/** The engine stores retired by a trap: never freed (see {@link createWasmBackend}). */
const retired: glue.WasmStore[] = [];

/** Builds the {@link Backend} over an instantiated glue module. */
export function createWasmBackend(exports: WasmExports): Backend {
  // Nothing runs in the module between calls, so this is where every call starts and ends.
  const stackBase = exports.__stack_pointer?.value as number | undefined;
  const fail = (error: unknown): never => {
    throw translate(error, stackBase, exports);
  };

  const writeKey = (keyWriter ??= makeKeyWriter(exports));
  const layout = glue.recordLayout();
  const remakeRecord = (): Float64Array => new Float64Array(exports.memory.buffer, glue.recordAddress(), layout.length);
  /** Copies the module's record into a store's: right after each call that writes one. */
  const copy = (to: Float64Array): void => {
    let from = (recordView ??= remakeRecord());
    if (from.byteLength === 0) from = recordView = remakeRecord();
    for (let i = 0; i < to.length; i++) to[i] = from[i]!;
  };

  /** One engine store; every method enters the module once. */
  class WasmBackendStore implements BackendStore {
    #inner: glue.WasmStore | undefined = new glue.WasmStore();
    #poison: unknown;
    readonly #record: Float64Array;

    constructor(record: Float64Array) {
      this.#record = record;
    }

    /** The live store, or the trap that poisoned it. */
    #store(): glue.WasmStore {
      if (this.#inner === undefined) throw this.#poison;
      return this.#inner;
    }

    /** Handles a failure: a trap poisons this store (its last step may be half done). */
    #fail(error: unknown): never {
      const out = translate(error, stackBase, exports);
      if (error instanceof WebAssembly.RuntimeError && this.#inner !== undefined) {
        this.#poison = out;
        // Kept alive on purpose: letting the glue's finalizer free it would run code on suspect state.
        retired.push(this.#inner);
        this.#inner = undefined;
      }
      throw out;
    }

    /** `call`'s answer, with the record copied into this store's. */
    #recorded(answer: number): number {
      copy(this.#record);
      return answer;
    }

    consume(key: string, uses: number, windowMs: number, now: number): number {
      try {
        return this.#recorded(this.#store().consume(writeKey(key), uses, windowMs, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    peek(key: string, uses: number, windowMs: number, now: number): number {
      try {
        return this.#recorded(this.#store().peek(writeKey(key), uses, windowMs, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    batchPush(key: string, uses: number, windowMs: number): void {
      try {
        this.#store().batchPush(writeKey(key), uses, windowMs);
      } catch (e) {
        this.#fail(e);
      }
    }
    batchConsume(now: number): number {
      try {
        return this.#recorded(this.#store().batchConsume(now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    batchPeek(now: number): number {
      try {
        return this.#recorded(this.#store().batchPeek(now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    batchClear(): void {
      try {
        this.#store().batchClear();
      } catch (e) {
        this.#fail(e);
      }
    }
    release(handle: number, now: number): void {
      try {
        this.#store().release(handle, now);
      } catch (e) {
        this.#fail(e);
      }
    }
    dropRelease(handle: number): void {
      try {
        this.#store().dropRelease(handle);
      } catch (e) {
        this.#fail(e);
      }
    }
    releaseHandles(): number {
      try {
        return this.#store().releaseHandles();
      } catch (e) {
        return this.#fail(e);
      }
    }
    hit(key: string, decayMs: number, amount: number, now: number): number {
      try {
        return this.#store().hit(writeKey(key), decayMs, amount, now);
      } catch (e) {
        return this.#fail(e);
      }
    }
    hitWindow(key: string, decayMs: number, amount: number, now: number): number {
      try {
        return this.#recorded(this.#store().hitWindow(writeKey(key), decayMs, amount, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    attempt(key: string, max: number, decayMs: number, now: number): number {
      try {
        return this.#recorded(this.#store().attempt(writeKey(key), max, decayMs, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    attemptCost(key: string, max: number, decayMs: number, cost: number, now: number): number {
      try {
        return this.#recorded(this.#store().attemptCost(writeKey(key), max, decayMs, cost, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    attempts(key: string, now: number): number {
      try {
        return this.#store().attempts(writeKey(key), now);
      } catch (e) {
        return this.#fail(e);
      }
    }
    tooManyAttempts(key: string, max: number, now: number): boolean {
      try {
        return this.#store().tooManyAttempts(writeKey(key), max, now);
      } catch (e) {
        return this.#fail(e);
      }
    }
    remaining(key: string, max: number, now: number): number {
      try {
        return this.#store().remaining(writeKey(key), max, now);
      } catch (e) {
        return this.#fail(e);
      }
    }
    availableIn(key: string, now: number): number {
      try {
        return this.#store().availableIn(writeKey(key), now);
      } catch (e) {
        return this.#fail(e);
      }
    }
    availableInMs(key: string, now: number): number {
      try {
        return this.#store().availableInMs(writeKey(key), now);
      } catch (e) {
        return this.#fail(e);
      }
    }
    resetAttempts(key: string, now: number): void {
      try {
        this.#store().resetAttempts(writeKey(key), now);
      } catch (e) {
        this.#fail(e);
      }
    }
    clear(key: string): void {
      try {
        this.#store().clear(writeKey(key));
      } catch (e) {
        this.#fail(e);
      }
    }
    purge(now: number): void {
      try {
        this.#store().purge(now);
      } catch (e) {
        this.#fail(e);
      }
    }
    size(): number {
      try {
        return this.#store().size();
      } catch (e) {
        return this.#fail(e);
      }
    }
    rateConsume(key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number, now: number): number {
      try {
        return this.#recorded(this.#store().rateConsume(writeKey(key), kind, uses, windowMs, burst, cost, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    ratePeek(key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number, now: number): number {
      try {
        return this.#recorded(this.#store().ratePeek(writeKey(key), kind, uses, windowMs, burst, cost, now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    rateReset(key: string, kind: number): void {
      try {
        this.#store().rateReset(writeKey(key), kind);
      } catch (e) {
        this.#fail(e);
      }
    }
    mixedPush(key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number): void {
      try {
        this.#store().mixedPush(writeKey(key), kind, uses, windowMs, burst, cost);
      } catch (e) {
        this.#fail(e);
      }
    }
    mixedConsume(now: number): number {
      try {
        return this.#recorded(this.#store().mixedConsume(now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    mixedPeek(now: number): number {
      try {
        return this.#recorded(this.#store().mixedPeek(now));
      } catch (e) {
        return this.#fail(e);
      }
    }
    mixedClear(): void {
      try {
        this.#store().mixedClear();
      } catch (e) {
        this.#fail(e);
      }
    }
  }

  if (glue.callRecordLayout().join() !== CALL_RECORD_LAYOUT.join()) {
    throw new Error(`@ratewindow/wasm: the module's call record (${glue.callRecordLayout().join()}) is not this package's`);
  }

  /**
   * One networked store's call machines (`WasmCalls` of `src/calls.rs`) as the Node layer's
   * `BackendCalls`: the store's call record crosses as a `&mut [f64]` (copied in and back out), so the
   * Node package's `RedisStore`, `PostgresStore` and `SqliteStore` run on it unchanged. A trap turns
   * into code `panic` as everywhere here.
   */
  class WasmBackendCalls implements BackendCalls {
    readonly #inner: glue.WasmCalls;
    readonly #r: Float64Array;

    constructor(inner: glue.WasmCalls, record: Float64Array) {
      this.#inner = inner;
      this.#r = record;
    }

    #go(f: (c: glue.WasmCalls, r: Float64Array) => string | null | undefined): string | null {
      try {
        return f(this.#inner, this.#r) ?? null;
      } catch (e) {
        return fail(e);
      }
    }
    #get<T>(f: (c: glue.WasmCalls) => T): T {
      try {
        return f(this.#inner);
      } catch (e) {
        return fail(e);
      }
    }

    consume(keys: string[], uses: number[], windows: number[], release: boolean, now?: number | null): string | null {
      return this.#go((c, r) => c.consume(r, keys, new Float64Array(uses), new Float64Array(windows), release, now ?? undefined));
    }
    consumeOne(key: string, uses: number, windowMs: number, now?: number | null, release?: boolean): string | null {
      return this.#go((c, r) => c.consumeOne(r, key, uses, windowMs, now ?? undefined, release));
    }
    peek(keys: string[], uses: number[], windows: number[], now?: number | null): string | null {
      return this.#go((c, r) => c.peek(r, keys, new Float64Array(uses), new Float64Array(windows), now ?? undefined));
    }
    weighted(op: number, keys: string[], uses: number[], windows: number[], costs: number[], batch: boolean, release: boolean, now?: number | null): string | null {
      return this.#go((c, r) =>
        c.weighted(r, op, keys, new Float64Array(uses), new Float64Array(windows), new Float64Array(costs), batch, release, now ?? undefined),
      );
    }
    mixed(op: number, keys: string[], kinds: number[], uses: number[], windows: number[], bursts: number[], costs: number[], now?: number | null): string | null {
      return this.#go((c, r) =>
        c.mixed(
          r,
          op,
          keys,
          new Uint32Array(kinds),
          new Float64Array(uses),
          new Float64Array(windows),
          new Float64Array(bursts),
          new Float64Array(costs),
          now ?? undefined,
        ),
      );
    }
    release(token: BackendRelease, now?: number | null): string | null {
      return this.#go((c, r) => c.release(r, token, now ?? undefined));
    }
    rate(op: number, key: string, kind: number, uses: number, windowMs: number, burst: number, cost: number, now?: number | null): string | null {
      return this.#go((c, r) => c.rate(r, op, key, kind, uses, windowMs, burst, cost, now ?? undefined));
    }
    hit(key: string, decayMs: number, amount: number, now?: number | null): string | null {
      return this.#go((c, r) => c.hit(r, key, decayMs, amount, now ?? undefined));
    }
    attempt(key: string, max: number, decayMs: number, now?: number | null): string | null {
      return this.#go((c, r) => c.attempt(r, key, max, decayMs, now ?? undefined));
    }
    attemptCost(key: string, max: number, decayMs: number, cost: number, now?: number | null): string | null {
      return this.#go((c, r) => c.attemptCost(r, key, max, decayMs, cost, now ?? undefined));
    }
    read(key: string, query: WindowQuery, max: number, now?: number | null): string | null {
      return this.#go((c, r) => c.read(r, key, query, max, now ?? undefined));
    }
    resetAttempts(key: string, now?: number | null): string | null {
      return this.#go((c, r) => c.resetAttempts(r, key, now ?? undefined));
    }
    clear(key: string, now?: number | null): string | null {
      return this.#go((c, r) => c.clear(r, key, now ?? undefined));
    }
    feed(id: number, reply: unknown): string | null {
      return this.#go((c, r) => c.feed(r, id, reply));
    }
    feedRecord(id: number, len: number): string | null {
      return this.#go((c, r) => c.feedRecord(r, id, len));
    }
    feedRows(id: number, rows: unknown): string | null {
      return this.#go((c, r) => c.feedRows(r, id, rows));
    }
    fail(id: number, message: string): string | null {
      return this.#go((c, r) => c.fail(r, id, message));
    }
    keys(id: number): string[] {
      return this.#get((c) => c.keys(id));
    }
    args(id: number): string[] {
      return this.#get((c) => c.args(id));
    }
    statements(id: number): SqlStatement[] {
      return this.#get((c) => c.statements(id) as SqlStatement[]);
    }
    releaseToken(id: number): BackendRelease | null {
      return this.#get((c) => c.releaseToken(id) as BackendRelease | null);
    }
    error(id: number): CallErrorInfo {
      return this.#get((c) => c.error(id) as CallErrorInfo);
    }
    giveBackFailures(id: number): GiveBackFailure[] {
      return this.#get((c) => c.giveBackFailures(id) as GiveBackFailure[]);
    }
    end(id: number): void {
      this.#get((c) => c.end(id));
    }
    inProgress(): number {
      return this.#get((c) => c.inProgress());
    }
    schema(): string {
      return this.#get((c) => c.schema());
    }
    connectionSetup(busyTimeoutMs?: number | null): string {
      return this.#get((c) => c.connectionSetup(busyTimeoutMs ?? undefined));
    }
    purge(now?: number | null): SqlStatement[] {
      return this.#get((c) => c.purge(now ?? undefined) as SqlStatement[]);
    }
    purged(rows: unknown): { calls: number; windows: number } {
      return this.#get((c) => c.purged(rows) as { calls: number; windows: number });
    }
  }

  const callsOf = (record: Float64Array, make: () => glue.WasmCalls): BackendCalls => {
    if (!(record instanceof Float64Array) || record.length !== CALL_RECORD_LENGTH) {
      throw coded('invalid_argument:record', `a store's call record is a Float64Array of ${CALL_RECORD_LENGTH} numbers`);
    }
    try {
      return new WasmBackendCalls(make(), record);
    } catch (e) {
      return fail(e);
    }
  };
  const networked: RedisBackend & SqlBackend = {
    createRedis: (record, prefix, hashTagBefore, evalsha) => callsOf(record, () => glue.WasmCalls.redis(prefix, hashTagBefore ?? undefined, evalsha)),
    redisScripts: () => glue.redisScripts(),
    createPostgres: (record, prefix, durable) => callsOf(record, () => glue.WasmCalls.postgres(prefix, durable)),
    createSqlite: (record, prefix) => callsOf(record, () => glue.WasmCalls.sqlite(prefix)),
  };

  return Object.freeze({
    kind: 'wasm',
    ...networked,
    createStore: (record: Float64Array): BackendStore => {
      if (!(record instanceof Float64Array) || record.length !== layout.length) {
        throw coded('invalid_argument:record', `a store's record is a Float64Array of ${layout.length} numbers`);
      }
      try {
        return new WasmBackendStore(record);
      } catch (e) {
        return fail(e);
      }
    },
    recordLayout: (): readonly string[] => layout,
    checkLimit: (uses: number, windowMs: number): void => {
      try {
        glue.checkLimit(uses, windowMs);
      } catch (e) {
        fail(e);
      }
    },
    checkRate: (kind: number, uses: number, windowMs: number, burst: number): void => {
      try {
        glue.checkRate(kind, uses, windowMs, burst);
      } catch (e) {
        fail(e);
      }
    },
    noop: (): number => {
      try {
        return glue.noop();
      } catch (e) {
        return fail(e);
      }
    },
    panicForTest: (message: string): void => {
      try {
        glue.panicForTest(message);
      } catch (e) {
        fail(e);
      }
    },
  });
}
