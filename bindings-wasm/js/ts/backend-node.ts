/**
 * The wasm-bindgen engine as a bare {@link Backend}, instantiated synchronously from the `.wasm` file:
 * what the Node package's test suite loads when `RATEWINDOW_BACKEND=wasm`, to run its own TypeScript
 * layer, conformance kit and vectors on this build. It loads only the glue and `wasm.ts`, not this
 * package's copy of the TypeScript layer.
 * @module
 */
import { readFileSync } from 'node:fs';

import { initSync } from '../pkg/ratewindow_wasm.js';
import type { Backend } from './layer/backend.js';
import { createWasmBackend, type WasmExports } from './wasm.js';

let loaded: Backend | undefined;

/** The wasm engine as a {@link Backend}, instantiated on the first call. */
export function wasmBackend(): Backend {
  loaded ??= createWasmBackend(
    initSync({ module: readFileSync(new URL('../pkg/ratewindow_wasm_bg.wasm', import.meta.url)) }) as unknown as WasmExports,
  );
  return loaded;
}
