// Batches mixing algorithms (sliding-log, GCRA and counter entries in one all-or-nothing consumeMany)
// on SqliteStore (better-sqlite3, real files): a seeded walk equal to MemoryStore field by field,
// processes racing a batch whose global entry is the bottleneck (exactly its uses pass), the release
// of the sliding-log calls, bad input (typed errors, nothing written); RedisStore and PostgresStore
// refuse a mixed batch as UnsupportedError with nothing sent. RATEWINDOW_SEED replays a walk.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import Database from 'better-sqlite3';

import { InvalidArgumentError, InvalidLimitError, MemoryStore, PostgresStore, RedisStore, SqliteStore, UnsupportedError } from '../dist/index.js';
import { tempDir } from './sql-helpers.mjs';

const gcra = (uses, windowMs, burst) => ({ algorithm: 'gcra', uses, windowMs, burst });
const counter = (uses, windowMs) => ({ algorithm: 'counter', uses, windowMs });
const sliding = (uses, windowMs) => ({ uses, windowMs });

const fields = (v) => ({
  allowed: v.allowed,
  retryAfterMs: v.retryAfterMs,
  retryTimestamp: v.retryTimestamp ?? null,
  blocked: v.blocked ?? null,
  limit: v.limit,
  remaining: v.remaining,
  refillAfterMs: v.refillAfterMs,
  resetAfterMs: v.resetAfterMs,
});

/** xorshift32, from a seed the test prints. */
function rng(seed) {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x % n;
  };
}

// One key name under two algorithms is two keys; a key under two limits of its algorithm is one.
const RULES = [
  ['a', [sliding(3, 1000), sliding(5, 2500)]],
  ['a', [gcra(3, 1000, 2), gcra(3, 1000, 3)]],
  ['b', [gcra(10, 1000, 5), gcra(7, 3000, 4)]],
  ['c', [counter(4, 1000)]],
  ['d', [counter(9, 700), counter(9, 1400)]],
  ['g', [sliding(6, 1500)]],
];

describe('SqliteStore: batches mixing algorithms', () => {
  it('a seeded walk gives MemoryStore\'s verdicts, field by field', async () => {
    const seed = Number(process.env.RATEWINDOW_SEED ?? (Date.now() % 2 ** 31));
    console.log(`RATEWINDOW_SEED=${seed}`);
    const r = rng(seed);
    const tmp = tempDir();
    const db = new Database(tmp.file('walk.db'));
    try {
      const clock = { t: 1_000_000, now() { return this.t; } };
      const lite = new SqliteStore(db, { clock });
      lite.installSchema();
      const memory = new MemoryStore({ clock });
      for (let step = 0; step < 600; step++) {
        clock.t += r(4) * r(160);
        const entries = Array.from({ length: 1 + r(4) }, () => {
          const [key, choices] = RULES[r(RULES.length)];
          const limit = choices[r(choices.length)];
          const top = limit.algorithm === 'gcra' ? limit.burst : limit.uses;
          return { key, limit, cost: 1 + r(Math.min(top, 3)) };
        });
        // A batch of sliding entries only is the weighted sliding log's: at least one rate entry.
        if (!entries.some((e) => e.limit.algorithm !== undefined)) entries.push({ key: 'b', limit: gcra(10, 1000, 5), cost: 1 });
        const peek = r(4) === 0;
        const want = peek ? memory.peekMany(entries) : memory.consumeMany(entries);
        const got = peek ? lite.peekMany(entries) : lite.consumeMany(entries);
        assert.deepEqual(fields(got), fields(want), `step ${step} at ${clock.t}: ${JSON.stringify(entries)} (RATEWINDOW_SEED=${seed})`);
        const slides = entries.some((e) => e.limit.algorithm === undefined);
        assert.equal(typeof got.release === 'function', got.allowed && !peek && slides, `step ${step}: release() on an allowed consume with sliding entries`);
      }
    } finally {
      db.close();
      tmp.remove();
    }
  });

  it('release() gives back the sliding-log calls; the GCRA use stays taken', () => {
    const tmp = tempDir();
    const db = new Database(tmp.file('release.db'));
    try {
      const clock = { t: 5000, now() { return this.t; } };
      const store = new SqliteStore(db, { clock });
      store.installSchema();
      const entries = [
        { key: 'u', limit: gcra(2, 1000, 2) },
        { key: 'all', limit: sliding(1, 10_000) },
      ];
      const v = store.consumeMany(entries);
      assert.equal(v.allowed, true);
      clock.t = 5001;
      const refused = store.consumeMany(entries);
      assert.deepEqual([refused.allowed, refused.blocked], [false, 1]);
      v.release();
      assert.equal(db.prepare('SELECT count(*) AS n FROM ratewindow_calls').get().n, 0);
      assert.equal(store.consumeMany(entries).allowed, true);
      // 1 of the burst of 2 was left before this call, and this call took it.
      assert.equal(store.peek('u', gcra(2, 1000, 2)).allowed, false);
    } finally {
      db.close();
      tmp.remove();
    }
  });

  it('processes racing a batch whose global entry is the bottleneck: exactly its uses pass', async () => {
    const tmp = tempDir();
    const file = tmp.file('race.db');
    try {
      {
        const db = new Database(file);
        new SqliteStore(db).installSchema(); // the schema, before the race
        db.close();
      }
      const worker = fileURLToPath(new URL('./mixed-worker.mjs', import.meta.url));
      const run = (i) =>
        new Promise((resolve, reject) => {
          const child = spawn(process.execPath, [worker, file, String(i), '15', '20'], { stdio: ['ignore', 'pipe', 'inherit'] });
          let out = '';
          child.stdout.on('data', (d) => (out += d));
          child.on('error', reject);
          child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out).allowed) : reject(new Error(`worker ${i} exited ${code}`))));
        });
      const allowed = (await Promise.all([0, 1, 2, 3].map(run))).reduce((a, b) => a + b, 0);
      assert.equal(allowed, 20);
      const db = new Database(file);
      try {
        assert.equal(db.prepare("SELECT count(*) AS n FROM ratewindow_calls WHERE key = 'global'").get().n, 20);
        // All or nothing: the users' counters hold exactly the calls the global entry let pass.
        assert.equal(db.prepare('SELECT coalesce(sum(cur), 0) AS n FROM ratewindow_counters').get().n, 20);
      } finally {
        db.close();
      }
    } finally {
      tmp.remove();
    }
  });

  it('bad input: typed errors naming the entry, nothing written', () => {
    const tmp = tempDir();
    const db = new Database(tmp.file('bad.db'));
    try {
      const store = new SqliteStore(db);
      store.installSchema();
      const count = () =>
        db.prepare('SELECT (SELECT count(*) FROM ratewindow_calls) + (SELECT count(*) FROM ratewindow_gcra) + (SELECT count(*) FROM ratewindow_counters) AS n').get().n;
      assert.throws(
        () => store.consumeMany([{ key: 'u', limit: gcra(2, 1000, 2) }, { key: 'all', limit: sliding(3, 1000), cost: 4 }]),
        (e) => e instanceof InvalidArgumentError && e.field === 'entries[1].cost',
      );
      assert.throws(
        () => store.consumeMany([{ key: 'all', limit: sliding(3, 1000) }, { key: 'u', limit: gcra(2, 1000, 0) }]),
        (e) => e instanceof InvalidLimitError && e.field === 'burst',
      );
      assert.throws(() => store.consumeMany([{ key: 'u', limit: { algorithm: 'gcra', uses: '2', windowMs: 1000 } }]), TypeError);
      assert.throws(() => store.peekMany([{ key: 5, limit: counter(2, 1000) }]), TypeError);
      assert.equal(count(), 0);
    } finally {
      db.close();
      tmp.remove();
    }
  });
});

describe('RedisStore and PostgresStore: a mixed batch is UnsupportedError, nothing sent', () => {
  const never = () => {
    throw new Error('nothing may be sent');
  };
  const entries = [{ key: 'u', limit: gcra(2, 1000, 2) }, { key: 'all', limit: sliding(3, 1000) }];
  for (const [name, store] of [
    ['RedisStore', RedisStore.using(never)],
    ['PostgresStore', PostgresStore.using({ query: never })],
  ]) {
    it(name, async () => {
      await assert.rejects(() => store.consumeMany(entries), UnsupportedError);
      await assert.rejects(() => store.peekMany(entries), UnsupportedError);
    });
  }
});
