// Per-call cost of `consume` on the wasm-bindgen build against the napi addon, both through the same
// TypeScript layer (the Node package's MemoryStore) and at the bare backend boundary.
//   node bindings-wasm/js/bench/consume.mjs      (build both first: scripts/build-wasm-js.sh, and the addon)
import { createRequire } from 'node:module';

import { createBackend } from '../backend.mjs';

const require = createRequire(import.meta.url);
const api = require('../../../bindings-node/dist/api.js');

const N = Number(process.env.N ?? 2_000_000);

function bench(name, f) {
  for (let i = 0; i < 200_000; i++) f(i);
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < N; i++) f(i);
    best = Math.min(best, Number(process.hrtime.bigint() - start) / N);
  }
  console.log(`${name.padEnd(58)} ${best.toFixed(0).padStart(5)} ns/call`);
  return best;
}

const backends = { wasm: createBackend() };
try {
  backends.native = api.nativeBackend();
} catch (e) {
  console.log(`(no napi addon: ${e.message.split('\n')[0]})`);
}

const keys = Array.from({ length: 1000 }, (_, i) => `user:${i}`);
const limit = { uses: 1_000_000_000, windowMs: 1_000 };
for (const [kind, backend] of Object.entries(backends)) {
  const raw = backend.createStore(new Float64Array(backend.recordLayout().length));
  bench(`${kind}: noop (bare crossing)`, () => backend.noop());
  bench(`${kind}: backend consume, one key`, (i) => raw.consume('user:1', 1_000_000_000, 1_000, i));
  let t = 0;
  const store = new (api.createApi(backend).MemoryStore)({ clock: { now: () => t } });
  bench(`${kind}: MemoryStore.consume, one key`, (i) => {
    t = i;
    return store.consume('user:1', limit);
  });
  bench(`${kind}: MemoryStore.consume, 1000 keys`, (i) => {
    t = i;
    return store.consume(keys[i % 1000], limit);
  });
  const refusing = new (api.createApi(backend).MemoryStore)({ clock: { now: () => t } });
  bench(`${kind}: MemoryStore.consume, refused`, (i) => {
    t = i;
    return refusing.consume('busy', { uses: 1, windowMs: 1e12 });
  });
  const batch = [
    { key: 'click:alice', limit: { uses: 1_000_000_000, windowMs: 1_000 } },
    { key: 'click', limit: { uses: 1_000_000_000, windowMs: 1_000 } },
  ];
  bench(`${kind}: MemoryStore.peekMany, 2 entries`, (i) => {
    t = i;
    return store.peekMany(batch);
  });
}
