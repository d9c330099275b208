// Batches mixing algorithms (sliding-log, GCRA and counter entries in one all-or-nothing consumeMany)
// on SqliteStore (better-sqlite3, real files): a seeded walk equal to MemoryStore field by field,
// processes racing a batch whose global entry is the bottleneck (exactly its uses pass), the release
// of the sliding-log calls, bad input (typed errors, nothing written); the same on RedisStore (single
// server: a walk on the server's clock, 4 processes x 64 concurrent batches; a Cluster when the keys share
// a slot, else UnsupportedError); and on PostgresStore (one statement a batch: a walk on the server's
// clock, 4 processes x 64 concurrent batches, release, bad input). RATEWINDOW_SEED replays a walk.
import { after, describe, it } from 'node:test';
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

// PostgreSQL: one statement ({prefix}_mixed) locks every key's row in one global order, reads the
// state on the server's clock, counts all or nothing and answers the state it read; the engine decides
// from it as MemoryStore does (and refuses rows whose verdict disagrees).
describe('PostgresStore: batches mixing algorithms', { concurrency: 1 }, async () => {
  const { pgPool, runPrefix, dropPg } = await import('./sql-helpers.mjs');
  const pool = pgPool(4);
  const prefix = runPrefix('mixed');
  const store = PostgresStore.using(pool, { prefix });
  await store.installSchema();
  const WALK = [
    ['a', [sliding(3, 120), sliding(5, 300)]],
    ['a', [gcra(3, 120, 2), gcra(3, 120, 3)]],
    ['b', [gcra(10, 120, 5), gcra(7, 360, 4)]],
    ['c', [counter(4, 120)]],
    ['d', [counter(9, 90), counter(9, 180)]],
    ['g', [sliding(6, 180)]],
  ];
  let n = 0;
  after(async () => {
    await dropPg(pool, prefix);
    await pool.end();
  });

  it('a seeded walk on the server\'s clock gives MemoryStore\'s verdicts, field by field (one statement a call)', async () => {
    const seed = Number(process.env.RATEWINDOW_SEED ?? (Date.now() % 2 ** 31));
    console.log(`RATEWINDOW_SEED=${seed}`);
    const r = rng(seed);
    // The host sees every statement's rows: the mixed statement's last row is (-1, NULL, now, did),
    // and its clock is never before the newest call it read (rows (0, key, at, expires_at)).
    const clock = { t: 0, now() { return this.t; } };
    let statements = 0;
    const query = async (sql, params) => {
      statements++;
      const { rows } = await pool.query({ text: sql, values: params, rowMode: 'array' });
      const last = rows[rows.length - 1];
      if (last !== undefined && Number(last[0]) === -1) {
        clock.t = Math.max(Number(last[2]), ...rows.filter((row) => Number(row[0]) === 0).map((row) => Number(row[2])));
      }
      return rows;
    };
    const tag = `walk${n++}:`;
    const pg = PostgresStore.using(query, { prefix });
    const memory = new MemoryStore({ clock });
    for (let step = 0; step < 250; step++) {
      await new Promise((done) => setTimeout(done, r(4) * r(25)));
      const entries = Array.from({ length: 1 + r(4) }, () => {
        const [key, choices] = WALK[r(WALK.length)];
        const limit = choices[r(choices.length)];
        const top = limit.algorithm === 'gcra' ? limit.burst : limit.uses;
        return { key: tag + key, limit, cost: 1 + r(Math.min(top, 3)) };
      });
      if (!entries.some((e) => e.limit.algorithm !== undefined)) entries.push({ key: `${tag}b`, limit: gcra(10, 120, 5), cost: 1 });
      const peek = r(4) === 0;
      const before = statements;
      const got = peek ? await pg.peekMany(entries) : await pg.consumeMany(entries);
      assert.equal(statements - before, 1, 'one statement a batch');
      const want = peek ? memory.peekMany(entries) : memory.consumeMany(entries);
      assert.deepEqual(fields(got), fields(want), `step ${step} at ${clock.t}: ${JSON.stringify(entries)} (RATEWINDOW_SEED=${seed})`);
      const slides = entries.some((e) => e.limit.algorithm === undefined);
      assert.equal(typeof got.release === 'function', got.allowed && !peek && slides);
    }
  });

  it('release() gives back the sliding-log calls (a cost of 2 too); the GCRA use stays taken; a refusal writes nothing', async () => {
    const t = `rel${n++}:`;
    const entries = [
      { key: `${t}u`, limit: gcra(2, 60_000, 2) },
      { key: `${t}all`, limit: sliding(2, 60_000), cost: 2 },
    ];
    const times = async () => (await pool.query(`SELECT coalesce(cardinality(ats), 0) AS n FROM ${prefix}_log WHERE key = $1`, [`${t}all`])).rows[0]?.n ?? 0;
    const v = await store.consumeMany(entries);
    assert.equal(v.allowed, true);
    assert.equal(await times(), 2);
    const refused = await store.consumeMany([{ key: `${t}new`, limit: counter(5, 60_000) }, ...entries]);
    assert.deepEqual([refused.allowed, refused.blocked], [false, 2]);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${prefix}_counters WHERE key = $1`, [`${t}new`])).rows[0].n, 0, 'nothing written');
    await v.release();
    assert.equal(await times(), 0);
    assert.equal((await store.consumeMany(entries)).allowed, true);
    // 1 of the burst of 2 was left before this call, and this call took it.
    assert.equal((await store.peek(`${t}u`, gcra(2, 60_000, 2))).allowed, false);
  });

  it('bad input: typed errors naming the entry, nothing sent', async () => {
    const never = () => {
      throw new Error('nothing may be sent');
    };
    const idle = PostgresStore.using({ query: never });
    await assert.rejects(
      async () => idle.consumeMany([{ key: 'u', limit: gcra(2, 1000, 2) }, { key: 'all', limit: sliding(3, 1000), cost: 4 }]),
      (e) => e instanceof InvalidArgumentError && e.field === 'entries[1].cost',
    );
    await assert.rejects(
      async () => idle.peekMany([{ key: 'all', limit: sliding(3, 1000) }, { key: 'u', limit: gcra(2, 1000, 0) }]),
      (e) => e instanceof InvalidLimitError && e.field === 'burst',
    );
  });

  it('4 processes x 64 concurrent batches whose global entry is the bottleneck: exactly its uses pass, all or nothing', async () => {
    const worker = fileURLToPath(new URL('./mixed-pg-worker.mjs', import.meta.url));
    const startAt = Date.now() + 2000; // after every process has connected
    const outs = await Promise.all(
      [0, 1, 2, 3].map(
        (i) =>
          new Promise((resolve, reject) => {
            const child = spawn(process.execPath, [worker, prefix, String(startAt), '64', '20', String(i)], { stdio: ['ignore', 'pipe', 'inherit'] });
            let out = '';
            child.stdout.on('data', (d) => (out += d));
            child.on('error', reject);
            child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out).allowed) : reject(new Error(`worker ${i} exited ${code}`))));
          }),
      ),
    );
    assert.equal(outs.reduce((a, b) => a + b, 0), 20);
    assert.equal((await pool.query(`SELECT cardinality(ats) AS n FROM ${prefix}_log WHERE key = 'api'`)).rows[0].n, 20);
    // Every user's counter holds exactly the calls the global entry let pass.
    assert.equal(Number((await pool.query(`SELECT coalesce(sum(cur), 0) AS n FROM ${prefix}_counters WHERE key LIKE 'api:%'`)).rows[0].n), 20);
  });
});

// Redis: the engine reads every key (mixed.lua 'r', on the server's TIME), decides as MemoryStore does
// and writes only if nothing changed since (mixed.lua 'w'); a Cluster needs the keys in one slot.
// mixed.lua's read: mode 'r' and a reply of TIME's two fields then one item a key (a release, also
// mode 'r', answers one number).
const isMixedRead = (keys, args, reply) => args[0] === 'r' && Array.isArray(reply) && reply.length === keys.length + 2;
const serverMs = (reply) => Number(reply[0]) * 1000 + Math.floor(Number(reply[1]) / 1000);

describe('RedisStore: batches mixing algorithms', { concurrency: 1 }, async () => {
  const { clusterUp, ioredis, nodeRedis, nodeRedisCluster, ioredisCluster, redisBackend, sharedRedisUp } = await import('./redis-servers.mjs');
  sharedRedisUp();
  const prefix = () => `rwtest:mixed:${process.pid}:${Math.random().toString(36).slice(2)}:`;
  // Short windows: the walk runs on the server's clock, so time passes by sleeping.
  const WALK = [
    ['a', [sliding(3, 120), sliding(5, 300)]],
    ['a', [gcra(3, 120, 2), gcra(3, 120, 3)]],
    ['b', [gcra(10, 120, 5), gcra(7, 360, 4)]],
    ['c', [counter(4, 120)]],
    ['d', [counter(9, 90), counter(9, 180)]],
    ['g', [sliding(6, 180)]],
  ];
  for (const connect of [nodeRedis, ioredis]) {
    it(`${connect.name}: a seeded walk on the server's clock gives MemoryStore's verdicts, field by field`, async () => {
      const c = await connect();
      try {
        const seed = Number(process.env.RATEWINDOW_SEED ?? (Date.now() % 2 ** 31));
        console.log(`RATEWINDOW_SEED=${seed}`);
        const r = rng(seed);
        // The host sees every reply: the read's TIME is the clock MemoryStore then decides at.
        const clock = { t: 0, now() { return this.t; } };
        const watch = (run) => async (script, keys, args) => {
          const reply = await run(script, keys, args);
          if (isMixedRead(keys, args, reply)) clock.t = serverMs(reply);
          return reply;
        };
        const store = RedisStore.using(watch(c.run), { evalsha: watch(c.evalsha), prefix: prefix(), backend: redisBackend });
        const memory = new MemoryStore({ clock });
        for (let step = 0; step < 250; step++) {
          await new Promise((done) => setTimeout(done, r(4) * r(25)));
          const entries = Array.from({ length: 1 + r(4) }, () => {
            const [key, choices] = WALK[r(WALK.length)];
            const limit = choices[r(choices.length)];
            const top = limit.algorithm === 'gcra' ? limit.burst : limit.uses;
            return { key, limit, cost: 1 + r(Math.min(top, 3)) };
          });
          if (!entries.some((e) => e.limit.algorithm !== undefined)) entries.push({ key: 'b', limit: gcra(10, 120, 5), cost: 1 });
          const peek = r(4) === 0;
          const got = peek ? await store.peekMany(entries) : await store.consumeMany(entries);
          const want = peek ? memory.peekMany(entries) : memory.consumeMany(entries);
          assert.deepEqual(fields(got), fields(want), `step ${step} at ${clock.t}: ${JSON.stringify(entries)} (RATEWINDOW_SEED=${seed})`);
          const slides = entries.some((e) => e.limit.algorithm === undefined);
          assert.equal(typeof got.release === 'function', got.allowed && !peek && slides);
        }
      } finally {
        await c.close();
      }
    });
  }

  it('release() gives back the sliding-log calls (a cost of 2 too); the GCRA use stays taken', async () => {
    const c = await nodeRedis();
    try {
      const p = prefix();
      const store = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: p, backend: redisBackend });
      const entries = [
        { key: 'u', limit: gcra(2, 60_000, 2) },
        { key: 'all', limit: sliding(2, 60_000), cost: 2 },
      ];
      const v = await store.consumeMany(entries);
      assert.equal(v.allowed, true);
      assert.equal(await c.client.zCard(`${p}log:all`), 2);
      const refused = await store.consumeMany(entries);
      assert.deepEqual([refused.allowed, refused.blocked], [false, 1]);
      await v.release();
      assert.equal(await c.client.zCard(`${p}log:all`), 0);
      assert.equal((await store.consumeMany(entries)).allowed, true);
      // 1 of the burst of 2 was left before this call, and this call took it.
      assert.equal((await store.peek('u', gcra(2, 60_000, 2))).allowed, false);
    } finally {
      await c.close();
    }
  });

  it('bad input: typed errors naming the entry, nothing sent', async () => {
    const never = () => {
      throw new Error('nothing may be sent');
    };
    const store = RedisStore.using(never, { backend: redisBackend });
    await assert.rejects(
      async () => store.consumeMany([{ key: 'u', limit: gcra(2, 1000, 2) }, { key: 'all', limit: sliding(3, 1000), cost: 4 }]),
      (e) => e instanceof InvalidArgumentError && e.field === 'entries[1].cost',
    );
    await assert.rejects(
      async () => store.consumeMany([{ key: 'all', limit: sliding(3, 1000) }, { key: 'u', limit: gcra(2, 1000, 0) }]),
      (e) => e instanceof InvalidLimitError && e.field === 'burst',
    );
  });

  const worker = fileURLToPath(new URL('./mixed-redis-worker.mjs', import.meta.url));
  const contend = async (target, hashTag) => {
    const p = prefix();
    const startAt = Date.now() + 2000; // after every process has connected
    const kinds = ['node-redis', 'node-redis', 'ioredis', 'ioredis'];
    const outs = await Promise.all(
      kinds.map(
        (kind, i) =>
          new Promise((resolve, reject) => {
            const child = spawn(process.execPath, [worker, kind, target, String(startAt), '64', '20', p, hashTag ?? '-', String(i)], { stdio: ['ignore', 'pipe', 'inherit'] });
            let out = '';
            child.stdout.on('data', (d) => (out += d));
            child.on('error', reject);
            child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out).allowed) : reject(new Error(`worker ${kind} ${i} exited ${code}`))));
          }),
      ),
    );
    return { p, allowed: outs.reduce((a, b) => a + b, 0) };
  };

  it('4 processes x 64 concurrent batches whose global entry is the bottleneck: exactly its uses pass, all or nothing', async () => {
    const { p, allowed } = await contend('single');
    assert.equal(allowed, 20);
    const c = await nodeRedis();
    try {
      assert.equal(await c.client.zCount(`${p}log:api`, 0, '+inf'), 20);
      // Every user's counter holds exactly the calls the global entry let pass.
      let counted = 0;
      for (const key of await c.client.keys(`${p}ctr:*`)) counted += Number((await c.client.get(key)).split(':')[2]);
      assert.equal(counted, 20);
    } finally {
      await c.close();
    }
  });

  describe('on a Redis Cluster', { concurrency: 1 }, () => {
    clusterUp();
    it('4 processes x 64 concurrent batches with hashTag (one slot): exactly its uses pass', async () => {
      const { allowed } = await contend('cluster', ':');
      assert.equal(allowed, 20);
    });
    for (const connect of [nodeRedisCluster, ioredisCluster]) {
      it(`${connect.name}: keys in one slot count; keys across slots are refused (the call's unsupported error), nothing written`, async () => {
        const c = await connect();
        try {
          const p = prefix();
          const tagged = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: p, hashTag: ':', backend: redisBackend });
          const entries = [
            { key: 'api:alice', limit: gcra(5, 60_000, 5) },
            { key: 'api:alice', limit: counter(5, 60_000) },
            { key: 'api', limit: sliding(2, 60_000) },
          ];
          assert.deepEqual([(await tagged.consumeMany(entries)).allowed, (await tagged.consumeMany(entries)).allowed], [true, true]);
          const refused = await tagged.consumeMany(entries);
          assert.deepEqual([refused.allowed, refused.blocked], [false, 2]);
          const plain = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: p, backend: redisBackend });
          const spread = [{ key: 'alice', limit: gcra(5, 60_000, 5) }, { key: 'bob', limit: sliding(2, 60_000) }];
          // The engine's `unsupported` outcome of a running call crosses as an UnsupportedError naming the
          // batch's algorithm (as a build without mixed batches does), not a TypeError; a peek too.
          for (const call of [() => plain.consumeMany(spread), () => plain.peekMany(spread)]) {
            await assert.rejects(call, (e) => {
              assert.ok(e instanceof UnsupportedError, `UnsupportedError, got ${e?.constructor?.name}: ${e?.message}`);
              assert.ok(!(e instanceof TypeError));
              assert.equal(e.code, 'ERR_RATEWINDOW_UNSUPPORTED');
              assert.equal(e.algorithm, 'gcra');
              assert.match(e.message, /one slot/);
              return true;
            });
          }
          const counted = [{ key: 'carol', limit: sliding(2, 60_000) }, { key: 'dave', limit: counter(5, 60_000) }];
          await assert.rejects(() => plain.consumeMany(counted), (e) => e instanceof UnsupportedError && e.algorithm === 'counter' && /one slot/.test(e.message));
          assert.equal(Number(await c.client.exists(`${p}gcr:alice`)), 0, 'nothing written');
          assert.equal(Number(await c.client.exists(`${p}ctr:dave`)), 0, 'nothing written');
        } finally {
          await c.close();
        }
      });
    }
  });
});
