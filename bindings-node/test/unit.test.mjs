// Unit tests of the TypeScript layer over the backend under test (RATEWINDOW_BACKEND).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { api, backend } from './backend.mjs';

const { MemoryStore, RateLimiter, Limit, GlobalLimit, Unlimited, RateWindowError, InvalidLimitError, InvalidArgumentError } = api;
const manual = (t = 1_000_000) => ({ t, now() { return this.t; } });
const L = (uses, windowMs) => ({ uses, windowMs });

describe('the backend', () => {
  it('implements every method of the Backend and BackendStore interfaces', () => {
    for (const name of ['createStore', 'recordLayout', 'checkLimit', 'noop', 'panicForTest']) assert.equal(typeof backend[name], 'function', name);
    assert.equal(typeof backend.kind, 'string');
    assert.deepStrictEqual([...backend.recordLayout()], ['limit', 'remaining', 'refillAfterMs', 'resetAfterMs', 'blocked', 'allowed']);
    const store = backend.createStore(new Float64Array(6));
    const methods = ['consume', 'peek', 'batchPush', 'batchConsume', 'batchPeek', 'batchClear', 'release',
      'dropRelease', 'releaseHandles', 'hit', 'hitWindow', 'attempt', 'attempts', 'tooManyAttempts', 'remaining', 'availableIn',
      'availableInMs', 'resetAttempts', 'clear', 'purge', 'size'];
    for (const name of methods) assert.equal(typeof store[name], 'function', name);
    assert.equal(backend.noop(), 0);
  });

  it('encodes verdicts as documented: 0 allowed, the retry timestamp when refused, the rest in the record', () => {
    const record = new Float64Array(6);
    const store = backend.createStore(record);
    assert.equal(store.consume('k', 1, 1000, 50), 0);
    assert.deepStrictEqual([...record.subarray(0, 4)], [1, 0, 1000, 1000]);
    assert.equal(store.consume('k', 1, 1000, 60), 1050);
    assert.deepStrictEqual([...record.subarray(0, 4)], [1, 0, 990, 990]);
    store.batchPush('j', 1, 5000);
    store.batchPush('k', 1, 1000);
    assert.equal(store.batchConsume(70), -1050);
    assert.equal(record[4], 1, 'blocked');
    assert.equal(store.attempt('f', 1, 100, 70), 1);
    assert.deepStrictEqual([record[3], record[5]], [100, 1]);
    assert.equal(store.attempt('f', 1, 100, 80), 1);
    assert.deepStrictEqual([record[3], record[5]], [90, 0]);
    assert.equal(store.hitWindow('f', 100, 2, 90), 3);
    assert.equal(record[3], 80);
    store.batchPush('j', 1, 5000);
    const handle = store.batchConsume(70);
    assert.ok(handle > 0);
    assert.equal(store.releaseHandles(), 1);
    store.release(handle, 80);
    store.release(handle, 80);
    assert.equal(store.releaseHandles(), 0);
    assert.throws(() => store.consume('k', 0, 1000, 0), (e) => e.code === 'invalid_limit:uses');
    assert.throws(() => store.hit('k', 0.5, 1, 0), (e) => e.code === 'invalid_limit:window_ms' && e.message.startsWith('invalid decayMs: 0.5'));
    // Numbers the TypeScript layer checks are checked again at the boundary, named as JS spells them.
    assert.throws(() => store.hit('k', 1000, 0.5, 0), (e) => e.code === 'invalid_argument:amount');
    assert.throws(() => store.remaining('k', NaN, 0), (e) => e.code === 'invalid_argument:max');
    assert.throws(() => store.consume('k', 1, 1000, -1), (e) => e.code === 'invalid_argument:now');
    assert.throws(() => backend.createStore(new Float64Array(2)), Error);
    // Called directly with a wrong type, the boundary throws (it never reads garbage or panics).
    assert.throws(() => store.consume(5, 1, 1000, 0), Error);
    assert.throws(() => store.attempts({}, 0), Error);
  });
});

describe('MemoryStore verdicts', () => {
  it('are plain data with the quota', () => {
    const store = new MemoryStore({ clock: manual(0) });
    const allowed = store.consume('a', L(1, 1000));
    assert.deepStrictEqual(allowed, { allowed: true, retryAfterMs: 0, limit: 1, remaining: 0, refillAfterMs: 1000, resetAfterMs: 1000 });
    const refused = store.consume('a', L(1, 1000));
    assert.deepStrictEqual(refused, { allowed: false, retryAfterMs: 1000, retryTimestamp: 1000, limit: 1, remaining: 0, refillAfterMs: 1000, resetAfterMs: 1000 });
    assert.equal(Object.getPrototypeOf(refused), Object.prototype);
    assert.equal(
      JSON.stringify(refused),
      '{"allowed":false,"retryAfterMs":1000,"retryTimestamp":1000,"limit":1,"remaining":0,"refillAfterMs":1000,"resetAfterMs":1000}',
    );
  });

  it('of an allowed batch carry a non-enumerable, idempotent release that gives back only that call', () => {
    const clock = manual(0);
    const store = new MemoryStore({ clock });
    const batch = [{ key: 'a', limit: L(2, 1000) }];
    const first = store.consumeMany(batch);
    assert.deepStrictEqual(first, { allowed: true, retryAfterMs: 0, limit: 2, remaining: 1, refillAfterMs: 1000, resetAfterMs: 1000 });
    assert.deepStrictEqual(Object.keys(first), ['allowed', 'retryAfterMs', 'limit', 'remaining', 'refillAfterMs', 'resetAfterMs']);
    assert.equal(typeof first.release, 'function');
    clock.t = 10;
    store.consumeMany(batch);
    clock.t = 20;
    assert.deepStrictEqual(store.consumeMany(batch), {
      allowed: false, retryAfterMs: 980, retryTimestamp: 1000, blocked: 0, limit: 2, remaining: 0, refillAfterMs: 980, resetAfterMs: 990,
    });
    assert.equal(first.release(), undefined);
    first.release();
    assert.equal(store.consumeMany(batch).allowed, true);
    const refused = store.consumeMany(batch);
    assert.deepStrictEqual(refused, {
      allowed: false, retryAfterMs: 990, retryTimestamp: 1010, blocked: 0, limit: 2, remaining: 0, refillAfterMs: 990, resetAfterMs: 1000,
    });
    assert.equal(refused.release, undefined);
  });

  it('name the entry with the longest wait', () => {
    const store = new MemoryStore({ clock: manual(0) });
    const batch = [{ key: 'a', limit: L(1, 100) }, { key: 'b', limit: L(1, 300) }, { key: 'c', limit: L(1, 300) }];
    store.consumeMany(batch);
    const refused = { allowed: false, retryAfterMs: 300, retryTimestamp: 300, blocked: 1, limit: 1, remaining: 0, refillAfterMs: 300, resetAfterMs: 300 };
    assert.deepStrictEqual(store.consumeMany(batch), refused);
    assert.deepStrictEqual(store.peekMany(batch), refused);
  });

  it('release handles are dropped once their verdicts are garbage', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc');
    const store = new MemoryStore({ clock: manual(0) });
    for (let i = 0; i < 1000; i++) store.consumeMany([{ key: `k${i}`, limit: L(1, 1000) }]);
    const native = store['native'];
    assert.equal(native.releaseHandles(), 1000);
    for (let i = 0; i < 20 && native.releaseHandles() > 0; i++) {
      gc();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(native.releaseHandles(), 0);
  });
});

describe('MemoryStore', () => {
  it('uses the host clock by default', () => {
    const store = new MemoryStore();
    store.consume('a', L(1, 60_000));
    const before = Date.now();
    const refused = store.consume('a', L(1, 60_000));
    assert.ok(refused.retryTimestamp >= before + 59_000 && refused.retryTimestamp <= Date.now() + 60_000);
  });

  it('expires keys eagerly, with no timer', () => {
    const clock = manual(0);
    const store = new MemoryStore({ clock });
    for (let i = 0; i < 200; i++) store.consume(`k${i}`, L(1, 100));
    assert.equal(store.size, 200);
    clock.t = 1000;
    for (let i = 0; i < 200; i++) store.consume('other', L(1_000_000, 100_000));
    assert.ok(store.size < 50, `size ${store.size}`);
    store.purge();
    assert.equal(store.size, 1);
  });

  it('reads keys of any length and script exactly (short keys skip the heap)', () => {
    const store = new MemoryStore({ clock: manual(0) });
    const keys = new Set(['', 'a', 'é', '日本', '🦀', 'a\u0000b', 'a\u0000c']);
    for (const unit of ['a', 'é', '日', '🦀']) {
      for (let n = 50; n <= 270; n++) keys.add(unit.repeat(n));
      keys.add(unit.repeat(1000));
    }
    for (const k of keys) assert.equal(store.consume(k, L(1, 100)).allowed, true, `first ${k.length}`);
    for (const k of keys) assert.equal(store.consume(k, L(1, 100)).allowed, false, `second ${k.length}`);
    assert.equal(store.size, keys.size);
  });

  it('peeks without recording', () => {
    const store = new MemoryStore({ clock: manual(0) });
    assert.deepStrictEqual(store.peek('a', L(1, 100)), { allowed: true, retryAfterMs: 0, limit: 1, remaining: 1, refillAfterMs: 0, resetAfterMs: 0 });
    assert.equal(store.size, 0);
    store.consume('a', L(1, 100));
    assert.deepStrictEqual(store.peek('a', L(1, 100)), {
      allowed: false, retryAfterMs: 100, retryTimestamp: 100, limit: 1, remaining: 0, refillAfterMs: 100, resetAfterMs: 100,
    });
  });

  it('offers the fixed-window operations', () => {
    const clock = manual(0);
    const store = new MemoryStore({ clock });
    assert.equal(store.hit('f', 2500), 1);
    assert.equal(store.hit('f', 2500, 4), 5);
    assert.equal(store.hit('f', 2500, -2), 3);
    assert.equal(store.attempts('f'), 3);
    assert.equal(store.tooManyAttempts('f', 3), true);
    assert.equal(store.tooManyAttempts('f', 4), false);
    assert.equal(store.remaining('f', 5), 2);
    clock.t = 1;
    assert.equal(store.availableIn('f'), 3);
    assert.equal(store.availableInMs('f'), 2499);
    store.resetAttempts('f');
    assert.equal(store.attempts('f'), 0);
    assert.equal(store.availableInMs('f'), 2499);
    store.clear('f');
    assert.equal(store.availableIn('f'), 0);
  });
});

describe('errors', () => {
  const store = new MemoryStore({ clock: manual(0) });

  it('refuse invalid limits with InvalidLimitError naming the field and the value as given', () => {
    const cases = [[NaN, 1000, 'uses'], [0, 1000, 'uses'], [1.5, 1000, 'uses'], [-1, 1000, 'uses'], [2 ** 32, 1000, 'uses'],
      [1, 0, 'windowMs'], [1, Infinity, 'windowMs'], [1, 4_320_000_000_000_001, 'windowMs'], [1, 0.5, 'windowMs']];
    for (const [uses, windowMs, field] of cases) {
      for (const call of [() => store.consume('e', L(uses, windowMs)), () => store.peek('e', L(uses, windowMs)),
        () => store.consumeMany([{ key: 'ok', limit: L(1, 10) }, { key: 'e', limit: L(uses, windowMs) }]),
        () => store.peekMany([{ key: 'e', limit: L(uses, windowMs) }]), () => api.cooldownLimit(uses, windowMs)]) {
        assert.throws(call, (e) => {
          assert.ok(e instanceof InvalidLimitError && e instanceof RateWindowError && e instanceof Error);
          assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_LIMIT');
          assert.equal(e.name, 'InvalidLimitError');
          assert.equal(e.field, field);
          assert.ok(Object.is(e.value, field === 'uses' ? uses : windowMs));
          assert.match(e.message, field === 'uses' ? /^invalid uses: / : /^invalid windowMs: /);
          return true;
        });
      }
    }
    // Nothing was recorded by the failed calls, not even the valid entry of the batch.
    assert.equal(store.size, 0);
    assert.equal(store.consumeMany([{ key: 'ok', limit: L(1, 10) }]).allowed, true);
  });

  it('give TypeErrors for wrong argument types, leaving no batch half-built', () => {
    assert.throws(() => store.consume(1, L(1, 10)), TypeError);
    assert.throws(() => store.consume('k', null), TypeError);
    assert.throws(() => store.consume('k', { uses: '1', windowMs: 10 }), TypeError);
    assert.throws(() => store.consumeMany('k'), TypeError);
    assert.throws(() => store.consumeMany([{ key: 'x', limit: L(1, 10) }, { key: 2, limit: L(1, 10) }]), TypeError);
    assert.throws(() => store.hit('k', '10'), TypeError);
    assert.throws(() => new MemoryStore(null), TypeError);
    assert.deepStrictEqual(store.consumeMany([{ key: 'y', limit: L(1, 10) }]), { allowed: true, retryAfterMs: 0, limit: 1, remaining: 0, refillAfterMs: 10, resetAfterMs: 10 });
    assert.equal(store.consume('x', L(1, 10)).allowed, true);
  });

  it('refuse a clock reading, amount or max that is not a safe integer', () => {
    for (const bad of [-1, 1.5, NaN, 2 ** 53]) {
      const s = new MemoryStore({ clock: { now: () => bad } });
      assert.throws(() => s.consume('k', L(1, 10)), (e) => e instanceof InvalidArgumentError && e.code === 'ERR_RATEWINDOW_INVALID_ARGUMENT' && e.field === 'now');
    }
    assert.throws(() => store.hit('k', 10, 0.5), (e) => e instanceof InvalidArgumentError && e.field === 'amount');
    assert.throws(() => store.remaining('k', Infinity), (e) => e instanceof InvalidArgumentError && e.field === 'max');
    assert.throws(() => store.hit('k', 0), (e) => e instanceof InvalidLimitError && e.field === 'windowMs' && e.value === 0);
    assert.equal(store.attempts('k'), 0);
  });
});

describe('Limit', () => {
  it('builds the seed framework limits', () => {
    assert.deepEqual([Limit.perSecond(5).maxAttempts, Limit.perSecond(5).decaySeconds], [5, 1]);
    assert.equal(Limit.perMinute(5, 2).decaySeconds, 120);
    assert.equal(Limit.perMinutes(2, 5).decaySeconds, 120);
    assert.equal(Limit.perMinutes(2, 5).maxAttempts, 5);
    assert.equal(Limit.perHour(1).decaySeconds, 3600);
    assert.equal(Limit.perDay(1, 2).decaySeconds, 172800);
    assert.ok(Limit.none() instanceof Unlimited && Limit.none() instanceof GlobalLimit && Limit.none() instanceof Limit);
    assert.equal(Limit.none().maxAttempts, Number.MAX_SAFE_INTEGER);
    assert.equal(new GlobalLimit(1000).decaySeconds, 60);
    assert.equal(Limit.perMinute(5).by('u1').key, 'u1');
    assert.equal(Limit.perMinute(5).by('u1').fallbackKey(), 'u1:attempts:5:decay:60');
    assert.equal(Limit.perMinute(5).fallbackKey(), 'attempts:5:decay:60');
  });

  it('is a cooldown limit, exact to the millisecond', () => {
    const limit = Limit.perSecond(2, 1.005);
    assert.equal(limit.uses, 2);
    assert.equal(limit.windowMs, 1005);
    const store = new MemoryStore({ clock: manual(0) });
    store.consume('k', limit);
    store.consume('k', limit);
    assert.equal(store.consume('k', limit).retryAfterMs, 1005);
  });
});

describe('RateLimiter', () => {
  it('counts in fixed windows on a MemoryStore', async () => {
    const clock = manual(0);
    const limiter = new RateLimiter(new MemoryStore({ clock }));
    assert.equal(await limiter.hit('k', 10), 1);
    assert.equal(await limiter.increment('k', 10, 3), 4);
    assert.equal(await limiter.decrement('k', 10), 3);
    assert.equal(await limiter.attempts('k'), 3);
    assert.equal(await limiter.tooManyAttempts('k', 3), true);
    assert.equal(await limiter.remaining('k', 5), 2);
    assert.equal(await limiter.retriesLeft('k', 2), 0);
    clock.t = 1;
    assert.equal(await limiter.availableIn('k'), 10);
    await limiter.resetAttempts('k');
    assert.equal(await limiter.attempts('k'), 0);
    await limiter.clear('k');
    assert.equal(await limiter.availableIn('k'), 0);
    assert.equal(await limiter.hit('k', 0.25), 1);
    clock.t = 251;
    assert.equal(await limiter.hit('k', 0.25), 1);
  });

  it('attempt runs the callback unless limited, counting first', async () => {
    const limiter = new RateLimiter();
    let runs = 0;
    assert.equal(await limiter.attempt('a', 2, () => { runs++; }), true);
    assert.equal(await limiter.attempt('a', 2, () => 'value'), 'value');
    assert.equal(await limiter.attempt('a', 2, () => { runs++; }), false);
    assert.equal(runs, 1);
    assert.equal(await limiter.attempts('a'), 2);
    const results = await Promise.all(Array.from({ length: 8 }, () => limiter.attempt('b', 1, async () => 'ran')));
    assert.equal(results.filter((r) => r === 'ran').length, 1);
  });

  it('resolves named limiters, rewriting duplicate keys to their fallback keys', async () => {
    const limiter = new RateLimiter();
    limiter.for('api', (user) => [Limit.perMinute(60), Limit.perDay(1000), Limit.perHour(5).by(user)]);
    limiter.for('one', () => Limit.perMinute(1).by('x'));
    assert.equal(limiter.limiter('missing'), undefined);
    const limits = await limiter.limiter('api')('u1');
    assert.deepEqual(limits.map((l) => l.key), ['attempts:60:decay:60', 'attempts:1000:decay:86400', 'u1']);
    assert.deepEqual((await limiter.limiter('one')()).map((l) => l.key), ['x']);
  });
});
