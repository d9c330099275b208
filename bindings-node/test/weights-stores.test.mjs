// Weighted calls on the sliding log (a call costing `cost` uses) on the networked stores: every
// tests/vectors/weights/ case on the memory store and on SQLite (better-sqlite3) at the vectors' times
// (its clock option), through the public API; Redis (node-redis, the server's clock) by the same
// behaviours read against its clock; PostgreSQL refusing a weighted call as UnsupportedError with
// nothing written. Keys and tables under a prefix of this run.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import Database from 'better-sqlite3';

import { InvalidArgumentError, MemoryStore, PostgresStore, RedisStore, SqliteStore, UnsupportedError } from '../dist/index.js';
import { repo } from './backend.mjs';
import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';
import { dropPg, pgPool, runPrefix, tempDir } from './sql-helpers.mjs';

const CASES = JSON.parse(readFileSync(join(repo, 'tests', 'vectors', 'weights', 'weights.json'), 'utf8')).cases;

const limitOf = (l) => ({ uses: l.uses, windowMs: l.window_ms });
const entriesOf = (entries) => entries.map((e) => ({ key: e.key, limit: limitOf(e.limit), ...(e.cost === undefined ? {} : { cost: e.cost }) }));
const optionsOf = (op) => (op.cost === undefined ? undefined : { cost: op.cost });
const single = (v) => ({
  allowed: v.allowed,
  retry_after_ms: v.retryAfterMs,
  retry_timestamp: v.retryTimestamp ?? null,
  limit: v.limit,
  remaining: v.remaining,
  refill_after_ms: v.refillAfterMs,
  reset_after_ms: v.resetAfterMs,
});
const batch = (v) => ({ ...single(v), blocked: v.blocked ?? null });

/** A bad cost: InvalidArgumentError naming `cost` (a batch's, `entries[i].cost`). */
function errorOf(e) {
  if (e instanceof InvalidArgumentError && /(^|\.)cost$/.test(e.field)) return { error: 'invalid_argument', field: 'cost' };
  throw e;
}

async function runCase(store, clock, c) {
  const ids = new Map();
  for (const [i, op] of c.ops.entries()) {
    clock.t = op.now;
    let got;
    try {
      switch (op.op) {
        case 'consume': got = single(await store.consume(op.key, limitOf(op.limit), optionsOf(op))); break;
        case 'peek': got = single(await store.peek(op.key, limitOf(op.limit), optionsOf(op))); break;
        case 'consume_many': {
          const v = await store.consumeMany(entriesOf(op.entries));
          if (op.id !== undefined) ids.set(op.id, v);
          got = batch(v);
          break;
        }
        case 'peek_many': got = batch(await store.peekMany(entriesOf(op.entries))); break;
        case 'release': got = (await ids.get(op.id)?.release?.()) ?? null; break;
        default: throw new Error(`unknown vector op ${op.op}`);
      }
    } catch (e) {
      got = errorOf(e);
    }
    assert.deepStrictEqual(got, op.expect ?? null, `${c.name} / op #${i} ${JSON.stringify(op)}`);
  }
}

describe('weights vectors', () => {
  const tmp = tempDir();
  after(() => tmp.remove());
  let n = 0;
  for (const c of CASES) {
    it(`MemoryStore: ${c.name}`, async () => {
      const clock = { t: 0, now() { return this.t; } };
      await runCase(new MemoryStore({ clock }), clock, c);
    });
    it(`SqliteStore: ${c.name}`, async () => {
      const clock = { t: 0, now() { return this.t; } };
      const db = new Database(tmp.file(`weights-${n++}.db`));
      const store = new SqliteStore(db, { clock });
      store.installSchema();
      try {
        await runCase(store, clock, c);
      } finally {
        db.close();
      }
    });
  }
});

/** The weighted behaviours on a store's own clock (a window long enough that nothing leaves it). */
async function ownClock(store) {
  const limit = { uses: 5, windowMs: 60_000 };
  const key = `w:${Math.random().toString(36).slice(2)}`;
  const first = await store.consume(key, limit, { cost: 3 });
  assert.deepEqual([first.allowed, first.limit, first.remaining], [true, 5, 2]);
  assert.equal(first.release, undefined, 'a single call has no release');
  const refused = await store.consume(key, limit, { cost: 3 });
  assert.deepEqual([refused.allowed, refused.remaining], [false, 2]);
  assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 60_000, `${refused.retryAfterMs}`);
  assert.deepEqual([(await store.peek(key, limit, { cost: 2 })).allowed, (await store.peek(key, limit, { cost: 3 })).allowed], [true, false]);
  assert.equal((await store.peek(key, limit)).remaining, 2, 'peeks and the refusal record nothing');
  // A cost of 1 given explicitly is the plain call.
  const one = await store.consume(key, limit, { cost: 1 });
  assert.deepEqual([one.allowed, one.remaining], [true, 1]);

  // A batch with costs: all or nothing, and release gives back exactly the call's cost, once.
  const other = `${key}:b`;
  const big = { uses: 10, windowMs: 60_000 };
  const v = await store.consumeMany([{ key: other, limit: big, cost: 4 }, { key: `${key}:g`, limit: big, cost: 2 }]);
  assert.deepEqual([v.allowed, v.remaining], [true, 6]);
  const w = await store.consumeMany([{ key: other, limit: big, cost: 3 }]);
  assert.deepEqual([w.allowed, w.remaining], [true, 3]);
  assert.equal(typeof v.release, 'function');
  await v.release();
  assert.equal((await store.peekMany([{ key: other, limit: big }])).remaining, 7, 'release gave back 4');
  assert.equal((await store.peek(`${key}:g`, big)).remaining, 10, 'and the other entry its 2');
  await v.release();
  assert.equal((await store.peek(other, big)).remaining, 7, 'a second release gives back nothing');
  const blocked = await store.consumeMany([{ key: other, limit: big, cost: 8 }, { key: `${key}:g`, limit: big, cost: 1 }]);
  assert.deepEqual([blocked.allowed, blocked.blocked], [false, 0]);
  assert.equal((await store.peek(`${key}:g`, big)).remaining, 10, 'a refused batch counts nothing');
  await w.release();
  assert.equal((await store.peek(other, big)).remaining, 10);

  // Bad costs: InvalidArgumentError naming cost, nothing counted.
  for (const cost of [0, 6, -1, 1.5, Number.NaN]) {
    await assert.rejects(async () => store.consume(`${key}:x`, limit, { cost }), (e) => e instanceof InvalidArgumentError && e.field === 'cost' && Object.is(e.value, cost), `cost ${cost}`);
    await assert.rejects(async () => store.peek(`${key}:x`, limit, { cost }), (e) => e instanceof InvalidArgumentError && e.field === 'cost');
  }
  await assert.rejects(
    async () => store.consumeMany([{ key: `${key}:x`, limit, cost: 1 }, { key: `${key}:y`, limit, cost: 9 }]),
    (e) => e instanceof InvalidArgumentError && e.field === 'entries[1].cost' && e.value === 9,
  );
  await assert.rejects(async () => store.consume(`${key}:x`, limit, { cost: '2' }), TypeError);
  assert.equal((await store.peek(`${key}:x`, limit)).remaining, 5);
  assert.equal((await store.peek(`${key}:y`, limit)).remaining, 5);
}

describe('RedisStore (node-redis): weighted calls', () => {
  let redis;
  const prefix = `rwtest:weights:${process.pid}:${Math.random().toString(36).slice(2, 8)}:`;
  before(async () => {
    sharedRedisUp();
    redis = await nodeRedis();
  });
  after(() => redis.close());
  const make = (evalsha) => RedisStore.using(redis.run, { ...(evalsha ? { evalsha: redis.evalsha } : {}), prefix, backend: redisBackend });
  it('counts, refuses, peeks and gives back costs (EVALSHA)', () => ownClock(make(true)));
  it('counts, refuses, peeks and gives back costs (EVAL)', () => ownClock(make(false)));
  it('shares a key with calls costing 1', async () => {
    const store = make(true);
    const key = `mix:${Math.random()}`;
    const limit = { uses: 4, windowMs: 60_000 };
    assert.equal((await store.consume(key, limit)).remaining, 3);
    assert.equal((await store.consume(key, limit, { cost: 2 })).remaining, 1);
    assert.equal((await store.consume(key, limit)).remaining, 0);
    assert.equal((await store.consume(key, limit)).allowed, false);
    assert.equal((await store.consume(key, limit, { cost: 2 })).allowed, false);
  });
});

describe('SqliteStore (better-sqlite3): weighted calls', () => {
  const tmp = tempDir();
  after(() => tmp.remove());
  it('counts, refuses, peeks and gives back costs on the host clock', async () => {
    const db = new Database(tmp.file('own.db'));
    const store = new SqliteStore(db);
    store.installSchema();
    await ownClock(store);
    db.close();
  });
});

describe('PostgresStore (pg Pool): weighted calls', () => {
  const pool = pgPool(2);
  const prefix = runPrefix('weights');
  const store = PostgresStore.using(pool, { prefix });
  before(() => store.installSchema());
  after(async () => {
    await dropPg(pool, prefix);
    await pool.end();
  });
  // The binding passes the cost to the core's machine whatever the store: while the core refuses a
  // weighted call on PostgreSQL it is UnsupportedError with nothing written; once it counts them, the
  // same behaviours as on Redis and SQLite.
  it('refuses a weighted call as UnsupportedError writing nothing, or counts it as the others do', async () => {
    const limit = { uses: 5, windowMs: 60_000 };
    let first;
    try {
      first = await store.consume('k', limit, { cost: 2 });
    } catch (e) {
      assert.ok(e instanceof UnsupportedError && e.algorithm === 'weighted sliding', String(e));
    }
    if (first !== undefined) {
      assert.deepEqual([first.allowed, first.remaining], [true, 3]);
      await ownClock(store);
      return;
    }
    const refused = (e) => e instanceof UnsupportedError && e.algorithm === 'weighted sliding';
    await assert.rejects(async () => store.peek('k', limit, { cost: 2 }), refused);
    await assert.rejects(async () => store.consumeMany([{ key: 'k', limit }, { key: 'j', limit, cost: 3 }]), refused);
    await assert.rejects(async () => store.peekMany([{ key: 'k', limit, cost: 3 }]), refused);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${prefix}_log`)).rows[0].n, 0);
    // A bad cost is still the argument's error, and a cost of 1 the plain call.
    await assert.rejects(async () => store.consume('k', limit, { cost: 0 }), (e) => e instanceof InvalidArgumentError && e.field === 'cost');
    assert.equal((await store.consume('k', limit, { cost: 1 })).remaining, 4);
  });
});

/** The fixed window's attempt costing `cost` hits, on a store whose window outlives the test. */
async function attemptCost(store) {
  const key = `a:${Math.random().toString(36).slice(2)}`;
  const first = await store.attempt(key, 5, 60_000, { cost: 3 });
  assert.deepEqual([first.allowed, first.count], [true, 3]);
  assert.ok(first.resetAfterMs > 0 && first.resetAfterMs <= 60_000, `${first.resetAfterMs}`);
  const refused = await store.attempt(key, 5, 60_000, { cost: 3 });
  assert.deepEqual([refused.allowed, refused.count], [false, 3], 'a cost above what is left counts nothing');
  assert.deepEqual([(await store.attempt(key, 5, 60_000, { cost: 2 })).allowed, await store.attempts(key)], [true, 5]);
  assert.deepEqual([(await store.attempt(key, 5, 60_000)).allowed, await store.attempts(key)], [false, 5]);
  assert.deepEqual([(await store.attempt(`${key}:big`, 5, 60_000, { cost: 6 })).allowed, await store.attempts(`${key}:big`)], [false, 0]);
  assert.equal((await store.attempt(`${key}:one`, 5, 60_000, { cost: 1 })).count, 1);
  for (const cost of [0, -1, 1.5, Number.NaN]) {
    await assert.rejects(async () => store.attempt(`${key}:x`, 5, 60_000, { cost }), (e) => e instanceof InvalidArgumentError && e.field === 'cost' && Object.is(e.value, cost), `cost ${cost}`);
  }
  await assert.rejects(async () => store.attempt(`${key}:x`, 5, 60_000, { cost: '2' }), TypeError);
  assert.equal(await store.attempts(`${key}:x`), 0);
}

describe('the fixed window attempt with a cost', () => {
  const tmp = tempDir();
  let redis;
  const pool = pgPool(2);
  const prefix = runPrefix('wattempt');
  const pg = PostgresStore.using(pool, { prefix });
  before(async () => {
    sharedRedisUp();
    redis = await nodeRedis();
    await pg.installSchema();
  });
  after(async () => {
    redis.close();
    tmp.remove();
    await dropPg(pool, prefix);
    await pool.end();
  });
  it('MemoryStore', () => attemptCost(new MemoryStore()));
  it('RedisStore (EVALSHA)', () => attemptCost(RedisStore.using(redis.run, { evalsha: redis.evalsha, prefix: `rwtest:wattempt:${process.pid}:`, backend: redisBackend })));
  it('RedisStore (EVAL)', () => attemptCost(RedisStore.using(redis.run, { prefix: `rwtest:wattempt:${process.pid}:`, backend: redisBackend })));
  it('SqliteStore', async () => {
    const db = new Database(tmp.file('attempt.db'));
    const store = new SqliteStore(db);
    store.installSchema();
    await attemptCost(store);
    db.close();
  });
  it('PostgresStore', () => attemptCost(pg));
});
