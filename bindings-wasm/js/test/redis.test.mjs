// @ratewindow/wasm's RedisStore against the real shared Redis (127.0.0.1:6379, or RATEWINDOW_REDIS_URL)
// with node-redis (from bindings-node's dev dependencies): a smoke test of the wasm call boundary with
// a real client — the script loaded by NOSCRIPT's fallback or found by SHA1, replies as node-redis
// decodes them, a batch's release, the atomic attempt. Skipped (said so) when no server answers.
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

  it('runs the fixed window: attempt is atomic, hit counts', async () => {
    const results = await Promise.all(Array.from({ length: 10 }, () => store.attempt('f', 3, 60_000)));
    assert.equal(results.filter((r) => r.allowed).length, 3);
    assert.equal(await store.attempts('f'), 3);
    assert.equal(await store.hit('h', 60_000, 2), 2);
    await store.clear('f');
    assert.equal(await store.attempts('f'), 0);
  });
});
