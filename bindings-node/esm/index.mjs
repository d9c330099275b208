// The ESM entry point: re-exports the CommonJS build, so `import` and `require` share one module
// instance (one MemoryStore class, one set of error classes: instanceof works across both).
import { createRequire } from 'node:module';

// Loaded with Node's own require, so bundling test runners (Vitest) get the same instance too.
const cjs = createRequire(import.meta.url)('../dist/index.js');

export const {
  CooldownStore,
  MemoryStore,
  cooldownLimit,
  gcraLimit,
  counterLimit,
  Limit,
  GlobalLimit,
  Unlimited,
  RateLimiter,
  RateWindowError,
  InvalidLimitError,
  InvalidArgumentError,
  InternalError,
  UnsupportedError,
  RedisStore,
  StoreError,
  StoreReplyError,
  GiveBackError,
  PostgresStore,
  SqliteStore,
  guard,
  GuardedStore,
  ShardedStore,
  ShardError,
  serveShards,
  SHARD_MESSAGE_KEY,
} = cjs;
