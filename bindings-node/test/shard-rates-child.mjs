// A shard for shard-rates.test.mjs: a child process (fork), a cluster worker or a worker thread that
// counts GCRA, the sliding-window counter and costs through a ShardedStore over the channel it was
// started with. What it does is argv[2] (or workerData[0]); it reports with one message { report } and
// exits. `script` is also run by the test on a local MemoryStore (export), to compare answer for answer.
import { pathToFileURL } from 'node:url';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';

import { ShardedStore } from '../dist/index.js';

const gcra = { algorithm: 'gcra', uses: 10, windowMs: 1000, burst: 4 };
const counter = { algorithm: 'counter', uses: 5, windowMs: 1000 };
const sliding = { uses: 3, windowMs: 1000 };

/** Every operation that carries an algorithm or a cost, in order; answers as plain data (or the error). */
export async function script(store, key) {
  const out = [];
  const plain = (v) => JSON.parse(JSON.stringify(v));
  const step = async (name, call) => {
    try {
      const v = await call();
      out.push([name, v === undefined ? null : plain(v), typeof v?.release === 'function']);
      return v;
    } catch (e) {
      // As plain data (JSON drops an undefined field, as a child process's IPC does).
      out.push([name, plain({ error: e?.name, field: e?.field, argument: e?.argument, value: e?.value, message: e?.message })]);
      return undefined;
    }
  };
  const g = `${key}:g`;
  const c = `${key}:c`;
  const s = `${key}:s`;
  await step('gcra cost 3', () => store.consume(g, gcra, { cost: 3 }));
  await step('gcra cost 1', () => store.consume(g, gcra));
  await step('gcra cost 2 refused', () => store.consume(g, gcra, { cost: 2 }));
  await step('gcra peek', () => store.peek(g, gcra, { cost: 1 }));
  await step('gcra reset', () => store.reset(g, gcra));
  await step('gcra after reset cost 4', () => store.consume(g, gcra, { cost: 4 }));
  await step('gcra default burst', () => store.consume(`${g}2`, { algorithm: 'gcra', uses: 2, windowMs: 1000 }, { cost: 2 }));
  for (let i = 0; i < 3; i++) await step(`counter cost 2 #${i}`, () => store.consume(c, counter, { cost: 2 }));
  await step('counter peek', () => store.peek(c, counter));
  await step('counter reset', () => store.reset(c, counter));
  await step('counter after reset', () => store.peek(c, counter, { cost: 5 }));
  await step('sliding cost 2', () => store.consume(s, sliding, { cost: 2 }));
  await step('sliding cost 2 refused', () => store.consume(s, sliding, { cost: 2 }));
  await step('sliding peek cost 1', () => store.peek(s, sliding, { cost: 1 }));
  const batch = [
    { key: `${key}:user`, limit: gcra, cost: 2 },
    { key: `${key}:global`, limit: sliding },
    { key: `${key}:ctr`, limit: counter, cost: 3 },
  ];
  await step('mixed peek', () => store.peekMany(batch));
  const allowed = await step('mixed consume', () => store.consumeMany(batch));
  await step('mixed consume again', () => store.consumeMany(batch));
  await step('mixed refused', () => store.consumeMany(batch));
  if (allowed?.release) await step('mixed release', () => allowed.release());
  await step('mixed after release', () => store.peekMany([{ key: `${key}:global`, limit: sliding, cost: 3 }]));
  await step('weighted sliding batch', () => store.consumeMany([{ key: `${key}:w`, limit: sliding, cost: 3 }]));
  await step('attempt cost 3', () => store.attempt(`${key}:f`, 5, 60_000, { cost: 3 }));
  await step('attempt cost 3 refused', () => store.attempt(`${key}:f`, 5, 60_000, { cost: 3 }));
  await step('attempt cost 2', () => store.attempt(`${key}:f`, 5, 60_000, { cost: 2 }));
  // Bad input: the typed errors, found before anything is sent.
  await step('bad burst', () => store.consume(g, { ...gcra, burst: 0 }));
  await step('bad gcra uses', () => store.consume(g, { ...gcra, uses: 0 }));
  await step('cost above burst', () => store.consume(g, gcra, { cost: 5 }));
  await step('cost above uses (counter)', () => store.consume(c, counter, { cost: 6 }));
  await step('cost above uses (sliding)', () => store.consume(s, sliding, { cost: 4 }));
  await step('fractional cost', () => store.peek(s, sliding, { cost: 1.5 }));
  await step('cost type', () => store.consume(g, gcra, { cost: '2' }));
  await step('burst type', () => store.consume(g, { ...gcra, burst: '2' }));
  await step('entry burst', () => store.consumeMany([{ key: 'a', limit: sliding }, { key: 'b', limit: { ...gcra, burst: 0 } }]));
  await step('entry cost', () => store.peekMany([{ key: 'a', limit: gcra }, { key: 'b', limit: counter, cost: 9 }]));
  await step('reset sliding', () => store.reset(s, sliding));
  await step('attempt cost 0', () => store.attempt(`${key}:f`, 5, 60_000, { cost: 0 }));
  return out;
}

const args = isMainThread ? process.argv.slice(2) : workerData;
const [mode, key, ...rest] = args ?? [];
const report = (value) =>
  new Promise((resolve) => {
    if (isMainThread) process.send({ report: value }, resolve);
    else {
      parentPort.postMessage({ report: value });
      resolve();
    }
  });

async function main() {
  const store = new ShardedStore({ timeoutMs: 20_000 });
  switch (mode) {
    case 'script':
      return { sharded: store.sharded, out: await script(store, key) };
    case 'race': {
      // `calls` concurrent consumes of `key` costing `cost` under `limit` (JSON): how many were allowed.
      const [limit, cost, calls] = [JSON.parse(rest[0]), Number(rest[1]), Number(rest[2])];
      const verdicts = await Promise.all(Array.from({ length: calls }, () => store.consume(key, limit, { cost })));
      return { sharded: store.sharded, allowed: verdicts.filter((v) => v.allowed).length };
    }
    case 'mixed-race': {
      // Batches of this shard's GCRA (burst 8, cost 2: 4 through) and a global sliding log of `uses`.
      const [uses, calls, shard] = rest.map(Number);
      const batch = [
        { key: `${key}:user:${shard}`, limit: { algorithm: 'gcra', uses: 8, windowMs: 3_600_000 }, cost: 2 },
        { key: `${key}:global`, limit: { uses, windowMs: 3_600_000 } },
      ];
      const verdicts = await Promise.all(Array.from({ length: calls }, () => store.consumeMany(batch)));
      return { allowed: verdicts.filter((v) => v.allowed).length };
    }
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

// Run as a shard (the entry of a fork or cluster worker, or a worker thread), not when imported.
if (isMainThread ? process.argv[1] !== undefined && pathToFileURL(process.argv[1]).href === import.meta.url : mode !== undefined) {
  main().then(
    async (value) => {
      await report(value);
      if (isMainThread && process.connected) process.disconnect();
    },
    async (e) => {
      await report({ crashed: String(e?.stack ?? e) });
      process.exitCode = 1;
      if (isMainThread) process.disconnect();
    },
  );
}
