// The failure guard (ts/guard.ts over core::guard) against the real Redis and PostgreSQL, with real
// network faults put between them and the client by the workspace's TCP fault proxy
// (tests/faultproxy: latency, stall, reset, refused connections, a cut reply). For each fault: the
// verdict comes within timeoutMs plus a small slack, the policy holds, and afterwards the key's count on
// the server (read by the unguarded store, straight to the server) is what the verdicts said.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { createClient } from 'redis';
import IORedis from 'ioredis';
import pg from 'pg';

import { guard, GuardedStore, InvalidArgumentError, MemoryStore, PostgresStore, RedisStore, StoreError } from '../dist/index.js';
import { testStore } from '../dist/testing.js';
import { FaultProxy } from './faultproxy.mjs';
import { redisBackend, sharedRedisUp } from './redis-servers.mjs';
import { dropPg, PG, runPrefix } from './sql-helpers.mjs';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const TIMEOUT = 100;
/** How late after timeoutMs a guard's verdict may come on a loaded machine (timers, event loop). */
const SLACK = 80;
const l = (uses, windowMs) => ({ uses, windowMs });
let n = 0;
const fresh = (label) => `${label}:${process.pid}:${++n}:${Math.random().toString(36).slice(2, 7)}`;

// --- the fault proxy (tests/faultproxy, driven by ./faultproxy.mjs) ------------------------------------

/** A fault proxy in front of `target` (host:port): `port`, `send(command)`, `close()`. */
async function faultProxy(target) {
  const at = target.lastIndexOf(':');
  const proxy = await FaultProxy.start(target.slice(0, at), Number(target.slice(at + 1)));
  return { port: proxy.port, send: (command) => proxy.command(command), close: () => proxy.close() };
}

/** Runs `call`, answering its value and how long it took (ms). */
async function timed(call) {
  const t = performance.now();
  const value = await call();
  return { value, ms: performance.now() - t };
}

/** The verdict came within the timeout (plus slack), failed as `failed`, and says what the policy says. */
function assertPolicy({ value, ms }, failed, allowed) {
  assert.equal(value.failed, failed, `failed: ${JSON.stringify(value)}`);
  assert.equal(value.allowed, allowed);
  assert.ok(ms <= TIMEOUT + SLACK, `answered after ${ms.toFixed(1)} ms (timeout ${TIMEOUT} + slack ${SLACK})`);
  if (!allowed) assert.equal(value.retryAfterMs, TIMEOUT);
  assert.ok(value.cause instanceof Error, 'the cause is given');
  assert.ok(!Object.keys(value).includes('cause'), 'the cause is not enumerable');
}

// --- options -----------------------------------------------------------------------------------------

describe('guard options', () => {
  const store = new MemoryStore();
  it('refuses a timeout that is not a whole number of ms from 1 to 2^31, naming timeoutMs', () => {
    for (const bad of [NaN, -1, 0, 1.5, Infinity, 2 ** 31 + 1]) {
      assert.throws(() => guard(store, { timeoutMs: bad }), (e) => {
        assert.ok(e instanceof InvalidArgumentError);
        assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_ARGUMENT');
        assert.equal(e.field, 'timeoutMs');
        assert.ok(Object.is(e.value, bad));
        assert.match(e.message, /^invalid timeoutMs: /);
        return true;
      });
    }
    assert.throws(() => guard(store, { timeoutMs: '100' }), TypeError);
    assert.equal(guard(store, { timeoutMs: 2 ** 31 }) instanceof GuardedStore, true);
  });
  it('refuses an unknown policy and a bad cache bound', () => {
    assert.throws(() => guard(store, { onFailure: 'sometimes' }), (e) => e instanceof InvalidArgumentError && e.field === 'onFailure');
    assert.throws(() => guard(store, { onFailure: 'fallback' }), (e) => e instanceof InvalidArgumentError && e.field === 'onFailure');
    assert.throws(() => guard(store, { onFailure: 42 }), TypeError);
    assert.throws(() => guard(store, { blockCache: { maxKeys: 0 } }), (e) => e instanceof InvalidArgumentError && e.field === 'blockCache.maxKeys');
    assert.throws(() => guard(store, { blockCache: { maxKeys: 1.5 } }), InvalidArgumentError);
    assert.throws(() => guard({}, {}), TypeError);
  });
  it("rethrows the caller's own mistakes instead of meeting the policy", async () => {
    const g = guard(new MemoryStore(), { onFailure: 'allow' });
    await assert.rejects(g.consume('k', l(0, 1000)), { code: 'ERR_RATEWINDOW_INVALID_LIMIT' });
    await assert.rejects(g.consume(42, l(1, 1000)), TypeError);
    const cached = guard(new MemoryStore(), { onFailure: 'allow', blockCache: true });
    await assert.rejects(cached.consume('k', l(1, NaN)), { code: 'ERR_RATEWINDOW_INVALID_LIMIT' });
    await assert.rejects(cached.consumeMany([{ key: 'k', limit: l(1.5, 10) }]), { code: 'ERR_RATEWINDOW_INVALID_LIMIT' });
    assert.equal(g.stats().storeErrors, 0);
  });
});

// --- a store of the user's that fails in process ---------------------------------------------------

describe('guard over a store of your own', () => {
  it('a store that throws meets the policy, with the cause', async () => {
    const boom = new Error('boom');
    const failing = { consume: () => Promise.reject(boom) };
    const events = [];
    const g = guard(failing, { timeoutMs: TIMEOUT, onEvent: (e) => events.push(e) });
    const v = await g.consume('k', l(1, 1000));
    assert.deepEqual({ ...v }, { allowed: false, retryAfterMs: TIMEOUT, failed: 'store-error' });
    assert.equal(v.cause, boom);
    assert.deepEqual(events.map((e) => [e.type, e.failed, e.operation]), [['failure', 'store-error', 'consume']]);
    const allow = guard({ consume: () => { throw boom; } }, { onFailure: 'allow' });
    assert.deepEqual({ ...(await allow.consume('k', l(1, 1000))) }, { allowed: true, retryAfterMs: 0, failed: 'store-error' });
    assert.equal(g.stats().storeErrors, 1);
  });
  it('a late answer without release() is counted as a failed late release', async () => {
    const slow = { consume: () => sleep(TIMEOUT * 2).then(() => ({ allowed: true, retryAfterMs: 0 })) };
    const events = [];
    const g = guard(slow, { timeoutMs: TIMEOUT, onEvent: (e) => events.push(e) });
    assertPolicy(await timed(() => g.consume('k', l(1, 1000))), 'timeout', false);
    await g.close();
    assert.deepEqual(
      [g.stats().lateReleases, g.stats().lateReleasesFailed, events.at(-1).type, events.at(-1).error instanceof StoreError],
      [0, 1, 'late-release', true],
    );
  });
});

// --- Redis through the fault proxy -------------------------------------------------------------------

describe('guard on RedisStore through the fault proxy', { concurrency: 1 }, () => {
  const prefix = `rwguard:${process.pid}:`;
  let proxy;
  let client; // through the proxy
  let direct; // straight to the server: the truth
  let truth;
  const stores = [];

  before(async () => {
    sharedRedisUp();
    proxy = await faultProxy('127.0.0.1:6379');
    client = createClient({ socket: { host: '127.0.0.1', port: proxy.port, reconnectStrategy: () => 20 } });
    client.on('error', () => {});
    await client.connect();
    direct = createClient({ socket: { host: '127.0.0.1', port: 6379 } });
    await direct.connect();
    truth = RedisStore.using((s, keys, args) => direct.eval(s, { keys, arguments: args }), { prefix, backend: redisBackend });
  });
  after(async () => {
    await proxy?.send('resume').catch(() => {});
    for (const k of await direct.keys(`${prefix}*`)) await direct.del(k);
    await client?.destroy();
    await direct?.destroy();
    await proxy?.close();
  });

  const redisStore = () =>
    RedisStore.using((s, keys, args) => client.eval(s, { keys, arguments: args }), {
      evalsha: (sha, keys, args) => client.evalSha(sha, { keys, arguments: args }),
      prefix,
      backend: redisBackend,
    });
  /** Uses counted on the server for `key` under `limit`. */
  const counted = async (key, limit) => {
    const v = await truth.peekMany([{ key, limit }]);
    return v.allowed ? limit.uses - v.remaining : limit.uses;
  };

  it('latency beyond the timeout, deny: refused in time, the late count released', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT });
    const key = fresh('latency');
    await proxy.send('latency 0 250');
    try {
      assertPolicy(await timed(() => g.consume(key, l(3, 10_000))), 'timeout', false);
    } finally {
      await proxy.send('resume');
    }
    await g.close();
    assert.equal(await counted(key, l(3, 10_000)), 0);
    const s = g.stats();
    assert.deepEqual([s.calls, s.refused, s.timeouts, s.lateReleases, s.lateReleasesFailed], [1, 1, 1, 1, 0]);
  });

  it('latency beyond the timeout, allow: allowed in time, the late count stays', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT, onFailure: 'allow' });
    const key = fresh('allow');
    await proxy.send('latency 0 250');
    try {
      assertPolicy(await timed(() => g.consumeMany([{ key, limit: l(3, 10_000) }])), 'timeout', true);
    } finally {
      await proxy.send('resume');
    }
    await g.close();
    assert.equal(await counted(key, l(3, 10_000)), 1);
    assert.equal(g.stats().lateReleases, 0);
  });

  it('a stall: every call refused in time; once it ends the late answers are released, exactly those calls', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT });
    const key = fresh('stall');
    const limit = l(5, 10_000);
    assert.equal((await g.consume(key, limit)).allowed, true); // one counted before the fault
    await proxy.send('stall');
    let verdicts;
    try {
      verdicts = await Promise.all([0, 1, 2].map(() => timed(() => g.consumeMany([{ key, limit }]))));
    } finally {
      await proxy.send('unstall');
    }
    for (const v of verdicts) assertPolicy(v, 'timeout', false);
    await g.close();
    assert.equal(await counted(key, limit), 1);
    assert.equal(g.stats().lateReleases, 3);
  });

  it('connections reset mid-call: refused in time, nothing counted', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT });
    const key = fresh('reset');
    await proxy.send('stall');
    const pending = timed(() => g.consume(key, l(3, 10_000)));
    await sleep(20);
    await proxy.send('reset');
    await proxy.send('resume');
    const v = await pending;
    assert.ok(['store-error', 'timeout'].includes(v.value.failed), v.value.failed);
    assertPolicy(v, v.value.failed, false);
    await g.close();
    await sleep(50);
    assert.equal(await counted(key, l(3, 10_000)), 0);
    // The client reconnects; the guard answers from the store again.
    for (let i = 0; i < 50 && !client.isReady; i++) await sleep(20);
    const back = await g.store.consume(key, l(3, 10_000));
    assert.equal(back.allowed, true);
  });

  it('a reply cut midway, allow: allowed in time; the script ran once, counted once', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT, onFailure: 'allow' });
    const key = fresh('cut');
    await g.consume(fresh('warm'), l(3, 10_000)); // the script is loaded: the cut reply is the consume's
    await proxy.send('cut 3');
    const v = await timed(() => g.consume(key, l(3, 10_000)));
    await proxy.send('resume');
    assert.ok(['store-error', 'timeout'].includes(v.value.failed), v.value.failed);
    assertPolicy(v, v.value.failed, true);
    await g.close();
    assert.equal(await counted(key, l(3, 10_000)), 1);
    for (let i = 0; i < 50 && !client.isReady; i++) await sleep(20);
  });

  it('a reply cut midway, deny: refused in time; the call the script counted is given back by its id', async () => {
    const events = [];
    const g = guard(redisStore(), { timeoutMs: TIMEOUT, onEvent: (e) => events.push(e) });
    const key = fresh('cut-deny');
    const limit = l(3, 10_000);
    await g.consume(fresh('warm'), limit); // the script is loaded: the cut reply is the consume's
    await proxy.send('cut 3');
    const v = await timed(() => g.consume(key, limit));
    await proxy.send('resume');
    assert.ok(['store-error', 'timeout'].includes(v.value.failed), v.value.failed);
    assertPolicy(v, v.value.failed, false);
    for (let i = 0; i < 50 && !client.isReady; i++) await sleep(20);
    // The batch too (its verdict's token came from the failed call, by the same id).
    await g.consume(fresh('warm'), limit);
    await proxy.send('cut 3');
    const batch = await timed(() => g.consumeMany([{ key: `${key}:a`, limit }, { key: `${key}:b`, limit }]));
    await proxy.send('resume');
    assertPolicy(batch, batch.value.failed, false);
    await g.close(); // waits for the give-backs
    for (let i = 0; i < 50 && !client.isReady; i++) await sleep(20);
    assert.deepEqual([await counted(key, limit), await counted(`${key}:a`, limit), await counted(`${key}:b`, limit)], [0, 0, 0]);
    const s = g.stats();
    assert.deepEqual([s.lateReleases, s.lateReleasesFailed], [2, 0]);
    assert.deepEqual(events.filter((e) => e.type === 'late-release').map((e) => e.error), [undefined, undefined]);
  });

  it('a store error carries release() only for a guard\'s call that may have counted', async () => {
    // A consume through the store itself (not asked for its release) fails as before: no release.
    const store = redisStore();
    const key = fresh('cut-plain');
    await store.consume(fresh('warm'), l(3, 10_000));
    await proxy.send('cut 3');
    const e = await store.consume(key, l(3, 10_000)).then(() => undefined, (error) => error);
    await proxy.send('resume');
    assert.ok(e instanceof StoreError, String(e));
    assert.equal(e.release, undefined);
    for (let i = 0; i < 50 && !client.isReady; i++) await sleep(20);
    assert.equal(await counted(key, l(3, 10_000)), 1, 'the script ran: counted (the reason the guard gives it back)');
  });

  it('refused connections, then accepted again: calls before wait in the client, refused in time, released late', async () => {
    const key = fresh('refuse');
    const own = createClient({ socket: { host: '127.0.0.1', port: proxy.port, reconnectStrategy: () => 20 } });
    own.on('error', () => {});
    await own.connect();
    const g = guard(
      RedisStore.using((s, keys, args) => own.eval(s, { keys, arguments: args }), { prefix, backend: redisBackend }),
      { timeoutMs: TIMEOUT },
    );
    await proxy.send('refuse');
    await proxy.send('reset'); // the open connection goes; new ones are refused
    let v;
    try {
      v = await timed(() => g.consumeMany([{ key, limit: l(3, 10_000) }]));
    } finally {
      await proxy.send('accept');
    }
    assert.ok(['store-error', 'timeout'].includes(v.value.failed), v.value.failed);
    assertPolicy(v, v.value.failed, false);
    await g.close();
    await own.destroy();
    assert.equal(await counted(key, l(3, 10_000)), 0);
  });

  it('a fallback store takes over while Redis stalls, and Redis answers again after', async () => {
    const fallback = new MemoryStore();
    const g = guard(redisStore(), { timeoutMs: TIMEOUT, onFailure: fallback });
    const key = fresh('fallback');
    const limit = l(2, 10_000);
    fallback.consume(key, limit); // the fallback has counted one call of its own
    await proxy.send('stall');
    let verdicts;
    try {
      verdicts = [];
      for (let i = 0; i < 3; i++) verdicts.push(await timed(() => g.consume(key, limit)));
    } finally {
      await proxy.send('unstall');
    }
    assert.deepEqual(verdicts.map((v) => [v.value.failed, v.value.allowed]), [['timeout', true], ['timeout', false], ['timeout', false]]);
    for (const v of verdicts) assert.ok(v.ms <= TIMEOUT + SLACK, `${v.ms}`);
    // The fallback's refusal is the fallback's own wait, not the timeout.
    assert.ok(verdicts[1].value.retryAfterMs > TIMEOUT);
    await g.close();
    // Redis answers late: allows calls 1 and 2, refuses 3. Call 1 ran (the fallback allowed it): its
    // count stays; call 2 was refused by the fallback: given back; call 3 recorded nothing.
    assert.equal(await counted(key, limit), 1);
    const s = g.stats();
    assert.deepEqual([s.fallbackCalls, s.timeouts, s.lateReleases, s.allowed, s.refused], [3, 3, 1, 1, 2]);
    // The main store is back: its verdict, no `failed`.
    const g2 = guard(redisStore(), { timeoutMs: TIMEOUT, onFailure: fallback });
    const back = await g2.consume(key, limit);
    assert.equal(back.failed, undefined);
    assert.equal(back.allowed, true); // Redis had counted 1 of 2
    assert.equal(back.remaining, 0);
    await g2.close();
  });

  it('ready(): calls wait for the store to connect, up to the timeout, then meet the policy', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT });
    const key = fresh('ready');
    const connecting = g.ready(() => sleep(TIMEOUT * 3));
    const early = await timed(() => g.consume(key, l(3, 10_000)));
    assertPolicy(early, 'not-ready', false);
    await connecting;
    assert.equal((await g.consume(key, l(3, 10_000))).allowed, true);
    // A connect step within the timeout: the call waits and is answered by the store.
    const g2 = guard(redisStore(), { timeoutMs: TIMEOUT });
    const quick = g2.ready(() => sleep(TIMEOUT / 4));
    const waited = await g2.consume(key, l(3, 10_000));
    assert.equal(waited.failed, undefined);
    assert.equal(waited.allowed, true);
    await quick;
    // A connect step that fails: calls meet the policy at once, with its error.
    const g3 = guard(redisStore(), { timeoutMs: TIMEOUT });
    const refused = new Error('no route');
    await assert.rejects(g3.ready(() => Promise.reject(refused)), refused);
    const v = await g3.consume(key, l(3, 10_000));
    assert.equal(v.failed, 'not-ready');
    assert.equal(v.cause, refused);
    await Promise.all([g.close(), g2.close(), g3.close()]);
    assert.equal(await counted(key, l(3, 10_000)), 2);
    assert.deepEqual([g.stats().notReady, g3.stats().notReady], [1, 1]);
  });

  it('close() waits for a release under way, then runs the shutdown hook; later calls are not-ready', async () => {
    const g = guard(redisStore(), { timeoutMs: TIMEOUT });
    const key = fresh('close');
    const limit = l(3, 10_000);
    await proxy.send('latency 0 300');
    let atShutdown;
    try {
      assertPolicy(await timed(() => g.consume(key, limit)), 'timeout', false);
      await g.close(async () => {
        atShutdown = await counted(key, limit);
      });
    } finally {
      await proxy.send('resume');
    }
    assert.equal(atShutdown, 0, 'the late call was given back before the shutdown hook ran');
    assert.equal(g.stats().lateReleases, 1);
    assert.equal((await g.consume(key, limit)).failed, 'not-ready');
    // Symbol.asyncDispose (what `await using` calls) closes too.
    const g2 = guard(redisStore(), { timeoutMs: TIMEOUT });
    await g2[Symbol.asyncDispose]();
    assert.equal((await g2.consume(key, limit)).failed, 'not-ready');
  });

  it('the block cache refuses without a round trip until the wait ends, and forgets a released call', async () => {
    let runs = 0;
    const store = RedisStore.using(
      (s, keys, args) => {
        runs++;
        return client.eval(s, { keys, arguments: args });
      },
      { prefix, backend: redisBackend },
    );
    const g = guard(store, { timeoutMs: 1000, blockCache: true });
    const key = fresh('cache');
    const limit = l(2, 400);
    const first = await g.consumeMany([{ key, limit }]);
    await g.consume(key, limit);
    const refused = await g.consume(key, limit);
    assert.equal(refused.allowed, false);
    const before = runs;
    const cached = await g.consume(key, limit);
    const cachedBatch = await g.consumeMany([{ key: fresh('other'), limit }, { key, limit }]);
    assert.equal(runs, before, 'no round trip');
    assert.equal(cached.allowed, false);
    assert.equal(cached.retryTimestamp, refused.retryTimestamp, 'the same wait, the same retryTimestamp');
    assert.ok(cached.retryAfterMs <= refused.retryAfterMs && cached.retryAfterMs >= 1);
    assert.equal(cachedBatch.blocked, 1);
    assert.equal(g.stats().cacheHits, 2);
    // A release through the guard forgets the entry: the next call asks the store, which allows it.
    await first.release();
    const again = await g.consume(key, limit);
    assert.equal(again.allowed, true);
    assert.equal(runs, before + 2);
    // At the end of the wait the store is asked again.
    await g.consume(key, limit); // refused by the store, cached again
    await sleep(450);
    assert.equal((await g.consume(key, limit)).allowed, true);
    await g.close();
  });

  describe('the conformance kit on guarded stores', { concurrency: 1 }, () => {
    testStore('guard(RedisStore)', () => guard(redisStore(), { timeoutMs: 2000 }), { describe, it });
    testStore('guard(RedisStore, blockCache)', () => guard(redisStore(), { timeoutMs: 2000, blockCache: true }), { describe, it });
  });
});

describe('the conformance kit on a guarded MemoryStore', () => {
  testStore('guard(MemoryStore, blockCache)', () => guard(new MemoryStore(), { timeoutMs: 1000, blockCache: true }), { describe, it });
});

// --- a private redis-server (6410-6419): paused, killed and restarted ---------------------------------

/** A redis-server of this suite's own on `port` (6410-6419), append-only so a restart keeps its counts. */
async function ownRedis(port) {
  const dir = mkdtempSync(join(tmpdir(), `ratewindow-guard-${port}-`));
  let child = null;
  const ping = () => execFileSync('redis-cli', ['-p', String(port), 'ping'], { stdio: 'pipe' });
  const server = {
    async start() {
      child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'], { stdio: 'ignore' });
      for (let i = 0; i < 100; i++) {
        try {
          ping();
          return;
        } catch {
          await sleep(30);
        }
      }
      throw new Error(`redis-server on ${port} did not start`);
    },
    async kill() {
      const c = child;
      child = null;
      if (c === null) return;
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await exited;
    },
    cli: (...args) => execFileSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).trim(),
    async close() {
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}

describe('guard on a private redis-server', { concurrency: 1 }, () => {
  const port = 6410;
  let server;
  let client;
  before(async () => {
    server = await ownRedis(port);
    client = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 30 } });
    client.on('error', () => {});
    await client.connect();
  });
  after(async () => {
    await client?.destroy();
    await server?.close();
  });
  const store = () => RedisStore.using((s, keys, args) => client.eval(s, { keys, arguments: args }), { backend: redisBackend });
  const counted = (key) => Number(server.cli('ZCOUNT', `ratewindow:log:${key}`, '0', '+inf'));

  it('CLIENT PAUSE: refused in time; the script runs when the pause ends and is given back', async () => {
    const g = guard(store(), { timeoutMs: TIMEOUT });
    const key = fresh('pause');
    await g.consume(fresh('warm'), l(3, 10_000)); // the script is loaded
    server.cli('CLIENT', 'PAUSE', String(TIMEOUT * 3), 'WRITE');
    assertPolicy(await timed(() => g.consume(key, l(3, 10_000))), 'timeout', false);
    await g.close();
    assert.equal(counted(key), 0);
    assert.equal(g.stats().lateReleases, 1);
  });

  it('the server killed and restarted mid-run: the policy answers meanwhile, the store after; counts match the verdicts', async () => {
    const g = guard(store(), { timeoutMs: TIMEOUT });
    const key = fresh('restart');
    const limit = l(100, 60_000);
    const verdicts = [];
    const run = (async () => {
      for (let i = 0; i < 40; i++) {
        verdicts.push(await timed(() => g.consume(key, limit)));
        await sleep(10);
      }
    })();
    await sleep(60);
    await server.kill();
    await sleep(150);
    await server.start();
    await run;
    await g.close(); // late answers (commands the client queued while the server was away) given back
    for (const v of verdicts) assert.ok(v.ms <= TIMEOUT + SLACK, `answered after ${v.ms} ms`);
    const failed = verdicts.filter((v) => v.value.failed !== undefined);
    const allowed = verdicts.filter((v) => v.value.allowed);
    assert.ok(failed.length >= 1, 'some calls met the policy while the server was down');
    for (const v of failed) assert.equal(v.value.allowed, false);
    assert.ok(allowed.length >= 2, 'the store answered before and after');
    // The server counts exactly the calls allowed, but for at most one: the call in flight when the
    // server was killed may have been written (appendfsync always) without its reply being sent.
    const n = counted(key);
    assert.ok(n === allowed.length || n === allowed.length + 1, `counted ${n}, allowed ${allowed.length}`);
  });
});

// --- Redis that is not there -------------------------------------------------------------------------

describe('guard on a Redis that is down', () => {
  it('a closed port: the client fails, the policy answers at once', async () => {
    const down = new IORedis({ host: '127.0.0.1', port: 6419, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    down.on('error', () => {});
    const g = guard(
      RedisStore.using((s, keys, args) => down.eval(s, keys.length, ...keys, ...args), { backend: redisBackend }),
      { timeoutMs: TIMEOUT },
    );
    const v = await timed(() => g.consume('k', l(1, 1000)));
    assertPolicy(v, 'store-error', false);
    assert.ok(v.value.cause instanceof StoreError);
    down.disconnect();
  });
});

// --- PostgreSQL through the fault proxy ------------------------------------------------------------

describe('guard on PostgresStore through the fault proxy', { concurrency: 1 }, () => {
  const prefix = runPrefix('guard');
  let proxy;
  let pool; // through the proxy
  let direct;
  let truth;

  before(async () => {
    proxy = await faultProxy('127.0.0.1:5432');
    direct = new pg.Pool({ ...PG, max: 2 });
    direct.on('error', () => {});
    truth = PostgresStore.using(direct, { prefix });
    await truth.installSchema();
    pool = new pg.Pool({ ...PG, host: '127.0.0.1', port: proxy.port, max: 1 });
    pool.on('error', () => {});
  });
  after(async () => {
    await proxy?.send('resume').catch(() => {});
    await pool?.end().catch(() => {});
    if (direct) {
      await dropPg(direct, prefix);
      await direct.end();
    }
    await proxy?.close();
  });
  const counted = async (key, limit) => {
    const v = await truth.peekMany([{ key, limit }]);
    return v.allowed ? limit.uses - v.remaining : limit.uses;
  };

  it('latency beyond the timeout, deny: refused in time, the late count released', async () => {
    const g = guard(PostgresStore.using(pool, { prefix }), { timeoutMs: TIMEOUT });
    const key = fresh('pg-latency');
    await g.consume(fresh('pg-warm'), l(3, 10_000)); // the pool's one connection is open
    await proxy.send('latency 0 300');
    try {
      assertPolicy(await timed(() => g.consume(key, l(3, 10_000))), 'timeout', false);
    } finally {
      await proxy.send('resume');
    }
    await g.close();
    assert.equal(await counted(key, l(3, 10_000)), 0);
    assert.equal(g.stats().lateReleases, 1);
  });

  it('a pool exhausted: the call waits for a connection, is refused in time, and released once it ran', async () => {
    const g = guard(PostgresStore.using(pool, { prefix }), { timeoutMs: TIMEOUT });
    const key = fresh('pg-pool');
    const held = await pool.connect(); // the pool's only connection
    let v;
    try {
      v = await timed(() => g.consumeMany([{ key, limit: l(3, 10_000) }]));
    } finally {
      setTimeout(() => held.release(), 50);
    }
    assertPolicy(v, 'timeout', false);
    await g.close();
    assert.equal(await counted(key, l(3, 10_000)), 0);
    assert.equal(g.stats().lateReleases, 1);
  });

  it('a reply cut after the statement committed, deny: refused in time; the call given back by its id', async () => {
    const g = guard(PostgresStore.using(pool, { prefix }), { timeoutMs: 1000 });
    const key = fresh('pg-cut');
    await g.consume(fresh('pg-warm'), l(3, 10_000)); // the pool's one connection is open
    await proxy.send('cut 3');
    let v;
    try {
      v = await g.consume(key, l(3, 10_000));
    } finally {
      await proxy.send('resume');
    }
    assert.deepEqual([v.allowed, v.failed], [false, 'store-error']);
    await g.close(); // waits for the give-back (on a new connection)
    assert.equal(await counted(key, l(3, 10_000)), 0);
    assert.deepEqual([g.stats().lateReleases, g.stats().lateReleasesFailed], [1, 0]);
  });

  it('a stall, allow: allowed in time; the late count stays', async () => {
    const g = guard(PostgresStore.using(pool, { prefix }), { timeoutMs: TIMEOUT, onFailure: 'allow' });
    const key = fresh('pg-stall');
    await proxy.send('stall');
    let v;
    try {
      v = await timed(() => g.consume(key, l(3, 10_000)));
    } finally {
      await proxy.send('unstall');
    }
    assertPolicy(v, 'timeout', true);
    await g.close();
    assert.equal(await counted(key, l(3, 10_000)), 1);
  });

  testStore('guard(PostgresStore)', () => guard(PostgresStore.using(direct, { prefix }), { timeoutMs: 2000 }), { describe, it });
});
