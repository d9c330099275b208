// ratewindow stores under express-rate-limit's own middleware (`ratewindow/express-rate-limit`), on real
// Express 4 and 5 servers with a real client: the one-line switch. Each scenario runs on
// express-rate-limit's own MemoryStore too, and must answer the same; express-rate-limit's validations
// stay silent (its logger collects what they would print).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';

import express4 from 'express';
import express5 from 'express5';
import { rateLimit, MemoryStore as ErlMemoryStore } from 'express-rate-limit';

import { burst, get } from './http-servers.mjs';
import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';

const require = createRequire(import.meta.url);
const { MemoryStore, RedisStore, SqliteStore } = require('../dist/index.js');
const { RateWindowStore } = require('../dist/http/express-rate-limit.js');

sharedRedisUp();
let redis;
before(async () => {
  redis = await nodeRedis();
});
after(() => redis?.close());

const prefix = `rwtest:erl:${process.pid}:${Date.now()}:`;
let n = 0;
/** A fresh store of each kind (express-rate-limit refuses one store shared by two limiters). */
const stores = {
  'express-rate-limit MemoryStore (reference)': () => new ErlMemoryStore(),
  'RateWindowStore(MemoryStore)': () => new RateWindowStore(new MemoryStore()),
  'RateWindowStore(RedisStore)': () =>
    new RateWindowStore(RedisStore.using(redis.run, { evalsha: redis.evalsha, prefix, backend: redisBackend }), { prefix: `erl${n++}:` }),
};

/** An Express app behind express-rate-limit with `store`; `logs` gathers what its validations say. */
async function serveLimited(express, store, options = {}) {
  const logs = [];
  const limiter = rateLimit({
    windowMs: 60_000,
    limit: 10,
    standardHeaders: 'draft-7',
    legacyHeaders: false,
    store,
    logger: { warn: (...a) => logs.push(a), error: (...a) => logs.push(a) },
    ...options,
  });
  const app = express();
  app.get('/', limiter, (req, res) => {
    res.status(Number(req.query.status ?? 200)).send('ok');
  });
  const server = createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    limiter,
    logs,
    close: () => new Promise((done) => (server.closeAllConnections(), server.close(() => done()))),
  };
}

const tally = (responses) => responses.reduce((c, r) => ((c[r.status] = (c[r.status] ?? 0) + 1), c), {});

describe('express-rate-limit with a ratewindow store', { concurrency: true }, () => {
  for (const [expressName, express] of [['express 4', express4], ['express 5', express5]]) {
    for (const [storeName, make] of Object.entries(stores)) {
      it(`${expressName}, ${storeName}: 100 concurrent requests against 10 → 10 × 200, 90 × 429`, async () => {
        const server = await serveLimited(express, make());
        try {
          const start = Date.now();
          const responses = await burst(server.url, 100);
          const low = 60 - Math.ceil((Date.now() - start) / 1000) - 1; // express-rate-limit rounds its own way
          assert.deepEqual(tally(responses), { 200: 10, 429: 90 });
          // draft-7: `RateLimit: limit=10, remaining=N, reset=S`, computed by express-rate-limit from our totalHits and resetTime.
          const remaining = responses.filter((r) => r.status === 200).map((r) => Number(/remaining=(\d+)/.exec(r.headers.get('ratelimit'))[1]));
          assert.deepEqual(remaining.sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
          for (const r of responses) {
            const reset = Number(/reset=(\d+)/.exec(r.headers.get('ratelimit'))[1]);
            assert.ok(reset >= low && reset <= 60, `reset=${reset}, at least ${low}`);
          }
          assert.deepEqual(server.logs, []);
        } finally {
          await server.close();
        }
      });
    }
  }

  for (const [storeName, make] of Object.entries(stores)) {
    it(`${storeName}: skipFailedRequests gives failed requests back (decrement); resetKey and getKey`, async () => {
      const server = await serveLimited(express5, make(), { limit: 3, skipFailedRequests: true });
      try {
        const statuses = [];
        const once = async (status) => statuses.push((await get(`${server.url}?status=${status}`)).status);
        const key = '127.0.0.1';
        // express-rate-limit gives a failed request back once its response is finished, after the
        // client has it: wait (at most 5 s) for the count to settle.
        const settled = async (hits) => {
          for (let t = 0; t < 500 && ((await server.limiter.getKey(key))?.totalHits ?? 0) !== hits; t++) {
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
          return (await server.limiter.getKey(key))?.totalHits ?? 0;
        };
        for (let i = 0; i < 4; i++) {
          await once(500);
          assert.equal(await settled(0), 0);
        }
        for (let i = 0; i < 4; i++) await once(200);
        assert.deepEqual(statuses, [500, 500, 500, 500, 200, 200, 200, 429]);
        assert.equal(await settled(3), 3); // the 429 is a failed request too: given back
        const info = await server.limiter.getKey(key);
        assert.ok(info.resetTime instanceof Date && info.resetTime.getTime() > Date.now());
        await server.limiter.resetKey(key);
        assert.equal(await server.limiter.getKey(key), undefined);
        assert.equal((await get(server.url)).status, 200);
        assert.deepEqual(server.logs, []);
      } finally {
        await server.close();
      }
    });
  }
});

describe('RateWindowStore', () => {
  it('is local to the process on a MemoryStore only; keeps its prefix', () => {
    assert.equal(new RateWindowStore(new MemoryStore()).localKeys, true);
    const remote = new RateWindowStore(RedisStore.using(redis.run, { backend: redisBackend }), { prefix: 'api:' });
    assert.equal(remote.localKeys, false);
    assert.equal(remote.prefix, 'api:');
  });

  it('works on SqliteStore too (any store with the fixed-window operations)', async () => {
    const Database = require('better-sqlite3');
    const sqlite = new SqliteStore(new Database(':memory:'));
    sqlite.installSchema();
    const store = new RateWindowStore(sqlite);
    store.init({ windowMs: 1_000 });
    assert.equal((await store.increment('k')).totalHits, 1);
    assert.equal((await store.increment('k')).totalHits, 2);
    await store.decrement('k');
    assert.equal((await store.get('k')).totalHits, 1);
  });

  it('decrement of a key with no running window opens none', async () => {
    const store = new RateWindowStore(new MemoryStore());
    store.init({ windowMs: 60_000 });
    await store.decrement('fresh');
    assert.equal(await store.get('fresh'), undefined);
    assert.equal((await store.increment('fresh')).totalHits, 1);
  });

  it('refuses what is not a store', () => {
    assert.throws(() => new RateWindowStore({}), TypeError);
    assert.throws(() => new RateWindowStore(new MemoryStore(), { prefix: 1 }), TypeError);
  });
});
