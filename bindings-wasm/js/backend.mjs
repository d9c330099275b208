// The hook the Node package's test suite loads when RATEWINDOW_BACKEND=wasm (bindings-node/test/backend.mjs):
// the wasm-bindgen engine as a `Backend`, instantiated synchronously. Build it first with
// scripts/build-wasm-js.sh.
export { wasmBackend as createBackend } from './dist/backend-node.js';
