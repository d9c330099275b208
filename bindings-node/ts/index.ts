/**
 * ratewindow: sliding-window cooldowns and fixed-window rate limits with exact semantics, counted by a
 * Rust engine.
 *
 * ```ts
 * import { MemoryStore } from 'ratewindow';
 * const store = new MemoryStore();
 * const verdict = store.consumeMany([
 *   { key: 'click:alice', limit: { uses: 3, windowMs: 10_000 } },
 *   { key: 'click', limit: { uses: 100, windowMs: 60_000 } },
 * ]);
 * ```
 * @module
 */
export type { AnyLimit, Awaitable, BatchVerdict, CallOptions, Clock, CooldownLimit, CounterLimit, Entry, GcraLimit, Verdict } from './types';
export { CooldownStore, MemoryStore, cooldownLimit, counterLimit, gcraLimit } from './store';
export type { MemoryStoreOptions } from './store';
export { GlobalLimit, Limit, Unlimited } from './limit';
export type { AfterCallback, ResponseCallback } from './limit';
export { RateLimiter } from './rate-limiter';
export type { FixedWindowStore, LimiterCallback } from './rate-limiter';
export { InternalError, InvalidArgumentError, InvalidLimitError, RateWindowError, UnsupportedError } from './errors';
export type { LimitField, RateWindowErrorCode } from './errors';
export { RedisStore } from './redis';
export type { RedisEvalSha, RedisRun, RedisStoreOptions } from './redis';
export { GiveBackError, StoreError, StoreReplyError } from './store-errors';
export type { StoreErrorCode } from './store-errors';
export { PostgresStore } from './postgres';
export type { PgQueryable, PostgresQuery, PostgresStoreOptions, PurgeResult } from './postgres';
export { SqliteStore } from './sqlite';
export type { SqliteDatabaseLike, SqlitePurgeResult, SqliteStatementLike, SqliteStoreOptions } from './sqlite';
export { guard, GuardedStore } from './guard';
export type { GuardEvent, GuardFailure, GuardOperation, GuardOptions, GuardStats, GuardVerdictFields, GuardedBatchVerdict, GuardedVerdict } from './guard';
export { ShardedStore, ShardError, serveShards, SHARD_MESSAGE_KEY } from './shard';
export type { PortLike, ProcessChannelLike, ServeShardsOptions, ShardChannelLike, ShardedStoreOptions, ShardFailureKind, ShardMessage, ShardServer } from './shard';
export { Lock, LockTimeoutError, withLock } from './lock';
export type { LockStore, WithLockOptions } from './lock';
