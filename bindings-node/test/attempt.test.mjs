// RateLimiter.attempt and the stores' atomic `attempt(key, max, decayMs)`: under 40 attempts at once,
// exactly `max` callbacks run, on every store — the memory store, Redis (the shared server, node-redis),
// PostgreSQL (a pool of 8) and SQLite (4 worker threads, each with its own connection to one file).
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';
import { dropPg, pgPool, runPrefix, tempDir } from './sql-helpers.mjs';

const { MemoryStore, PostgresStore, RateLimiter, RedisStore, SqliteStore, InvalidLimitError } = createRequire(import.meta.url)('../dist/index.js');

const MAX = 7;
const N = 40;

/** 40 attempts at once on `limiter`; resolves to how many callbacks ran and how many were refused. */
async function race(limiter, key) {
  let ran = 0;
  const results = await Promise.all(
    Array.from({ length: N }, () =>
      limiter.attempt(key, MAX, async () => {
        ran++;
        await new Promise((r) => setTimeout(r, 1));
        return 'done';
      }, 60),
    ),
  );
  return { ran, done: results.filter((r) => r === 'done').length, refused: results.filter((r) => r === false).length };
}

async function exactly(store) {
  const key = `attempt:${process.pid}:${Math.random().toString(36).slice(2)}`;
  const got = await race(new RateLimiter(store), key);
  assert.deepEqual(got, { ran: MAX, done: MAX, refused: N - MAX });
  assert.equal(await store.attempts(key), MAX, 'refused attempts count nothing');
  const a = await store.attempt(key, MAX, 60_000);
  assert.equal(a.allowed, false);
  assert.equal(a.count, MAX);
  assert.ok(a.resetAfterMs > 0 && a.resetAfterMs <= 60_000);
}

describe('attempt: exactly max callbacks under 40 at once', () => {
  it('MemoryStore', () => exactly(new MemoryStore()));

  it('RedisStore (node-redis)', async () => {
    sharedRedisUp();
    const c = await nodeRedis();
    try {
      await exactly(RedisStore.using(c.run, { evalsha: c.evalsha, backend: redisBackend, prefix: `rwtest:attempt:${process.pid}:` }));
    } finally {
      c.close();
    }
  });

  it('PostgresStore (a pool of 8)', async () => {
    const pool = pgPool(8);
    const prefix = runPrefix('attempt');
    try {
      const store = PostgresStore.using(pool, { prefix });
      await store.installSchema();
      await exactly(store);
    } finally {
      await dropPg(pool, prefix);
      await pool.end();
    }
  });

  it('SqliteStore (4 worker threads, one file)', async () => {
    const tmp = tempDir();
    after(() => tmp.remove());
    const file = tmp.file('attempt.db');
    const Database = (await import('better-sqlite3')).default;
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    const store = new SqliteStore(db);
    store.installSchema();
    const key = 'attempt:threads';
    const source = `
      const { parentPort, workerData } = require('node:worker_threads');
      const Database = require('better-sqlite3');
      const { RateLimiter, SqliteStore } = require(workerData.pkg);
      const limiter = new RateLimiter(new SqliteStore(new Database(workerData.file)));
      (async () => {
        let ran = 0;
        const all = [];
        for (let i = 0; i < workerData.n; i++) all.push(limiter.attempt(workerData.key, workerData.max, () => { ran++; }, 60));
        const results = await Promise.all(all);
        parentPort.postMessage({ ran, refused: results.filter((r) => r === false).length });
      })();`;
    const pkg = createRequire(import.meta.url).resolve('../dist/index.js');
    const counts = await Promise.all(
      Array.from({ length: 4 }, () => new Promise((resolve, reject) => {
        const w = new Worker(source, { eval: true, workerData: { pkg, file, key, max: MAX, n: N / 4 } });
        w.once('message', resolve);
        w.once('error', reject);
      })),
    );
    assert.equal(counts.reduce((a, c) => a + c.ran, 0), MAX);
    assert.equal(counts.reduce((a, c) => a + c.refused, 0), N - MAX);
    assert.equal(store.attempts(key), MAX);
    db.close();
  });

  it('an invalid decay is named as the caller gave it, and counts nothing', async () => {
    const limiter = new RateLimiter(RedisStore.using(() => assert.fail('nothing may be sent'), { backend: redisBackend }));
    await assert.rejects(limiter.attempt('k', 1, () => assert.fail('no callback'), 0), (e) => e instanceof InvalidLimitError && e.argument === 'decaySeconds');
  });
});
