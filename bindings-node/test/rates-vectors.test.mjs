// Runs every case of tests/vectors/gcra/*.json and tests/vectors/counter/*.json (GCRA, the
// sliding-window counter and batches mixing them with the sliding log; format in
// tests/vectors/README.md) through MemoryStore's public API with a manual clock, comparing every field,
// null included. The wasm-bindgen build leaves these algorithms out: there each op must throw
// UnsupportedError instead.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { api, backend, repo } from './backend.mjs';

const root = process.env.RATEWINDOW_VECTORS_DIR ?? join(repo, 'tests', 'vectors');
const supported = typeof backend.checkRate === 'function';

const gcraOf = (l) => (l.burst === undefined ? { algorithm: 'gcra', uses: l.uses, windowMs: l.window_ms } : { algorithm: 'gcra', uses: l.uses, windowMs: l.window_ms, burst: l.burst });
const counterOf = (l) => ({ algorithm: 'counter', uses: l.uses, windowMs: l.window_ms });
const limitOf = (algorithm, l) => (algorithm === 'gcra' ? gcraOf(l) : algorithm === 'counter' ? counterOf(l) : { uses: l.uses, windowMs: l.window_ms });
const entriesOf = (entries) =>
  entries.map((e) => (e.cost === undefined ? { key: e.key, limit: limitOf(e.algorithm, e.limit) } : { key: e.key, limit: limitOf(e.algorithm, e.limit), cost: e.cost }));
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
    case 'gcra_consume': return verdict(store.consume(op.key, gcraOf(op.limit), options(op)));
    case 'gcra_peek': return verdict(store.peek(op.key, gcraOf(op.limit), options(op)));
    case 'gcra_reset': return store.reset(op.key, gcraOf({ uses: 1, window_ms: 1 })) ?? null;
    case 'counter_consume': return verdict(store.consume(op.key, counterOf(op.limit), options(op)));
    case 'counter_peek': return verdict(store.peek(op.key, counterOf(op.limit), options(op)));
    case 'counter_reset': return store.reset(op.key, counterOf({ uses: 1, window_ms: 1 })) ?? null;
    case 'consume_mixed': {
      const v = store.consumeMany(entriesOf(op.entries));
      if (op.id !== undefined) ids.set(op.id, v);
      return batch(v);
    }
    case 'peek_mixed': return batch(store.peekMany(entriesOf(op.entries)));
    case 'release': return ids.get(op.id)?.release?.() ?? null;
    case 'gcra_limit': {
      const l = op.limit;
      const g = l.burst === undefined ? api.gcraLimit(l.uses, l.window_ms) : api.gcraLimit(l.uses, l.window_ms, l.burst);
      assert.deepEqual(g, { algorithm: 'gcra', uses: l.uses, windowMs: l.window_ms, burst: l.burst ?? l.uses });
      return { ok: true };
    }
    case 'counter_limit': api.counterLimit(op.limit.uses, op.limit.window_ms); return { ok: true };
    default: throw new Error(`unknown vector op ${JSON.stringify(op.op)}: teach this runner`);
  }
}

/** The error a vector expects, from the typed error thrown (`invalid_rate` and the engine's field). */
function errorOf(e) {
  if (e instanceof api.InvalidLimitError) {
    assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_LIMIT');
    return { error: 'invalid_rate', field: ENGINE[e.field] };
  }
  if (e instanceof api.InvalidArgumentError && /(^|\.)cost$/.test(e.field)) {
    assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_ARGUMENT');
    return { error: 'invalid_rate', field: 'cost' };
  }
  throw e;
}

for (const sub of ['gcra', 'counter']) {
  const dir = join(root, sub);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  describe(`${sub} vectors (memory store)`, () => {
    it('finds vector files', () => assert.ok(files.length > 0, `no *.json in ${dir}`));
    for (const file of files) {
      const doc = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      describe(file, () => {
        for (const testCase of doc.cases) {
          it(testCase.name, () => {
            const clock = { t: 0, now() { return this.t; } };
            const store = new api.MemoryStore({ clock });
            const ids = new Map();
            testCase.ops.forEach((op, i) => {
              clock.t = op.now;
              const where = `${sub}/${file} / ${testCase.name} / op #${i} ${JSON.stringify(op)}`;
              if (!supported) {
                if (op.op === 'release') return;
                assert.throws(() => run(store, op, ids), (e) => e instanceof api.UnsupportedError || e instanceof api.InvalidLimitError, where);
                return;
              }
              let got;
              try {
                got = run(store, op, ids);
              } catch (e) {
                got = errorOf(e);
              }
              assert.deepStrictEqual(got, op.expect ?? null, where);
            });
          });
        }
      });
    }
  });
}
