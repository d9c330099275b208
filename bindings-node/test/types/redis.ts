// A compile-time proof that the napi addon implements the optional Redis part of the backend boundary
// (ts/redis-backend.ts): the types napi-rs generates (native.d.ts) must be assignable to it.
import type { BackendCall, BackendCalls, RedisBackend } from '../../ts/redis-backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const planner: BackendCalls = new native.NativeRedis('ratewindow:', null);
export const call: BackendCall = planner.clear('k');
export const redisBackend: RedisBackend = {
  createRedis: (prefix, hashTagBefore, evalsha) => new native.NativeRedis(prefix, hashTagBefore, evalsha),
  redisScripts: native.redisScripts,
};
