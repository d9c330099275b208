// The sharded store (ts/shard.ts over core::shard) with real processes: forked children, cluster
// workers and worker threads are the shards, this test process is their manager and serves them from
// a MemoryStore (and a RedisStore). Exactly-once across 4 shards x 64 calls, counts kept over a shard's
// restart, a manager that does not answer (a typed timeout, alone and under the failure guard),
// malformed and unknown messages (a typed error answer, and the manager keeps serving), every
// operation, and the conformance kit inside sharding (in a child) and outside it (here).
import assert from 'node:assert/strict';
import cluster from 'node:cluster';
import { fork } from 'node:child_process';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

import { CooldownStore, guard, MemoryStore, RedisStore, serveShards, ShardedStore, ShardError, StoreError } from '../dist/index.js';
import { testStore } from '../dist/testing.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const CHILD = join(HERE, 'shard-child.mjs');
let n = 0;
const fresh = (label) => `shard-test:${label}:${process.pid}:${++n}:${Math.random().toString(36).slice(2, 7)}`;

/** Starts a forked shard; resolves with its report once it exits. `serve` false: nobody answers it. */
function forked(args, store, { serve = true, stdio } = {}) {
  const child = fork(CHILD, args, stdio ? { stdio } : {});
  const server = serve ? serveShards(store, child) : undefined;
  return collect(child, server, () => child.kill());
}

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
    setTimeout(() => kill(), 60_000).unref();
  });
}

function threaded(args, store) {
  const worker = new Worker(CHILD, { workerData: args });
  const server = serveShards(store, worker);
  return collect(worker, server, () => worker.terminate());
}

describe('ShardedStore over IPC', () => {
  it('counts exactly once across 4 forked shards x 64 concurrent calls (limit 50: exactly 50 allowed)', async () => {
    const store = new MemoryStore();
    const key = fresh('exact');
    const reports = await Promise.all(Array.from({ length: 4 }, () => forked(['consume', key, '50', '64'], store)));
    assert.ok(reports.every((r) => r.sharded === true));
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 50);
    assert.equal(store.consume(key, { uses: 50, windowMs: 60_000 }).allowed, false);
  });

  it('counts batches exactly once across 4 shards (all or nothing: 20 allowed of 256)', async () => {
    const store = new MemoryStore();
    const key = fresh('batch');
    const reports = await Promise.all(Array.from({ length: 4 }, () => forked(['batch', key, '20', '64'], store)));
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 20);
    // The second entry counted exactly the allowed batches too.
    assert.equal(store.peek(`${key}:b`, { uses: 20, windowMs: 60_000 }).allowed, false);
    assert.equal(store.peek(`${key}:b`, { uses: 21, windowMs: 60_000 }).allowed, true);
  });

  it('counts exactly once across 4 worker threads (worker_threads parentPort)', async () => {
    const store = new MemoryStore();
    const key = fresh('threads');
    const reports = await Promise.all(Array.from({ length: 4 }, () => threaded(['consume', key, '50', '64'], store)));
    assert.ok(reports.every((r) => r.sharded === true));
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 50);
  });

  it('counts exactly once across cluster workers', async () => {
    const store = new MemoryStore();
    const key = fresh('cluster');
    cluster.setupPrimary({ exec: CHILD, args: ['consume', key, '30', '64'] });
    const reports = await Promise.all(
      Array.from({ length: 2 }, () => {
        const worker = cluster.fork();
        const server = serveShards(store, worker);
        return collect(worker.process, server, () => worker.kill()).finally(() => server.close());
      }),
    );
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 30);
  });

  it('carries the lock: exactly one holder among 4 shards x 64 concurrent acquirers', async () => {
    const store = new MemoryStore();
    const key = fresh('lock');
    const reports = await Promise.all(Array.from({ length: 4 }, () => forked(['lock', key], store)));
    assert.equal(reports.reduce((s, r) => s + r.acquired, 0), 1);
    assert.notEqual(await store.lock(key, 30).currentOwner(), null);
  });

  it("carries every lock operation to the manager's store's lock", async () => {
    const { out } = { out: await forked(['lockops', fresh('lockops')], new MemoryStore()) };
    assert.deepEqual(out, {
      acquire: true,
      again: false,
      owner: true,
      notOwnerRelease: false,
      stillOwner: true,
      restored: true,
      free: null,
      reacquire: true,
      force: true,
      afterForce: null,
      withLock: 'ran',
      badTtl: { name: 'InvalidArgumentError', field: 'ttl' },
    });
  });

  it('keeps the counts when a shard restarts (they live in the manager)', async () => {
    const store = new MemoryStore();
    const key = fresh('restart');
    const first = await forked(['consume', key, '5', '3'], store);
    assert.equal(first.allowed, 3);
    const restarted = await forked(['consume', key, '5', '5'], store);
    assert.equal(restarted.allowed, 2);
  });

  it('serves a RedisStore in the manager the same way', async () => {
    const { createClient } = await import('redis');
    const client = createClient({ url: 'redis://127.0.0.1:6379' });
    await client.connect();
    try {
      const store = RedisStore.using((script, keys, args) => client.eval(script, { keys, arguments: args }));
      const key = fresh('redis');
      const reports = await Promise.all(Array.from({ length: 4 }, () => forked(['consume', key, '50', '64'], store)));
      assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 50);
      const keys = await client.keys(`*${key}*`);
      if (keys.length > 0) await client.del(keys);
    } finally {
      await client.quit();
    }
  });

  it('serves a guarded store in the manager (guard(MemoryStore)) the same way', async () => {
    const inner = new MemoryStore();
    const store = guard(inner, { timeoutMs: 2000 });
    const key = fresh('guarded-manager');
    const reports = await Promise.all(Array.from({ length: 4 }, () => forked(['consume', key, '50', '64'], store)));
    assert.equal(reports.reduce((s, r) => s + r.allowed, 0), 50);
    assert.equal(inner.peek(key, { uses: 50, windowMs: 60_000 }).allowed, false);
    await store.close();
  });

  it('fails with a typed timeout (a StoreError) when the manager does not answer', async () => {
    const report = await forked(['timeout', fresh('timeout'), '150'], undefined, { serve: false });
    assert.equal(report.error.name, 'ShardError');
    assert.equal(report.error.kind, 'timeout');
    assert.equal(report.error.code, 'ERR_RATEWINDOW_STORE');
    assert.equal(report.error.storeError, true);
    assert.match(report.error.message, /did not answer consume within 150 ms/);
    assert.ok(report.ms >= 140 && report.ms < 2000, `${report.ms} ms`);
  });

  it('fails at once with kind closed when the manager closes the channel under a call', async () => {
    const child = fork(CHILD, ['closed', fresh('closed')], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    // The request arrives (nobody answers it), then the manager closes the channel.
    await new Promise((resolve) => child.once('message', resolve));
    child.disconnect();
    await new Promise((resolve) => child.on('exit', resolve));
    const report = JSON.parse(out.trim());
    assert.equal(report.error.kind, 'closed');
    assert.equal(report.error.storeError, true);
    assert.ok(report.ms < 10_000, `${report.ms} ms`);
  });

  it("is a store failure to the failure guard: its policy answers ('deny'), failed: 'store-error'", async () => {
    const report = await forked(['guarded', fresh('guarded'), '100'], undefined, { serve: false });
    assert.deepEqual(report.allowed, false);
    assert.equal(report.failed, 'store-error');
    assert.equal(report.cause.kind, 'timeout');
    assert.equal(report.cause.storeError, true);
  });

  it('answers malformed and unknown messages with a typed error and keeps serving', async () => {
    const store = new MemoryStore();
    const errors = [];
    const child = fork(CHILD, ['raw', fresh('raw')]);
    const server = serveShards(store, child, { onError: (e) => errors.push(e) });
    const report = await collect(child, server, () => child.kill());
    const kinds = report.answers.map((a) => [a.id, a.error?.kind]).sort((a, b) => a[0] - b[0]);
    assert.deepEqual(kinds, [
      [0, 'malformed'],
      [900001, 'unknown'],
      [900002, 'malformed'],
      [900003, 'unknown'],
    ]);
    assert.match(report.answers.find((a) => a.id === 900002).error.message, /windowMs/);
    assert.equal(report.allowed, true);
    assert.equal(errors.length, 4);
    assert.ok(errors.every((e) => e instanceof ShardError));
  });

  it('runs every operation through the manager, and refuses bad input with the typed errors', async () => {
    const store = new MemoryStore();
    const { out, errors } = await forked(['ops', fresh('ops')], store);
    assert.equal(out.consume.allowed, true);
    assert.equal(out.consume.remaining, 1);
    assert.equal(out.peek.allowed, true);
    assert.equal(out.peek.remaining, 1);
    assert.equal(out.consumeMany.allowed, true);
    assert.equal(out.hasRelease, true);
    assert.equal(out.refusedMany.allowed, false);
    assert.equal(out.refusedMany.blocked, 0);
    assert.ok(out.refusedMany.retryAfterMs > 0 && out.refusedMany.retryTimestamp > 0);
    assert.equal(out.peekMany.allowed, false);
    assert.equal(out.afterRelease.allowed, true, 'release() gave the call back in the manager');
    assert.equal(out.hit, 2);
    assert.equal(out.hitWindow.count, 3);
    assert.ok(out.hitWindow.resetAfterMs > 0);
    assert.deepEqual([out.attempt.allowed, out.attempt.count], [false, 3]);
    assert.equal(out.attempts, 3);
    assert.equal(out.tooMany, false);
    assert.equal(out.remaining, 7);
    assert.equal(out.availableIn, 60);
    assert.ok(out.availableInMs > 59_000);
    assert.equal(out.afterReset, 0);
    assert.equal(out.afterClear, 0);
    assert.deepEqual([errors.uses.name, errors.uses.field, errors.uses.argument], ['InvalidLimitError', 'uses', 'uses']);
    assert.deepEqual([errors.windowMs.name, errors.windowMs.field], ['InvalidLimitError', 'windowMs']);
    assert.deepEqual([errors.decayMs.name, errors.decayMs.argument], ['InvalidLimitError', 'decayMs']);
    assert.deepEqual([errors.amount.name, errors.amount.field], ['InvalidArgumentError', 'amount']);
    assert.deepEqual([errors.entryKey.name, errors.entryKey.field], ['InvalidArgumentError', 'entries[1].key']);
    assert.equal(errors.keyType.name, 'TypeError');
  });

  it("answers a store's failure as a StoreError, and 'unsupported' for an operation the manager's store lacks", async () => {
    // A store of one's own that fails, and has no fixed window.
    class Down extends CooldownStore {
      consume() {
        throw new StoreError('the database is down');
      }
      peekMany() {
        return Promise.reject(new Error('the connection was reset'));
      }
    }
    const report = await forked(['failures', fresh('failures')], new Down());
    assert.deepEqual(
      [report.consume.name, report.consume.kind, report.consume.storeError, report.consume.message],
      ['ShardError', 'store', true, 'the database is down'],
    );
    assert.deepEqual([report.peekMany.kind, report.peekMany.message], ['store', 'the connection was reset']);
    assert.deepEqual([report.hit.kind, report.hit.storeError], ['unsupported', true]);
    assert.match(report.hit.message, /has no hit\(\)/);
  });

  it('passes the conformance kit inside sharding (in a forked shard)', async () => {
    const store = new MemoryStore();
    // Its own test run, reporting TAP (not to this runner, whose context the environment carries).
    const env = { ...process.env };
    delete env.NODE_TEST_CONTEXT;
    const child = fork(CHILD, ['kit', 'kit'], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], env, execArgv: ['--test-reporter=tap'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const server = serveShards(store, child);
    const code = await new Promise((resolve) => child.on('exit', resolve));
    server.close();
    assert.equal(code, 0, output);
    assert.match(output, /# pass [1-9]/);
    assert.match(output, /# fail 0/);
  });

  it('counts in this process outside sharding', () => {
    const store = new ShardedStore();
    assert.equal(store.sharded, false);
    assert.equal(store.consume('outside', { uses: 1, windowMs: 1000 }).allowed, true);
    assert.equal(store.consume('outside', { uses: 1, windowMs: 1000 }).allowed, false);
  });
});

testStore('ShardedStore outside sharding', () => new ShardedStore(), { describe, it });
