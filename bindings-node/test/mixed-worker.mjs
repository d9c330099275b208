// One process of the mixed-batch race (mixed-stores.test.mjs): its own connection to the SQLite file,
// `calls` batches of its user's GCRA and counter entries with the global sliding log of `uses`; prints
// how many were allowed. argv: file, worker index, calls, uses.
import Database from 'better-sqlite3';

import { SqliteStore } from '../dist/index.js';

const [file, index, calls, uses] = process.argv.slice(2);
const db = new Database(file);
const store = new SqliteStore(db);
let allowed = 0;
for (let i = 0; i < Number(calls); i++) {
  const v = store.consumeMany([
    { key: `user${index}`, limit: { algorithm: 'gcra', uses: 100, windowMs: 1000, burst: 100 } },
    { key: `user${index}`, limit: { algorithm: 'counter', uses: 100, windowMs: 60_000 } },
    { key: 'global', limit: { uses: Number(uses), windowMs: 60_000 } },
  ]);
  if (v.allowed) allowed++;
}
db.close();
process.stdout.write(`${JSON.stringify({ allowed })}\n`);
