// The sharded store carrying GCRA, the sliding-window counter and costs (issue 17), with real processes:
// forked children, cluster workers and worker threads are the shards, this test process their manager,
// serving a MemoryStore. Every operation answers exactly as a local MemoryStore on the same clock
// (verdicts, release, reset, attempts, and the typed errors of bad input); concurrent shards count
// exactly; the manager checks what it is sent (a request of another binding included).
import assert from 'node:assert/strict';
import cluster from 'node:cluster';
import { fork } from 'node:child_process';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker } from 'node:worker_threads';

import { MemoryStore, SHARD_MESSAGE_KEY, serveShards } from '../dist/index.js';
import { script } from './shard-rates-child.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const CHILD = join(HERE, 'shard-rates-child.mjs');
let n = 0;
const fresh = (label) => `shard-rates:${label}:${process.pid}:${++n}`;

/** A clock that steps 7 ms at each reading: the manager's store and the local one read it alike. */
const stepping = () => {
  let t = 1_700_000_000_000;
  return { now: () => (t += 7) };
};

function collect(child, server, kill) {
  return new Promise((resolve, reject) => {
    let report;
    child.on('message', (m) => {
      if (m && typeof m === 'object' && 'report' in m) report = m.report;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      server?.close();
      if (report?.crashed) reject(new Error(report.crashed));
      else if (report === undefined) reject(new Error(`the shard exited (${code}) without a report`));
      else resolve(report);
    });
    setTimeout(() => kill(), 120_000).unref();
  });
}

const shards = {
  child_process(args, store) {
    const child = fork(CHILD, args);
    return collect(child, serveShards(store, child), () => child.kill());
  },
  worker_threads(args, store) {
    const worker = new Worker(CHILD, { workerData: args });
    return collect(worker, serveShards(store, worker), () => worker.terminate());
  },
  cluster(args, store) {
    cluster.setupPrimary({ exec: CHILD, args });
    const worker = cluster.fork();
    const server = serveShards(store, worker);
    return collect(worker.process, server, () => worker.kill()).finally(() => server.close());
  },
};

describe('ShardedStore carries GCRA, the sliding-window counter and costs', () => {
  for (const [over, start] of Object.entries(shards)) {
    it(`answers every operation as the memory store does (over ${over})`, async () => {
      const key = fresh(over);
      const report = await start(['script', key], new MemoryStore({ clock: stepping() }));
      assert.equal(report.sharded, true);
      const local = await script(new MemoryStore({ clock: stepping() }), key);
      assert.deepEqual(report.out, local);
      // The script reaches what it means to: allowed, refused, released and refused-with-a-field answers.
      const by = Object.fromEntries(local.map(([name, v, release]) => [name, { ...v, release }]));
      assert.deepEqual([by['gcra cost 3'].allowed, by['gcra cost 2 refused'].allowed, by['gcra after reset cost 4'].allowed], [true, false, true]);
      assert.deepEqual([by['counter cost 2 #2'].allowed, by['counter after reset'].allowed], [false, true]);
      assert.deepEqual([by['mixed consume'].allowed, by['mixed consume'].release, by['mixed refused'].allowed], [true, true, false]);
      assert.equal(by['mixed after release'].allowed, true, 'release() gave back the sliding-log call in the manager');
      assert.deepEqual([by['attempt cost 3'].count, by['attempt cost 3 refused'].allowed, by['attempt cost 2'].count], [3, false, 5]);
      assert.deepEqual([by['bad burst'].error, by['bad burst'].field], ['InvalidLimitError', 'burst']);
      assert.deepEqual([by['cost above burst'].error, by['cost above burst'].field], ['InvalidArgumentError', 'cost']);
      assert.deepEqual([by['entry burst'].field, by['entry burst'].value], ['burst', 0]);
      assert.equal(by['entry cost'].field, 'entries[1].cost');
      assert.equal(by['cost type'].error, 'TypeError');
    });
  }

  it('counts GCRA costs exactly once across 4 forked shards x 16 concurrent calls (burst 20, cost 3: 6 through)', async () => {
    const store = new MemoryStore();
    const key = fresh('gcra-race');
    const limit = { algorithm: 'gcra', uses: 20, windowMs: 3_600_000 };
    const reports = await Promise.all(Array.from({ length: 4 }, () => shards.child_process(['race', key, JSON.stringify(limit), '3', '16'], store)));
    assert.ok(reports.every((r) => r.sharded));
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 6);
    assert.equal(store.peek(key, limit, { cost: 1 }).allowed, true, '2 uses left');
    assert.equal(store.peek(key, limit, { cost: 3 }).allowed, false);
  });

  it('counts counter and sliding-log costs exactly once across 4 worker threads (20 uses, cost 2: 10 through)', async () => {
    for (const limit of [
      { algorithm: 'counter', uses: 20, windowMs: 3_600_000 },
      { uses: 20, windowMs: 3_600_000 },
    ]) {
      const store = new MemoryStore();
      const key = fresh('race');
      const reports = await Promise.all(Array.from({ length: 4 }, () => shards.worker_threads(['race', key, JSON.stringify(limit), '2', '16'], store)));
      assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 10, JSON.stringify(limit));
    }
  });

  it('counts batches mixing a per-shard GCRA and a global sliding log all or nothing across cluster workers', async () => {
    const store = new MemoryStore();
    const key = fresh('mixed-race');
    const reports = await Promise.all(Array.from({ length: 3 }, (_, i) => shards.cluster(['mixed-race', key, '10', '16', String(i)], store)));
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 10);
    assert.ok(reports.every((r) => r.allowed <= 4), JSON.stringify(reports));
    assert.equal(store.peek(`${key}:global`, { uses: 10, windowMs: 3_600_000 }).allowed, false);
  });
});

describe("the Node manager checks a request's algorithm, burst and cost", () => {
  /** Sends raw request texts to a manager serving `store` over a MessageChannel; resolves with the answers. */
  async function ask(store, texts) {
    const { port1, port2 } = new MessageChannel();
    const server = serveShards(store, port1);
    const answers = new Promise((resolve) => {
      const got = [];
      port2.on('message', (m) => {
        got.push(JSON.parse(m[SHARD_MESSAGE_KEY]));
        if (got.length === texts.length) resolve(got);
      });
    });
    for (const text of texts) port2.postMessage({ [SHARD_MESSAGE_KEY]: text });
    try {
      return (await answers).sort((a, b) => a.id - b.id);
    } finally {
      server.close();
      port1.close();
      port2.close();
    }
  }

  it('runs what another binding sends (the protocol as core::shard writes it) and refuses a bad rule with a typed error', async () => {
    const store = new MemoryStore({ clock: { now: () => 1_000_000 } });
    const answers = await ask(store, [
      '{"rw":1,"id":1,"op":"consume","key":"k","uses":10,"windowMs":1000,"algorithm":"gcra","burst":4,"cost":3}',
      '{"rw":1,"id":2,"op":"peek","key":"k","uses":10,"windowMs":1000,"algorithm":"gcra","burst":4,"cost":2}',
      '{"rw":1,"id":3,"op":"consumeMany","entries":[{"key":"c","uses":5,"windowMs":100,"algorithm":"counter","cost":2},{"key":"s","uses":2,"windowMs":100}]}',
      '{"rw":1,"id":4,"op":"attempt","key":"f","max":5,"decayMs":100,"cost":4}',
      '{"rw":1,"id":5,"op":"consume","key":"k","uses":10,"windowMs":1000,"algorithm":"gcra","burst":0}',
      '{"rw":1,"id":6,"op":"consume","key":"k","uses":10,"windowMs":1000,"algorithm":"counter","burst":2}',
      '{"rw":1,"id":7,"op":"peekMany","entries":[{"key":"s","uses":0,"windowMs":100,"algorithm":"counter"}]}',
      '{"rw":1,"id":8,"op":"reset","key":"k","algorithm":"gcra","uses":10,"windowMs":1000,"burst":4}',
      '{"rw":1,"id":9,"op":"consume","key":"k","uses":10,"windowMs":1000,"algorithm":"gcra","burst":4,"cost":4}',
    ]);
    const local = new MemoryStore({ clock: { now: () => 1_000_000 } });
    const gcra = { algorithm: 'gcra', uses: 10, windowMs: 1000, burst: 4 };
    const want = (v) => JSON.parse(JSON.stringify(v));
    assert.deepEqual(answers[0].verdict, want(local.consume('k', gcra, { cost: 3 })));
    assert.deepEqual(answers[1].verdict, want(local.peek('k', gcra, { cost: 2 })));
    assert.equal(answers[1].verdict.allowed, false);
    const batch = local.consumeMany([
      { key: 'c', limit: { algorithm: 'counter', uses: 5, windowMs: 100 }, cost: 2 },
      { key: 's', limit: { uses: 2, windowMs: 100 } },
    ]);
    assert.deepEqual({ ...answers[2].verdict, release: undefined }, { ...want(batch), release: undefined });
    assert.equal(typeof answers[2].verdict.release, 'number', 'an allowed batch carries its release token');
    assert.deepEqual(answers[3].attempt, want(local.attempt('f', 5, 100, { cost: 4 })));
    assert.deepEqual([answers[4].error.kind, answers[4].error.field], ['invalid_limit', 'burst']);
    assert.equal(answers[5].error.kind, 'malformed');
    assert.deepEqual([answers[6].error.kind, answers[6].error.field], ['invalid_limit', 'uses']);
    assert.equal(answers[7].value, null);
    assert.equal(answers[8].verdict.allowed, true, 'reset emptied the bucket');
  });

  it("answers 'unsupported' when the manager's store has no reset", async () => {
    const store = { consume: () => ({ allowed: true, retryAfterMs: 0 }) };
    const [answer] = await ask(store, ['{"rw":1,"id":1,"op":"reset","key":"k","algorithm":"counter","uses":1,"windowMs":10}']);
    assert.equal(answer.error.kind, 'unsupported');
  });
});
