// Benchmark: ratewindow's PostgresStore and SqliteStore against rate-limiter-flexible's
// RateLimiterPostgres and RateLimiterSQLite, and PostgresStore against a bare `SELECT 1` on the same pool.
//
// Workload: 10,000 keys taken round-robin, 5 uses per 10 s. Contenders run interleaved (a, b, c, a, b,
// c ...) and the median of each is reported, so drift of the machine affects all alike. A refusal is an
// answer (rate-limiter-flexible rejects; the rejection is caught and counted).
//   PostgreSQL (the machine's server over its unix socket, a pg Pool of 8; 1 and 16 calls in flight):
//   - ours:    PostgresStore.consume (one statement: the installed function locks, trims, counts, records)
//   - bare:    pool.query('SELECT 1') (the floor: one round trip); target: ours within 2x of it
//   - rlf:     RateLimiterPostgres.consume (a fixed window, one upsert)
//   - batch3:  PostgresStore.consumeMany of 3 entries (still one statement)
//   Round trips per call are counted on the pool ours runs on (target: 1).
//   SQLite (better-sqlite3 12, a file in a temp dir, WAL, one call at a time):
//   - ours:    SqliteStore.consume (BEGIN IMMEDIATE, trim, select, insert, COMMIT; synchronous)
//   - rlf:     RateLimiterSQLite.consume with storeType 'better-sqlite3'
//
//   node bench/node/sql.mjs               full run (~30 s)
//   BENCH_QUICK=1 node bench/node/sql.mjs a smoke run (~3 s)
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { PostgresStore, SqliteStore } = require('./dist/index.js');
const { RateLimiterPostgres, RateLimiterSQLite } = require('rate-limiter-flexible');
const pg = require('pg');
const Database = require('better-sqlite3');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : 5;
const RUN_MS = quick ? 80 : 400;
const N = 10_000;
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const LIMIT = { uses: 5, windowMs: 10_000 };
const tag = `${process.pid}_${Date.now().toString(36)}`;

/** Runs `op(i)` with `inflight` calls in flight for `ms`; returns completed calls per second. */
async function throughput(op, inflight, ms = RUN_MS) {
  let next = 0;
  let done = 0;
  const start = performance.now();
  const end = start + ms;
  const worker = async () => {
    while (performance.now() < end) {
      await op(next++);
      done++;
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  return (done * 1000) / (performance.now() - start);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (x) => Math.round(x).toLocaleString('en-US').padStart(8);
const ignoreRefusal = (p) => p.catch((e) => { if (e instanceof Error) throw e; });

async function interleaved(contenders, inflight) {
  const results = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, op] of Object.entries(contenders)) results[name].push(await throughput(op, inflight));
  }
  return Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)]));
}

async function postgres() {
  const pool = new pg.Pool({ host: '/var/run/postgresql', user: 'postgres', database: 'test', max: 8, ...(process.env.BENCH_PG_OPTIONS ? { options: process.env.BENCH_PG_OPTIONS } : {}) });
  pool.on('error', () => {});
  let roundTrips = 0;
  const counted = { query: (config) => (roundTrips++, pool.query(config)) };
  const prefix = `rw_bench_${tag}`;
  const rlfTable = `rlf_bench_${tag}`;
  const store = PostgresStore.using(counted, { prefix });
  await store.installSchema();
  const rlf = await new Promise((resolve, reject) => {
    const limiter = new RateLimiterPostgres(
      { storeClient: pool, storeType: 'pool', tableName: rlfTable, points: LIMIT.uses, duration: LIMIT.windowMs / 1000, clearExpiredByTimeout: false },
      (e) => (e ? reject(e) : resolve(limiter)),
    );
  });
  try {
    await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT 1'))); // connections open
    roundTrips = 0;
    let calls = 0;
    const contenders = {
      ours: (i) => (calls++, store.consume(KEYS[i % N], LIMIT)),
      bare: () => pool.query('SELECT 1'),
      rlf: (i) => ignoreRefusal(rlf.consume(KEYS[i % N])),
      batch3: (i) => (calls++, store.consumeMany([
        { key: KEYS[i % N], limit: LIMIT },
        { key: `b:${KEYS[i % N]}`, limit: LIMIT },
        { key: `c:${KEYS[i % N]}`, limit: LIMIT },
      ])),
    };
    console.log('PostgreSQL (pg Pool of 8, unix socket), calls/s, median of', ROUNDS, 'interleaved rounds');
    for (const inflight of [1, 16]) {
      const m = await interleaved(contenders, inflight);
      console.log(
        `  in flight ${String(inflight).padStart(2)}: ours ${fmt(m.ours)}  bare SELECT 1 ${fmt(m.bare)}  rlf ${fmt(m.rlf)}  batch3 ${fmt(m.batch3)}` +
          `  | ours/bare ${(m.ours / m.bare).toFixed(2)}x  ours/rlf ${(m.ours / m.rlf).toFixed(2)}x  batch3/ours ${(m.batch3 / m.ours).toFixed(2)}x`,
      );
    }
    console.log(`  round trips per call (ours, consume and consumeMany): ${(roundTrips / calls).toFixed(3)}`);
  } finally {
    await pool.query(`DROP TABLE IF EXISTS ${prefix}_calls, ${prefix}_windows, ${rlfTable};
      DROP FUNCTION IF EXISTS ${prefix}_consume(text, text, text[], bigint[], bigint[]);
      DROP FUNCTION IF EXISTS ${prefix}_window(text, text, bigint, bigint);`);
    await pool.end();
  }
}

async function sqlite() {
  const dir = mkdtempSync(join(tmpdir(), 'ratewindow-bench-'));
  const db = new Database(join(dir, 'bench.db'));
  try {
    db.exec('PRAGMA journal_mode = WAL');
    const store = new SqliteStore(db);
    store.installSchema();
    const rlf = await new Promise((resolve, reject) => {
      const limiter = new RateLimiterSQLite(
        { storeClient: db, storeType: 'better-sqlite3', tableName: 'rlf_bench', points: LIMIT.uses, duration: LIMIT.windowMs / 1000, clearExpiredByTimeout: false },
        (e) => (e ? reject(e) : resolve(limiter)),
      );
    });
    const m = await interleaved(
      {
        ours: async (i) => store.consume(KEYS[i % N], LIMIT),
        rlf: (i) => ignoreRefusal(rlf.consume(KEYS[i % N])),
      },
      1,
    );
    console.log('SQLite (better-sqlite3, WAL, one file), calls/s, median of', ROUNDS, 'interleaved rounds');
    console.log(`  ours ${fmt(m.ours)}  rlf ${fmt(m.rlf)}  | ours/rlf ${(m.ours / m.rlf).toFixed(2)}x`);
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await postgres();
await sqlite();
