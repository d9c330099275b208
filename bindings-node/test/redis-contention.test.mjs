// Exactly once under contention: 4 processes (two on node-redis, two on ioredis) x 64 concurrent calls
// at one key with uses = 10 let exactly 10 through, and so do 3-entry batches: on the single server,
// and on the cluster with and without hashTag (counted key by key, every caller in the same order).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { createClient, createCluster } from 'redis';

import { clusterPorts, clusterUp, sharedRedisUp } from './redis-servers.mjs';

const run = promisify(execFile);
const contender = join(dirname(fileURLToPath(import.meta.url)), 'redis-contender.mjs');
sharedRedisUp();
clusterUp();

async function contend(target, keys, hashTag) {
  const prefix = `rwtest:contention:${process.pid}:${Math.random().toString(36).slice(2)}:`;
  const startAt = Date.now() + 1500; // after every process has connected
  const kinds = ['node-redis', 'node-redis', 'ioredis', 'ioredis'];
  const outs = await Promise.all(
    kinds.map((kind) => run(process.execPath, [contender, kind, target, String(startAt), '64', '10', prefix, hashTag ?? '-', ...keys])),
  );
  const allowed = outs.map(({ stdout }) => JSON.parse(stdout).allowed);
  // What the server holds: every key of the call counted exactly as often as calls were allowed.
  const client = target === 'single'
    ? createClient({ socket: { host: '127.0.0.1', port: 6379 } })
    : createCluster({ rootNodes: clusterPorts.map((port) => ({ socket: { host: '127.0.0.1', port } })) });
  await client.connect();
  const counts = [];
  for (const key of keys) {
    const tagged = hashTag ? `{${key.split(hashTag)[0]}}${key.slice(key.split(hashTag)[0].length)}` : key;
    counts.push(await client.zCount(`${prefix}log:${tagged}`, 0, '+inf')); // the calls (a refusal marker scores -inf)
    await client.del(`${prefix}log:${tagged}`);
  }
  await client.destroy();
  return { allowed: allowed.reduce((a, b) => a + b, 0), perProcess: allowed, counts };
}

describe('exactly once under contention (4 processes x 64 concurrent calls, uses = 10)', { concurrency: 1 }, () => {
  it('one key, single server: exactly 10 allowed', async () => {
    const r = await contend('single', ['hot']);
    assert.equal(r.allowed, 10, JSON.stringify(r));
    assert.deepEqual(r.counts, [10]);
  });
  it('3-entry batches, single server: exactly 10 allowed, each key counted 10 times', async () => {
    const r = await contend('single', ['hot:a', 'hot:b', 'hot']);
    assert.equal(r.allowed, 10, JSON.stringify(r));
    assert.deepEqual(r.counts, [10, 10, 10]);
  });
  it('3-entry batches, cluster with hashTag (one step): exactly 10 allowed', async () => {
    const r = await contend('cluster', ['hot:a', 'hot:b', 'hot'], ':');
    assert.equal(r.allowed, 10, JSON.stringify(r));
    assert.deepEqual(r.counts, [10, 10, 10]);
  });
  it('3-entry batches spanning slots, cluster without hashTag (key by key, give-backs): exactly 10 allowed', async () => {
    const r = await contend('cluster', ['alpha', 'bravo', 'charlie']);
    assert.equal(r.allowed, 10, JSON.stringify(r));
    assert.deepEqual(r.counts, [10, 10, 10]);
  });
});
