// The conformance vectors (tests/vectors/*.json) through this package's public MemoryStore (its `node`
// entry), with the Node package's runner: every verdict field with the quota, `attempt` and
// `hit_window` included. (scripts/test-wasm-js.sh also runs the Node package's own suites on this
// build's backend; this runs the package as users import it.)
process.env.RATEWINDOW_BACKEND ??= 'wasm';
const rw = await import('../dist/node.js');
const { vectorSuite } = await import('../../../bindings-node/test/vector-runner.mjs');

vectorSuite('@ratewindow/wasm: conformance vectors', rw, (clock) => ({ store: new rw.MemoryStore({ clock }) }));
