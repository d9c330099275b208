// The client's CPU a call on PostgreSQL (this process, process.cpuUsage), refusals, interleaved rounds:
// where a PostgresStore.consume's client time goes against node-postgres alone.
//   - bare:      pool.query('SELECT 1') (the simple protocol: one message)
//   - bareArr:   the same with rowMode 'array'
//   - bareNamed: SELECT 1 as a named statement (the extended protocol: Bind, Describe, Execute, Sync)
//   - pgOnly:    node-postgres alone running the store's one-entry statement (its text, as the store sends it)
//   - ours:      PostgresStore.consume (the same statement, through the engine)
// 2,000 keys filled to 5 uses per 600 s: every timed call is a refusal. A pg Pool of 8 over the unix socket.
//   node bench/node/sql-client.mjs        (N calls a round, INFL in flight, ROUNDS: 2000, 16, 5)
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
const require = createRequire(join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node', 'package.json'));
const { PostgresStore } = require('./dist/index.js');
const pg = require('pg');
const N = Number(process.env.N ?? 2000), INFL = Number(process.env.INFL ?? 16), ROUNDS = Number(process.env.ROUNDS ?? 5);
const pool = new pg.Pool({ host: '/var/run/postgresql', user: 'postgres', database: 'test', max: 8, idleTimeoutMillis: 0 });
const prefix = `rwp_cli_${process.pid}`;
const store = PostgresStore.using(pool, { prefix });
await store.installSchema();
const FULL = { uses: 5, windowMs: 600_000 };
const K = 2000;
const keys = Array.from({ length: K }, (_, i) => `user:${i}`);
for (let p = 0; p < 5; p++) for (let i = 0; i < K; i += 500) await store.consumeMany(keys.slice(i, i + 500).map((key) => ({ key, limit: FULL })));
if ((await store.consume(keys[0], FULL)).allowed) throw new Error('not full');
// The store's statement text, as it sends it.
let text;
{ const spy = { query: (c) => { text ??= c.text; return pool.query(c); } }; await PostgresStore.using(spy, { prefix }).consume(keys[1], FULL); }
let n = 0;
const ops = {
  bare: () => pool.query('SELECT 1'),
  bareArr: () => pool.query({ text: 'SELECT 1', rowMode: 'array' }),
  bareNamed: () => pool.query({ name: 'rwp_b', text: 'SELECT 1', values: [], rowMode: 'array' }),
  pgOnly: (i) => pool.query({ name: 'rwp_s', text, values: [keys[i % K], `x${n++}`, 5, 600000, true], rowMode: 'array' }),
  ours: (i) => store.consume(keys[i % K], FULL),
};
async function run(op) {
  let next = 0;
  const c = process.cpuUsage(); const t = performance.now();
  await Promise.all(Array.from({ length: INFL }, async () => { while (next < N) await op(next++); }));
  const u = process.cpuUsage(c);
  return { us: (u.user + u.system) / N, user: u.user / N, sys: u.system / N, rate: N * 1000 / (performance.now() - t) };
}
await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT 1')));
for (const op of Object.values(ops)) await run(op);
const res = Object.fromEntries(Object.keys(ops).map((k) => [k, []]));
for (let r = 0; r < ROUNDS; r++) { const names = Object.keys(ops); for (let k = 0; k < names.length; k++) { const name = names[(k + r) % names.length]; res[name].push(await run(ops[name])); } }
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
console.log(`in flight ${INFL}, ${N} calls x ${ROUNDS} rounds; load ${(await import('node:os')).loadavg().map((x) => x.toFixed(1)).join(' ')}`);
for (const [k, v] of Object.entries(res)) console.log(`${k.padEnd(10)} client CPU ${med(v.map((x) => x.us)).toFixed(1)} us/call (user ${med(v.map((x) => x.user)).toFixed(1)}, sys ${med(v.map((x) => x.sys)).toFixed(1)})  rate ${med(v.map((x) => x.rate)).toFixed(0)}/s`);
await pool.query(`DROP TABLE IF EXISTS ${prefix}_log, ${prefix}_windows, ${prefix}_locks`);
const { rows } = await pool.query(`SELECT oid::regprocedure::text AS f FROM pg_proc WHERE proname LIKE $1`, [`${prefix}\\_%`]);
for (const { f } of rows) await pool.query(`DROP FUNCTION IF EXISTS ${f}`);
await pool.end();
