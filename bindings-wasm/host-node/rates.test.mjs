// GCRA and the sliding-window counter through the component in Node (jco transpile), in both worlds:
// every case of tests/vectors/gcra/*.json and tests/vectors/counter/*.json (single calls, batches mixing
// them with the sliding log, give-backs), and bad input as the `error` variant, never a trap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import { batchJson as batch, engineOps, hostedOps, verdictJson as verdict } from './component.mjs';

const VECTORS = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'tests', 'vectors');
const WORLDS = [['engine', engineOps], ['hosted', hostedOps]];

/** A refusal in the vectors' shape: `invalid_rate` and the engine's field. */
const fromResult = (r, ok) => {
  if (r.err) {
    if (r.err.tag === 'invalid-argument') {
      assert.equal(r.err.val.field, 'cost', `unexpected error ${JSON.stringify(r.err)}`);
      return { error: 'invalid_rate', field: 'cost' };
    }
    assert.equal(r.err.tag, 'invalid-limit', `unexpected error ${JSON.stringify(r.err)}`);
    return { error: 'invalid_rate', field: r.err.val.field === 'window-ms' ? 'window_ms' : r.err.val.field };
  }
  return ok(r.ok);
};

function run(ops, op) {
  const cost = op.cost ?? 1;
  switch (op.op) {
    case 'gcra_consume':
      return fromResult(ops.consumeRate(op.key, 'gcra', op.limit, cost, op.now), verdict);
    case 'gcra_peek':
      return fromResult(ops.peekRate(op.key, 'gcra', op.limit, cost, op.now), verdict);
    case 'gcra_reset':
      ops.resetRate(op.key, 'gcra', op.now);
      return null;
    case 'counter_consume':
      return fromResult(ops.consumeRate(op.key, 'counter', op.limit, cost, op.now), verdict);
    case 'counter_peek':
      return fromResult(ops.peekRate(op.key, 'counter', op.limit, cost, op.now), verdict);
    case 'counter_reset':
      ops.resetRate(op.key, 'counter', op.now);
      return null;
    case 'consume_mixed':
      return fromResult(ops.consumeMixed(op.entries, op.now, op.id), batch);
    case 'peek_mixed':
      return fromResult(ops.peekMixed(op.entries, op.now), batch);
    case 'release':
      ops.release(op.id, op.now);
      return null;
    case 'gcra_limit':
      return fromResult(ops.checkRate('gcra', op.limit), () => ({ ok: true }));
    case 'counter_limit':
      return fromResult(ops.checkRate('counter', op.limit), () => ({ ok: true }));
    default:
      throw new Error(`unknown vector op ${JSON.stringify(op.op)}: teach this runner`);
  }
}

for (const sub of ['gcra', 'counter']) {
  const dir = path.join(VECTORS, sub);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  test(`${sub}: the vectors directory has cases`, () => assert.ok(files.length > 0, `no vectors in ${dir}`));
  for (const [world, make] of WORLDS) {
    for (const file of files) {
      const doc = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
      test(`${world}: ${sub}/${file}`, async (t) => {
        const ops = await make();
        for (const c of doc.cases) {
          await t.test(c.name, () => {
            ops.freshStore();
            c.ops.forEach((op, i) => {
              const expect = op.expect === undefined ? null : op.expect;
              assert.deepStrictEqual(run(ops, op), expect, `op ${i} (${op.op} at ${op.now})`);
            });
          });
        }
      });
    }
  }
}

const GCRA = { uses: 10, window_ms: 1000, burst: 10 };
const BAD_LIMITS = [
  ['gcra', { uses: NaN, window_ms: 1000 }, 'uses', 'NaN'],
  ['gcra', { uses: 0, window_ms: 1000 }, 'uses', '0'],
  ['gcra', { uses: 10, window_ms: 2.5 }, 'window-ms', '2.5'],
  ['gcra', { uses: 10, window_ms: 1000, burst: 0 }, 'burst', '0'],
  ['gcra', { uses: 10, window_ms: 1000, burst: -1 }, 'burst', '-1'],
  ['gcra', { uses: 10, window_ms: 1000, burst: 1.5 }, 'burst', '1.5'],
  ['gcra', { uses: 10, window_ms: 1000, burst: NaN }, 'burst', 'NaN'],
  ['gcra', { uses: 10, window_ms: 1000, burst: Infinity }, 'burst', 'Infinity'],
  ['gcra', { uses: 10, window_ms: 1000, burst: 2 ** 32 }, 'burst', '4294967296'],
  ['counter', { uses: -Infinity, window_ms: 1000 }, 'uses', '-Infinity'],
  ['counter', { uses: 1, window_ms: -0 }, 'window-ms', '-0'],
  // uses x window-ms past 2^53 - 1: the counter's own bound, on `uses`.
  ['counter', { uses: 4294967295, window_ms: 4320000000000000 }, 'uses', '4294967295'],
];
const BAD_COSTS = [0, -1, 1.5, NaN, Infinity, 11, 1e300];

for (const [world, make] of WORLDS) {
  test(`${world}: a bad GCRA or counter limit or cost is the error variant, and records nothing`, async () => {
    const ops = await make();
    ops.freshStore();
    for (const [algorithm, bad, field, value] of BAD_LIMITS) {
      const want = { tag: 'invalid-limit', val: { field, value } };
      const where = `${algorithm} ${JSON.stringify(bad)}`;
      assert.deepStrictEqual(ops.checkRate(algorithm, bad).err, want, where);
      assert.deepStrictEqual(ops.consumeRate('k', algorithm, bad, 1, 5).err, want, where);
      assert.deepStrictEqual(ops.peekRate('k', algorithm, bad, 1, 5).err, want, where);
      const entries = [{ algorithm: 'gcra', key: 'fine', limit: GCRA }, { algorithm, key: 'k', limit: bad }];
      assert.deepStrictEqual(ops.consumeMixed(entries, 5).err, want, where);
      assert.deepStrictEqual(ops.peekMixed(entries, 5).err, want, where);
    }
    for (const cost of BAD_COSTS) {
      const value = Number.isNaN(cost) ? 'NaN' : cost === Infinity ? 'Infinity' : cost === 1e300 ? undefined : String(cost);
      for (const algorithm of ['gcra', 'counter']) {
        const r = ops.consumeRate('k', algorithm, GCRA, cost, 5);
        assert.equal(r.err?.tag, 'invalid-argument', `${algorithm} cost ${cost}`);
        assert.equal(r.err.val.field, 'cost');
        if (value !== undefined) assert.equal(r.err.val.value, value);
        assert.equal(ops.peekRate('k', algorithm, GCRA, cost, 5).err?.tag, 'invalid-argument');
        const entries = [{ algorithm: 'sliding', key: 's', limit: GCRA }, { algorithm, key: 'k', limit: GCRA, cost }];
        assert.equal(ops.consumeMixed(entries, 5).err?.tag, 'invalid-argument');
      }
    }
    // A sliding-log entry takes its cost (the weighted log): above its limit's uses, the error.
    const heavy = [{ algorithm: 'sliding', key: 's', limit: GCRA, cost: 11 }];
    assert.deepStrictEqual(ops.consumeMixed(heavy, 5).err?.tag, 'invalid-argument');
    assert.deepStrictEqual(ops.consumeMixed(heavy, 5).err.val.field, 'cost');
    assert.equal(ops.store.keyCount(), 0n, 'nothing was recorded');
    // A `now` that is not a time (a wrapped clock's -1) is refused before the store sees it.
    if (ops.timed) {
      const r = ops.consumeRate('k', 'gcra', GCRA, 1, 2n ** 64n - 1n);
      assert.deepStrictEqual(r.err, { tag: 'invalid-argument', val: { field: 'now', value: '18446744073709551615' } });
    }
    // The instance still works; a sliding-log entry costing 4 takes 4 uses.
    assert.equal(ops.consumeMixed([{ algorithm: 'sliding', key: 's', limit: GCRA, cost: 4 }], 5).ok.remaining, 6);
    assert.equal(ops.consumeRate('k', 'gcra', GCRA, 10, 5).ok.allowed, true);
    assert.equal(ops.consumeRate('k', 'gcra', GCRA, 1, 5).ok.retryAfterMs, 100n);
  });

  test(`${world}: GCRA, counter and sliding-log keys of one name are apart, and a reset forgets one`, async () => {
    const ops = await make();
    ops.freshStore();
    const one = { uses: 1, window_ms: 1000 };
    assert.equal(ops.consume('k', one, 0).ok.allowed, true);
    assert.equal(ops.consumeRate('k', 'gcra', one, 1, 0).ok.allowed, true);
    assert.equal(ops.consumeRate('k', 'counter', one, 1, 0).ok.allowed, true);
    assert.equal(ops.consumeRate('k', 'gcra', one, 1, 1).ok.allowed, false);
    ops.resetRate('k', 'gcra', 1);
    assert.equal(ops.consumeRate('k', 'gcra', one, 1, 1).ok.allowed, true);
    assert.equal(ops.consumeRate('k', 'counter', one, 1, 1).ok.allowed, false, 'the counter kept its use');
    assert.equal(ops.consume('k', one, 1).ok.allowed, false, 'the sliding log kept its call');
  });
}
