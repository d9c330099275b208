// A shard for shard.test.mjs: a child process (fork), a cluster worker or a worker thread that talks to
// the test (its manager) through a ShardedStore over the channel it was started with. What it does is
// argv[2] (or workerData.mode); it reports with one message { report: ... } and exits.
import { parentPort, workerData, isMainThread } from 'node:worker_threads';

import { guard, ShardedStore, SHARD_MESSAGE_KEY, StoreError } from '../dist/index.js';

const args = isMainThread ? process.argv.slice(2) : workerData;
const [mode, key, ...rest] = args;
const report = (value) =>
  new Promise((resolve) => {
    if (isMainThread) process.send({ report: value }, resolve);
    else {
      parentPort.postMessage({ report: value });
      resolve();
    }
  });
const errorOf = (e) => ({ name: e?.name, kind: e?.kind, code: e?.code, storeError: e instanceof StoreError, message: e?.message });

async function main() {
  switch (mode) {
    case 'consume': {
      // `calls` concurrent consumes of `key` under `uses` per minute: how many were allowed.
      const [uses, calls] = rest.map(Number);
      const store = new ShardedStore({ timeoutMs: 20_000 });
      const verdicts = await Promise.all(Array.from({ length: calls }, () => store.consume(key, { uses, windowMs: 60_000 })));
      return { sharded: store.sharded, allowed: verdicts.filter((v) => v.allowed).length };
    }
    case 'batch': {
      const [uses, calls] = rest.map(Number);
      const store = new ShardedStore({ timeoutMs: 20_000 });
      const batch = [
        { key: `${key}:a`, limit: { uses, windowMs: 60_000 } },
        { key: `${key}:b`, limit: { uses: uses * 10, windowMs: 60_000 } },
      ];
      const verdicts = await Promise.all(Array.from({ length: calls }, () => store.consumeMany(batch)));
      return { allowed: verdicts.filter((v) => v.allowed).length };
    }
    case 'timeout': {
      const store = new ShardedStore({ timeoutMs: Number(rest[0]) });
      const started = performance.now();
      try {
        await store.consume(key, { uses: 1, windowMs: 1000 });
        return { answered: true };
      } catch (e) {
        return { error: errorOf(e), ms: performance.now() - started };
      }
    }
    case 'closed': {
      // The manager closes the channel with the call under way: it fails at once, not at the timeout.
      const store = new ShardedStore({ timeoutMs: 20_000 });
      const started = performance.now();
      try {
        await store.consume(key, { uses: 1, windowMs: 1000 });
        console.log(JSON.stringify({ answered: true }));
      } catch (e) {
        console.log(JSON.stringify({ error: errorOf(e), ms: performance.now() - started }));
      }
      return undefined;
    }
    case 'lock': {
      // 64 concurrent acquirers of one lock in this shard: how many took it.
      const store = new ShardedStore({ timeoutMs: 20_000 });
      const taken = await Promise.all(Array.from({ length: 64 }, () => store.lock(key, 30).acquire()));
      return { acquired: taken.filter(Boolean).length };
    }
    case 'lockops': {
      const store = new ShardedStore({ timeoutMs: 5000 });
      const lock = store.lock(key, 30);
      const other = store.lock(key, 30);
      const out = {};
      out.acquire = await lock.acquire();
      out.again = await other.acquire();
      out.owner = (await lock.currentOwner()) === lock.owner;
      out.notOwnerRelease = await other.release();
      out.stillOwner = (await store.lock(key, 30).currentOwner()) === lock.owner;
      out.restored = await store.lock(key, 30, lock.owner).release();
      out.free = await lock.currentOwner();
      out.reacquire = await other.acquire();
      out.force = await store.lock(key, 30).forceRelease();
      out.afterForce = await other.currentOwner();
      out.withLock = await store.withLock(`${key}:w`, 5, () => 'ran');
      try {
        store.lock(key, -1);
        out.badTtl = 'no error';
      } catch (e) {
        out.badTtl = { name: e.name, field: e.field };
      }
      return out;
    }
    case 'guarded': {
      // The store's own timeout (shorter than the guard's): a StoreError the guard answers with its policy.
      const store = guard(new ShardedStore({ timeoutMs: Number(rest[0]) }), { timeoutMs: 5000, onFailure: 'deny' });
      const v = await store.consume(key, { uses: 1, windowMs: 1000 });
      return { allowed: v.allowed, failed: v.failed, cause: errorOf(v.cause) };
    }
    case 'raw': {
      // Messages no shard sends, each answered (or not) by the manager; then a real call still works.
      const answers = [];
      const seen = new Promise((resolve) => {
        process.on('message', (m) => {
          if (m && typeof m[SHARD_MESSAGE_KEY] === 'string') answers.push(JSON.parse(m[SHARD_MESSAGE_KEY]));
          if (answers.length === 4) resolve();
        });
      });
      for (const text of [
        'garbage',
        '{"rw":1,"id":900001,"op":"explode","key":"k"}',
        '{"rw":1,"id":900002,"op":"consume","key":"k","uses":3}',
        '{"rw":9,"id":900003,"op":"consume","key":"k","uses":3,"windowMs":10}',
      ]) {
        process.send({ [SHARD_MESSAGE_KEY]: text });
      }
      process.send({ [SHARD_MESSAGE_KEY]: 42 }); // not a protocol message: ignored
      process.send('hello'); // another message on the channel: ignored
      await seen;
      process.removeAllListeners('message');
      const store = new ShardedStore({ timeoutMs: 5000 });
      const v = await store.consume(key, { uses: 1, windowMs: 1000 });
      return { answers, allowed: v.allowed };
    }
    case 'ops': {
      // Every operation once, through the manager, and the typed errors of bad input found on either side.
      const store = new ShardedStore({ timeoutMs: 5000 });
      const out = {};
      out.consume = await store.consume(key, { uses: 2, windowMs: 60_000 });
      out.peek = await store.peek(key, { uses: 2, windowMs: 60_000 });
      const batch = [{ key: `${key}:m`, limit: { uses: 1, windowMs: 60_000 } }];
      const allowed = await store.consumeMany(batch);
      out.consumeMany = allowed;
      out.hasRelease = typeof allowed.release === 'function';
      out.refusedMany = await store.consumeMany(batch);
      out.peekMany = await store.peekMany(batch);
      await allowed.release();
      out.afterRelease = await store.consumeMany(batch);
      out.hit = await store.hit(`${key}:f`, 60_000, 2);
      out.hitWindow = await store.hitWindow(`${key}:f`, 60_000);
      out.attempt = await store.attempt(`${key}:f`, 3, 60_000);
      out.attempts = await store.attempts(`${key}:f`);
      out.tooMany = await store.tooManyAttempts(`${key}:f`, 4);
      out.remaining = await store.remaining(`${key}:f`, 10);
      out.availableIn = await store.availableIn(`${key}:f`);
      out.availableInMs = await store.availableInMs(`${key}:f`);
      await store.resetAttempts(`${key}:f`);
      out.afterReset = await store.attempts(`${key}:f`);
      await store.clear(`${key}:f`);
      out.afterClear = await store.availableIn(`${key}:f`);
      const errors = {};
      for (const [name, call] of Object.entries({
        uses: () => store.consume(key, { uses: 0, windowMs: 1000 }),
        windowMs: () => store.consume(key, { uses: 1, windowMs: 1.5 }),
        decayMs: () => store.hit(key, -1),
        amount: () => store.hit(key, 1000, 0.5),
        entryKey: () => store.consumeMany([{ key: 'ok', limit: { uses: 1, windowMs: 10 } }, { key: '\ud800', limit: { uses: 1, windowMs: 10 } }]),
        keyType: () => store.consume(5, { uses: 1, windowMs: 10 }),
      })) {
        try {
          await call();
          errors[name] = 'no error';
        } catch (e) {
          errors[name] = { ...errorOf(e), field: e.field, argument: e.argument };
        }
      }
      return { out, errors };
    }
    case 'failures': {
      const store = new ShardedStore({ timeoutMs: 5000 });
      const out = {};
      for (const [name, call] of Object.entries({
        consume: () => store.consume(key, { uses: 1, windowMs: 1000 }),
        peekMany: () => store.peekMany([{ key, limit: { uses: 1, windowMs: 1000 } }]),
        hit: () => store.hit(key, 1000),
      })) {
        try {
          await call();
          out[name] = 'no error';
        } catch (e) {
          out[name] = errorOf(e);
        }
      }
      return out;
    }
    case 'kit': {
      // The conformance kit, inside sharding: registered with node:test, which runs it in this process.
      const { describe, it } = await import('node:test');
      const { testStore } = await import('../dist/testing.js');
      const store = new ShardedStore();
      if (!store.sharded) throw new Error('the kit child is not sharded');
      testStore('ShardedStore inside sharding', () => new ShardedStore({ timeoutMs: 10_000 }), { describe, it });
      return undefined;
    }
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

main().then(
  async (value) => {
    if (value !== undefined) await report(value);
    if (isMainThread && mode !== 'kit' && process.connected) process.disconnect();
  },
  async (e) => {
    await report({ crashed: String(e?.stack ?? e) });
    process.exitCode = 1;
    if (isMainThread) process.disconnect();
  },
);
