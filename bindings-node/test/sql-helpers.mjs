// Helpers of the PostgreSQL and SQLite suites: the machine's PostgreSQL (unix socket, user postgres,
// database test; `$USER` is empty here), a name prefix of our own per run, and temp SQLite files.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';

export const PG = {
  host: process.env.RATEWINDOW_PG_HOST ?? '/var/run/postgresql',
  user: process.env.RATEWINDOW_PG_USER ?? 'postgres',
  database: process.env.RATEWINDOW_PG_DATABASE ?? 'test',
};

/** A pool on the test database; errors of idle clients (a terminated backend) are expected in tests. */
export function pgPool(max = 4) {
  const pool = new pg.Pool({ ...PG, max });
  pool.on('error', () => {});
  return pool;
}

/** A name prefix no other run uses. */
export function runPrefix(label) {
  return `rw_${label}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
}

/** Drops what a PostgresStore schema under `prefix` created. */
export async function dropPg(pool, prefix) {
  // Every table the schema (of any version, the rates and lock tables too) created under the prefix.
  const tables = await pool.query(
    `SELECT c.oid::regclass::text AS t FROM pg_class c WHERE c.relkind IN ('r', 'p') AND c.relname LIKE $1`,
    [`${prefix.replace(/_/g, '\\_')}\\_%`],
  );
  for (const { t } of tables.rows) await pool.query(`DROP TABLE IF EXISTS ${t} CASCADE`);
  // Every function the schema (of any version) installed under the prefix.
  const { rows } = await pool.query(
    `SELECT p.oid::regprocedure::text AS f FROM pg_proc p WHERE p.proname LIKE $1`,
    [`${prefix.replace(/_/g, '\\_')}\\_%`],
  );
  for (const { f } of rows) await pool.query(`DROP FUNCTION IF EXISTS ${f} CASCADE`);
}

/** A temp directory for SQLite files, and its removal. */
export function tempDir() {
  const dir = mkdtempSync(join(tmpdir(), 'ratewindow-sqlite-'));
  return { dir, file: (name) => join(dir, name), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `node:sqlite` where this Node has it (22.5+), else undefined. */
export async function nodeSqlite() {
  try {
    return await import('node:sqlite');
  } catch {
    return undefined;
  }
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
