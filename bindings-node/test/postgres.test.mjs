// PostgresStore on the machine's PostgreSQL through a pg Pool: the conformance kit (pool and query
// function), RateLimiter, errors (a statement failing after the call wrote, a connection lost mid-call,
// rows of the wrong shape), the server's clock, purge. Tables under a prefix of this run, dropped after.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { PostgresStore, RateLimiter, StoreError, StoreReplyError, RateWindowError } from '../dist/index.js';
import { testStore } from '../dist/testing.js';
import { dropPg, pgPool, runPrefix, sleep } from './sql-helpers.mjs';

const pool = pgPool(8);
const prefix = runPrefix('pg');
const store = PostgresStore.using(pool, { prefix });
const l = (uses, windowMs) => ({ uses, windowMs });

before(async () => {
  await store.installSchema();
  await store.installSchema(); // idempotent
});
after(async () => {
  await dropPg(pool, prefix);
  await pool.end();
});

testStore('PostgresStore (pg Pool)', () => store, { describe, it });
testStore(
  'PostgresStore (a query function returning node-postgres results)',
  () => PostgresStore.using((sql, params) => pool.query(sql, params), { prefix }),
  { describe, it },
);
testStore(
  'PostgresStore (a query function returning row objects)',
  () => PostgresStore.using((sql, params) => pool.query(sql, params).then((r) => r.rows), { prefix }),
  { describe, it },
);

describe('PostgresStore', () => {
  it('relaxes only its own commits; durable keeps a caller\'s transaction on the server setting', async () => {
    const client = await pool.connect();
    try {
      for (const [durable, want] of [[true, 'on'], [false, 'off']]) {
        await client.query('BEGIN');
        await client.query('SET LOCAL synchronous_commit = on');
        const inTransaction = PostgresStore.using((sql, params) => client.query(sql, params), { prefix, durable });
        assert.equal((await inTransaction.consume(`tx:${Math.random()}`, l(1, 1000))).allowed, true);
        const { rows } = await client.query('SHOW synchronous_commit');
        assert.equal(rows[0].synchronous_commit, want);
        await client.query('ROLLBACK');
      }
      assert.throws(() => PostgresStore.using(pool, { prefix, durable: 'yes' }), TypeError);
    } finally {
      client.release();
    }
  });

  it('runs RateLimiter unchanged', async () => {
    const limiter = new RateLimiter(store);
    const key = `rl:${Math.random()}`;
    assert.equal(await limiter.attempt(key, 2, () => 'a', 5), 'a');
    assert.equal(await limiter.attempt(key, 2, () => undefined, 5), true);
    assert.equal(await limiter.attempt(key, 2, () => 'c', 5), false);
    assert.equal(await limiter.attempts(key), 2);
    assert.equal(await limiter.tooManyAttempts(key, 2), true);
    assert.equal(await limiter.remaining(key, 5), 3);
    assert.equal(await limiter.availableIn(key), 5);
    await limiter.clear(key);
    assert.equal(await limiter.attempts(key), 0);
  });

  it('refuses a bad prefix and a bad client with TypeErrors, an invalid limit with InvalidLimitError', async () => {
    assert.throws(() => PostgresStore.using(pool, { prefix: 'Bad-Name' }), TypeError);
    assert.throws(() => PostgresStore.using(42), TypeError);
    await assert.rejects(store.consumeMany([{ key: 'a', limit: l(1, 10) }, { key: 'b', limit: l(1.5, 10) }]), {
      code: 'ERR_RATEWINDOW_INVALID_LIMIT',
      field: 'uses',
      value: 1.5,
    });
    await assert.rejects(store.hit('a', -1), { code: 'ERR_RATEWINDOW_INVALID_LIMIT', field: 'windowMs' });
  });

  it('a statement failing after the call wrote its rows: StoreError with the cause, nothing recorded', async () => {
    // A deferred constraint trigger fails the call's transaction at COMMIT, after every row was written.
    await pool.query(`
      CREATE FUNCTION ${prefix}_poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.key LIKE '%:poison' THEN RAISE EXCEPTION 'poisoned key %', NEW.key; END IF; RETURN NEW; END $$;
      CREATE CONSTRAINT TRIGGER ${prefix}_poison AFTER INSERT OR UPDATE ON ${prefix}_log
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${prefix}_poison();`);
    try {
      const ok = `err:${Math.random()}:ok`;
      const batch = [{ key: ok, limit: l(1, 60_000) }, { key: `err:${Math.random()}:poison`, limit: l(1, 60_000) }];
      const error = await store.consumeMany(batch).then(() => undefined, (e) => e);
      assert.ok(error instanceof StoreError && error instanceof RateWindowError);
      assert.equal(error.code, 'ERR_RATEWINDOW_STORE');
      assert.match(error.cause.message, /poisoned key/);
      const { rows } = await pool.query(`SELECT coalesce(sum(cardinality(ats)), 0)::int AS n FROM ${prefix}_log WHERE key = $1`, [ok]);
      assert.equal(rows[0].n, 0);
      assert.equal((await store.consume(ok, l(1, 60_000))).allowed, true);
    } finally {
      await pool.query(`DROP FUNCTION ${prefix}_poison() CASCADE`);
    }
  });

  it('a connection lost mid-call (pg_terminate_backend): StoreError with the cause, nothing recorded', async () => {
    const key = `lost:${Math.random()}`;
    // Another session inserted the key's row and has not committed, so the call waits inside its statement.
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`INSERT INTO ${prefix}_log VALUES ($1, '{}', '{}', 0)`, [key]);
      const call = store.consumeMany([{ key, limit: l(1, 60_000) }, { key: `${key}:b`, limit: l(1, 60_000) }]);
      const settled = call.then(() => undefined, (e) => e);
      let pid;
      for (let i = 0; i < 200 && pid === undefined; i++) {
        await sleep(10);
        const { rows } = await holder.query(
          `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
          [`%${prefix}_sliding%`],
        );
        pid = rows[0]?.pid;
      }
      assert.ok(pid, 'the call never waited on the lock');
      await holder.query('SELECT pg_terminate_backend($1)', [pid]);
      const error = await settled;
      assert.ok(error instanceof StoreError, `expected a StoreError, got ${error}`);
      assert.ok(error.cause instanceof Error);
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
    }
    const { rows } = await pool.query(`SELECT coalesce(sum(cardinality(ats)), 0)::int AS n FROM ${prefix}_log WHERE key LIKE $1`, [`${key}%`]);
    assert.equal(rows[0].n, 0);
    assert.equal((await store.consumeMany([{ key, limit: l(1, 60_000) }])).allowed, true);
  });

  it('rows of the wrong shape: StoreReplyError naming the statement, no verdict guessed', async () => {
    const bad = PostgresStore.using(async () => [[true, 'zero', -1, -1, 5]], { prefix });
    const error = await bad.consume('k', l(1, 1000)).then(() => undefined, (e) => e);
    assert.ok(error instanceof StoreReplyError && error instanceof StoreError);
    assert.equal(error.code, 'ERR_RATEWINDOW_STORE_REPLY');
    assert.equal(error.source, 'consume');
    assert.match(error.got, /zero/);
    const none = PostgresStore.using(async () => [], { prefix });
    await assert.rejects(none.attempts('k'), StoreReplyError);
    await assert.rejects(none.purge(), StoreReplyError);
  });

  it('follows the server clock, not the host clock', async () => {
    const realNow = Date.now;
    const key = `clock:${Math.random()}`;
    Date.now = () => realNow() + 3_600_000; // the host an hour ahead
    try {
      assert.equal((await store.consume(key, l(1, 10_000))).allowed, true);
      const before = realNow();
      const refused = await store.consume(key, l(1, 10_000));
      assert.equal(refused.allowed, false);
      assert.ok(refused.retryAfterMs > 9_000 && refused.retryAfterMs <= 10_000, `${refused.retryAfterMs}`);
      // The timestamp is the server's (an hour behind this host's offset clock).
      assert.ok(Math.abs(refused.retryTimestamp - (before + 10_000)) < 2_000, `${refused.retryTimestamp - before}`);
      assert.equal(await store.hit(key, 10_000), 1);
      assert.ok((await store.availableInMs(key)) > 9_000);
    } finally {
      Date.now = realNow;
    }
  });

  it('purge removes exactly the rows whose calls have left their windows', async () => {
    const own = runPrefix('pgpurge');
    const s = PostgresStore.using(pool, { prefix: own });
    await s.installSchema();
    try {
      await s.consumeMany([{ key: 'short', limit: l(5, 1000) }, { key: 'both', limit: l(5, 1000) }]);
      await s.consumeMany([{ key: 'long', limit: l(5, 60_000) }, { key: 'both', limit: l(5, 60_000) }]);
      await s.consume('short', l(5, 1000));
      await s.hit('w-short', 1000);
      await s.hit('w-long', 60_000);
      assert.deepEqual(await s.purge(), { calls: 0, windows: 0 });
      await sleep(1200);
      // Left: short's row (two calls); kept: long, and both's row (counted under 60 s too).
      assert.deepEqual(await s.purge(), { calls: 2, windows: 1 });
      const { rows } = await pool.query(`SELECT key FROM ${own}_log ORDER BY key`);
      assert.deepEqual(rows.map((r) => r.key), ['both', 'long']);
      const { rows: windows } = await pool.query(`SELECT key FROM ${own}_windows`);
      assert.deepEqual(windows.map((r) => r.key), ['w-long']);
      assert.deepEqual(await s.purge(), { calls: 0, windows: 0 });
    } finally {
      await dropPg(pool, own);
    }
  });
});
