// The lock on every store: the vectors of tests/vectors/lock/lock.json (memory and SQLite on an
// injected clock; a real Redis through node-redis and ioredis, and a real PostgreSQL, on the server's
// clock, each step at its offset from the case's start, `exact` steps skipped); the argument errors
// and block's schedule; block, withLock and restore by token; exactly one holder among 4 processes x
// 64 concurrent acquirers on Redis, Redis Cluster, PostgreSQL and SQLite.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createClient } from 'redis';

import { InvalidArgumentError, Lock, LockTimeoutError, MemoryStore, PostgresStore, RedisStore, SqliteStore, withLock } from '../dist/index.js';
import { repo } from './backend.mjs';
import { clusterUp, ioredisCluster, nodeRedisCluster, privateServer } from './redis-servers.mjs';
import { dropPg, pgPool, runPrefix, tempDir } from './sql-helpers.mjs';

const vectors = JSON.parse(readFileSync(join(repo, 'tests', 'vectors', 'lock', 'lock.json'), 'utf8'));
const WORKER = fileURLToPath(new URL('./lock-worker.mjs', import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const num = (v) => (v === 'NaN' ? NaN : v === 'Infinity' ? Infinity : v);
const BASE = 1_700_000_000_000;

/** Runs every case on `store` (made fresh per case by `make`); `clock` is set to each step's time, or
 * null: the store's own clock (each step at its offset from the case's start; `exact` steps skipped). */
async function runCases(make, clock) {
  for (const c of vectors.cases) {
    const store = await make();
    const prefix = `${Math.random().toString(36).slice(2)}:`;
    const start = Date.now();
    for (const step of c.steps) {
      if (clock === null && step.exact) continue;
      if (clock === null) await sleep(Math.max(0, start + step.at - Date.now()));
      else clock.t = BASE + step.at;
      const key = prefix + step.key;
      let got;
      switch (step.op) {
        case 'acquire':
          got = await store.lock(key, num(step.ttl), step.owner).acquire();
          break;
        case 'release':
          got = await store.lock(key, 1, step.owner).release();
          break;
        case 'force_release':
          got = await store.lock(key, 1).forceRelease();
          break;
        case 'owner':
          got = await store.lock(key, 1).currentOwner();
          break;
      }
      assert.deepEqual(got, step.expect, `${c.name}: ${JSON.stringify(step)}`);
    }
  }
}

describe('lock vectors', () => {
  it('memory (injected clock)', async () => {
    const clock = { t: BASE, now: () => clock.t };
    const store = new MemoryStore({ clock });
    await runCases(() => store, clock);
  });

  it('SQLite (injected clock)', async () => {
    const dir = tempDir();
    const db = new Database(dir.file('lock.db'));
    const clock = { t: BASE, now: () => clock.t };
    const store = new SqliteStore(db, { clock });
    store.installSchema();
    try {
      await runCases(() => store, clock);
    } finally {
      db.close();
      dir.remove();
    }
  });

  it('Redis through node-redis (server clock)', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:6379' });
    await client.connect();
    try {
      const store = RedisStore.using((s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), {
        evalsha: (sha, keys, args) => client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
        prefix: 'rwtest:nodelock:',
      });
      await runCases(() => store, null);
    } finally {
      await client.quit();
    }
  });

  it('Redis through ioredis (server clock)', async () => {
    const redis = new Redis({ host: '127.0.0.1', port: 6379 });
    try {
      const store = RedisStore.using((s, keys, args) => redis.eval(s, keys.length, keys, args), {
        evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, keys, args),
        prefix: 'rwtest:nodelock:',
      });
      await runCases(() => store, null);
    } finally {
      await redis.quit();
    }
  });

  it('Redis through node-redis with `command`: acquire a plain SET NX PX (server clock)', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:6379' });
    await client.connect();
    try {
      const sent = [];
      const store = RedisStore.using((s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), {
        evalsha: (sha, keys, args) => client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
        command: (args) => (sent.push(args[0]), client.sendCommand(args)),
        prefix: 'rwtest:nodelock:',
      });
      await runCases(() => store, null);
      assert.deepEqual([...new Set(sent)].sort(), ['DEL', 'GET', 'SET']);
    } finally {
      await client.quit();
    }
  });

  it('Redis through ioredis with `command` (server clock)', async () => {
    const redis = new Redis({ host: '127.0.0.1', port: 6379 });
    try {
      const store = RedisStore.using((s, keys, args) => redis.eval(s, keys.length, keys, args), {
        evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, keys, args),
        command: (args) => redis.call(args[0], args.slice(1)),
        prefix: 'rwtest:nodelock:',
      });
      await runCases(() => store, null);
    } finally {
      await redis.quit();
    }
  });

  it('PostgreSQL (server clock)', async () => {
    const pool = pgPool(2);
    const prefix = runPrefix('lock');
    const store = PostgresStore.using(pool, { prefix });
    await store.installSchema();
    try {
      await runCases(() => store, null);
    } finally {
      await dropPg(pool, prefix);
      await pool.query(`DROP TABLE IF EXISTS ${prefix}_locks`);
      await pool.end();
    }
  });

  it('argument errors name the field as JavaScript spells it', async () => {
    const store = new MemoryStore();
    for (const e of vectors.errors) {
      const field = e.error === 'retry_ms' ? 'retryMs' : e.error;
      const act = async () => {
        if (e.op === 'acquire') return store.lock(e.key, num(e.ttl), e.owner);
        return store.lock('k', 1).block(num(e.seconds), num(e.retry_ms));
      };
      await assert.rejects(act, (err) => {
        assert.ok(err instanceof InvalidArgumentError, `${e.name}: ${err}`);
        assert.equal(err.field, field, e.name);
        assert.match(err.message, new RegExp(`^invalid ${field}:`));
        return true;
      });
    }
    assert.throws(() => store.lock('k', '10'), InvalidArgumentError);
    assert.throws(() => store.lock('k', 10, 42), InvalidArgumentError);
  });

  it("block's schedule is the engine's", async () => {
    const { nativeBackend } = await import('../dist/api.js');
    const backend = nativeBackend();
    for (const w of vectors.waits) {
      if (w.error) {
        assert.throws(() => backend.createLockWait(num(w.seconds), num(w.retry_ms), w.start), (e) => e.code === 'invalid_argument:retryMs');
        continue;
      }
      const wait = backend.createLockWait(num(w.seconds), num(w.retry_ms), w.start);
      for (const r of w.refusals) assert.equal(wait.afterRefusal(r.at), r.sleep ?? -1, `${w.name}: ${JSON.stringify(r)}`);
    }
  });
});

describe('Lock behaviour', () => {
  it('block waits for a release, and times out with LockTimeoutError', async () => {
    const store = new MemoryStore();
    const holder = store.lock('job', 10);
    assert.equal(await holder.acquire(), true);
    const waiter = store.lock('job', 10);
    const started = Date.now();
    await assert.rejects(waiter.block(0.2, 50), (e) => e instanceof LockTimeoutError && e.key === 'job' && e.code === 'ERR_RATEWINDOW_LOCK_TIMEOUT');
    assert.ok(Date.now() - started >= 190, 'waited its seconds');
    setTimeout(() => holder.release(), 100);
    await waiter.block(5, 20);
    assert.equal(await waiter.isOwned(), true);
    assert.equal(await store.lock('job', 10).block(0).catch((e) => e.constructor), LockTimeoutError);
  });

  it('a generated owner token is unique: a random prefix of its process (128 bits) and a counter; each process and worker has its own', async () => {
    const store = new MemoryStore();
    const tokens = Array.from({ length: 2000 }, () => store.lock('k', 10).owner);
    assert.equal(new Set(tokens).size, 2000);
    const prefixOf = (token) => {
      const m = /^([0-9a-f]{32}):(\d+)$/.exec(token);
      assert.ok(m, token);
      return m[1];
    };
    const prefix = prefixOf(tokens[0]);
    assert.ok(tokens.every((t) => prefixOf(t) === prefix));
    // A lock restored from a generated token is that owner's (on the store that holds it).
    const held = store.lock('restore', 10);
    assert.equal(await held.acquire(), true);
    assert.equal(await store.lock('restore', 10, held.owner).release(), true);
    // Another process and another worker thread start their own prefix.
    const dist = JSON.stringify(new URL('../dist/index.js', import.meta.url).href);
    const source = `import { MemoryStore } from ${dist}; const s = new MemoryStore(); console.log(s.lock('k', 1).owner);`;
    const child = execFileSync(process.execPath, ['--input-type=module', '-e', source], { encoding: 'utf8' }).trim();
    const worker = await new Promise((resolve, reject) => {
      const w = new Worker(`import(${dist}).then(({ MemoryStore }) => require('node:worker_threads').parentPort.postMessage(new MemoryStore().lock('k', 1).owner))`, { eval: true });
      w.once('message', resolve);
      w.once('error', reject);
    });
    const prefixes = new Set([prefix, prefixOf(child), prefixOf(worker)]);
    assert.equal(prefixes.size, 3, [...prefixes].join(' '));
  });

  it('withLock runs the function holding the lock and releases it when it throws', async () => {
    const store = new MemoryStore();
    let inside;
    const value = await store.withLock('w', 10, async () => {
      inside = await store.lock('w', 1).currentOwner();
      return 7;
    });
    assert.equal(value, 7);
    assert.equal(typeof inside, 'string');
    await assert.rejects(withLock(store, 'w', 10, () => { throw new Error('boom'); }), /boom/);
    assert.equal(await store.lock('w', 1).currentOwner(), null);
    const held = store.lock('w', 10);
    await held.acquire();
    await assert.rejects(store.withLock('w', 10, () => 1), LockTimeoutError);
    assert.equal(await held.isOwned(), true);
  });

  it('a lock restored in another process from its owner token releases it (Redis)', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:6379' });
    await client.connect();
    try {
      const prefix = 'rwtest:nodelock:';
      const store = RedisStore.using((s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), { prefix });
      const key = `restore:${Math.random()}`;
      const lock = store.lock(key, 60);
      assert.ok(lock instanceof Lock);
      assert.equal(await lock.acquire(), true);
      const out = await runWorker(['redis-io', prefix, 'release', key, 'not-the-owner']);
      assert.equal(out.trim(), 'false');
      assert.equal(await lock.currentOwner(), lock.owner);
      const released = await runWorker(['redis-io', prefix, 'release', key, lock.owner]);
      assert.equal(released.trim(), 'true');
      assert.equal(await lock.currentOwner(), null);
    } finally {
      await client.quit();
    }
  });
});

describe('a Redis lock with `command`: its commands planned once, sent again with the owner in', () => {
  /** A store on `client` (node-redis) whose sends are logged: [what, ...arrays]. */
  const logged = (client, sent, prefix) =>
    RedisStore.using((s, keys, args) => (sent.push(['eval', keys, args]), client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args])), {
      evalsha: (sha, keys, args) => (sent.push(['evalsha', keys, args]), client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args])),
      command: (args) => (sent.push(['command', args]), client.sendCommand(args)),
      prefix,
    });

  it('acquire and release send the planned commands every time, in arrays of their own, and hold no call (shared Redis)', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:6379' });
    await client.connect();
    try {
      const sent = [];
      const prefix = `rwtest:nodelock:${process.pid}:`;
      const store = logged(client, sent, prefix);
      const key = `planned:${Math.random().toString(36).slice(2)}`;
      const lock = store.lock(key, 10);
      const other = store.lock(key, 10);
      assert.equal(await lock.acquire(), true);
      assert.equal(await other.acquire(), false);
      assert.equal(await lock.acquire(), false, 'not re-entrant');
      assert.equal(await other.release(), false, "not the other's to release");
      assert.equal(await lock.currentOwner(), lock.owner);
      assert.equal(await lock.release(), true);
      assert.equal(await lock.release(), false);
      assert.equal(await lock.acquire(), true);
      assert.equal(await lock.release(), true);
      const mine = (what) => sent.filter((s) => s[0] === what && (s[1].includes(lock.owner) || s[2]?.includes(lock.owner)));
      const acquires = mine('command');
      assert.equal(acquires.length, 3);
      for (const a of acquires) assert.deepEqual(a[1], ['SET', `${prefix}lck:${key}`, lock.owner, 'NX', 'PX', '10000']);
      assert.equal(new Set(acquires.map((a) => a[1])).size, 3, 'an array of its own each time');
      const releases = mine('evalsha');
      assert.equal(releases.length, 3);
      for (const r of releases) assert.deepEqual([r[1], r[2]], [[`${prefix}lck:${key}`], ['release', lock.owner]]);
      assert.equal(new Set(releases.flatMap((r) => [r[1], r[2]])).size, 6, 'arrays of their own each time');
      // A client that changes the arrays it was given changes no later command.
      acquires[2][1].fill('changed');
      releases[2][1].fill('changed');
      releases[2][2].fill('changed');
      assert.equal(await lock.acquire(), true);
      assert.equal(await lock.release(), true);
      assert.deepEqual(sent.at(-2)[1], ['SET', `${prefix}lck:${key}`, lock.owner, 'NX', 'PX', '10000']);
      assert.deepEqual(sent.at(-1).slice(1), [[`${prefix}lck:${key}`], ['release', lock.owner]]);
      // Another lock on the key and TTL: the store's plan with its owner (no crossing), its own arrays.
      const third = store.lock(key, 10);
      assert.equal(await third.acquire(), true);
      assert.equal(await third.release(), true);
      const theirs = sent.filter((s) => s[0] === 'command' && s[1].includes(third.owner));
      assert.deepEqual(theirs[0][1], ['SET', `${prefix}lck:${key}`, third.owner, 'NX', 'PX', '10000']);
      assert.notEqual(theirs[0][1], acquires[0][1]);
      assert.deepEqual(sent.at(-1).slice(1), [[`${prefix}lck:${key}`], ['release', third.owner]]);
      assert.notEqual(sent.at(-1)[1], releases[0][1]);
      assert.equal(sent.filter((s) => s[0] === 'eval').length, 0);
      assert.equal(store.calls.inProgress(), 0);
    } finally {
      await client.quit();
    }
  });

  it('a refused TTL or owner names its field, as on every store', () => {
    const store = RedisStore.using(() => 1, { evalsha: () => 1, command: () => 'OK' });
    assert.throws(() => store.lock('k', 0), (e) => e instanceof InvalidArgumentError && e.field === 'ttl');
    assert.throws(() => store.lock('k', 1, ''), (e) => e instanceof InvalidArgumentError && e.field === 'owner');
    assert.throws(() => store.lock('k', 1, 'x'.repeat(257)), (e) => e instanceof InvalidArgumentError && e.field === 'owner');
    // Also when the key and TTL's plan is kept (made by a valid lock first).
    store.lock('k', 1);
    assert.throws(() => store.lock('k', 1, ''), (e) => e instanceof InvalidArgumentError && e.field === 'owner');
    assert.throws(() => store.lock('k', 0), (e) => e instanceof InvalidArgumentError && e.field === 'ttl');
  });

  it('a release after SCRIPT FLUSH: NOSCRIPT, then the source (private redis-server on 6393)', async () => {
    const server = await privateServer(6393);
    const client = createClient({ url: 'redis://127.0.0.1:6393' });
    await client.connect();
    try {
      const sent = [];
      const store = logged(client, sent, 'rwtest:');
      const lock = store.lock('flushed', 10);
      assert.equal(await lock.acquire(), true);
      assert.equal(server.cli('SCRIPT', 'FLUSH'), 'OK');
      sent.length = 0;
      assert.equal(await lock.release(), true);
      assert.deepEqual(sent.map((s) => s[0]), ['evalsha', 'eval']);
      assert.equal(await lock.currentOwner(), null);
      // The script is loaded again: the next release runs by SHA1 alone.
      assert.equal(await lock.acquire(), true);
      sent.length = 0;
      assert.equal(await lock.release(), true);
      assert.deepEqual(sent.map((s) => s[0]), ['evalsha']);
    } finally {
      await client.quit();
      await server.close();
    }
  });

  it("a client's failure is a StoreError with its cause; the acquire is never sent again", async () => {
    const boom = new Error('Connection lost');
    let sends = 0;
    const store = RedisStore.using(() => 1, {
      evalsha: () => Promise.reject(boom),
      command: () => (sends++, Promise.reject(boom)),
    });
    const lock = store.lock('k', 1);
    await assert.rejects(lock.acquire(), (e) => e.code === 'ERR_RATEWINDOW_STORE' && e.cause === boom);
    assert.equal(sends, 1);
    await assert.rejects(lock.release(), (e) => e.code === 'ERR_RATEWINDOW_STORE' && e.cause === boom);
    assert.equal(store.calls.inProgress(), 0);
  });
});

function runWorker(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKER, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`worker exited ${code}`))));
  });
}

/** 4 processes x 64 concurrent acquirers on one key: resolves to how many got the lock in all. */
async function race(kinds, target, key) {
  const children = kinds.map((kind) => spawn(process.execPath, [WORKER, kind, target, 'race', key, '64'], { stdio: ['pipe', 'pipe', 'inherit'] }));
  const outputs = children.map((child) => {
    child.stdout.setEncoding('utf8');
    let buffer = '';
    const lines = [];
    let wake;
    child.stdout.on('data', (chunk) => {
      buffer += chunk;
      let i;
      while ((i = buffer.indexOf('\n')) >= 0) {
        lines.push(buffer.slice(0, i));
        buffer = buffer.slice(i + 1);
        wake?.();
      }
    });
    return async () => {
      while (lines.length === 0) await new Promise((r) => (wake = r));
      return lines.shift();
    };
  });
  for (const next of outputs) assert.equal(await next(), 'ready');
  for (const child of children) child.stdin.end('go\n');
  let total = 0;
  for (const next of outputs) total += Number(await next());
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r() : c.on('exit', r)))));
  return total;
}

describe('exactly one holder among 4 processes x 64 concurrent acquirers', () => {
  it('Redis (two processes on node-redis, two on ioredis)', async () => {
    const key = `race:${Math.random()}`;
    assert.equal(await race(['redis-node', 'redis-node', 'redis-io', 'redis-io'], 'rwtest:nodelock:', key), 1);
  });

  it('Redis, plain SET NX PX and the script at once (node-redis and ioredis, each with and without `command`)', async () => {
    const key = `race:${Math.random()}`;
    assert.equal(await race(['redis-node-cmd', 'redis-node', 'redis-io-cmd', 'redis-io'], 'rwtest:nodelock:', key), 1);
  });

  it('Redis Cluster (two processes on node-redis, two on ioredis, each with `command`)', async () => {
    clusterUp();
    const key = `race:${Math.random()}`;
    assert.equal(await race(['cluster-node-cmd', 'cluster-node-cmd', 'cluster-io-cmd', 'cluster-io-cmd'], `rwtest:clusterlock:${process.pid}:`, key), 1);
  });

  describe('PostgreSQL', () => {
    const pool = pgPool(2);
    const prefix = runPrefix('lockrace');
    before(() => PostgresStore.using(pool, { prefix }).installSchema());
    after(async () => {
      await dropPg(pool, prefix);
      await pool.query(`DROP TABLE IF EXISTS ${prefix}_locks`);
      await pool.end();
    });
    it('one key', async () => {
      assert.equal(await race(['pg', 'pg', 'pg', 'pg'], prefix, 'one'), 1);
    });
  });

  describe('SQLite (one file)', () => {
    const dir = tempDir();
    const file = dir.file('race.db');
    before(() => {
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      new SqliteStore(db).installSchema();
      db.close();
    });
    after(() => dir.remove());
    it('one key', async () => {
      assert.equal(await race(['sqlite', 'sqlite', 'sqlite', 'sqlite'], file, 'one'), 1);
    });
  });

  it('memory: 256 concurrent acquirers in one process', async () => {
    const store = new MemoryStore();
    const got = await Promise.all(Array.from({ length: 256 }, () => store.lock('one', 60).acquire()));
    assert.equal(got.filter(Boolean).length, 1);
  });
});

describe('Redis Cluster with `command`: a plain SET routed by its key, the release by script', () => {
  for (const [kind, connect, command] of [
    ['node-redis cluster', nodeRedisCluster, (client) => (args) => client.sendCommand(args[1], false, args)],
    ['ioredis cluster', ioredisCluster, (client) => (args) => client.call(args[0], args.slice(1))],
  ]) {
    it(kind, async () => {
      clusterUp();
      const c = await connect();
      try {
        const store = RedisStore.using(c.run, { evalsha: c.evalsha, command: command(c.client), prefix: `rwtest:clusterlock:${process.pid}:` });
        // Keys on many slots: each SET, DEL, GET goes to its key's master.
        for (let i = 0; i < 20; i++) {
          const key = `job${i}:${Math.random()}`;
          const a = store.lock(key, 30);
          assert.equal(await a.acquire(), true, key);
          assert.equal(await store.lock(key, 30).acquire(), false, key);
          assert.equal(await a.currentOwner(), a.owner);
          assert.equal(await store.lock(key, 30, 'someone-else').release(), false);
          assert.equal(await a.release(), true);
          assert.equal(await a.currentOwner(), null);
          assert.equal(await a.acquire(), true);
          assert.equal(await a.forceRelease(), true);
          assert.equal(await a.forceRelease(), false);
        }
      } finally {
        await c.close();
      }
    });
  }
});

describe("purge deletes the locks whose TTL ended (and keeps the live ones)", () => {
  it('SQLite (injected clock)', async () => {
    const dir = tempDir();
    const db = new Database(dir.file('purge.db'));
    const clock = { t: BASE, now: () => clock.t };
    const store = new SqliteStore(db, { clock });
    store.installSchema();
    try {
      assert.equal(await store.lock('short', 0.1, 'a').acquire(), true);
      assert.equal(await store.lock('live', 60, 'b').acquire(), true);
      const rows = () => db.prepare('SELECT key FROM ratewindow_locks ORDER BY key').all().map((r) => r.key);
      clock.t = BASE + 99;
      store.purge();
      assert.deepEqual(rows(), ['live', 'short']);
      clock.t = BASE + 100;
      assert.deepEqual(store.purge(), { calls: 0, windows: 0 });
      assert.deepEqual(rows(), ['live']);
      assert.equal(await store.lock('live', 1).currentOwner(), 'b');
    } finally {
      db.close();
      dir.remove();
    }
  });

  it('PostgreSQL (server clock)', async () => {
    const pool = pgPool(2);
    const prefix = runPrefix('lockpurge');
    const store = PostgresStore.using(pool, { prefix });
    await store.installSchema();
    try {
      assert.equal(await store.lock('short', 0.001, 'a').acquire(), true);
      assert.equal(await store.lock('live', 60, 'b').acquire(), true);
      await sleep(20);
      await store.purge();
      const { rows } = await pool.query(`SELECT key FROM ${prefix}_locks ORDER BY key`);
      assert.deepEqual(rows.map((r) => r.key), ['live']);
      assert.equal(await store.lock('live', 1).currentOwner(), 'b');
    } finally {
      await dropPg(pool, prefix);
      await pool.query(`DROP TABLE IF EXISTS ${prefix}_locks`);
      await pool.end();
    }
  });
});
