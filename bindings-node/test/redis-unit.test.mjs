// RedisStore's contract at the client boundary: typed errors for wrong replies (never a guessed
// verdict), for failing clients (cause kept, nothing resent) and for bad arguments (nothing sent); the
// decoders' accepted reply shapes; release is data-invisible and idempotent. The server's replies are
// real ones (from the shared server on 6379) where a real one is needed.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';

const { RedisStore, StoreError, StoreReplyError, InvalidLimitError, RateWindowError } = createRequire(import.meta.url)('../dist/index.js');

sharedRedisUp();
const c = await nodeRedis();
after(() => c.close());

const prefix = `rwtest:unit:${process.pid}:`;
const limit = { uses: 1, windowMs: 5000 };
const key = () => `k:${Math.random().toString(36).slice(2)}`;
const replying = (reply) => RedisStore.using(async () => reply, { backend: redisBackend });

describe('replies of the wrong shape', () => {
  for (const [what, reply] of [
    ['an error-looking array', ['x', 1]],
    ['nil', null],
    ['a status', 'OK'],
    ['too few numbers', [1, 0, -1]],
    ['a float', [1, 0.5, -1, -1, 1]],
    ['a refusal naming an entry the call does not have', [0, 10, 1_000_010, 3, 1_000_000]],
    ['a refusal in the past', [0, 10, 5, 0, 1_000_000]],
    ['nested arrays', [[1], [0]]],
    ['an object', { allowed: true }],
  ]) {
    it(`${what}: StoreReplyError naming expected and got`, async () => {
      await assert.rejects(replying(reply).consume(key(), limit), (e) => {
        assert.ok(e instanceof StoreReplyError && e instanceof StoreError && e instanceof RateWindowError, String(e));
        assert.equal(e.code, 'ERR_RATEWINDOW_STORE_REPLY');
        assert.equal(e.source, 'sliding');
        assert.match(e.expected, /allowed 0\|1/);
        assert.equal(typeof e.got, 'string');
        assert.ok(e.message.includes(e.got));
        return true;
      });
    });
  }

  it('a fixed-window reply of the wrong shape: StoreReplyError from the fixed script', async () => {
    await assert.rejects(replying([1, -5]).attempts(key()), (e) => e instanceof StoreReplyError && e.source === 'fixed');
  });

  it('integers as text, BigInt and Buffers (clients that decode replies their own way) still decode', async () => {
    const quota = { limit: 1, remaining: 0, refillAfterMs: 5000, resetAfterMs: 5000 };
    assert.deepEqual(await replying(['1', '0', '-1', '-1', '1700000000000', '0', '0', '5000', '5000']).consume(key(), limit), {
      allowed: true,
      retryAfterMs: 0,
      ...quota,
    });
    assert.deepEqual(await replying([0n, 700n, 1_700_000_010_000n, 0n, 1_700_000_009_300n, 0n, 0n, 700n, 700n]).consume(key(), limit), {
      allowed: false,
      retryAfterMs: 700,
      retryTimestamp: 1_700_000_010_000,
      ...quota,
      refillAfterMs: 700,
      resetAfterMs: 700,
    });
    assert.equal(await replying([Buffer.from('3'), Buffer.from('250')]).hit(key(), 1000), 3);
  });
});

describe('failing clients', () => {
  it('a client that throws (synchronously or not): StoreError with the error as cause', async () => {
    const boom = new Error('boom');
    for (const run of [() => { throw boom; }, async () => { throw boom; }]) {
      await assert.rejects(RedisStore.using(run, { backend: redisBackend }).consumeMany([{ key: key(), limit }]), (e) => {
        assert.ok(e instanceof StoreError);
        assert.equal(e.code, 'ERR_RATEWINDOW_STORE');
        assert.equal(e.cause, boom);
        return true;
      });
    }
  });

  it('evalsha failing with anything but NOSCRIPT: never resent in full', async () => {
    let runs = 0;
    const timeout = new Error('Command timed out');
    const store = RedisStore.using(() => { runs++; return c.run; }, { backend: redisBackend, evalsha: async () => { throw timeout; } });
    await assert.rejects(store.consume(key(), limit), (e) => e instanceof StoreError && e.cause === timeout);
    assert.equal(runs, 0);
  });

  it('NOSCRIPT (a real server, script not loaded under a made-up client SHA1): sent in full once', async () => {
    let runs = 0;
    const store = RedisStore.using(
      (script, keys, args) => { runs++; return c.run(script, keys, args); },
      { backend: redisBackend, prefix, evalsha: (_sha, keys, args) => c.evalsha('0'.repeat(40), keys, args) },
    );
    assert.equal((await store.consume(key(), limit)).allowed, true);
    assert.equal(runs, 1);
  });
});

describe('arguments', () => {
  const never = () => assert.fail('nothing may be sent');
  const store = RedisStore.using(never, { backend: redisBackend });

  it('invalid limits: InvalidLimitError naming the field and value as given, nothing sent', async () => {
    await assert.rejects(store.consume('k', { uses: 0, windowMs: 10 }), (e) => e instanceof InvalidLimitError && e.field === 'uses' && e.value === 0);
    await assert.rejects(
      store.consumeMany([{ key: 'a', limit }, { key: 'b', limit: { uses: 1, windowMs: NaN } }]),
      (e) => e instanceof InvalidLimitError && e.field === 'windowMs' && Number.isNaN(e.value),
    );
    await assert.rejects(store.hit('k', -1), (e) => e instanceof InvalidLimitError && e.field === 'windowMs');
  });

  it('wrong types: TypeError, nothing sent', async () => {
    await assert.rejects(store.consume(1, limit), TypeError);
    await assert.rejects(store.consumeMany('nope'), TypeError);
    await assert.rejects(store.consumeMany([{ key: 'a' }]), TypeError);
    await assert.rejects(store.hit('k', 1000, 1.5), (e) => e.code === 'ERR_RATEWINDOW_INVALID_ARGUMENT');
    assert.throws(() => RedisStore.using('nope'), TypeError);
    assert.throws(() => RedisStore.using(never, { evalsha: 1 }), TypeError);
    assert.throws(() => RedisStore.using(never, { hashTag: '' }), TypeError);
    assert.throws(() => RedisStore.using(never, { backend: { kind: 'bare' } }), /no Redis planner/);
  });

  it('an empty batch is allowed without a round trip', async () => {
    const none = { allowed: true, retryAfterMs: 0, limit: 0, remaining: 0, refillAfterMs: 0, resetAfterMs: 0 };
    assert.deepEqual(await store.consumeMany([]), none);
    assert.deepEqual(await store.peekMany([]), none);
  });
});

describe('release', () => {
  it('not enumerable, idempotent; a failed release throws StoreError and may be retried', async () => {
    let fail = false;
    const store = RedisStore.using(
      (script, keys, args) => {
        if (fail && args[0] === 'r') throw new Error('connection lost');
        return c.run(script, keys, args);
      },
      { backend: redisBackend, prefix },
    );
    const k = key();
    const v = await store.consumeMany([{ key: k, limit }]);
    assert.deepEqual(Object.keys(v), ['allowed', 'retryAfterMs', 'limit', 'remaining', 'refillAfterMs', 'resetAfterMs']);
    assert.equal(JSON.stringify(v), '{"allowed":true,"retryAfterMs":0,"limit":1,"remaining":0,"refillAfterMs":5000,"resetAfterMs":5000}');
    fail = true;
    await assert.rejects(v.release(), (e) => e instanceof StoreError && e.cause.message === 'connection lost');
    assert.equal((await store.consume(k, limit)).allowed, false);
    fail = false;
    await v.release();
    await v.release();
    assert.equal((await store.consume(k, limit)).allowed, true);
    await v.release(); // released already: gives back nothing more
    assert.equal((await store.consume(k, limit)).allowed, false);
  });
});

it('import and require give the same RedisStore and store errors', async () => {
  const esm = await import('ratewindow');
  const cjs = createRequire(import.meta.url)('ratewindow');
  for (const name of ['RedisStore', 'StoreError', 'StoreReplyError', 'GiveBackError']) {
    assert.equal(typeof esm[name], 'function', name);
    assert.equal(esm[name], cjs[name], name);
  }
});
