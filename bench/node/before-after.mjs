// Before / after: this checkout's Node package against an earlier build of it, in ONE interleaved run
// (before, after, before, after …; medians of per-round ratios), on the peers' workload: 10,000 keys
// round-robin, 5 uses per 10 s — filled first, then the timed calls are all refusals ("refused") —
// and an allowed-traffic variant: the same keys under a limit they never reach ("allowed").
//
//   git worktree add /tmp/before <commit> && (build its bindings-node: napi build --release + tsc)
//   RATEWINDOW_BEFORE=/tmp/before/bindings-node node bench/node/before-after.mjs
//   BENCH_QUICK=1 …   a smoke run;  BENCH_SKIP_PG=1 …   without the PostgreSQL rows
//   REDIS_PORT=6430 …   a private redis-server (default: the shared 6379);  BENCH_ROUNDS=15 …   more rounds
//
// Contenders: MemoryStore.consume; RedisStore.consume on node-redis and ioredis (1 and 64 in flight);
// PostgresStore.consume on pg (1 and 16 in flight). Each side has its own key prefix (and SQL name
// prefix), so the two never share state.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const afterPkg = join(here, '..', '..', 'bindings-node');
const beforePkg = process.env.RATEWINDOW_BEFORE;
if (!beforePkg) {
  console.error('set RATEWINDOW_BEFORE to the bindings-node folder of a built earlier checkout');
  process.exit(2);
}
const load = (pkg) => createRequire(join(pkg, 'package.json'))('./dist/index.js');
const sides = { before: load(beforePkg), after: load(afterPkg) };
const require = createRequire(join(afterPkg, 'package.json'));
const { createClient } = require('redis');
const IORedis = require('ioredis');
const pg = require('pg');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 2 : Number(process.env.BENCH_ROUNDS ?? 7);
const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379);
const RUN_MS = quick ? 80 : 300;
const N = 10_000;
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const LIMIT = { uses: 5, windowMs: 10_000 };
const run = `ba${Date.now().toString(36)}`;

async function throughput(op, inflight, ms) {
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

function throughputSync(op, ms) {
  let i = 0;
  const start = performance.now();
  const end = start + ms;
  while (performance.now() < end) for (let j = 0; j < 256; j++) op(i++);
  return (i * 1000) / (performance.now() - start);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Interleaves before and after; returns the median per-round ratio after/before (> 1: after is faster). */
async function compare(name, make, inflight, sync = false) {
  const ops = {};
  for (const [side, pkg] of Object.entries(sides)) ops[side] = await make(pkg, side);
  const time = (op) => (sync ? throughputSync(op, RUN_MS) : throughput(op, inflight, RUN_MS));
  for (const op of Object.values(ops)) await time(op); // warm up
  const ratios = [];
  const rates = { before: [], after: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const b = await time(ops.before);
    const a = await time(ops.after);
    rates.before.push(b);
    rates.after.push(a);
    ratios.push(a / b);
  }
  const row = {
    name,
    inflight,
    before: Math.round(median(rates.before)),
    after: Math.round(median(rates.after)),
    ratio: median(ratios).toFixed(3),
  };
  console.log(`${name.padEnd(34)} ${String(inflight).padStart(3)} in flight  before ${String(row.before).padStart(9)}/s  after ${String(row.after).padStart(9)}/s  after/before ${row.ratio}`);
  return row;
}

/** The allowed variant: the same round-robin keys under a limit they never reach. */
const ALLOWED = { uses: 1_000_000_000, windowMs: 10_000 };
const limitOf = (variant) => (variant === 'allowed' ? ALLOWED : LIMIT);

/** Fills every key of the refusal workload (5 uses each), so the timed calls are refusals. */
async function fill(consume) {
  const batch = 256;
  for (let i = 0; i < N * LIMIT.uses; i += batch) {
    await Promise.all(Array.from({ length: batch }, (_, j) => consume(KEYS[(i + j) % N])));
  }
}

const { loadavg } = await import('node:os');
console.log(`before: ${beforePkg}\nafter:  ${afterPkg}\nredis:  127.0.0.1:${REDIS_PORT}\n(throughput, median of ${ROUNDS} interleaved rounds; load average ${loadavg().map((x) => x.toFixed(2)).join(' ')})`);

for (const variant of ['refused', 'allowed']) {
  await compare(`memory consume (${variant})`, async (pkg) => {
    const store = new pkg.MemoryStore();
    if (variant === 'refused') for (let i = 0; i < N * LIMIT.uses; i++) store.consume(KEYS[i % N], LIMIT);
    const limit = limitOf(variant);
    return (i) => store.consume(KEYS[i % N], limit);
  }, 1, true);
}

const nr = createClient({ socket: { host: '127.0.0.1', port: REDIS_PORT } });
await nr.connect();
const io = new IORedis({ host: '127.0.0.1', port: REDIS_PORT });
const redisClients = {
  'node-redis': {
    run: (s, keys, args) => nr.eval(s, { keys, arguments: args }),
    evalsha: (sha, keys, args) => nr.evalSha(sha, { keys, arguments: args }),
  },
  ioredis: {
    run: (s, keys, args) => io.eval(s, keys.length, ...keys, ...args),
    evalsha: (sha, keys, args) => io.evalsha(sha, keys.length, ...keys, ...args),
  },
};
// The host side alone (no I/O): one RedisStore.consume whose client answers at once with the reply the
// server gave that side's script for the same call (captured once, refused and allowed), so the row
// is the JS layer plus the crossings. Reported as µs per call too.
for (const variant of ['refused', 'allowed']) {
  const row = await compare(`redis host side, no I/O (${variant})`, async (pkg, side) => {
    const prefix = `${run}:${side}:host:${variant}:`;
    let captured;
    const real = pkg.RedisStore.using(async (s, keys, args) => (captured = await nr.eval(s, { keys, arguments: args })), {
      evalsha: async (sha, keys, args) => (captured = await nr.evalSha(sha, { keys, arguments: args })),
      prefix,
    });
    const limit = limitOf(variant);
    for (let i = 0; i <= LIMIT.uses; i++) await real.consume('k', limit);
    const reply = captured;
    const answer = () => reply;
    const store = pkg.RedisStore.using(answer, { evalsha: answer, prefix });
    return (i) => store.consume(KEYS[i % N], limit);
  }, 1);
  console.log(`  µs per call: before ${(1e6 / row.before).toFixed(2)}, after ${(1e6 / row.after).toFixed(2)}`);
}

for (const [client, c] of Object.entries(redisClients)) {
  for (const variant of ['refused', 'allowed']) {
    for (const inflight of [1, 64]) {
      await compare(`redis ${client} consume (${variant})`, async (pkg, side) => {
        const store = pkg.RedisStore.using(c.run, { evalsha: c.evalsha, prefix: `${run}:${side}:${client}:${variant}:${inflight}:` });
        if (variant === 'refused') await fill((k) => store.consume(k, LIMIT));
        const limit = limitOf(variant);
        return (i) => store.consume(KEYS[i % N], limit);
      }, inflight);
    }
  }
}
await nr.destroy();
io.disconnect();

if (process.env.BENCH_SKIP_PG === '1') process.exit(0);
const pool = new pg.Pool({ host: '/var/run/postgresql', user: 'postgres', database: 'test', max: 16 });
for (const variant of ['refused', 'allowed']) {
  for (const inflight of [1, 16]) {
    await compare(`postgres pg consume (${variant})`, async (pkg, side) => {
      const store = pkg.PostgresStore.using(pool, { prefix: `${run}_${side}` });
      await store.installSchema();
      if (variant === 'refused') await fill((k) => store.consume(`${k}:${inflight}`, LIMIT));
      const limit = limitOf(variant);
      return (i) => store.consume(`${KEYS[i % N]}:${inflight}`, limit);
    }, inflight);
  }
}
// The bench's own tables and functions go.
const { rows } = await pool.query(
  `SELECT 'DROP TABLE IF EXISTS ' || quote_ident(relname) || ' CASCADE' AS sql FROM pg_class WHERE relkind = 'r' AND relname LIKE $1
   UNION ALL SELECT 'DROP FUNCTION IF EXISTS ' || oid::regprocedure::text FROM pg_proc WHERE proname LIKE $1`,
  [`${run}%`],
);
for (const { sql } of rows) await pool.query(sql).catch(() => {});
await pool.end();
