// @ratewindow/wasm's RedisStore against the real shared Redis (127.0.0.1:6379, or RATEWINDOW_REDIS_URL)
// with node-redis (from bindings-node's dev dependencies): a smoke test of the wasm call boundary with
// a real client — the script loaded by NOSCRIPT's fallback or found by SHA1, replies as node-redis
// decodes them, a batch's release, the atomic attempt, calls costing more than one use (the sliding log
// and the attempt) and a batch mixing algorithms. Skipped (said so) when no server answers.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

process.env.RATEWINDOW_BACKEND ??= 'wasm';
const rw = await import('../dist/node.js');
const { createClient } = createRequire(new URL('../../../bindings-node/package.json', import.meta.url))('redis');

const url = process.env.RATEWINDOW_REDIS_URL ?? 'redis://127.0.0.1:6379';
let client;
try {
  client = createClient({ url, socket: { reconnectStrategy: false, connectTimeout: 2000 } });
  client.on('error', () => {});
  await client.connect();
} catch {
  client = undefined;
}

describe('@ratewindow/wasm RedisStore on a real Redis (node-redis)', { skip: client === undefined && `no Redis at ${url}` }, () => {
  const prefix = `rwwasm:${process.pid}:${Date.now().toString(36)}:`;
  let store;
  before(() => {
    store = rw.RedisStore.using((s, keys, args) => client.eval(s, { keys, arguments: args }), {
      evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }),
      prefix,
    });
  });
  after(async () => {
    for await (const keys of client.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
      if (keys.length > 0) await client.del(keys);
    }
    await client.destroy();
  });

  it('counts a sliding window exactly and refuses with the wait', async () => {
    const limit = { uses: 2, windowMs: 60_000 };
    const a = await store.consume('k', limit);
    const b = await store.consume('k', limit);
    const c = await store.consume('k', limit);
    assert.deepEqual([a.allowed, b.allowed, c.allowed], [true, true, false]);
    assert.equal(b.remaining, 0);
    assert.ok(c.retryAfterMs > 0 && c.retryAfterMs <= 60_000, `retryAfterMs ${c.retryAfterMs}`);
    assert.equal(typeof c.retryTimestamp, 'number');
    assert.equal((await store.peek('k', limit)).allowed, false);
  });

  it('gives back exactly an allowed batch', async () => {
    const entries = [
      { key: 'x', limit: { uses: 1, windowMs: 60_000 } },
      { key: 'y', limit: { uses: 1, windowMs: 60_000 } },
    ];
    const v = await store.consumeMany(entries);
    assert.equal(v.allowed, true);
    assert.equal((await store.consumeMany(entries)).allowed, false);
    await v.release();
    assert.equal((await store.consumeMany(entries)).allowed, true);
  });

  it('counts weighted calls: a cost takes that many uses, a batch with costs gives them back on release', async () => {
    const limit = { uses: 5, windowMs: 60_000 };
    const first = await store.consume('w', limit, { cost: 3 });
    assert.deepEqual([first.allowed, first.remaining], [true, 2]);
    const refused = await store.consume('w', limit, { cost: 3 });
    assert.deepEqual([refused.allowed, refused.remaining], [false, 2]);
    assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 60_000, `retryAfterMs ${refused.retryAfterMs}`);
    assert.deepEqual([(await store.peek('w', limit, { cost: 2 })).allowed, (await store.peek('w', limit, { cost: 3 })).allowed], [true, false]);
    await assert.rejects(async () => store.consume('w', limit, { cost: 6 }), (e) => e instanceof rw.InvalidArgumentError && e.field === 'cost');
    const big = { uses: 10, windowMs: 60_000 };
    const v = await store.consumeMany([{ key: 'wb', limit: big, cost: 4 }, { key: 'wg', limit: big, cost: 2 }]);
    assert.deepEqual([v.allowed, v.remaining], [true, 6]);
    await v.release();
    assert.deepEqual([(await store.peek('wb', big)).remaining, (await store.peek('wg', big)).remaining], [10, 10]);
    await assert.rejects(
      async () => store.consumeMany([{ key: 'wb', limit: big }, { key: 'wg', limit: big, cost: 11 }]),
      (e) => e instanceof rw.InvalidArgumentError && e.field === 'entries[1].cost',
    );
  });

  it('counts an attempt costing several hits only when they all fit', async () => {
    const first = await store.attempt('fc', 5, 60_000, { cost: 3 });
    assert.deepEqual([first.allowed, first.count], [true, 3]);
    const refused = await store.attempt('fc', 5, 60_000, { cost: 3 });
    assert.deepEqual([refused.allowed, refused.count], [false, 3]);
    assert.deepEqual([(await store.attempt('fc', 5, 60_000, { cost: 2 })).allowed, await store.attempts('fc')], [true, 5]);
    await assert.rejects(async () => store.attempt('fc', 5, 60_000, { cost: 1.5 }), (e) => e instanceof rw.InvalidArgumentError && e.field === 'cost');
  });

  it('runs a batch mixing algorithms all or nothing; release gives back its sliding-log calls', async () => {
    const perUser = rw.gcraLimit(2, 60_000);
    const global = { uses: 1, windowMs: 60_000 };
    const first = await store.consumeMany([{ key: 'mu:a', limit: perUser }, { key: 'mall', limit: global }, { key: 'mc', limit: rw.counterLimit(5, 60_000), cost: 2 }]);
    assert.equal(first.allowed, true);
    const refused = await store.consumeMany([{ key: 'mu:b', limit: perUser, cost: 2 }, { key: 'mall', limit: global }]);
    assert.deepEqual([refused.allowed, refused.blocked], [false, 1]);
    assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 60_000, `retryAfterMs ${refused.retryAfterMs}`);
    assert.equal((await store.peek('mu:b', perUser)).remaining, 2, 'a refused batch counts nothing');
    assert.equal((await store.peek('mc', rw.counterLimit(5, 60_000))).remaining, 3, 'the allowed batch counted its cost of 2');
    assert.equal((await store.peekMany([{ key: 'mu:b', limit: perUser }, { key: 'mall', limit: global }])).allowed, false);
    await first.release();
    assert.equal((await store.consumeMany([{ key: 'mu:b', limit: perUser, cost: 2 }, { key: 'mall', limit: global }])).allowed, true);
  });

  it('runs the fixed window: attempt is atomic, hit counts', async () => {
    const results = await Promise.all(Array.from({ length: 10 }, () => store.attempt('f', 3, 60_000)));
    assert.equal(results.filter((r) => r.allowed).length, 3);
    assert.equal(await store.attempts('f'), 3);
    assert.equal(await store.hit('h', 60_000, 2), 2);
    await store.clear('f');
    assert.equal(await store.attempts('f'), 0);
  });
});
