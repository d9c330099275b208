// Per-call cost of `consume` through the component in Node (jco transpile), engine world.
//   node bindings-wasm/host-node/bench.mjs [calls]
import { loadEngine, loadHosted } from './component.mjs';

const calls = Number(process.argv[2] ?? 500_000);
const keys = Array.from({ length: 100 }, (_, i) => `user:${i}`);
const limit = { uses: 10, windowMs: 1000 };

function time(label, fn) {
  for (let i = 0; i < 20_000; i++) fn(i); // warm up
  const t = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) fn(20_000 + i);
  const ns = Number(process.hrtime.bigint() - t) / calls;
  console.log(`jco ${label}: ${(ns / 1000).toFixed(2)} µs/call`);
}

const engine = await loadEngine();
const store = new engine.memory.MemoryStore();
time('consume (engine world)', (i) => store.consume(keys[i % 100], limit, BigInt(i)));

const { exports, host } = await loadHosted();
const clocked = new exports.clockedMemory.MemoryStore();
time('consume (hosted world, imported clock)', (i) => {
  host.clockMs = BigInt(i);
  return clocked.consume(keys[i % 100], limit);
});
