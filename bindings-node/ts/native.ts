/**
 * Loads the napi addon through `loader.cjs`, the loader `napi build --platform` generates: it picks
 * `ratewindow.<platform>-<arch>[-abi].node` beside it (a build from source) or the platform package
 * (`ratewindow-linux-x64-gnu`, `ratewindow-darwin-arm64`, … installed as optional dependencies,
 * glibc or musl detected at run time), and presents it as a {@link Backend}.
 * @module
 */
import { join } from 'node:path';

import type { Backend, BackendStore } from './backend';
import { CALL_RECORD_LAYOUT, type BackendCalls, type RedisBackend } from './redis-backend';
import type { LockBackend, MemoryLocksLike } from './lock';
import type { SqlBackend } from './sql-backend';

/** What the addon exports (see `src/lib.rs`). */
interface NativeModule {
  NativeStore: new (record: Float64Array) => BackendStore;
  recordLayout(): string[];
  checkLimit(uses: number, windowMs: number): void;
  checkRate(kind: number, uses: number, windowMs: number, burst: number): void;
  noop(): number;
  __panicForTest(message: string): void;
  NativeCalls: {
    redis(record: Float64Array, prefix: string, hashTagBefore: string | null, evalsha?: boolean, commands?: boolean): BackendCalls;
    postgres(record: Float64Array, prefix: string, durable?: boolean): BackendCalls;
    sqlite(record: Float64Array, prefix: string): BackendCalls;
  };
  callRecordLayout(): string[];
  redisScripts(): string[];
  checkLock?(ttl: number, owner: string): void;
  lockAnswers?(acquire: boolean): Array<{ text?: string | null; int?: number | null; answer: boolean }>;
  NativeLocks?: new () => MemoryLocksLike;
  NativeLockWait?: new (seconds: number, retryMs: number, now: number) => { afterRefusal(now: number): number };
}

let loaded: Backend | undefined;

/** The napi addon as a {@link Backend} (with the optional {@link RedisBackend} and {@link SqlBackend}), loaded once. */
export function nativeBackend(): Backend {
  if (loaded) return loaded;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const native = require(join(__dirname, '..', 'loader.cjs')) as NativeModule;
  if (native.callRecordLayout().join() !== CALL_RECORD_LAYOUT.join()) {
    throw new Error(`ratewindow: the addon's call record (${native.callRecordLayout().join()}) is not this package's; rebuild the addon`);
  }
  loaded = Object.freeze({
    kind: 'native',
    createStore: (record: Float64Array) => new native.NativeStore(record),
    recordLayout: native.recordLayout,
    checkLimit: native.checkLimit,
    checkRate: native.checkRate,
    noop: native.noop,
    panicForTest: native.__panicForTest,
    createRedis: (record: Float64Array, prefix: string, hashTagBefore: string | null, evalsha?: boolean, commands?: boolean) =>
      native.NativeCalls.redis(record, prefix, hashTagBefore, evalsha, commands),
    redisScripts: native.redisScripts,
    createPostgres: (record: Float64Array, prefix: string, durable?: boolean) => native.NativeCalls.postgres(record, prefix, durable),
    createSqlite: (record: Float64Array, prefix: string) => native.NativeCalls.sqlite(record, prefix),
    checkLock: native.checkLock,
    lockAnswers: native.lockAnswers,
    createLocks: native.NativeLocks && (() => new native.NativeLocks!()),
    createLockWait: native.NativeLockWait && ((seconds: number, retryMs: number, now: number) => new native.NativeLockWait!(seconds, retryMs, now)),
  } satisfies Backend & RedisBackend & SqlBackend & LockBackend);
  return loaded;
}
