/**
 * Loads the napi addon (`ratewindow.<platform>-<arch>[-abi].node`, built by `napi build --platform`)
 * and presents it as a {@link Backend}.
 * @module
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

import type { Backend, BackendStore } from './backend';
import type { BackendRedis, RedisBackend } from './redis-backend';
import type { BackendPostgres, BackendSqlite, SqlBackend } from './sql-backend';

/** What the addon exports (see `src/lib.rs`). */
interface NativeModule {
  NativeStore: new () => BackendStore;
  checkLimit(uses: number, windowMs: number): void;
  noop(): number;
  __panicForTest(message: string): void;
  NativeRedis: new (prefix: string, hashTagBefore: string | null) => BackendRedis;
  redisScripts(): string[];
  NativePostgres: new (prefix: string, durable?: boolean) => BackendPostgres;
  NativeSqlite: new (prefix: string) => BackendSqlite;
}

function addonPath(): string {
  const root = join(__dirname, '..');
  const prefix = `ratewindow.${process.platform}-${process.arch}`;
  const found = readdirSync(root).filter((f) => f.startsWith(prefix) && f.endsWith('.node'));
  if (found.length === 0) {
    throw new Error(
      `ratewindow: no native addon for ${process.platform}-${process.arch} in ${root} ` +
        '(build it with `npx napi build --platform --release` in bindings-node/)',
    );
  }
  // A glibc build is preferred where both exist.
  return join(root, found.find((f) => f.includes('-gnu')) ?? found[0]!);
}

let loaded: Backend | undefined;

/** The napi addon as a {@link Backend} (with the optional {@link RedisBackend} and {@link SqlBackend}), loaded once. */
export function nativeBackend(): Backend {
  if (loaded) return loaded;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const native = require(addonPath()) as NativeModule;
  loaded = Object.freeze({
    kind: 'native',
    createStore: () => new native.NativeStore(),
    checkLimit: native.checkLimit,
    noop: native.noop,
    panicForTest: native.__panicForTest,
    createRedis: (prefix: string, hashTagBefore: string | null) => new native.NativeRedis(prefix, hashTagBefore),
    redisScripts: native.redisScripts,
    createPostgres: (prefix: string, durable?: boolean) => new native.NativePostgres(prefix, durable),
    createSqlite: (prefix: string) => new native.NativeSqlite(prefix),
  } satisfies Backend & RedisBackend & SqlBackend);
  return loaded;
}
