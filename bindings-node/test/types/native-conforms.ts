// A compile-time proof that the napi addon implements the backend boundary: the types napi-rs generates
// from src/lib.rs (native.d.ts) must be assignable to `Backend` / `BackendStore` of ts/backend.ts.
import type { Backend, BackendStore } from '../../ts/backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const store: BackendStore = new native.NativeStore();
export const backend: Backend = {
  kind: 'native',
  createStore: () => new native.NativeStore(),
  checkLimit: native.checkLimit,
  noop: native.noop,
  panicForTest: native.__panicForTest,
};
