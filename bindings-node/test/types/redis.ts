// A compile-time proof that the napi addon implements the optional Redis part of the backend boundary
// (ts/redis-backend.ts): the types napi-rs generates (native.d.ts) must be assignable to it.
import type { BackendRedis, RedisBackend } from '../../ts/redis-backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const planner: BackendRedis = new native.NativeRedis('ratewindow:', null);
export const redisBackend: RedisBackend = {
  createRedis: (prefix, hashTagBefore) => new native.NativeRedis(prefix, hashTagBefore),
  redisScripts: native.redisScripts,
};
