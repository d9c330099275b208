// Weighted calls on a real three-master Redis Cluster (node-redis and ioredis), without hashTag: a
// weighted consume, a consumeMany whose entries have their own costs on keys of different slots (the
// core's key-by-key fallback, giving back what was counted on a refusal), release of exactly a batch's
// costs, and the fixed window's attempt with a cost; exact under concurrency (many calls in flight on
// one client).
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { clusterUp, ioredisCluster, nodeRedisCluster, redisBackend } from './redis-servers.mjs';

const { RedisStore } = createRequire(import.meta.url)('../dist/index.js');

clusterUp();
const clients = [await nodeRedisCluster(), await ioredisCluster()];
after(() => Promise.all(clients.map((c) => c.close())));

const prefix = `rwtest:wcluster:${process.pid}:`;
const id = () => Math.random().toString(36).slice(2);
const storeOf = (c, evalsha) => RedisStore.using(c.run, { ...(evalsha ? { evalsha: c.evalsha } : {}), backend: redisBackend, prefix });

/** Two keys of this run on different slots (so a batch of both is refused CROSSSLOT and goes key by key). */
function apart() {
  const slot = (key) => keySlot(`${prefix}log:${key}`);
  for (;;) {
    const [a, b] = [`a${id()}`, `b${id()}`];
    if (slot(a) !== slot(b)) return [a, b];
  }
}

// CRC16/XMODEM of the key (or its hash tag), mod 16384: the cluster's key slot.
function keySlot(key) {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(key)) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

describe('weighted calls on Redis Cluster', { concurrency: true }, () => {
  for (const c of clients) {
    for (const evalsha of [true, false]) {
      const via = `${c.kind}, ${evalsha ? 'EVALSHA' : 'EVAL'}`;

      it(`a weighted consume is exact under concurrency (${via})`, async () => {
        const store = storeOf(c, evalsha);
        const key = `k${id()}`;
        const limit = { uses: 20, windowMs: 60_000 };
        const verdicts = await Promise.all(Array.from({ length: 40 }, () => store.consume(key, limit, { cost: 3 })));
        assert.equal(verdicts.filter((v) => v.allowed).length, 6, 'floor(20 / 3) calls costing 3');
        assert.equal((await store.peek(key, limit)).remaining, 2);
        assert.equal((await store.consume(key, limit, { cost: 2 })).remaining, 0);
        assert.equal((await store.consume(key, limit)).allowed, false);
      });

      it(`consumeMany with per-entry costs on keys of different slots, exact under concurrency (${via})`, async () => {
        const store = storeOf(c, evalsha);
        const [a, b] = apart();
        const la = { uses: 10, windowMs: 60_000 };
        const lb = { uses: 12, windowMs: 30_000 };
        // a has room for 5 batches, b (counted second) for 4: the fifth and later are refused at b,
        // giving back what they counted on a.
        const batch = [{ key: a, limit: la, cost: 2 }, { key: b, limit: lb, cost: 3 }];
        const verdicts = await Promise.all(Array.from({ length: 24 }, () => store.consumeMany(batch)));
        const allowed = verdicts.filter((v) => v.allowed);
        assert.equal(allowed.length, 4);
        for (const v of verdicts.filter((v) => !v.allowed)) {
          assert.ok(v.blocked === 0 || v.blocked === 1, String(v.blocked));
          assert.ok(v.retryAfterMs > 0 && v.retryAfterMs <= 60_000, String(v.retryAfterMs));
        }
        assert.equal((await store.peek(a, la)).remaining, 2, 'a holds exactly 4 batches of 2: refusals gave back');
        assert.equal((await store.peek(b, lb)).remaining, 0);
        const refused = await store.peekMany(batch);
        assert.deepEqual([refused.allowed, refused.blocked], [false, 1]);

        // release gives back exactly one batch's costs on both keys, once.
        await allowed[0].release();
        await allowed[0].release();
        assert.equal((await store.peek(a, la)).remaining, 4);
        assert.equal((await store.peek(b, lb)).remaining, 3);
        const again = await store.consumeMany(batch);
        assert.equal(again.allowed, true);
        assert.equal((await store.consumeMany(batch)).allowed, false);
        assert.equal((await store.peek(a, la)).remaining, 2, 'the refused batch gave back its 2 on a');
      });

      it(`a batch refused at its first key counts nothing on any slot (${via})`, async () => {
        const store = storeOf(c, evalsha);
        const [a, b] = apart();
        const limit = { uses: 5, windowMs: 60_000 };
        assert.equal((await store.consume(a, limit, { cost: 4 })).allowed, true);
        const v = await store.consumeMany([{ key: a, limit, cost: 2 }, { key: b, limit, cost: 5 }]);
        assert.deepEqual([v.allowed, v.blocked], [false, 0]);
        assert.equal((await store.peek(b, limit)).remaining, 5);
        assert.equal((await store.peek(a, limit)).remaining, 1);
      });

      it(`the fixed window's attempt with a cost is exact under concurrency (${via})`, async () => {
        const store = storeOf(c, evalsha);
        const key = `w${id()}`;
        const answers = await Promise.all(Array.from({ length: 30 }, () => store.attempt(key, 20, 60_000, { cost: 3 })));
        assert.equal(answers.filter((r) => r.allowed).length, 6);
        assert.equal(await store.attempts(key), 18);
        assert.deepEqual([(await store.attempt(key, 20, 60_000, { cost: 3 })).allowed, (await store.attempt(key, 20, 60_000, { cost: 2 })).count], [false, 20]);
        for (const r of answers) assert.ok(r.resetAfterMs > 0 && r.resetAfterMs <= 60_000, String(r.resetAfterMs));
      });
    }
  }
});
