/**
 * Stands in for the Node package's `native.ts` (the napi addon loader) when its TypeScript layer is
 * compiled for `@ratewindow/wasm`: this package has no addon, and must not import `node:fs` where it
 * runs (browsers, edge workers).
 * @module
 */
import type { Backend } from './backend.js';

/** There is no native addon in the wasm package: always throws. */
export function nativeBackend(): Backend {
  throw new Error('@ratewindow/wasm has no native addon: its stores count in the WebAssembly engine');
}
