// SqliteStore on better-sqlite3 (and node:sqlite where this Node has it): the conformance kit,
// RateLimiter, errors (a statement failing after the call wrote, a busy file), rolled back with nothing
// half-recorded, purge. Files in a temp dir, removed after.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { RateLimiter, SqliteStore, StoreError, StoreReplyError } from '../dist/index.js';
import { testStore } from '../dist/testing.js';
import { nodeSqlite, tempDir } from './sql-helpers.mjs';

const tmp = tempDir();
const open = [];
const database = (name, setup = 'PRAGMA journal_mode = WAL') => {
  const db = new Database(tmp.file(name));
  db.exec(setup);
  open.push(db);
  return db;
};
after(() => {
  for (const db of open) if (db.open) db.close();
  tmp.remove();
});
const l = (uses, windowMs) => ({ uses, windowMs });

const shared = new SqliteStore(database('kit.db'));
shared.installSchema();
shared.installSchema(); // idempotent
testStore('SqliteStore (better-sqlite3, WAL)', () => shared, { describe, it });
const rollbackJournal = new SqliteStore(database('kit-delete.db', 'PRAGMA journal_mode = DELETE'), { prefix: 'rw_kit' });
rollbackJournal.installSchema();
testStore('SqliteStore (better-sqlite3, rollback journal, prefix)', () => rollbackJournal, { describe, it });

const sqlite = await nodeSqlite();
if (sqlite) {
  const db = new sqlite.DatabaseSync(tmp.file('node-sqlite.db'));
  open.push({ get open() { return db.isOpen ?? true; }, close: () => db.close() });
  const store = new SqliteStore(db);
  store.installSchema();
  testStore('SqliteStore (node:sqlite DatabaseSync)', () => store, { describe, it });
} else {
  it(`SqliteStore on node:sqlite: skipped, Node ${process.versions.node} has no node:sqlite (22.5+ has it)`, { skip: true }, () => {});
}

/**
 * node:sqlite's statement API (no `raw` nor `reader`, rows as objects) over a better-sqlite3 connection, so the
 * object-row path runs on every Node: the real database answers, only the row shape differs.
 */
function objectRows(db) {
  return {
    exec: (sql) => db.exec(sql),
    prepare: (sql) => {
      const st = db.prepare(sql);
      // node:sqlite's all() runs a statement that answers no rows too, and gives [].
      return { run: (...p) => st.run(...p), all: (...p) => (st.reader ? st.all(...p) : (st.run(...p), [])) };
    },
  };
}
testStore('SqliteStore (node:sqlite statement API: rows as objects)', () => {
  const s = new SqliteStore(objectRows(database(`objects-${Math.random()}.db`)));
  s.installSchema();
  return s;
}, { describe, it });

describe('SqliteStore', () => {
  it('answers at once (no promise) and runs RateLimiter unchanged', async () => {
    const v = shared.consume(`sync:${Math.random()}`, l(1, 1000));
    assert.deepEqual(v, { allowed: true, retryAfterMs: 0, limit: 1, remaining: 0, refillAfterMs: 1000, resetAfterMs: 1000 });
    const limiter = new RateLimiter(shared);
    const key = `rl:${Math.random()}`;
    assert.equal(await limiter.attempt(key, 1, () => 'a', 5), 'a');
    assert.equal(await limiter.attempt(key, 1, () => 'b', 5), false);
    assert.equal(await limiter.attempts(key), 1);
    assert.equal(await limiter.availableIn(key), 5);
  });

  it('uses the given clock (the host clock by default)', () => {
    let now = 1_000_000;
    const s = new SqliteStore(database('clock.db'), { clock: { now: () => now } });
    s.installSchema();
    assert.equal(s.consume('k', l(1, 1000)).allowed, true);
    const quota = { limit: 1, remaining: 0, refillAfterMs: 1000, resetAfterMs: 1000 };
    assert.deepEqual(s.consume('k', l(1, 1000)), { allowed: false, retryAfterMs: 1000, retryTimestamp: 1_001_000, ...quota });
    now += 999;
    assert.equal(s.consume('k', l(1, 1000)).retryAfterMs, 1);
    now += 1;
    assert.equal(s.consume('k', l(1, 1000)).allowed, true);
    now = -1;
    assert.throws(() => s.consume('k', l(1, 1000)), { code: 'ERR_RATEWINDOW_INVALID_ARGUMENT' });
  });

  it('refuses bad arguments with typed errors, recording nothing', () => {
    assert.throws(() => new SqliteStore({}), TypeError);
    assert.throws(() => new SqliteStore(database('x.db'), { prefix: '1bad' }), TypeError);
    const key = `bad:${Math.random()}`;
    assert.throws(() => shared.consumeMany([{ key, limit: l(1, 10) }, { key: 'b', limit: l(1, NaN) }]), {
      code: 'ERR_RATEWINDOW_INVALID_LIMIT',
      field: 'windowMs',
    });
    assert.equal(shared.consume(key, l(1, 10_000)).allowed, true);
  });

  it('a statement failing after the call wrote: StoreError with the cause, rolled back, nothing recorded', () => {
    const db = database('poison.db');
    const s = new SqliteStore(db);
    s.installSchema();
    db.exec(`CREATE TRIGGER poison BEFORE INSERT ON ratewindow_calls WHEN NEW.key = 'poison'
             BEGIN SELECT RAISE(ABORT, 'poisoned key'); END`);
    // `ok` is inserted first, then `poison` fails.
    const error = (() => {
      try {
        s.consumeMany([{ key: 'ok', limit: l(1, 60_000) }, { key: 'poison', limit: l(1, 60_000) }]);
      } catch (e) {
        return e;
      }
    })();
    assert.ok(error instanceof StoreError, `expected a StoreError, got ${error}`);
    assert.equal(error.code, 'ERR_RATEWINDOW_STORE');
    assert.match(error.cause.message, /poisoned key/);
    assert.equal(db.inTransaction, false);
    assert.equal(db.prepare('SELECT count(*) AS n FROM ratewindow_calls').get().n, 0);
    assert.equal(s.consume('ok', l(1, 60_000)).allowed, true);
  });

  it('another connection holding the write lock past the busy timeout: StoreError, nothing recorded', () => {
    const file = 'busy.db';
    const s = new SqliteStore(database(file), { busyTimeoutMs: 50 });
    s.installSchema();
    const other = database(file);
    other.exec('BEGIN IMMEDIATE');
    try {
      assert.throws(() => s.consume('k', l(1, 60_000)), (e) => e instanceof StoreError && /locked|busy/i.test(e.cause.message));
      assert.throws(() => s.hit('w', 60_000), StoreError);
    } finally {
      other.exec('ROLLBACK');
    }
    assert.equal(s.consume('k', l(1, 60_000)).allowed, true);
    assert.equal(s.hit('w', 60_000), 1);
  });

  it('rows of the wrong shape: StoreReplyError, transaction rolled back', () => {
    const db = database('shape.db');
    const s = new SqliteStore(db);
    s.installSchema();
    db.exec(`INSERT INTO ratewindow_calls (key, at, id, expires_at) VALUES ('k', 'soon', 'x', 0)`);
    assert.throws(() => s.consume('k', l(1, 1000)), (e) => e instanceof StoreReplyError && e.source === 'the calls select');
    assert.equal(db.inTransaction, false);
  });

  it('purge removes exactly the rows whose calls have left their windows', () => {
    let now = 5_000_000;
    const db = database('purge.db');
    const s = new SqliteStore(db, { clock: { now: () => now } });
    s.installSchema();
    s.consumeMany([{ key: 'short', limit: l(5, 150) }, { key: 'both', limit: l(5, 150) }]);
    s.consumeMany([{ key: 'long', limit: l(5, 60_000) }, { key: 'both', limit: l(5, 60_000) }]);
    s.consume('short', l(5, 150));
    s.hit('w-short', 150);
    s.hit('w-long', 60_000);
    assert.deepEqual(s.purge(), { calls: 0, windows: 0 });
    now += 149;
    assert.deepEqual(s.purge(), { calls: 0, windows: 0 });
    now += 1;
    assert.deepEqual(s.purge(), { calls: 3, windows: 1 });
    const keys = db.prepare('SELECT key FROM ratewindow_calls ORDER BY key').pluck().all();
    assert.deepEqual(keys, ['both', 'long']);
    assert.deepEqual(db.prepare('SELECT key FROM ratewindow_windows').pluck().all(), ['w-long']);
  });
});
