// Benchmark: the sharded store's IPC cost. This process is the manager (serveShards over a MemoryStore);
// it forks itself as one shard. Contenders, run interleaved in rotating order each round:
//   - memory:      MemoryStore.consume in the manager (what every sharded call runs there)
//   - sharded-1:   ShardedStore.consume in the shard, one call at a time (a full round trip each)
//   - sharded-64:  ShardedStore.consume in the shard, 64 calls in flight (throughput)
// 10,000 keys round-robin, a limit never reached (every call allowed and recorded). Each figure is the
// median of the rounds; the IPC cost is sharded-1 minus memory, per call.
//
//   node bench/node/sharded.mjs                full run (~15 s)
//   BENCH_QUICK=1 node bench/node/sharded.mjs  a smoke run
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

import { MemoryStore, serveShards, ShardedStore } from '../../bindings-node/dist/index.js';

const QUICK = process.env.BENCH_QUICK === '1';
const ROUNDS = QUICK ? 2 : 7;
const MS = QUICK ? 100 : 500;
const KEYS = 10_000;
const LIMIT = { uses: 1_000_000, windowMs: 600_000 };
const keys = Array.from({ length: KEYS }, (_, i) => `bench:${i}`);

async function timed(callsPerBatch, batch) {
  // Calls until MS has passed: ns per call.
  let calls = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(MS) * 1_000_000n;
  let now = start;
  while (now < end) {
    await batch(calls);
    calls += callsPerBatch;
    now = process.hrtime.bigint();
  }
  return Number(now - start) / calls;
}

if (process.argv[2] === 'shard') {
  const store = new ShardedStore({ timeoutMs: 10_000 });
  let k = 0;
  process.on('message', async (m) => {
    if (m?.run === undefined) return;
    const ns =
      m.run === 'sharded-1'
        ? await timed(1, () => store.consume(keys[k++ % KEYS], LIMIT))
        : await timed(64, () => Promise.all(Array.from({ length: 64 }, () => store.consume(keys[k++ % KEYS], LIMIT))));
    process.send({ ns });
  });
  process.send({ ready: true });
} else {
  const store = new MemoryStore();
  const child = fork(fileURLToPath(import.meta.url), ['shard']);
  serveShards(store, child);
  const replies = [];
  let wake;
  child.on('message', (m) => {
    if (m?.ns !== undefined || m?.ready) {
      replies.push(m);
      wake?.();
    }
  });
  const next = () => new Promise((resolve) => (replies.length > 0 ? resolve(replies.shift()) : (wake = () => resolve(replies.shift()))));
  await next(); // ready
  const contenders = {
    memory: async () => {
      let k = 0;
      return timed(1, () => store.consume(keys[k++ % KEYS], LIMIT));
    },
    'sharded-1': async () => (child.send({ run: 'sharded-1' }), (await next()).ns),
    'sharded-64': async () => (child.send({ run: 'sharded-64' }), (await next()).ns),
  };
  const names = Object.keys(contenders);
  const results = Object.fromEntries(names.map((n) => [n, []]));
  const load = [loadavg()[0]];
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < names.length; i++) {
      const name = names[(r + i) % names.length];
      results[name].push(await contenders[name]());
    }
  }
  load.push(loadavg()[0]);
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const m = Object.fromEntries(names.map((n) => [n, median(results[n])]));
  const us = (ns) => (ns / 1000).toFixed(2);
  console.log(`sharded store, ${ROUNDS} rounds of ${MS} ms, load ${load.map((l) => l.toFixed(1)).join(' -> ')} (node ${process.version})`);
  for (const n of names) console.log(`  ${n.padEnd(11)} ${us(m[n]).padStart(8)} us/call  ${Math.round(1e9 / m[n]).toLocaleString('en').padStart(10)} calls/s`);
  console.log(`  IPC cost per call (sharded-1 - memory): ${us(m['sharded-1'] - m.memory)} us; sharded-1 / memory = ${(m['sharded-1'] / m.memory).toFixed(0)}x`);
  console.log(`  with 64 in flight: ${us(m['sharded-64'])} us/call, ${(m['sharded-64'] / m.memory).toFixed(0)}x memory`);
  child.kill();
}
