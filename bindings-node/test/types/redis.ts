// A compile-time proof that the napi addon implements the optional call boundary (ts/redis-backend.ts):
// the types napi-rs generates (native.d.ts) must be assignable to it.
import type { BackendCalls, RedisBackend } from '../../ts/redis-backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const calls: BackendCalls = native.NativeCalls.redis(new Float64Array(64), 'ratewindow:', null);
export const redisBackend: RedisBackend = {
  createRedis: (record, prefix, hashTagBefore, evalsha) => native.NativeCalls.redis(record, prefix, hashTagBefore, evalsha),
  redisScripts: native.redisScripts,
};
