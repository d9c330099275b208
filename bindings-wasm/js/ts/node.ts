/**
 * The Node entry of `@ratewindow/wasm` (the `node` export condition): the same API as the default
 * entry, with the engine instantiated synchronously on import from the `.wasm` next to the glue, so no
 * `await init()` is needed (calling it anyway is harmless).
 * @module
 */
import { readFileSync } from 'node:fs';

import { initSync } from './index.js';

initSync(readFileSync(new URL('../pkg/ratewindow_wasm_bg.wasm', import.meta.url)));

export * from './index.js';
