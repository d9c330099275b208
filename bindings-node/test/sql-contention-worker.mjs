// One process of the contention suite: opens its own pool (PostgreSQL) or connection (SQLite), says
// `ready`, waits for `go` on stdin, then fires its calls at once and prints how many were allowed.
// argv: kind (pg | sqlite), prefix or file, mode (single | batch | opposite), calls, uses, run id.
import Database from 'better-sqlite3';

import { PostgresStore, SqliteStore } from '../dist/index.js';
import { pgPool } from './sql-helpers.mjs';

const [kind, target, mode, calls, uses, run] = process.argv.slice(2);
const limit = { uses: Number(uses), windowMs: 60_000 };
const keys = [`${run}:a`, `${run}:b`, `${run}:c`];
const entries = (i) => {
  if (mode === 'single') return undefined;
  const ordered = keys.map((key) => ({ key, limit }));
  return mode === 'opposite' && i % 2 === 1 ? ordered.reverse() : ordered;
};

let store;
let close;
if (kind === 'pg') {
  const pool = pgPool(8);
  store = PostgresStore.using(pool, { prefix: target });
  await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT 1'))); // connections open
  close = () => pool.end();
} else {
  const db = new Database(target);
  store = new SqliteStore(db);
  close = () => db.close();
}

process.stdout.write('ready\n');
await new Promise((resolve) => process.stdin.once('data', resolve));
const verdicts = await Promise.all(
  Array.from({ length: Number(calls) }, async (_, i) => {
    const e = entries(i);
    return e === undefined ? store.consume(keys[0], limit) : store.consumeMany(e);
  }),
);
process.stdout.write(`${JSON.stringify({ allowed: verdicts.filter((v) => v.allowed).length })}\n`);
await close();
process.stdin.pause();
