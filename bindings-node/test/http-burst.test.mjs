// The HTTP middleware as users run it: a real server on loopback per framework (Express 4, Express 5,
// Fastify's plugin and route hook, node:http), 100 concurrent requests from a real client (fetch)
// against a limit of 10 per client → exactly 10 × 200 and 90 × 429, with the IETF fields and
// Retry-After, counted by the memory store and by Redis (node-redis).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { FRAMEWORKS, assertSecondsLeft, burst, serve } from './http-servers.mjs';
import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';

const { MemoryStore, RedisStore, RateLimiter, Limit } = createRequire(import.meta.url)('../dist/index.js');

sharedRedisUp();
let redis;
before(async () => {
  redis = await nodeRedis();
});
after(() => redis?.close());

const prefix = `rwtest:http:${process.pid}:${Date.now()}:`;
const stores = {
  memory: () => new MemoryStore(),
  redis: () => RedisStore.using(redis.run, { evalsha: redis.evalsha, prefix, backend: redisBackend }),
};

/** Counts of each status. */
function tally(responses) {
  const counts = {};
  for (const r of responses) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return counts;
}

describe('100 concurrent requests against 10 per minute', { concurrency: true }, () => {
  for (const kind of FRAMEWORKS.filter((k) => !k.endsWith('-hook'))) {
    for (const storeName of Object.keys(stores)) {
      it(`${kind}, ${storeName} store: exactly 10 × 200 and 90 × 429, with the rate-limit fields`, async () => {
        const limiter = new RateLimiter(stores[storeName]());
        // Each case its own client address (from a trusted proxy's X-Forwarded-For): no case sees another's counts.
        const client = `198.51.100.${FRAMEWORKS.indexOf(kind) * 2 + (storeName === 'redis' ? 1 : 0) + 10}`;
        const seen = new Set();
        limiter.for('api', (req, { ip }) => {
          seen.add(ip);
          return Limit.perMinute(10).by(ip);
        });
        const server = await serve(kind, 'api', { limiter, trustProxy: 1 });
        try {
          const start = Date.now();
          const responses = await burst(server.url, 100, { headers: { 'X-Forwarded-For': `${client}` } });
          // Waits are whole seconds rounded up, so at least 60 less the seconds the burst took.
          const low = 60 - Math.ceil((Date.now() - start) / 1000);
          assert.deepEqual(tally(responses), { 200: 10, 429: 90 });
          assert.deepEqual([...seen], [client]);
          const remaining = [];
          for (const r of responses) {
            assert.equal(r.headers.get('ratelimit-policy'), '"api";q=10;w=60');
            assert.equal(r.headers.get('x-ratelimit-limit'), null, 'no legacy fields unless asked');
            const field = /^"api";r=(\d+);t=(\d+)$/.exec(r.headers.get('ratelimit'));
            assert.ok(field, `RateLimit: ${r.headers.get('ratelimit')}`);
            const t = Number(field[2]);
            assert.ok(t >= low && t <= 60, `t=${t}, at least ${low}`);
            if (r.status === 200) {
              assert.equal(r.body, 'ok');
              assert.equal(r.headers.get('retry-after'), null);
              remaining.push(Number(field[1]));
            } else {
              assert.equal(r.body, 'Too Many Requests');
              assert.equal(field[1], '0');
              const wait = Number(r.headers.get('retry-after'));
              assert.ok(wait >= low && wait <= 60, `Retry-After: ${wait}, at least ${low}`);
            }
          }
          // Each allowed request saw the count after itself: 9, 8, ..., 0, once each.
          assert.deepEqual(remaining.sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        } finally {
          await server.close();
        }
      });
    }
  }
});

describe('legacy fields on request', { concurrency: true }, () => {
  for (const kind of FRAMEWORKS) {
    it(`${kind}: X-RateLimit-Limit, -Remaining and -Reset (Unix seconds) beside the IETF fields`, async () => {
      const store = new MemoryStore();
      const server = await serve(kind, Limit.perSecond(2, 30), { store, name: 'legacy', headers: { legacy: true } });
      try {
        const before = Math.floor(Date.now() / 1000);
        const responses = [];
        for (let i = 0; i < 3; i++) responses.push((await burst(server.url, 1))[0]);
        const after = Math.ceil(Date.now() / 1000);
        assert.deepEqual(responses.map((r) => r.status), [200, 200, 429]);
        assert.deepEqual(responses.map((r) => r.headers.get('x-ratelimit-remaining')), ['1', '0', '0']);
        for (const r of responses) {
          assert.equal(r.headers.get('x-ratelimit-limit'), '2');
          assert.equal(r.headers.get('ratelimit-policy'), '"legacy";q=2;w=30');
          const reset = Number(r.headers.get('x-ratelimit-reset'));
          assert.ok(reset >= before + 29 && reset <= after + 30, `X-RateLimit-Reset ${reset} in [${before + 29}, ${after + 30}]`);
        }
      } finally {
        await server.close();
      }
    });
  }

  it('headers: false sends Retry-After alone', async () => {
    const server = await serve('express5', Limit.perMinute(1), { store: new MemoryStore(), headers: false });
    try {
      const start = Date.now();
      const [first, second] = [(await burst(server.url, 1))[0], (await burst(server.url, 1))[0]];
      assert.deepEqual([first.status, second.status], [200, 429]);
      assert.equal(first.headers.get('ratelimit'), null);
      assert.equal(second.headers.get('ratelimit-policy'), null);
      assertSecondsLeft(second.headers.get('retry-after'), start, 60, 'Retry-After');
    } finally {
      await server.close();
    }
  });
});
