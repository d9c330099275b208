// Picks the engine build the whole suite runs on, by RATEWINDOW_BACKEND:
//   native (default)  the napi addon built in bindings-node/
//   wasm              the wasm-bindgen package of bindings-wasm/js/
//
// HOOK for the wasm-bindgen package: the module at $RATEWINDOW_WASM_BACKEND (default
// bindings-wasm/js/backend.mjs) must export `createBackend()` (or `backend`, or a default export)
// returning an object that implements `Backend` from ts/backend.ts. Everything else in this suite
// (MemoryStore, RateLimiter, errors, the kit, the vectors) then runs unchanged on it.
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, '..', '..');

const internal = require('../dist/api.js');

async function load(which) {
  if (which === 'native') return internal.nativeBackend();
  if (which === 'wasm') {
    const path = process.env.RATEWINDOW_WASM_BACKEND ?? join(repo, 'bindings-wasm', 'js', 'backend.mjs');
    if (!existsSync(path)) {
      throw new Error(`RATEWINDOW_BACKEND=wasm: no wasm backend module at ${path} (build bindings-wasm/js first)`);
    }
    const mod = await import(pathToFileURL(path).href);
    const backend = mod.createBackend?.() ?? mod.backend ?? mod.default;
    return await backend;
  }
  throw new Error(`RATEWINDOW_BACKEND must be "native" or "wasm", not ${JSON.stringify(which)}`);
}

/** The backend under test. */
export const backend = await load(process.env.RATEWINDOW_BACKEND ?? 'native');
// Stores created without an explicit backend (RateLimiter's default, cooldownLimit) use it too.
internal.setDefaultBackend(backend);
/** The public API bound to it. */
export const api = internal.createApi(backend);
