// Exactly once under contention: 4 processes x 64 concurrent calls at one key with uses = 10 let
// exactly 10 through, on PostgreSQL and on one SQLite file; the same for 3-entry batches; and batches
// naming the same keys in opposite orders neither deadlock nor overcount.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import Database from 'better-sqlite3';

import { PostgresStore, SqliteStore } from '../dist/index.js';
import { dropPg, pgPool, runPrefix, tempDir } from './sql-helpers.mjs';

const WORKER = fileURLToPath(new URL('./sql-contention-worker.mjs', import.meta.url));
const PROCESSES = 4;
const CALLS = 64;
const USES = 10;

/** Runs the processes together (all ready, then `go` at once); resolves to the allowed calls in all. */
async function contend(kind, target, mode) {
  const run = `${mode}:${Math.random().toString(36).slice(2)}`;
  const children = Array.from({ length: PROCESSES }, () =>
    spawn(process.execPath, [WORKER, kind, target, mode, String(CALLS), String(USES), run], {
      stdio: ['pipe', 'pipe', 'inherit'],
    }),
  );
  const lines = children.map((child) => {
    child.stdout.setEncoding('utf8');
    const queue = [];
    let buffer = '';
    let waiting;
    child.stdout.on('data', (chunk) => {
      buffer += chunk;
      let i;
      while ((i = buffer.indexOf('\n')) >= 0) {
        queue.push(buffer.slice(0, i));
        buffer = buffer.slice(i + 1);
      }
      if (waiting && queue.length) {
        const resolve = waiting;
        waiting = undefined;
        resolve(queue.shift());
      }
    });
    return () => new Promise((resolve) => (queue.length ? resolve(queue.shift()) : (waiting = resolve)));
  });
  for (const next of lines) assert.equal(await next(), 'ready');
  for (const child of children) child.stdin.end('go\n');
  let allowed = 0;
  for (const next of lines) allowed += JSON.parse(await next()).allowed;
  for (const child of children) {
    if (child.exitCode === null) await once(child, 'exit');
    assert.equal(child.exitCode, 0);
  }
  return allowed;
}

describe('PostgresStore under contention (4 processes x 64 calls)', () => {
  const pool = pgPool(2);
  const prefix = runPrefix('pgrace');
  before(() => PostgresStore.using(pool, { prefix }).installSchema());
  after(async () => {
    await dropPg(pool, prefix);
    await pool.end();
  });
  it('one key, uses = 10: exactly 10 allowed', async () => {
    assert.equal(await contend('pg', prefix, 'single'), USES);
  });
  it('3-entry batches: exactly 10 allowed', async () => {
    assert.equal(await contend('pg', prefix, 'batch'), USES);
  });
  it('3-entry batches in opposite orders: no deadlock, exactly 10 allowed', async () => {
    assert.equal(await contend('pg', prefix, 'opposite'), USES);
  });
});

describe('SqliteStore under contention (4 processes x 64 calls, one file)', () => {
  const tmp = tempDir();
  const file = tmp.file('race.db');
  before(() => {
    const db = new Database(file);
    db.exec('PRAGMA journal_mode = WAL');
    new SqliteStore(db).installSchema();
    db.close();
  });
  after(() => tmp.remove());
  it('one key, uses = 10: exactly 10 allowed', async () => {
    assert.equal(await contend('sqlite', file, 'single'), USES);
  });
  it('3-entry batches: exactly 10 allowed', async () => {
    assert.equal(await contend('sqlite', file, 'batch'), USES);
  });
  it('3-entry batches in opposite orders: exactly 10 allowed', async () => {
    assert.equal(await contend('sqlite', file, 'opposite'), USES);
  });
});
