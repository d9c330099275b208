// GCRA, the sliding-window counter and weighted calls through this package's public API (its `node`
// entry): `gcraLimit`, `counterLimit`, `MemoryStore` (consume / peek / reset with a cost, mixed batches
// and their release, sliding-log calls and batches costing more than one use) on every case of
// tests/vectors/gcra/*.json, tests/vectors/counter/*.json and tests/vectors/weights/*.json, every
// verdict field compared; refusals as the typed errors the Node package throws.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

process.env.RATEWINDOW_BACKEND ??= 'wasm';
const rw = await import('../dist/node.js');

const VECTORS = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'tests', 'vectors');

const gcraOf = (l) => (l.burst === undefined ? rw.gcraLimit(l.uses, l.window_ms) : rw.gcraLimit(l.uses, l.window_ms, l.burst));
const counterOf = (l) => rw.counterLimit(l.uses, l.window_ms);
// Built as literals (not by the helpers) so that an invalid limit reaches the engine's own check.
const literal = (algorithm, l) =>
  algorithm === 'gcra'
    ? { algorithm, uses: l.uses, windowMs: l.window_ms, ...(l.burst === undefined ? {} : { burst: l.burst }) }
    : algorithm === 'counter'
      ? { algorithm, uses: l.uses, windowMs: l.window_ms }
      : { uses: l.uses, windowMs: l.window_ms };
const entriesOf = (entries) =>
  entries.map((e) => ({ key: e.key, limit: literal(e.algorithm, e.limit), ...(e.cost === undefined ? {} : { cost: e.cost }) }));
const options = (op) => (op.cost === undefined ? undefined : { cost: op.cost });
const verdict = (v) => ({
  allowed: v.allowed,
  limit: v.limit,
  refill_after_ms: v.refillAfterMs,
  remaining: v.remaining,
  reset_after_ms: v.resetAfterMs,
  retry_after_ms: v.retryAfterMs,
  retry_timestamp: v.retryTimestamp ?? null,
});
const batch = (v) => ({ ...verdict(v), blocked: v.blocked ?? null });
const ENGINE = { uses: 'uses', windowMs: 'window_ms', burst: 'burst' };

function run(store, op, ids) {
  switch (op.op) {
    case 'gcra_consume': return verdict(store.consume(op.key, literal('gcra', op.limit), options(op)));
    case 'gcra_peek': return verdict(store.peek(op.key, literal('gcra', op.limit), options(op)));
    case 'gcra_reset': return store.reset(op.key, rw.gcraLimit(1, 1)) ?? null;
    case 'counter_consume': return verdict(store.consume(op.key, literal('counter', op.limit), options(op)));
    case 'counter_peek': return verdict(store.peek(op.key, literal('counter', op.limit), options(op)));
    case 'counter_reset': return store.reset(op.key, rw.counterLimit(1, 1)) ?? null;
    case 'consume_mixed': {
      const v = store.consumeMany(entriesOf(op.entries));
      if (op.id !== undefined) ids.set(op.id, v);
      return batch(v);
    }
    case 'peek_mixed': return batch(store.peekMany(entriesOf(op.entries)));
    case 'release': return ids.get(op.id)?.release?.() ?? null;
    case 'gcra_limit': {
      const g = gcraOf(op.limit);
      assert.deepEqual(g, { algorithm: 'gcra', uses: op.limit.uses, windowMs: op.limit.window_ms, burst: op.limit.burst ?? op.limit.uses });
      return { ok: true };
    }
    case 'counter_limit': counterOf(op.limit); return { ok: true };
    // weights/: the sliding log's ops, each with an optional cost (a batch's on each entry).
    case 'consume': return verdict(store.consume(op.key, literal('sliding', op.limit), options(op)));
    case 'peek': return verdict(store.peek(op.key, literal('sliding', op.limit), options(op)));
    case 'consume_many': {
      const v = store.consumeMany(entriesOf(op.entries));
      if (op.id !== undefined) ids.set(op.id, v);
      return batch(v);
    }
    case 'peek_many': return batch(store.peekMany(entriesOf(op.entries)));
    default: throw new Error(`unknown vector op ${JSON.stringify(op.op)}: teach this runner`);
  }
}

/** The error a vector expects: gcra/ and counter/ name a bad cost `invalid_rate`, weights/ `invalid_argument`. */
function errorOf(e, sub) {
  if (e instanceof rw.InvalidLimitError) return { error: 'invalid_rate', field: ENGINE[e.field] };
  if (e instanceof rw.InvalidArgumentError && /(^|\.)cost$/.test(e.field)) return { error: sub === 'weights' ? 'invalid_argument' : 'invalid_rate', field: 'cost' };
  throw e;
}

for (const sub of ['gcra', 'counter', 'weights']) {
  const dir = path.join(VECTORS, sub);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  describe(`@ratewindow/wasm: ${sub} vectors`, () => {
    it('finds vector files', () => assert.ok(files.length > 0, `no *.json in ${dir}`));
    for (const file of files) {
      const doc = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
      describe(file, () => {
        for (const testCase of doc.cases) {
          it(testCase.name, () => {
            const clock = { t: 0, now() { return this.t; } };
            const store = new rw.MemoryStore({ clock });
            const ids = new Map();
            testCase.ops.forEach((op, i) => {
              clock.t = op.now;
              let got;
              try {
                got = run(store, op, ids);
              } catch (e) {
                got = errorOf(e, sub);
              }
              assert.deepStrictEqual(got, op.expect ?? null, `${sub}/${file} / ${testCase.name} / op #${i} ${JSON.stringify(op)}`);
            });
          });
        }
      });
    }
  });
}

describe('@ratewindow/wasm: GCRA and counter refusals', () => {
  it('throws the typed errors for a bad burst, limit or cost and records nothing', () => {
    const store = new rw.MemoryStore({ clock: { now: () => 0 } });
    assert.throws(() => rw.gcraLimit(10, 1000, 0), (e) => e instanceof rw.InvalidLimitError && e.field === 'burst');
    assert.throws(() => rw.counterLimit(0, 1000), (e) => e instanceof rw.InvalidLimitError && e.field === 'uses');
    for (const cost of [0, -1, 1.5, NaN, Infinity, 11]) {
      assert.throws(() => store.consume('k', rw.gcraLimit(10, 1000), { cost }), (e) => e instanceof rw.InvalidArgumentError, String(cost));
      assert.throws(() => store.consume('k', rw.counterLimit(10, 1000), { cost }), (e) => e instanceof rw.InvalidArgumentError, String(cost));
    }
    assert.throws(() => store.consume('k', { algorithm: 'gcra', uses: 10, windowMs: 1000, burst: 1.5 }), rw.InvalidLimitError);
    assert.equal(store.size, 0);
    assert.equal(store.consume('k', rw.gcraLimit(10, 1000), { cost: 10 }).allowed, true);
    assert.equal(store.consume('k', rw.gcraLimit(10, 1000)).retryAfterMs, 100);
  });
});
