// The conformance kit on RedisStore: node-redis 6 and ioredis 6, with and without evalsha, on the
// single server and on the three-master cluster, with and without hashTag. The stores run side by side
// (each kit's cases in order); the kit brackets every timing check, so load cannot fail a correct store.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { testStore } from '../dist/testing.js';
import { clusterUp, ioredis, ioredisCluster, nodeRedis, nodeRedisCluster, redisBackend, sharedRedisUp } from './redis-servers.mjs';

const { RedisStore, RateLimiter, Limit } = createRequire(import.meta.url)('../dist/index.js');

sharedRedisUp();
clusterUp();
const clients = [await nodeRedis(), await ioredis(), await nodeRedisCluster(), await ioredisCluster()];
after(() => Promise.all(clients.map((c) => c.close())));

const prefix = `rwtest:${process.pid}:`;
/** Each kit's cases in order (the stores side by side). */
const inOrder = (name, fn) => describe(name, { concurrency: 1 }, fn);

describe('RedisStore under the conformance kit', { concurrency: true }, () => {
  for (const c of clients) {
    const cluster = c.kind.includes('cluster');
    for (const evalsha of [true, false]) {
      for (const hashTag of cluster ? [undefined, ':'] : [undefined]) {
        const name = `RedisStore (${c.kind}, ${evalsha ? 'evalsha' : 'eval only'}${hashTag ? ', hashTag' : ''})`;
        const options = { prefix, backend: redisBackend, ...(evalsha ? { evalsha: c.evalsha } : {}), ...(hashTag ? { hashTag } : {}) };
        testStore(name, () => RedisStore.using(c.run, options), { describe: inOrder, it });
      }
    }
  }
});

describe('RedisStore with RateLimiter', { concurrency: true }, () => {
  for (const c of clients) {
    it(`attempt, hit and the rest run unchanged (${c.kind})`, async () => {
      const limiter = new RateLimiter(RedisStore.using(c.run, { evalsha: c.evalsha, prefix, backend: redisBackend }));
      const key = `limiter:${Math.random().toString(36).slice(2)}`;
      assert.equal(await limiter.attempt(key, 2, () => 'ran', 5), 'ran');
      assert.equal(await limiter.attempt(key, 2, () => undefined, 5), true);
      assert.equal(await limiter.attempt(key, 2, () => 'ran', 5), false);
      assert.equal(await limiter.attempts(key), 2);
      assert.equal(await limiter.tooManyAttempts(key, 2), true);
      assert.equal(await limiter.remaining(key, 5), 3);
      const left = await limiter.availableIn(key);
      assert.ok(left >= 1 && left <= 5, String(left));
      await limiter.clear(key);
      assert.equal(await limiter.attempts(key), 0);
      const per = Limit.perMinute(1).by(key);
      assert.equal(per.maxAttempts, 1);
    });
  }
});

for (const c of clients.slice(2)) it(`a cluster batch spanning slots without hashTag is counted key by key; with hashTag in one step (${c.kind})`, async () => {
  const sent = [];
  const spy = (script, keys, args) => {
    sent.push(keys);
    return c.run(script, keys, args);
  };
  const id = Math.random().toString(36).slice(2);
  const batch = [`a${id}:x`, `b${id}:y`, `c${id}:z`].map((key) => ({ key, limit: { uses: 1, windowMs: 3000 } }));
  const apart = RedisStore.using(spy, { prefix, backend: redisBackend });
  const v = await apart.consumeMany(batch);
  assert.equal(v.allowed, true);
  // One refused try (CROSSSLOT), then one script per key.
  assert.deepEqual(sent.map((keys) => keys.length), [3, 1, 1, 1]);
  sent.length = 0;
  const tagged = RedisStore.using(spy, { prefix, backend: redisBackend, hashTag: ':' });
  const same = [`t${id}:x`, `t${id}:y`, `t${id}`].map((key) => ({ key, limit: { uses: 1, windowMs: 3000 } }));
  assert.equal((await tagged.consumeMany(same)).allowed, true);
  assert.deepEqual(sent.map((keys) => keys.length), [3]);
});
