// The conversation vectors (tests/vectors/conversations/*.json) through this package's public
// RedisStore, PostgresStore and SqliteStore (its `node` entry), on the wasm module's call machines
// (src/calls.rs), with the Node package's runner: the same steps, outcomes, error kinds and failed
// give-backs as the napi addon, the Python package and the component's hosts.
process.env.RATEWINDOW_BACKEND ??= 'wasm';
const rw = await import('../dist/node.js');
const { conversationSuite } = await import('../../../bindings-node/test/conversation-runner.mjs');

conversationSuite(rw, rw.wasmBackend(), '@ratewindow/wasm: conversation vectors through the public stores');
