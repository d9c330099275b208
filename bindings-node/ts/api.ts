/**
 * The internal factory that runs the whole TypeScript layer on a given {@link Backend}: the napi addon
 * by default, the wasm-bindgen build for its package and its tests.
 *
 * ```ts
 * const api = createApi(wasmBackend);
 * const store = new api.MemoryStore(); // counts in the wasm engine
 * ```
 * @module
 * @internal
 */
import type { Backend } from './backend';
import { InternalError, InvalidArgumentError, InvalidLimitError, RateWindowError, UnsupportedError } from './errors';
import { GlobalLimit, Limit, Unlimited } from './limit';
import { RateLimiter } from './rate-limiter';
import { CooldownStore, cooldownLimit, counterLimit, gcraLimit, MemoryStore, type MemoryStoreOptions } from './store';
import type { CooldownLimit, CounterLimit, GcraLimit } from './types';

export type { Backend, BackendStore, BackendError, BackendErrorCode } from './backend';
export { nativeBackend } from './native';
export { getDefaultBackend, setDefaultBackend } from './store';

/** The public API with its `MemoryStore` (and `cooldownLimit`) bound to `backend`. */
export function createApi(backend: Backend) {
  class BoundMemoryStore extends MemoryStore {
    constructor(options: MemoryStoreOptions = {}) {
      // A wrong type is passed through for MemoryStore to refuse with its TypeError.
      super(typeof options === 'object' && options !== null ? { backend, ...options } : options);
    }
  }
  Object.defineProperty(BoundMemoryStore, 'name', { value: 'MemoryStore' });
  return {
    backend,
    MemoryStore: BoundMemoryStore as typeof MemoryStore,
    CooldownStore,
    RateLimiter,
    Limit,
    GlobalLimit,
    Unlimited,
    cooldownLimit: (uses: number, windowMs: number): CooldownLimit => cooldownLimit(uses, windowMs, backend),
    gcraLimit: (uses: number, windowMs: number, burst: number = uses): GcraLimit => gcraLimit(uses, windowMs, burst, backend),
    counterLimit: (uses: number, windowMs: number): CounterLimit => counterLimit(uses, windowMs, backend),
    RateWindowError,
    InvalidLimitError,
    InvalidArgumentError,
    InternalError,
    UnsupportedError,
  } as const;
}

/** What {@link createApi} returns. */
export type Api = ReturnType<typeof createApi>;
