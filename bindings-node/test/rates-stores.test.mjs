// GCRA and the sliding-window counter on the networked stores: every gcra/counter vector case without
// a mixed batch on the real Redis (node-redis), PostgreSQL (pg Pool) and SQLite (better-sqlite3), at the
// vectors' times (SQLite by its clock option; Redis and PostgreSQL by the store's rate clock, which the
// public stores leave to the server), through the public store API; then each store on its own clock,
// and a batch mixing algorithms counted by each (their walks and races: mixed-stores.test.mjs). Keys
// under a prefix of this run.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import Database from 'better-sqlite3';

import { InvalidArgumentError, InvalidLimitError, PostgresStore, RedisStore, SqliteStore, counterLimit, gcraLimit } from '../dist/index.js';
import { repo } from './backend.mjs';
import { nodeRedis, redisBackend, sharedRedisUp } from './redis-servers.mjs';
import { dropPg, pgPool, runPrefix, tempDir } from './sql-helpers.mjs';

const root = join(repo, 'tests', 'vectors');
const CASES = ['gcra', 'counter'].flatMap((sub) =>
  readdirSync(join(root, sub))
    .filter((f) => f.endsWith('.json'))
    .sort()
    .flatMap((file) => JSON.parse(readFileSync(join(root, sub, file), 'utf8')).cases.map((c) => ({ file: `${sub}/${file}`, c }))),
);
const MIXED = new Set(['consume_mixed', 'peek_mixed', 'release']);

const gcraOf = (l) => ({ algorithm: 'gcra', uses: l.uses, windowMs: l.window_ms, ...(l.burst === undefined ? {} : { burst: l.burst }) });
const counterOf = (l) => ({ algorithm: 'counter', uses: l.uses, windowMs: l.window_ms });
const fields = (v) => ({
  allowed: v.allowed,
  limit: v.limit,
  refill_after_ms: v.refillAfterMs,
  remaining: v.remaining,
  reset_after_ms: v.resetAfterMs,
  retry_after_ms: v.retryAfterMs,
  retry_timestamp: v.retryTimestamp ?? null,
});

async function runOp(store, op) {
  const options = op.cost === undefined ? undefined : { cost: op.cost };
  const [algorithm, what] = op.op.split('_');
  const limitOf = algorithm === 'gcra' ? gcraOf : counterOf;
  switch (what) {
    case 'consume': return fields(await store.consume(op.key, limitOf(op.limit), options));
    case 'peek': return fields(await store.peek(op.key, limitOf(op.limit), options));
    case 'reset': return (await store.reset(op.key, limitOf({ uses: 1, window_ms: 1 }))) ?? null;
    case 'limit': (algorithm === 'gcra' ? gcraLimit : counterLimit)(op.limit.uses, op.limit.window_ms, ...(op.limit.burst === undefined ? [] : [op.limit.burst])); return { ok: true };
    default: throw new Error(`unknown vector op ${op.op}`);
  }
}

function errorOf(e) {
  if (e instanceof InvalidLimitError) return { error: 'invalid_rate', field: { uses: 'uses', windowMs: 'window_ms', burst: 'burst' }[e.field] };
  if (e instanceof InvalidArgumentError && e.field === 'cost') return { error: 'invalid_rate', field: 'cost' };
  throw e;
}

/** Runs every carried case on stores made by `open(clock)`. */
function vectorSuite(name, open) {
  describe(`${name}: gcra/counter vectors`, () => {
    for (const { file, c } of CASES) {
      const mixed = c.ops.some((op) => MIXED.has(op.op));
      it(`${file}: ${c.name}`, { skip: mixed && 'batches mixing algorithms: the memory store only' }, async () => {
        const clock = { t: 0, now() { return this.t; } };
        const store = await open(clock);
        for (const [i, op] of c.ops.entries()) {
          clock.t = op.now;
          let got;
          try {
            got = await runOp(store, op);
          } catch (e) {
            got = errorOf(e);
          }
          assert.deepStrictEqual(got, op.expect ?? null, `${file} / ${c.name} / op #${i} ${JSON.stringify(op)}`);
        }
      });
    }
  });
}

/** The checks on a store's own clock. */
async function ownClock(store) {
  const tokens = gcraLimit(100, 60_000);
  const key = `llm:${Math.random()}`;
  const first = await store.consume(key, tokens, { cost: 60 });
  assert.deepEqual([first.allowed, first.limit, first.remaining], [true, 100, 40]);
  const refused = await store.consume(key, tokens, { cost: 50 });
  assert.equal(refused.allowed, false);
  assert.ok(refused.retryAfterMs > 5_000 && refused.retryAfterMs <= 6_000, `${refused.retryAfterMs}`);
  assert.equal(refused.release, undefined);
  await store.reset(key, tokens);
  assert.equal((await store.peek(key, tokens)).remaining, 100);
  await assert.rejects(async () => store.consume(key, counterLimit(2, 1000), { cost: 3 }), (e) => e instanceof InvalidArgumentError && e.field === 'cost');
  const mixed = [{ key, limit: tokens }, { key: 's', limit: { uses: 1, windowMs: 1000 } }];
  // A mixed batch: every store counts it (mixed-stores.test.mjs has their walks and races).
  assert.equal((await store.peekMany(mixed)).allowed, true);
}

describe('RedisStore (node-redis)', () => {
  let redis;
  const prefix = `rwtest:rates:${process.pid}:${Math.random().toString(36).slice(2, 8)}:`;
  before(async () => {
    sharedRedisUp();
    redis = await nodeRedis();
  });
  after(() => redis.close());
  const make = () => RedisStore.using(redis.run, { evalsha: redis.evalsha, prefix: `${prefix}${Math.random().toString(36).slice(2, 8)}:`, backend: redisBackend });
  vectorSuite('RedisStore', (clock) => {
    const store = make();
    store.rateClock = () => clock.now();
    return store;
  });
  it('counts on the server clock', () => ownClock(make()));
});

describe('PostgresStore (pg Pool)', () => {
  const pool = pgPool(4);
  const prefix = runPrefix('rates');
  const store = PostgresStore.using(pool, { prefix });
  before(() => store.installSchema());
  after(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${prefix}_gcra, ${prefix}_counters CASCADE`);
    await dropPg(pool, prefix);
    await pool.end();
  });
  let n = 0;
  vectorSuite('PostgresStore', (clock) => {
    // One store per case: its keys are apart by a case prefix.
    const s = PostgresStore.using(pool, { prefix });
    const tag = `c${n++}:`;
    s.rateClock = () => clock.now();
    return {
      consume: (key, ...rest) => s.consume(tag + key, ...rest),
      peek: (key, ...rest) => s.peek(tag + key, ...rest),
      reset: (key, ...rest) => s.reset(tag + key, ...rest),
    };
  });
  it('counts on the server clock', () => ownClock(store));
});

describe('SqliteStore (better-sqlite3)', () => {
  const tmp = tempDir();
  after(() => tmp.remove());
  let n = 0;
  const open = (clock) => {
    const store = new SqliteStore(new Database(tmp.file(`rates-${n++}.db`)), clock === undefined ? {} : { clock });
    store.installSchema();
    return store;
  };
  vectorSuite('SqliteStore', open);
  it('counts on the host clock', () => ownClock(open()));
});
