// The ESM entry point: re-exports the CommonJS build, so `import` and `require` share one module
// instance (one MemoryStore class, one set of error classes: instanceof works across both).
import cjs from '../dist/index.js';

export const {
  CooldownStore,
  MemoryStore,
  cooldownLimit,
  Limit,
  GlobalLimit,
  Unlimited,
  RateLimiter,
  RateWindowError,
  InvalidLimitError,
  InvalidArgumentError,
  InternalError,
} = cjs;
