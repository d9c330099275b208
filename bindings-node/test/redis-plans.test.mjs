// RedisStore's calls planned once per key and limit (ts/redis-plan.ts): a single consume, an attempt,
// a GCRA / counter consume send the engine's planned keys and arguments again, each consume with a call
// id of its own; the reply crosses once and the engine decides it, so every behaviour of the ordinary
// call holds: a script missing on the server is sent in full (NOSCRIPT), a key used with another
// limit is planned again, replies of another shape and failing clients are the typed errors. On the
// shared Redis (6379), node-redis and ioredis.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { ioredis, nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';

const { RedisStore, StoreError, StoreReplyError, InvalidLimitError, InvalidArgumentError, gcraLimit, counterLimit } = createRequire(import.meta.url)('../dist/index.js');

sharedRedisUp();
const clients = [await nodeRedis(), await ioredis()];
after(() => Promise.all(clients.map((c) => c.close())));

const prefix = `rwtest:plans:${process.pid}:`;
const key = () => `k:${Math.random().toString(36).slice(2)}`;

for (const c of clients) {
  describe(`planned calls, ${c.kind}`, () => {
    /**
     * A store whose sends are recorded (script or SHA1, keys, args); while `gone.now`, its EVALSHA names
     * a SHA1 the server does not have (the server answers NOSCRIPT, as after a flush: the shared server's
     * scripts are not flushed under other tests).
     */
    const recorded = () => {
      const sent = [];
      const gone = { now: false };
      const store = RedisStore.using(
        (script, keys, args) => (sent.push({ full: true, keys: [...keys], args: [...args] }), c.run(script, keys, args)),
        {
          backend: redisBackend,
          prefix,
          evalsha: (sha1, keys, args) => (sent.push({ full: false, keys: [...keys], args: [...args] }), c.evalsha(gone.now ? '0'.repeat(40) : sha1, keys, args)),
        },
      );
      return { store, sent, gone };
    };

    it('a consume sends the same key and a call id of its own each time, and counts exactly', async () => {
      const { store, sent } = recorded();
      const k = key();
      const limit = { uses: 3, windowMs: 60_000 };
      const verdicts = await Promise.all(Array.from({ length: 8 }, () => store.consume(k, limit)));
      assert.equal(verdicts.filter((v) => v.allowed).length, 3);
      assert.equal(verdicts.filter((v) => !v.allowed).length, 5);
      for (const v of verdicts.filter((v) => !v.allowed)) assert.ok(v.retryAfterMs > 0 && v.retryAfterMs <= 60_000);
      assert.equal(sent.length, 8);
      assert.equal(new Set(sent.map((s) => s.keys.join())).size, 1);
      const at = sent[0].args.findIndex((a, i) => a !== sent[1].args[i]);
      assert.ok(at >= 0);
      assert.equal(new Set(sent.map((s) => s.args[at])).size, sent.length, 'every call its own id');
      for (const s of sent) assert.deepEqual(s.args.filter((_, i) => i !== at), sent[0].args.filter((_, i) => i !== at));
      // A release-carrying consume (the ordinary call, the engine's own ids) counts beside them.
      assert.equal((await store.consumeMany([{ key: k, limit: { uses: 100, windowMs: 60_000 } }])).allowed, true);
      assert.equal((await store.peek(k, { uses: 100, windowMs: 60_000 })).remaining, 96);
    });

    it('a key used with another limit is planned again (the verdict is the new limit\'s)', async () => {
      const { store } = recorded();
      const k = key();
      assert.equal((await store.consume(k, { uses: 1, windowMs: 60_000 })).allowed, true);
      assert.equal((await store.consume(k, { uses: 1, windowMs: 60_000 })).allowed, false);
      const v = await store.consume(k, { uses: 5, windowMs: 60_000 });
      assert.equal(v.allowed, true);
      assert.equal(v.limit, 5);
      assert.equal(v.remaining, 3);
    });

    it('a script missing between two calls (NOSCRIPT) is sent in full once, for consume, attempt, GCRA and counter', async () => {
      const { store, sent, gone } = recorded();
      const k = key();
      const calls = [
        () => store.consume(k, { uses: 10, windowMs: 60_000 }),
        () => store.attempt(k, 10, 60_000),
        () => store.consume(k, gcraLimit(10, 60_000)),
        () => store.consume(`${k}:c`, counterLimit(10, 60_000)),
      ];
      for (const call of calls) await call();
      gone.now = true;
      sent.length = 0;
      for (const call of calls) {
        const r = await call();
        assert.equal(r.allowed, true);
      }
      // Each: EVALSHA (NOSCRIPT), then EVAL with the same keys and arguments (the consume's same id).
      assert.equal(sent.length, 8);
      for (let i = 0; i < 8; i += 2) {
        assert.deepEqual([sent[i].full, sent[i + 1].full], [false, true]);
        assert.deepEqual(sent[i + 1].keys, sent[i].keys);
        assert.deepEqual(sent[i + 1].args, sent[i].args);
      }
      assert.equal((await store.attempt(k, 10, 60_000)).count, 3);
    });

    it('a new key of a planned limit is planned from another key\'s: its own Redis key, the same arguments, and its own key again after NOSCRIPT', async () => {
      const { store, sent, gone } = recorded();
      const [k1, k2, k3, a1, a2] = [key(), key(), key(), key(), key()];
      const limit = { uses: 5, windowMs: 60_000 };
      await store.consume(k1, limit);
      await store.consume(k2, limit);
      assert.equal(sent.length, 2);
      assert.equal(sent[0].keys.length, 1);
      assert.ok(sent[0].keys[0].endsWith(k1));
      const logs = sent[0].keys[0].slice(0, -k1.length);
      assert.deepEqual(sent[1].keys, [logs + k2]);
      assert.equal(sent[1].args.length, sent[0].args.length);
      // After NOSCRIPT the call runs on with the new key's own keys (and the same id).
      gone.now = true;
      sent.length = 0;
      assert.equal((await store.consume(k3, limit)).remaining, 4);
      assert.deepEqual(sent.map((s) => s.full), [false, true]);
      assert.deepEqual(sent[1].keys, [logs + k3]);
      assert.deepEqual(sent[1].keys, sent[0].keys);
      assert.deepEqual(sent[1].args, sent[0].args);
      gone.now = false;
      for (const [k, remaining] of [[k1, 3], [k2, 3], [k3, 3]]) assert.equal((await store.consume(k, limit)).remaining, remaining);
      // An attempt the same: the fixed window of its own key.
      await store.attempt(a1, 10, 60_000);
      gone.now = true;
      assert.equal((await store.attempt(a2, 10, 60_000)).count, 1);
      gone.now = false;
      assert.equal((await store.attempt(a1, 10, 60_000)).count, 2);
      assert.equal((await store.attempt(a2, 10, 60_000)).count, 2);
      // A key the engine refuses (a lone surrogate) is refused as before, nothing sent.
      sent.length = 0;
      await assert.rejects(store.consume(`${k1}\uD800`, limit), InvalidArgumentError);
      await assert.rejects(store.attempt(`${a1}\uD800`, 10, 60_000), InvalidArgumentError);
      assert.equal(sent.length, 0);
    });

    it('a reply of another shape is StoreReplyError, a failing client StoreError with its cause', async () => {
      const boom = new Error('boom');
      const limit = { uses: 2, windowMs: 1000 };
      for (const [reply, source] of [[['x'], 'sliding'], ['nonsense', 'sliding'], [[7, 7], 'sliding']]) {
        const store = RedisStore.using(async () => reply, { backend: redisBackend, evalsha: async () => reply });
        await assert.rejects(store.consume(key(), limit), (e) => e instanceof StoreReplyError && e.source === source);
        await assert.rejects(store.attempt(key(), 2, 1000), (e) => e instanceof StoreReplyError && e.source === 'fixed');
        await assert.rejects(store.consume(key(), gcraLimit(2, 1000)), (e) => e instanceof StoreReplyError);
      }
      for (const run of [() => { throw boom; }, async () => { throw boom; }]) {
        const store = RedisStore.using(run, { backend: redisBackend, evalsha: run });
        for (const call of [() => store.consume(key(), limit), () => store.attempt(key(), 2, 1000), () => store.consume(key(), counterLimit(2, 1000))]) {
          await assert.rejects(call(), (e) => e instanceof StoreError && e.cause === boom);
        }
      }
    });

    it('a bad argument is the same typed error as before, nothing sent', async () => {
      const { store, sent } = recorded();
      await assert.rejects(store.consume(key(), { uses: 0, windowMs: 1000 }), InvalidLimitError);
      await assert.rejects(store.consume(key(), { uses: 1, windowMs: 'x' }), TypeError);
      await assert.rejects(store.attempt(key(), 1.5, 1000), InvalidArgumentError);
      await assert.rejects(store.consume(key(), { algorithm: 'gcra', uses: 1, windowMs: 1000, burst: -1 }), InvalidLimitError);
      await assert.rejects(store.attempt(key(), 1, -5), InvalidLimitError);
      assert.equal(sent.length, 0);
    });
  });
}
