// RedisStore against a PRIVATE redis-server (port 6390, never the shared 6379), which these tests flush,
// restart, pause and kill: SCRIPT FLUSH and restarts (calls keep working through evalsha, nothing
// double-counted), the server down or paused (a typed StoreError with the client's error as cause,
// nothing half-recorded, nothing resent), expiry of every key written, peeks writing nothing, and
// verdicts on the server's clock whatever the hosts' clocks say.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';

import { ioredis, nodeRedis, privateServer, redisBackend } from './redis-servers.mjs';

const { RedisStore, StoreError, RateWindowError } = createRequire(import.meta.url)('../dist/index.js');

const PORT = 6390;
let server;
let clients; // node-redis and ioredis, failing fast while the server is away (no offline queue)
let raw; // a node-redis client for looking at what the server holds

before(async () => {
  server = await privateServer(PORT);
  clients = [
    await nodeRedis(PORT, { client: { disableOfflineQueue: true }, socket: { reconnectStrategy: () => 50 } }),
    await ioredis(PORT, { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 }),
  ];
  raw = await nodeRedis(PORT, { socket: { reconnectStrategy: () => 50 } });
});
after(async () => {
  for (const c of [...(clients ?? []), raw]) await c?.close();
  await server?.close();
});

let counter = 0;
const fresh = (label) => `${label}:${++counter}:${Math.random().toString(36).slice(2, 8)}`;
const log = (key) => `ratewindow:log:${key}`;
const limit = (uses, windowMs) => ({ uses, windowMs });

/** A store whose client calls are counted: `sent.evalsha` and `sent.run`. */
function counted(c) {
  const sent = { evalsha: 0, run: 0 };
  const store = RedisStore.using(
    (script, keys, args) => {
      sent.run++;
      return c.run(script, keys, args);
    },
    {
      backend: redisBackend,
      evalsha: (sha1, keys, args) => {
        sent.evalsha++;
        return c.evalsha(sha1, keys, args);
      },
    },
  );
  return { store, sent };
}

/** Waits until `c` answers again after a restart. */
async function ready(c) {
  for (let i = 0; i < 200; i++) {
    try {
      await c.client.ping();
      return;
    } catch {
      await sleep(25);
    }
  }
  throw new Error(`${c.kind} did not reconnect`);
}

describe('private server (6390)', { concurrency: 1 }, () => {
  it('SCRIPT FLUSH between calls: calls keep working through evalsha, the script sent in full only after NOSCRIPT, nothing double-counted', async () => {
    for (const c of clients) {
      const { store, sent } = counted(c);
      const k = fresh('flush');
      for (let i = 0; i < 3; i++) {
        await raw.client.scriptFlush();
        const before = { ...sent };
        assert.equal((await store.consume(k, limit(3, 10_000))).allowed, true, c.kind);
        // Each call: one EVALSHA answered NOSCRIPT, then one EVAL.
        assert.deepEqual([sent.evalsha - before.evalsha, sent.run - before.run], [1, 1], c.kind);
      }
      // Loaded now: by SHA1 alone.
      const before = { ...sent };
      assert.equal((await store.consume(k, limit(3, 10_000))).allowed, false, c.kind);
      assert.deepEqual([sent.evalsha - before.evalsha, sent.run - before.run], [1, 0], c.kind);
      assert.equal(await raw.client.zCount(log(k), 0, '+inf'), 3, c.kind); // the calls (a refusal marker scores -inf)
    }
  });

  it('a server restart: calls keep working through evalsha (scripts gone, counts kept), nothing double-counted', async () => {
    const ks = clients.map(() => fresh('restart'));
    for (const [i, c] of clients.entries()) {
      const { store } = counted(c);
      assert.equal((await store.consume(ks[i], limit(3, 30_000))).allowed, true);
      assert.equal((await store.consumeMany([{ key: ks[i], limit: limit(3, 30_000) }])).allowed, true);
    }
    await server.stop();
    await server.start();
    for (const [i, c] of clients.entries()) {
      await ready(c);
      const { store, sent } = counted(c);
      assert.equal((await store.consume(ks[i], limit(3, 30_000))).allowed, true, c.kind);
      // The first call after the restart: NOSCRIPT, then EVAL (which loads it for the next client).
      assert.deepEqual(sent, { evalsha: 1, run: i === 0 ? 1 : 0 }, c.kind);
      const refused = await store.consume(ks[i], limit(3, 30_000));
      assert.equal(refused.allowed, false, c.kind);
      assert.equal(await raw.client.zCount(log(ks[i]), 0, '+inf'), 3, c.kind); // the calls (a refusal marker scores -inf)
    }
    await ready(raw);
  });

  it('the server down: a typed StoreError with the client\'s error as cause, nothing recorded; then calls work again', async () => {
    const ks = clients.map(() => [fresh('down-a'), fresh('down-b'), fresh('down-c')]);
    await server.stop();
    for (const [i, c] of clients.entries()) {
      const { store } = counted(c);
      for (const call of [
        () => store.consume(ks[i][0], limit(1, 5000)),
        () => store.consumeMany(ks[i].map((key) => ({ key, limit: limit(1, 5000) }))),
        () => store.peekMany([{ key: ks[i][0], limit: limit(1, 5000) }]),
        () => store.hit(ks[i][0], 5000),
      ]) {
        await assert.rejects(call(), (e) => {
          assert.ok(e instanceof StoreError && e instanceof RateWindowError, `${c.kind}: ${e}`);
          assert.equal(e.code, 'ERR_RATEWINDOW_STORE');
          assert.ok(e.cause instanceof Error, `${c.kind}: cause ${e.cause}`);
          assert.ok(e.message.includes(e.cause.message));
          return true;
        });
      }
    }
    await server.start();
    await ready(raw);
    for (const [i, c] of clients.entries()) {
      await ready(c);
      for (const key of ks[i]) assert.equal(await raw.client.exists(log(key)), 0, `${c.kind}: ${key}`);
      const { store } = counted(c);
      assert.equal((await store.consumeMany(ks[i].map((key) => ({ key, limit: limit(1, 5000) })))).allowed, true);
    }
  });

  it('CLIENT PAUSE past the client\'s timeout: a StoreError with cause, the batch counted all or nothing and never resent', async () => {
    const c = await ioredis(PORT, { commandTimeout: 200, maxRetriesPerRequest: 0 });
    try {
      const { store, sent } = counted(c);
      await store.consume(fresh('warm'), limit(1, 5000)); // the script is loaded: the paused call goes by SHA1
      const keys = [fresh('pause-a'), fresh('pause-b'), fresh('pause-c')];
      const before = { ...sent };
      await raw.client.sendCommand(['CLIENT', 'PAUSE', '700', 'ALL']);
      await assert.rejects(store.consumeMany(keys.map((key) => ({ key, limit: limit(5, 10_000) }))), (e) => {
        assert.ok(e instanceof StoreError, String(e));
        assert.equal(e.code, 'ERR_RATEWINDOW_STORE');
        assert.match(e.cause.message, /timed out/i);
        return true;
      });
      assert.deepEqual([sent.evalsha - before.evalsha, sent.run - before.run], [1, 0]); // never resent
      await sleep(900); // the pause ends; the server runs what it had queued, once
      const counts = await Promise.all(keys.map((key) => raw.client.zCard(log(key))));
      assert.ok(counts.every((n) => n === counts[0]) && counts[0] <= 1, `half-recorded or resent: ${counts}`);
    } finally {
      c.close();
    }
  });

  it('every key written has a PTTL in (0, window]; the keys are gone after the window; peeks write nothing', async () => {
    const store = counted(clients[0]).store;
    const [a, b, f, p] = [fresh('ttl-a'), fresh('ttl-b'), fresh('ttl-fixed'), fresh('ttl-peek')];
    // `a` is counted under two windows in one call: it lives for the longer one.
    const entries = [
      { key: a, limit: limit(5, 600) },
      { key: b, limit: limit(5, 300) },
      { key: a, limit: limit(5, 200) },
    ];
    assert.equal((await store.consumeMany(entries)).allowed, true);
    assert.equal(await store.hit(f, 400), 1);
    for (const [key, window] of [[log(a), 600], [log(b), 300], [`ratewindow:win:${f}`, 400]]) {
      const ttl = await raw.client.pTTL(key);
      assert.ok(ttl > 0 && ttl <= window, `${key}: PTTL ${ttl} not in (0, ${window}]`);
    }
    // Peeks: a fresh key is not created; a live key's members and expiry are left as they were.
    assert.equal((await store.peekMany([{ key: p, limit: limit(1, 5000) }])).allowed, true);
    assert.equal(await raw.client.exists(log(p)), 0);
    const ttlBefore = await raw.client.pTTL(log(a));
    assert.equal((await store.peekMany([{ key: a, limit: limit(1, 5000) }])).allowed, false);
    assert.equal((await store.peek(a, limit(1, 5000))).allowed, false);
    const ttlAfter = await raw.client.pTTL(log(a));
    assert.ok(ttlAfter <= ttlBefore, `a peek moved the expiry: ${ttlBefore} -> ${ttlAfter}`);
    assert.equal(await raw.client.zCard(log(a)), 1);
    assert.equal(await store.attempts(f), 1); // reading a fixed window writes nothing either
    await sleep(650);
    for (const key of [log(a), log(b), `ratewindow:win:${f}`]) assert.equal(await raw.client.exists(key), 0, key);
  });

  it('hosts with offset clocks (Date.now stubbed an hour apart) get verdicts on the server\'s TIME', async () => {
    const [A, B] = clients.map((c) => counted(c).store);
    const k = fresh('clock');
    const f = fresh('clock-fixed');
    const serverMs = async () => {
      const [s, us] = await raw.client.time().then((t) => (Array.isArray(t) ? t : [Math.floor(t.getTime() / 1000), (t.getTime() % 1000) * 1000]));
      return Number(s) * 1000 + Math.floor(Number(us) / 1000);
    };
    const realNow = Date.now;
    try {
      const t0 = await serverMs();
      Date.now = () => realNow() + 3_600_000; // host A runs an hour fast
      assert.equal((await A.consume(k, limit(1, 2000))).allowed, true);
      assert.equal(await A.hit(f, 2000), 1);
      Date.now = () => realNow() - 3_600_000; // host B an hour slow
      const refused = await B.consume(k, limit(1, 2000));
      const t1 = await serverMs();
      assert.equal(refused.allowed, false);
      // The wait ends 2 s after A's call on the server's clock, not on either host's.
      assert.ok(refused.retryTimestamp >= t0 + 2000 && refused.retryTimestamp <= t1 + 2000, `${refused.retryTimestamp} vs ${t0}..${t1}`);
      assert.ok(refused.retryAfterMs >= 1 && refused.retryAfterMs <= 2000, String(refused.retryAfterMs));
      assert.equal(await B.hit(f, 2000), 2); // the same fixed window, whatever B's clock says
      const left = await B.availableInMs(f);
      assert.ok(left > 0 && left <= 2000, String(left));
    } finally {
      Date.now = realNow;
    }
  });
});
