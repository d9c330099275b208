// The HTTP middleware's behaviour on real servers (test/http-servers.mjs) and a real client (fetch):
// client addresses behind trusted proxies (malformed X-Forwarded-For / Forwarded never believed), huge
// keys, a limit's response() and after(), Unlimited, several limits in one batch, a store failure
// reaching the framework's error handling, and misconfigurations refused when the middleware is built.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { FASTIFY, FRAMEWORKS, assertRateLimit, assertSecondsLeft, burst, get, serve } from './http-servers.mjs';
import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';

const require = createRequire(import.meta.url);
const { MemoryStore, RedisStore, RateLimiter, Limit, GlobalLimit } = require('../dist/index.js');
const { throttle, HttpInputError } = require('../dist/http/express.js');
const fastify = require('../dist/http/fastify.js');

/** Runs `fn(server, seen)` on `kind` guarded by limiter `name`, whose limits `make(req, ip)` returns. */
async function withServer(kind, make, options, fn) {
  const limiter = new RateLimiter(new MemoryStore());
  const seen = [];
  limiter.for('api', (req, { ip }) => {
    seen.push(ip);
    return make(req, ip);
  });
  const server = await serve(kind, 'api', { limiter, ...options });
  try {
    await fn(server, seen);
  } finally {
    await server.close();
  }
}

const statuses = (responses) => responses.map((r) => r.status);

describe('client address', { concurrency: true }, () => {
  for (const kind of FRAMEWORKS) {
    it(`${kind}: X-Forwarded-For only from trusted hops; a malformed one is not believed`, async () => {
      await withServer(kind, (req, ip) => Limit.perMinute(100).by(ip), { trustProxy: 1 }, async (server, seen) => {
        const xff = (value) => get(server.url, { headers: { 'X-Forwarded-For': value } });
        await xff('203.0.113.7');
        await xff('10.9.9.9, 203.0.113.8'); // one hop: the rightmost entry, what our proxy saw
        await xff('not-an-ip');
        await xff('203.0.113.9, '); // an empty entry where the proxy's should be
        await xff('[2001:DB8::1]:8080');
        await xff('::ffff:192.0.2.1');
        await get(server.url); // no header: the peer
        assert.deepEqual(seen, ['203.0.113.7', '203.0.113.8', '127.0.0.1', '127.0.0.1', '2001:db8::1', '192.0.2.1', '127.0.0.1']);
      });
    });
  }

  it('without trustProxy, forwarded headers are ignored', async () => {
    await withServer('express4', (req, ip) => Limit.perMinute(100).by(ip), {}, async (server, seen) => {
      await get(server.url, { headers: { 'X-Forwarded-For': '203.0.113.7', Forwarded: 'for=203.0.113.8' } });
      assert.deepEqual(seen, ['127.0.0.1']);
    });
  });

  for (const kind of FASTIFY) it(`${kind}: Forwarded (RFC 7239) with proxyHeader, trusted proxies by CIDR, IPv6 grouped by /64`, async () => {
    const options = { trustProxy: ['127.0.0.0/8'], proxyHeader: 'forwarded', ipv6Prefix: 64 };
    await withServer(kind, (req, ip) => Limit.perMinute(100).by(ip), options, async (server, seen) => {
      const fwd = (value) => get(server.url, { headers: { Forwarded: value } });
      await fwd('for=203.0.113.7;proto=https');
      await fwd('for="[2001:db8:1:2::5]:4711"');
      await fwd('for=unknown');
      await fwd('for="203.0.113.9'); // unterminated quote: malformed
      await fwd('for=198.51.100.1, for=127.0.0.2'); // our proxy forwarded another trusted one's request
      assert.deepEqual(seen, ['203.0.113.7', '2001:db8:1:2::/64', '127.0.0.1', '127.0.0.1', '198.51.100.1']);
    });
  });

  it('a spoofed client cannot escape its limit by rotating the left of X-Forwarded-For', async () => {
    await withServer('express5', (req, ip) => Limit.perMinute(3).by(ip), { trustProxy: 1 }, async (server) => {
      const responses = [];
      for (let i = 0; i < 5; i++) responses.push(await get(server.url, { headers: { 'X-Forwarded-For': `10.0.0.${i}, 203.0.113.50` } }));
      assert.deepEqual(statuses(responses), [200, 200, 200, 429, 429]);
    });
  });
});

describe('huge keys', { concurrency: true }, () => {
  for (const kind of FRAMEWORKS) {
    it(`${kind}: a key past the core's 1024 bytes reaches the error handler as a 400 HttpInputError`, async () => {
      const make = (req) => Limit.perMinute(5).by(String(req.headers['x-user']));
      await withServer(kind, make, {}, async (server) => {
        const ok = await get(server.url, { headers: { 'X-User': 'u'.repeat(900) } });
        assert.equal(ok.status, 200);
        const huge = await get(server.url, { headers: { 'X-User': 'u'.repeat(4000) } });
        assert.equal(huge.status, 400);
        const body = JSON.parse(huge.body);
        assert.equal(body.error, 'HttpInputError');
        assert.equal(body.code, 'ERR_RATEWINDOW_INVALID_ARGUMENT');
        assert.equal(body.reason, 'key_too_long');
        assert.equal(huge.headers.get('ratelimit'), null);
      });
    });
  }
});

describe('keys that are not valid Unicode', () => {
  it('a lone surrogate in a limit key reaches the error handler as InvalidArgumentError (never merged with U+FFFD)', async () => {
    const make = (req) => [Limit.perMinute(5).by(req.headers['x-two'] ? 'x' : 'a\uD800'), ...(req.headers['x-two'] ? [Limit.perHour(9).by('b\uDFFF')] : [])];
    await withServer('express5', make, {}, async (server) => {
      for (const headers of [{}, { 'X-Two': '1' }]) {
        const r = await get(server.url, { headers });
        assert.equal(r.status, 500);
        const body = JSON.parse(r.body);
        assert.deepEqual([body.error, body.code], ['InvalidArgumentError', 'ERR_RATEWINDOW_INVALID_ARGUMENT']);
      }
    });
  });
});

describe("a limit's response() and after()", { concurrency: true }, () => {
  for (const kind of FRAMEWORKS) {
    it(`${kind}: response() answers a refusal; its return value is sent with 429 and the fields`, async () => {
      const make = (req, ip) =>
        Limit.perMinute(1)
          .by(ip)
          .response((req2, res, refusal) => {
            assert.equal(req2, req);
            return { error: 'slow down', retryAfter: Number(refusal.headers[0][1]), limit: refusal.limit.maxAttempts };
          });
      await withServer(kind, make, {}, async (server) => {
        const start = Date.now();
        await get(server.url);
        const refused = await get(server.url);
        assert.equal(refused.status, 429);
        const body = JSON.parse(refused.body);
        assert.deepEqual({ ...body, retryAfter: 0 }, { error: 'slow down', retryAfter: 0, limit: 1 });
        assert.equal(String(body.retryAfter), refused.headers.get('retry-after'));
        assert.match(refused.headers.get('content-type'), /application\/json/);
        assertSecondsLeft(refused.headers.get('retry-after'), start, 60, 'Retry-After');
        assertRateLimit(refused.headers.get('ratelimit'), 'api', 0, start);
      });
    });

    it(`${kind}: after() counts only the responses it says to (failed logins)`, async () => {
      const make = (req, ip) => Limit.perMinute(2).by(ip).after((res) => res.statusCode >= 400);
      await withServer(kind, make, {}, async (server) => {
        const run = async (status) => (await get(`${server.url}?status=${status}`)).status;
        const got = [];
        for (let i = 0; i < 4; i++) got.push(await run(200)); // successes cost nothing
        got.push(await run(401), await run(401), await run(401), await run(200));
        assert.deepEqual(got, [200, 200, 200, 200, 401, 401, 429, 429]);
      });
    });
  }

  it('express: response() may send the answer itself', async () => {
    const make = (req, ip) => Limit.perMinute(1).by(ip).response((req2, res) => res.status(503).set('X-Why', 'busy').send('later'));
    await withServer('express4', make, {}, async (server) => {
      const start = Date.now();
      await get(server.url);
      const refused = await get(server.url);
      assert.deepEqual([refused.status, refused.body, refused.headers.get('x-why')], [503, 'later', 'busy']);
      assertSecondsLeft(refused.headers.get('retry-after'), start, 60, 'Retry-After');
    });
  });

  for (const kind of FASTIFY) it(`${kind}: response() may send the answer itself`, async () => {
    const make = (req, ip) => Limit.perMinute(1).by(ip).response((request, reply) => reply.code(503).send({ later: true }));
    await withServer(kind, make, {}, async (server) => {
      const start = Date.now();
      await get(server.url);
      const refused = await get(server.url);
      assert.deepEqual([refused.status, JSON.parse(refused.body)], [503, { later: true }]);
      assertSecondsLeft(refused.headers.get('retry-after'), start, 60, 'Retry-After');
    });
  });

  it('after() on Redis: the give-back (release) reaches the server', async () => {
    sharedRedisUp();
    const redis = await nodeRedis();
    const store = RedisStore.using(redis.run, { evalsha: redis.evalsha, backend: redisBackend, prefix: `rwtest:http-after:${process.pid}:${Date.now()}:` });
    const limit = () => Limit.perMinute(2).by('client').after((res) => res.statusCode >= 400);
    const server = await serve('express5', (req) => limit(), { store, name: 'login' });
    // The give-back runs after the response is sent: wait until the store has it back (up to 30 s: a
    // loaded machine may take seconds; a give-back that never comes still fails).
    const remaining = async (want) => {
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; ) {
        if ((await store.peek('throttle:login:client', limit())).remaining === want) return want;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return (await store.peek('throttle:login:client', limit())).remaining;
    };
    try {
      const got = [];
      for (let i = 0; i < 3; i++) {
        got.push((await get(server.url)).status);
        assert.equal(await remaining(2), 2); // a success costs nothing
      }
      got.push((await get(`${server.url}?status=401`)).status, (await get(`${server.url}?status=401`)).status, (await get(server.url)).status);
      assert.deepEqual(got, [200, 200, 200, 401, 401, 429]);
    } finally {
      await server.close();
      await redis.close();
    }
  });

  it('after() with several limits: the one that does not count is given back, the others stay counted', async () => {
    const make = (req, ip) => [
      Limit.perMinute(3).by(ip), // every request
      Limit.perMinute(100).by(`failed:${ip}`).after((res) => res.statusCode >= 400),
    ];
    await withServer('express5', make, {}, async (server) => {
      const got = [];
      for (let i = 0; i < 4; i++) got.push((await get(server.url)).status);
      assert.deepEqual(got, [200, 200, 200, 429]);
    });
  });
});

describe('Unlimited and several limits', { concurrency: true }, () => {
  for (const kind of FRAMEWORKS) {
    it(`${kind}: Limit.none() is never counted and sends no field`, async () => {
      await withServer(kind, () => Limit.none(), {}, async (server) => {
        const responses = await burst(server.url, 30);
        assert.deepEqual(new Set(statuses(responses)), new Set([200]));
        for (const r of responses) {
          assert.equal(r.headers.get('ratelimit'), null);
          assert.equal(r.headers.get('ratelimit-policy'), null);
        }
      });
    });
  }

  for (const kind of FASTIFY) it(`${kind}: a premium user is unlimited, the others limited, in the same limiter`, async () => {
    const make = (req, ip) => (req.headers['x-plan'] === 'premium' ? Limit.none() : Limit.perMinute(2).by(ip));
    await withServer(kind, make, {}, async (server) => {
      const premium = await burst(server.url, 5, { headers: { 'X-Plan': 'premium' } });
      const free = [];
      for (let i = 0; i < 3; i++) free.push(await get(server.url));
      assert.deepEqual([...statuses(premium), ...statuses(free)], [200, 200, 200, 200, 200, 200, 200, 429]);
    });
  });

  it('several limits are one all-or-nothing batch; the blocked one answers and names its policy', async () => {
    const make = (req, ip) => [
      Limit.perMinute(5).by(ip).response(() => 'per-client'),
      new GlobalLimit(3, 60).response(() => 'global'),
      Limit.none(),
    ];
    await withServer('express4', make, {}, async (server) => {
      const start = Date.now();
      const got = [];
      for (let i = 0; i < 4; i++) got.push(await get(server.url));
      assert.deepEqual(statuses(got), [200, 200, 200, 429]);
      assert.equal(got[3].body, 'global');
      assert.equal(got[0].headers.get('ratelimit-policy'), '"api.0";q=5;w=60, "api.1";q=3;w=60');
      assert.equal(got[0].headers.get('ratelimit'), '"api.1";r=2;t=60'); // the window's first request: all of it left
      assertRateLimit(got[2].headers.get('ratelimit'), 'api.1', 0, start);
      assertRateLimit(got[3].headers.get('ratelimit'), 'api.1', 0, start);
    });
  });

  it('a Limit (not a name) and a callback guard a route too, under options.name', async () => {
    const store = new MemoryStore();
    const a = await serve('node:http', Limit.perMinute(1), { store, name: 'upload' });
    const b = await serve('express5', (req, { ip }) => Limit.perMinute(2).by(ip), { store, name: 'search' });
    try {
      assert.deepEqual(statuses([await get(a.url), await get(a.url)]), [200, 429]);
      assert.equal((await get(a.url)).headers.get('ratelimit-policy'), '"upload";q=1;w=60');
      assert.deepEqual(statuses([await get(b.url), await get(b.url), await get(b.url)]), [200, 200, 429]);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('store failure', { concurrency: true }, () => {
  let redis;
  before(async () => {
    sharedRedisUp();
    redis = await nodeRedis();
    await redis.close(); // a real client, closed: every command it sends fails
  });

  for (const kind of FRAMEWORKS) {
    it(`${kind}: a store error reaches the framework's error handling (500, the StoreError)`, async () => {
      const store = RedisStore.using(redis.run, { backend: redisBackend, prefix: `rwtest:http-fail:${process.pid}:` });
      const server = await serve(kind, Limit.perMinute(10), { store });
      try {
        const r = await get(server.url);
        assert.equal(r.status, 500);
        const body = JSON.parse(r.body);
        assert.equal(body.error, 'StoreError');
        assert.equal(body.code, 'ERR_RATEWINDOW_STORE');
      } finally {
        await server.close();
      }
    });
  }
});

describe('misconfiguration is refused when the middleware is built', () => {
  const limiter = new RateLimiter(new MemoryStore());
  it('a name without a limiter, a bad source, a store without consumeMany', () => {
    assert.throws(() => throttle('api'), TypeError);
    assert.throws(() => throttle(42, { limiter }), TypeError);
    assert.throws(() => throttle(Limit.perMinute(1), { store: {} }), TypeError);
    assert.throws(() => fastify.throttle(Limit.perMinute(1)), TypeError);
  });

  it("a limiter name the core refuses (a ':', too long, not printable ASCII)", () => {
    for (const name of ['a:b', 'x'.repeat(65), 'café', '']) {
      assert.throws(() => throttle(name, { limiter }), (e) => e instanceof HttpInputError && e.reason === 'invalid_name' && e.statusCode === 500, name);
    }
  });

  it('trusted proxies and IPv6 prefixes the core cannot read', () => {
    assert.throws(() => throttle(Limit.perMinute(1), { limiter, trustProxy: ['10.0.0.0/33'] }), (e) => e instanceof HttpInputError && e.reason === 'invalid_proxy');
    assert.throws(() => throttle(Limit.perMinute(1), { limiter, trustProxy: ['nope'] }), (e) => e instanceof HttpInputError && e.reason === 'invalid_proxy');
    assert.throws(() => throttle(Limit.perMinute(1), { limiter, ipv6Prefix: 0 }), (e) => e instanceof HttpInputError && e.reason === 'invalid_prefix');
    assert.throws(() => throttle(Limit.perMinute(1), { limiter, trustProxy: -1 }), TypeError);
    assert.throws(() => throttle(Limit.perMinute(1), { limiter, trustProxy: 1.5 }), TypeError);
    assert.throws(() => throttle(Limit.perMinute(1), { limiter, proxyHeader: 'x-real-ip' }), TypeError);
  });

  it('an unregistered limiter name fails the request (next(error)), not the server', async () => {
    const server = await serve('express5', 'nobody', { limiter });
    try {
      const r = await get(server.url);
      assert.equal(r.status, 500);
      assert.match(JSON.parse(r.body).message, /no limiter named 'nobody'/);
    } finally {
      await server.close();
    }
  });
});
