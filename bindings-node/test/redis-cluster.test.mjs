// Redis Cluster without hashTag, keys spanning slots: each key counted by a script of its own, in order;
// on a refusal or an error what was counted is given back; a failed give-back is reported to
// onGiveBackError (the refusal stands); `release` releases every key. Real cluster; failures are
// injected into the client calls only.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { clusterUp, ioredisCluster, nodeRedisCluster, redisBackend } from './redis-servers.mjs';

const { RedisStore, StoreError, GiveBackError } = createRequire(import.meta.url)('../dist/index.js');

clusterUp();
const clients = [await nodeRedisCluster(), await ioredisCluster()];
after(() => Promise.all(clients.map((c) => c.close())));

const prefix = `rwtest:cluster:${process.pid}:`;
const log = (key) => `${prefix}log:${key}`;
const id = () => Math.random().toString(36).slice(2);
const e = (key, uses = 1, windowMs = 5000) => ({ key, limit: { uses, windowMs } });

/** A store whose client fails the calls `fail(args, keys)` picks, and which records what it sent. */
function faulty(c, fail = () => false) {
  const reports = [];
  const sent = [];
  const store = RedisStore.using(
    async (script, keys, args) => {
      sent.push([args[0], keys.length]);
      if (fail(args, keys)) throw new Error('injected');
      return c.run(script, keys, args);
    },
    { backend: redisBackend, prefix, onGiveBackError: (error) => reports.push(error) },
  );
  return { store, reports, sent };
}

// The calls in a log (ZCOUNT by score: a full log also holds its refusal marker, scored -inf).
const zcard = (c, key) => c.client.zCount ? c.client.zCount(key, 0, '+inf') : c.client.zcount(key, 0, '+inf');

describe('cluster, keys spanning slots, no hashTag', { concurrency: true }, () => {
  for (const c of clients) {
    it(`a refusal gives back what was counted and names the longest wait (${c.kind})`, async () => {
      const [a, b, d] = [`a${id()}`, `b${id()}`, `d${id()}`];
      const { store } = faulty(c);
      assert.equal((await store.consume(b, { uses: 1, windowMs: 1000 })).allowed, true);
      assert.equal((await store.consume(d, { uses: 1, windowMs: 3000 })).allowed, true);
      const v = await store.consumeMany([e(a), e(b, 1, 1000), e(d, 1, 3000)]);
      assert.equal(v.allowed, false);
      assert.equal(v.blocked, 2); // d waits longest, though b refused first
      assert.ok(v.retryAfterMs > 1000 && v.retryAfterMs <= 3000, String(v.retryAfterMs));
      assert.equal(await zcard(c, log(a)), 0); // given back
      const p = await store.peekMany([e(a), e(b, 1, 1000), e(d, 1, 3000)]);
      assert.equal(p.blocked, 2);
      assert.equal(p.retryTimestamp, v.retryTimestamp);
    });

    it(`a failed give-back is reported as GiveBackError and the refusal stands (${c.kind})`, async () => {
      const [a, b] = [`a${id()}`, `b${id()}`];
      const { store, reports } = faulty(c, (args, keys) => args[0] === 'r' && keys[0] === log(a));
      assert.equal((await store.consume(b, e(b).limit)).allowed, true);
      const v = await store.consumeMany([e(a), e(b)]);
      assert.equal(v.allowed, false);
      assert.equal(v.blocked, 1);
      assert.equal(reports.length, 1);
      const [report] = reports;
      assert.ok(report instanceof GiveBackError && report instanceof StoreError);
      assert.equal(report.code, 'ERR_RATEWINDOW_STORE_GIVE_BACK');
      assert.deepEqual(report.keys, [log(a)]);
      assert.equal(report.cause.message, 'injected');
      // Not given back: a's use stays counted (until its window ends), and the report names its member.
      assert.equal(await zcard(c, log(a)), 1);
      const members = c.client.zRangeByScore ? await c.client.zRangeByScore(log(a), 0, '+inf') : await c.client.zrangebyscore(log(a), 0, '+inf');
      assert.deepEqual(members, [report.callId]);
    });

    it(`an error part-way gives back every key tried, then throws StoreError with the cause (${c.kind})`, async () => {
      const [a, b, d] = [`a${id()}`, `b${id()}`, `d${id()}`];
      // d's own consume: one key, the one-entry form ('uses:windowMs', the call id).
      const { store, reports } = faulty(c, (args, keys) => args.length === 2 && args[0] !== 'r' && keys.length === 1 && keys[0] === log(d));
      await assert.rejects(store.consumeMany([e(a), e(b), e(d)]), (err) => err instanceof StoreError && err.cause.message === 'injected');
      assert.deepEqual(reports, []);
      for (const key of [a, b, d]) assert.equal(await zcard(c, log(key)), 0, key);
    });

    it(`release gives back every key (${c.kind})`, async () => {
      const keys = [`a${id()}`, `b${id()}`, `d${id()}`];
      const { store, sent } = faulty(c);
      const v = await store.consumeMany(keys.map((k) => e(k)));
      assert.equal(v.allowed, true);
      for (const key of keys) assert.equal(await zcard(c, log(key)), 1);
      sent.length = 0;
      await v.release();
      // One script for every key first; the cluster answers CROSSSLOT; then one per key.
      assert.deepEqual(sent, [['r', 3], ['r', 1], ['r', 1], ['r', 1]]);
      for (const key of keys) assert.equal(await zcard(c, log(key)), 0);
      assert.equal((await store.consumeMany(keys.map((k) => e(k)))).allowed, true);
    });
  }
});
