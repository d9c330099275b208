// One contending process of mixed-stores.test.mjs on PostgreSQL: opens its own pool, waits for the
// common start time, fires `calls` concurrent mixed batches (the user's GCRA and counter, one global
// sliding log of `uses`; the entries in rotated orders) and prints how many were allowed.
//   node mixed-pg-worker.mjs <prefix> <startAt ms> <calls> <uses> <worker>
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';

import { pgPool } from './sql-helpers.mjs';

const { PostgresStore } = createRequire(import.meta.url)('../dist/index.js');
const [prefix, startAt, calls, uses, worker] = process.argv.slice(2);
const pool = pgPool(8);
const store = PostgresStore.using(pool, { prefix });
await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT 1'))); // connections open
await sleep(Math.max(0, Number(startAt) - Date.now()));
const verdicts = await Promise.all(
  Array.from({ length: Number(calls) }, (_, i) => {
    const user = `api:user${worker}-${i % 4}`;
    const entries = [
      { key: user, limit: { algorithm: 'gcra', uses: 1000, windowMs: 60_000, burst: 1000 } },
      { key: user, limit: { algorithm: 'counter', uses: 1000, windowMs: 3_600_000 } },
      { key: 'api', limit: { uses: Number(uses), windowMs: 3_600_000 } },
    ];
    return store.consumeMany(i % 2 === 0 ? entries : entries.reverse());
  }),
);
process.stdout.write(JSON.stringify({ allowed: verdicts.filter((v) => v.allowed).length }));
await pool.end();
