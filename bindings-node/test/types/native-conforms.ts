// A compile-time proof that the napi addon implements the backend boundary: the types napi-rs generates
// from src/lib.rs (native.d.ts) must be assignable to `Backend` / `BackendStore` of ts/backend.ts.
import type { Backend, BackendStore } from '../../ts/backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const store: BackendStore = new native.NativeStore(new Float64Array(6));
export const backend: Backend = {
  kind: 'native',
  createStore: (record: Float64Array) => new native.NativeStore(record),
  recordLayout: native.recordLayout,
  checkLimit: native.checkLimit,
  checkRate: native.checkRate,
  noop: native.noop,
  panicForTest: native.__panicForTest,
};
