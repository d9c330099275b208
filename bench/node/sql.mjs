// Benchmark: ratewindow's PostgresStore and SqliteStore against rate-limiter-flexible's
// RateLimiterPostgres and RateLimiterSQLite, and PostgresStore against a bare `SELECT 1` on the same pool.
//
// Workload (the peers' harness): 10,000 keys taken round-robin, 5 uses per window. Two traffic variants:
//   - refusals: every key filled to its 5 uses first (a 600 s window, so none leaves during the run), then
//     every timed call is a refusal — abuse traffic, what a limiter mostly answers under attack;
//   - allowed:  1,000 uses per 10 s, so every timed call is allowed and recorded.
// Contenders run interleaved, the order rotating each round (a, b, c, b, c, a ...); each round gives a ratio per pair, and the median of
// the per-round ratios is reported, so drift of the machine affects all alike. A refusal is an answer
// (rate-limiter-flexible rejects; the rejection is caught and counted).
//   PostgreSQL (the machine's server over its unix socket, a pg Pool of 8 each; 1 and 16 calls in flight):
//   - ours:      PostgresStore.consume (one statement: the installed function reads the key's row; a refusal
//                writes nothing, an allowed call writes the row back by compare-and-set), commits relaxed
//                (synchronous_commit off for the call's own transaction: the default)
//   - ours-dur:  the same with { durable: true } (each call waits for its WAL flush)
//   - rlf:       RateLimiterPostgres.consume (one upsert), on a pool with the server's default commit
//                (waits for the WAL flush each call)
//   - rlf-rel:   the same on a pool whose connections run with synchronous_commit = off
//   - bare:      pool.query('SELECT 1') (the floor: one round trip)
//   - batch3:    PostgresStore.consumeMany of 3 entries (still one statement), in tables of its own
//   - ours-unl:  ours (relaxed) on tables of its own made UNLOGGED after installSchema (the opt-in the
//                README documents: ALTER TABLE {p}_log SET UNLOGGED; no WAL for the counts, a crash
//                empties them)
//   Like for like: ours / rlf-rel (both relaxed) and ours-dur / rlf (both wait for the flush).
//   Round trips per call are counted on the pool ours runs on (target: 1).
//   CPU a call, per contender (medians over rounds): the client's (this process, process.cpuUsage) and
//   the server's (the pools' backends, found by application_name, their /proc/<pid>/schedstat time on
//   CPU, when the server runs on this machine) - less load-dependent than the rates.
//   SQLite (better-sqlite3, a file in a temp dir, WAL, one call at a time):
//   - ours:    SqliteStore.consume (BEGIN IMMEDIATE, trim, select, insert, COMMIT; synchronous)
//   - rlf:     RateLimiterSQLite.consume with storeType 'better-sqlite3'
//
//   node bench/node/sql.mjs               full run (~2 min)
//   BENCH_QUICK=1 node bench/node/sql.mjs a smoke run (1,000 keys, ~6 s)
//   BENCH_ROUNDS=9 BENCH_RUN_MS=400 BENCH_VARIANTS=allowed BENCH_SQLITE=0 node bench/node/sql.mjs
//                                         rounds, ms per contender and round, which variants
//                                         (refusals,allowed), and whether the SQLite part runs
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
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
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (quick ? 1 : 5));
const RUN_MS = Number(process.env.BENCH_RUN_MS ?? (quick ? 80 : 400));
const VARIANTS = (process.env.BENCH_VARIANTS ?? 'refusals,allowed').split(',');
const load = () => loadavg().map((x) => x.toFixed(1)).join(' ');
const N = quick ? 1_000 : 10_000; // the smoke run fills fewer keys
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const LIMIT = { uses: 5, windowMs: 10_000 };
const FULL = { uses: 5, windowMs: 600_000 };
const OPEN = { uses: 1000, windowMs: 10_000 };
const tag = `${process.pid}_${Date.now().toString(36)}`;
const APP = `rw_bench_${tag}`;

/**
 * The CPU the server spent so far in the backends `pids` (ns on CPU, `/proc/<pid>/schedstat`; 0 when the
 * server is not on this machine).
 */
function serverNs(pids) {
  let ns = 0;
  for (const pid of pids) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // not on this machine, or gone
    }
  }
  return ns;
}

/**
 * Runs `op(i)` with `inflight` calls in flight for `ms`: completed calls per second, and the CPU a call
 * of this process (client, µs) and of the backends `pids` (server, µs; load-independent where the rate is
 * not).
 */
async function throughput(op, inflight, ms = RUN_MS, pids = []) {
  let next = 0;
  let done = 0;
  const server = serverNs(pids);
  const cpu = process.cpuUsage();
  const start = performance.now();
  const end = start + ms;
  const worker = async () => {
    while (performance.now() < end) {
      await op(next++);
      done++;
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  const elapsed = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return { rate: (done * 1000) / elapsed, client: (used.user + used.system) / done, server: (serverNs(pids) - server) / 1000 / done };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (x) => Math.round(x).toLocaleString('en-US').padStart(8);
const ignoreRefusal = (p) => p.catch((e) => { if (e instanceof Error) throw e; });

/**
 * Interleaved rounds: each contender's median rate, the median over rounds of each pair's ratio, and each
 * contender's median client and server CPU a call (µs; server: the backends `pids`).
 */
async function interleaved(contenders, inflight, pairs = [], pids = []) {
  const rounds = [];
  const entries = Object.entries(contenders);
  for (let r = 0; r < ROUNDS; r++) {
    const round = {};
    // A rotating order: no contender always runs first (after the previous round's last) or last.
    for (let k = 0; k < entries.length; k++) {
      const [name, op] = entries[(k + r) % entries.length];
      round[name] = await throughput(op, inflight, RUN_MS, pids);
    }
    rounds.push(round);
  }
  const of = (field) => Object.fromEntries(Object.keys(contenders).map((k) => [k, median(rounds.map((r) => r[k][field]))]));
  const ratios = Object.fromEntries(pairs.map(([a, b]) => [`${a}/${b}`, median(rounds.map((r) => r[a].rate / r[b].rate))]));
  return { rates: of('rate'), client: of('client'), server: of('server'), ratios };
}

function pgPool(options = {}) {
  // Idle connections stay open (their backends' CPU is read), named so the bench finds their backends.
  const pool = new pg.Pool({ host: '/var/run/postgresql', user: 'postgres', database: 'test', max: 8, idleTimeoutMillis: 0, application_name: APP, ...options });
  pool.on('error', () => {});
  return pool;
}

function rlfLimiter(pool, tableName, limit) {
  return new Promise((resolve, reject) => {
    const limiter = new RateLimiterPostgres(
      { storeClient: pool, storeType: 'pool', tableName, points: limit.uses, duration: limit.windowMs / 1000, clearExpiredByTimeout: false },
      (e) => (e ? reject(e) : resolve(limiter)),
    );
  });
}

/** Runs `op(key)` over every key, `width` at a time. */
async function eachKey(op, width = 32) {
  for (let i = 0; i < N; i += width) await Promise.all(KEYS.slice(i, i + width).map(op));
}

async function postgres() {
  const pool = pgPool();
  const relaxedPool = pgPool({ options: '-c synchronous_commit=off' });
  let roundTrips = 0;
  const counted = { query: (config) => (roundTrips++, pool.query(config)) };
  const prefix = `rw_bench_${tag}`;
  const durPrefix = `rw_benchd_${tag}`;
  const rlfTables = [];
  const store = PostgresStore.using(counted, { prefix });
  const durable = PostgresStore.using(pool, { prefix: durPrefix, durable: true });
  // Batches of 3 in tables of their own, so their writes do not touch the rows `ours` reads.
  const batchPrefix = `rw_bench3_${tag}`;
  const batches = PostgresStore.using(counted, { prefix: batchPrefix });
  await store.installSchema();
  await durable.installSchema();
  await batches.installSchema();
  // The UNLOGGED opt-in: the same store and statements on tables that write no WAL.
  const unlPrefix = `rw_benchu_${tag}`;
  const unlogged = PostgresStore.using(pool, { prefix: unlPrefix });
  await unlogged.installSchema();
  await pool.query(`ALTER TABLE ${unlPrefix}_log SET UNLOGGED; ALTER TABLE ${unlPrefix}_windows SET UNLOGGED`);
  try {
    await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT 1'))); // connections open
    await Promise.all(Array.from({ length: 8 }, () => relaxedPool.query('SELECT 1')));
    console.log(`PostgreSQL (pg Pool of 8, unix socket), calls/s, ${ROUNDS} interleaved rounds of ${RUN_MS} ms; ratios are medians of per-round ratios; load ${load()}`);
    let calls = 0;
    for (const variant of VARIANTS) {
      const limit = variant === 'refusals' ? FULL : OPEN;
      const table = (t) => { const name = `rlf_bench_${t}_${variant}_${tag}`; rlfTables.push(name); return name; };
      const rlf = await rlfLimiter(pool, table('d'), limit);
      const rlfRel = await rlfLimiter(relaxedPool, table('r'), limit);
      if (variant === 'refusals') {
        // Every key at its limit: ours by five passes of batches (one call per key per pass), rlf by set().
        for (let pass = 0; pass < limit.uses; pass++) {
          for (const s of [store, durable, unlogged]) {
            for (let i = 0; i < N; i += 500) await s.consumeMany(KEYS.slice(i, i + 500).map((key) => ({ key, limit })));
          }
        }
        await eachKey((key) => rlf.set(key, limit.uses, limit.windowMs / 1000));
        await eachKey((key) => rlfRel.set(key, limit.uses, limit.windowMs / 1000));
        const probe = await store.consume(KEYS[0], limit);
        const probeRlf = await rlf.consume(KEYS[0]).then(() => true, () => false);
        if (probe.allowed || probeRlf) throw new Error('the fill left a key below its limit');
      }
      roundTrips = 0;
      calls = 0;
      const contenders = {
        ours: (i) => (calls++, store.consume(KEYS[i % N], limit)),
        'ours-dur': (i) => durable.consume(KEYS[i % N], limit),
        'ours-unl': (i) => unlogged.consume(KEYS[i % N], limit),
        rlf: (i) => ignoreRefusal(rlf.consume(KEYS[i % N])),
        'rlf-rel': (i) => ignoreRefusal(rlfRel.consume(KEYS[i % N])),
        bare: () => pool.query('SELECT 1'),
        batch3: (i) => (calls++, batches.consumeMany([
          { key: `a:${KEYS[i % N]}`, limit: LIMIT },
          { key: `b:${KEYS[i % N]}`, limit: LIMIT },
          { key: `c:${KEYS[i % N]}`, limit: LIMIT },
        ])),
      };
      const pairs = [['ours', 'rlf-rel'], ['ours-dur', 'rlf'], ['ours', 'rlf'], ['ours', 'bare'], ['ours-unl', 'rlf-rel'], ['ours-unl', 'rlf'], ['ours-unl', 'bare'], ['batch3', 'ours']];
      console.log(`  ${variant}${variant === 'refusals' ? ' (every key full: 5 uses per 600 s)' : ' (1,000 uses per 10 s)'}`);
      // The pools' backends (both pools' connections are open), whose CPU each run reads.
      const { rows: backends } = await pool.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [APP]);
      const pids = backends.map((b) => b.pid);
      for (const inflight of [1, 16]) {
        const { rates: m, client, server, ratios } = await interleaved(contenders, inflight, pairs, pids);
        const names = Object.keys(contenders);
        console.log(`    in flight ${String(inflight).padStart(2)}: ${names.map((k) => `${k} ${fmt(m[k])}`).join('  ')}`);
        console.log(`                  ${Object.entries(ratios).map(([k, v]) => `${k} ${v.toFixed(2)}x`).join('  ')}`);
        const us = (x) => x.toFixed(1);
        console.log(`                  CPU a call, client / server us: ${names.map((k) => `${k} ${us(client[k])} / ${us(server[k])}`).join('  ')}`);
      }
      console.log(`    round trips per call (ours, consume and consumeMany): ${(roundTrips / calls).toFixed(3)}; load ${load()}`);
    }
  } finally {
    for (const p of [prefix, durPrefix, unlPrefix, batchPrefix]) {
      const { rows } = await pool.query(`SELECT oid::regprocedure::text AS f FROM pg_proc WHERE proname LIKE $1`, [`${p.replace(/_/g, '\\_')}\\_%`]);
      for (const { f } of rows) await pool.query(`DROP FUNCTION IF EXISTS ${f}`);
      await pool.query(`DROP TABLE IF EXISTS ${p}_log, ${p}_calls, ${p}_windows, ${p}_locks`);
    }
    for (const t of rlfTables) await pool.query(`DROP TABLE IF EXISTS ${t}`);
    await pool.end();
    await relaxedPool.end();
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
    const { rates: m, ratios } = await interleaved(
      {
        ours: async (i) => store.consume(KEYS[i % N], LIMIT),
        rlf: (i) => ignoreRefusal(rlf.consume(KEYS[i % N])),
      },
      1,
      [['ours', 'rlf']],
    );
    console.log('SQLite (better-sqlite3, WAL, one file), 5 uses per 10 s, calls/s, median of', ROUNDS, 'interleaved rounds');
    console.log(`  ours ${fmt(m.ours)}  rlf ${fmt(m.rlf)}  | ours/rlf ${ratios['ours/rlf'].toFixed(2)}x (median of per-round ratios)`);
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await postgres();
if (process.env.BENCH_SQLITE !== '0') await sqlite();
