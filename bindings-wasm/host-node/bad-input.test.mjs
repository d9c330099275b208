// Bad input comes back as the component's `error` variant (a ComponentError carrying it), never a trap,
// in both worlds; the hosted world reads the host's clock once per call.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { attempt, engineOps, hostedOps } from './component.mjs';

const BAD = [
  [{ uses: NaN, window_ms: 1000 }, 'uses', 'NaN'],
  [{ uses: Infinity, window_ms: 1000 }, 'uses', 'Infinity'],
  [{ uses: -Infinity, window_ms: 1000 }, 'uses', '-Infinity'],
  [{ uses: 0, window_ms: 1000 }, 'uses', '0'],
  [{ uses: -1, window_ms: 1000 }, 'uses', '-1'],
  [{ uses: 1.5, window_ms: 1000 }, 'uses', '1.5'],
  [{ uses: 2 ** 32, window_ms: 1000 }, 'uses', '4294967296'],
  [{ uses: 1, window_ms: NaN }, 'window-ms', 'NaN'],
  [{ uses: 1, window_ms: 0 }, 'window-ms', '0'],
  [{ uses: 1, window_ms: -0 }, 'window-ms', '-0'],
  [{ uses: 1, window_ms: 2.5 }, 'window-ms', '2.5'],
  [{ uses: 1, window_ms: 4320000000000001 }, 'window-ms', '4320000000000001'],
];

for (const [world, make] of [['engine', engineOps], ['hosted', hostedOps]]) {
  test(`${world}: every operation refuses a bad limit with the error variant`, async () => {
    const ops = await make();
    ops.freshStore();
    for (const [bad, field, value] of BAD) {
      const results = [
        ops.checkLimit(bad),
        ops.consume('k', bad, 5),
        ops.peek('k', bad, 5),
        ops.consumeMany([{ key: 'fine', limit: { uses: 1, window_ms: 1000 } }, { key: 'k', limit: bad }], 5),
        ops.peekMany([{ key: 'k', limit: bad }], 5),
      ];
      if (field === 'window-ms') results.push(ops.hit('h', bad.window_ms, 1, 5));
      for (const r of results) {
        assert.deepStrictEqual(r.err, { tag: 'invalid-limit', val: { field, value } }, JSON.stringify(bad));
      }
    }
    assert.equal(ops.store.keyCount(), 0n);
    assert.equal(ops.consume('fine', { uses: 1, window_ms: 1000 }, 5).ok.allowed, true);
  });

  test(`${world}: wrongly typed host values are refused by the bindings, and the instance still works`, async () => {
    const ops = await make();
    ops.freshStore();
    assert.throws(() => ops.store.consume(42, { uses: 1, windowMs: 1 }, ...(ops.timed ? [0n] : [])));
    assert.throws(() => ops.hit('k', 1000, 2 ** 70, 0), RangeError);
    assert.throws(() => ops.attempts('k', -1), RangeError);
    assert.equal(ops.consume('k', { uses: 1, window_ms: 1000 }, 0).ok.allowed, true);
  });

  test(`${world}: odd but valid input`, async () => {
    const ops = await make();
    ops.freshStore();
    const max = { uses: 2 ** 32 - 1, window_ms: 4320000000000000 };
    for (const key of ['', 'ключ:🔑', 'x'.repeat(100_000)]) {
      assert.equal(ops.consume(key, max, 0).ok.allowed, true);
      assert.equal(ops.hit(key, 1, 2n ** 63n - 1n, 5).ok, 2n ** 63n - 1n);
      assert.equal(ops.hit(key, 1, 2n ** 63n - 1n, 5).ok, 2n ** 63n - 1n);
    }
    assert.equal(ops.consumeMany([], 0, 'e').ok.allowed, true);
    ops.release('e', 0);
    ops.release('e', 0);
  });
}

test('hosted: the store reads the imported clock once per call', async () => {
  const ops = await hostedOps();
  ops.freshStore();
  const before = ops.host.clockReads;
  ops.host.clockMs = 10_000n;
  const lim = { uses: 1, windowMs: 1000 };
  assert.equal(ops.store.consume('k', lim).allowed, true);
  assert.equal(ops.host.clockReads, before + 1);
  ops.host.clockMs = 10_400n;
  const refused = ops.store.consume('k', lim);
  assert.deepStrictEqual([refused.allowed, refused.retryAfterMs, refused.retryTimestamp], [false, 600n, 11_000n]);
  ops.host.clockMs = 11_000n;
  assert.equal(ops.store.consume('k', lim).allowed, true);
});

test('hosted: the Redis store reports the host runner error as store-failed', async () => {
  const ops = await hostedOps();
  const store = new ops.redis.RedisStore({ prefix: 't:', hashTagBefore: undefined });
  for (const call of [
    () => store.consumeMany([{ key: 'k', limit: { uses: 1, windowMs: 1000 } }]),
    () => store.hit('k', 1000, 1n),
  ]) {
    assert.deepStrictEqual(attempt(call).err, { tag: 'store-failed', val: ops.host.noClient });
  }
});

test('hosted: a Redis store whose prefix could name another prefix\'s keys refuses every call as invalid-argument', async () => {
  const ops = await hostedOps();
  const lim = { uses: 1, windowMs: 1000 };
  for (const prefix of ['p:log:', 'plog:', 'a:win:b']) {
    // The constructor cannot fail (WIT 0.2.0): the store is made, and each call is refused before any command.
    const store = new ops.redis.RedisStore({ prefix, hashTagBefore: undefined });
    for (const call of [
      () => store.consume('k', lim),
      () => store.peekMany([{ key: 'k', limit: lim }]),
      () => store.hit('k', 1000, 1n),
      () => store.attempt('k', 3, 1000),
      () => store.clear('k'),
    ]) {
      assert.deepStrictEqual(attempt(call).err, { tag: 'invalid-argument', val: { field: 'prefix', value: prefix } });
    }
  }
  // A prefix without a marker reaches the host's runner (which has no client here).
  const fine = new ops.redis.RedisStore({ prefix: 'p:lo', hashTagBefore: undefined });
  assert.equal(attempt(() => fine.hit('k', 1000, 1n)).err.tag, 'store-failed');
});

test('jco replaces a lone surrogate before the component sees the key (a host limit, documented)', async () => {
  // jco lowers a JS string with TextEncoder, which writes U+FFFD for a lone surrogate: the component
  // receives valid UTF-8 and cannot tell `s\uD800` from `s\uFFFD`. The component ships no JS wrapper of
  // ours that could check first; the README says to check keys in the host (`str.isWellFormed()`).
  const ops = await engineOps();
  ops.freshStore();
  const lim = { uses: 1, window_ms: 60_000 };
  assert.equal(ops.consume('s\uFFFD', lim, 1_000).ok.allowed, true);
  assert.equal(ops.consume('s\uD800', lim, 1_001).ok.allowed, false, 'one key: jco replaced the surrogate');
  assert.equal(ops.consume('s\uDC00', lim, 1_002).ok.allowed, false);
  assert.equal('s\uD800'.isWellFormed(), false, 'what a host checks before the call');
});
