// The `lock` interface of the hosted world in Node (jco): the lock vectors (tests/vectors/lock/lock.json)
// on a `clocked-memory` store (this host's clock set to each step's time) and on the real Redis at
// 127.0.0.1:6379 (each step at its offset on the real clock, the `exact` steps skipped), refused
// arguments as `invalid-argument` naming the field, `block`'s schedule through the imported
// `clock.sleepMs` and its `lock-timeout`, and exactly one holder among 4 worker threads (an instance
// each) x 64 acquirers on Redis.
//
// jco's imports are synchronous, so this host's Redis client is `redis-cli` run with execFileSync (one
// process a command: slow, but a real client on the real server); its `--no-raw` output is read back
// into a `store-io.reply`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import { attempt, hostedOps } from './component.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const VECTORS = JSON.parse(readFileSync(path.join(here, '..', '..', 'tests', 'vectors', 'lock', 'lock.json'), 'utf8'));
const REDIS_PORT = process.env.REDIS_PORT ?? '6379';
const number = (v) => (v === 'NaN' ? NaN : v === 'Infinity' ? Infinity : Number(v));

/** One `redis-cli --no-raw` reply line as a `store-io.value`. */
function cliValue(line) {
  if (line === '(nil)') return { tag: 'nil' };
  const int = /^\(integer\) (-?\d+)$/.exec(line);
  if (int) return { tag: 'integer', val: BigInt(int[1]) };
  if (line.startsWith('"') && line.endsWith('"')) return { tag: 'text', val: JSON.parse(line) };
  return { tag: 'text', val: line };
}

/** The host's runner: EVALSHA when the component sends no source, EVAL when it does. */
export function redisCliRunner(script, sha1, keys, args) {
  const argv = ['--no-raw', '-h', '127.0.0.1', '-p', REDIS_PORT, script ? 'EVAL' : 'EVALSHA', script || sha1,
    String(keys.length), ...keys, ...args];
  const out = execFileSync('redis-cli', argv, { encoding: 'utf8' }).replace(/\n$/, '');
  if (out.startsWith('(error) ')) throw new Error(out.slice('(error) '.length));
  return { tag: 'value', val: cliValue(out) };
}

async function redisOps(prefix) {
  const ops = await hostedOps();
  ops.host.runner = redisCliRunner;
  ops.host.realTime = true;
  const store = new ops.redis.RedisStore({ prefix, hashTagBefore: undefined });
  return { ops, make: (key, ttl, owner) => ops.lock.Lock.onRedis(store, key, ttl, owner) };
}

async function memoryOps() {
  const ops = await hostedOps();
  const store = new ops.clockedMemory.MemoryStore();
  return { ops, make: (key, ttl, owner) => ops.lock.Lock.onMemory(store, key, ttl, owner) };
}

function step(make, s) {
  const lock = make(s.key, s.ttl == null ? 1 : number(s.ttl), s.owner ?? 'someone');
  switch (s.op) {
    case 'acquire': return lock.acquire();
    case 'release': return lock.release();
    case 'force_release': return lock.forceRelease();
    case 'owner': return lock.owner() ?? null;
    default: throw new Error(`unknown op ${s.op}`);
  }
}

const unique = () => `ratewindow-wasm-node-lock:${randomUUID().slice(0, 8)}:`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (isMainThread) {
  for (const c of VECTORS.cases) {
    test(`memory: ${c.name}`, async () => {
      const { ops, make } = await memoryOps();
      for (const s of c.steps) {
        ops.host.clockMs = 1_700_000_000_000n + BigInt(s.at);
        assert.deepStrictEqual(step(make, s), s.expect, JSON.stringify(s));
      }
    });
    test(`redis: ${c.name}`, async () => {
      const { make } = await redisOps(unique());
      const start = Date.now();
      for (const s of c.steps) {
        if (s.exact) continue;
        await sleep(Math.max(0, start + s.at - Date.now()));
        assert.deepStrictEqual(step(make, s), s.expect, JSON.stringify(s));
      }
    });
  }

  test('refused arguments are invalid-argument naming the field', async () => {
    const { ops, make } = await memoryOps();
    for (const c of VECTORS.errors) {
      const got = c.op === 'acquire'
        ? attempt(() => make(c.key, number(c.ttl), c.owner))
        : attempt(() => make('job', 1, undefined).block(number(c.seconds), number(c.retry_ms)));
      assert.equal(got.err?.tag, 'invalid-argument', c.name);
      assert.equal(got.err.val.field, c.error.replace('_', '-'), c.name);
    }
    assert.deepStrictEqual(ops.host.sleptMs, []);
  });

  test("block sleeps the core's schedule through clock.sleepMs, then lock-timeout", async () => {
    let ran = 0;
    for (const c of VECTORS.waits) {
      const r = c.refusals;
      if (!r || r.at(-1).sleep !== null || !r.slice(1).every((b, i) => b.at - r[i].at === r[i].sleep)) continue;
      const { ops, make } = await memoryOps();
      ops.host.clockMs = BigInt(c.start);
      assert.equal(make('job', 1e9, 'holder').acquire(), true);
      const got = attempt(() => make('job', 1, undefined).block(number(c.seconds), number(c.retry_ms)));
      assert.deepStrictEqual(got.err, { tag: 'lock-timeout', val: 'job' }, c.name);
      assert.deepStrictEqual(ops.host.sleptMs, r.slice(0, -1).map((x) => x.sleep), c.name);
      ran += 1;
    }
    assert.ok(ran >= 2);
  });

  test('block on Redis waits on the real clock; a lock restored by its token releases it', async () => {
    const prefix = unique();
    const { make } = await redisOps(prefix);
    const held = make('job', 0.3);
    const waiter = make('job', 5);
    assert.equal(held.acquire(), true);
    assert.deepStrictEqual(attempt(() => waiter.block(0.1, 20)).err, { tag: 'lock-timeout', val: 'job' });
    assert.equal(attempt(() => waiter.block(3, 20)).ok, undefined);
    assert.equal(held.owner(), waiter.ownerToken());
    const other = await redisOps(prefix); // another instance, the same keys
    assert.equal(other.make('job', 5, waiter.ownerToken()).release(), true);
    assert.equal(held.owner(), undefined);
  });

  test('exactly one holder among 4 worker threads x 64 acquirers on Redis', async () => {
    const prefix = unique();
    const at = Date.now() + 3000;
    const won = (await Promise.all([0, 1, 2, 3].map(() => new Promise((resolve, reject) => {
      const w = new Worker(fileURLToPath(import.meta.url), { workerData: { prefix, at } });
      w.once('message', resolve);
      w.once('error', reject);
    })))).flat();
    assert.equal(won.length, 1, JSON.stringify(won));
    const { make } = await redisOps(prefix);
    assert.equal(make('race', 60).owner(), won[0]);
  });

  test('a Redis store with a refused prefix refuses every lock call', async () => {
    const { make } = await redisOps('bad:lck:');
    assert.deepStrictEqual(attempt(() => make('job', 1).acquire()).err, { tag: 'invalid-argument', val: { field: 'prefix', value: 'bad:lck:' } });
  });
} else {
  const { make } = await redisOps(workerData.prefix);
  const locks = Array.from({ length: 64 }, () => make('race', 60));
  await sleep(Math.max(0, workerData.at - Date.now()));
  parentPort.postMessage(locks.filter((l) => l.acquire()).map((l) => l.ownerToken()));
}
