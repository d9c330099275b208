// Every case of tests/vectors/*.json and tests/vectors/weights/*.json through the component in Node (jco
// transpile), in both worlds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import { batchJson as batch, engineOps, hostedOps, num, verdictJson as verdict } from './component.mjs';

const VECTORS = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'tests', 'vectors');
const jsonIn = (sub) => readdirSync(path.join(VECTORS, sub)).filter((f) => f.endsWith('.json')).sort().map((f) => path.join(sub, f));
const files = [...jsonIn('.'), ...jsonIn('weights')];

const fromResult = (r, ok) => {
  if (r.err) {
    if (r.err.tag === 'invalid-argument') return { error: 'invalid_argument', field: r.err.val.field };
    assert.equal(r.err.tag, 'invalid-limit', `unexpected error ${JSON.stringify(r.err)}`);
    return { error: 'invalid_limit', field: r.err.val.field === 'window-ms' ? 'window_ms' : r.err.val.field };
  }
  return ok(r.ok);
};

/** The actual result of one op, in the vectors' JSON shape. */
function run(ops, op) {
  switch (op.op) {
    case 'limit':
      return fromResult(ops.checkLimit({ uses: op.uses, window_ms: op.window_ms }), () => ({ ok: true }));
    case 'consume':
      if (op.cost !== undefined) return fromResult(ops.consumeCost(op.key, op.limit, op.cost, op.now), verdict);
      return fromResult(ops.consume(op.key, op.limit, op.now), verdict);
    case 'peek':
      if (op.cost !== undefined) return fromResult(ops.peekCost(op.key, op.limit, op.cost, op.now), verdict);
      return fromResult(ops.peek(op.key, op.limit, op.now), verdict);
    case 'consume_many':
      return fromResult(ops.consumeMany(op.entries, op.now, op.id), batch);
    case 'peek_many':
      return fromResult(ops.peekMany(op.entries, op.now), batch);
    case 'release':
      ops.release(op.id, op.now);
      return null;
    case 'hit':
      return fromResult(ops.hit(op.key, op.decay_ms, op.amount, op.now), num);
    case 'hit_window':
      return fromResult(ops.hitWindow(op.key, op.decay_ms, op.amount, op.now), (w) => ({
        count: num(w.count),
        reset_after_ms: num(w.resetAfterMs),
      }));
    case 'attempt':
      return fromResult(ops.attempt(op.key, op.max, op.decay_ms, op.now), (a) => ({
        allowed: a.allowed,
        count: num(a.count),
        reset_after_ms: num(a.resetAfterMs),
      }));
    case 'attempts':
      return num(ops.attempts(op.key, op.now));
    case 'too_many_attempts':
      return ops.tooManyAttempts(op.key, op.max, op.now);
    case 'remaining':
      return num(ops.remaining(op.key, op.max, op.now));
    case 'available_in':
      return num(ops.availableIn(op.key, op.now));
    case 'available_in_ms':
      return num(ops.availableInMs(op.key, op.now));
    case 'reset_attempts':
      ops.resetAttempts(op.key, op.now);
      return null;
    case 'clear':
      ops.clear(op.key, op.now);
      return null;
    default:
      throw new Error(`unknown op ${op.op}`);
  }
}

test('the vectors directory has cases', () => {
  assert.ok(files.length > 0, `no vectors in ${VECTORS}`);
  assert.ok(files.some((f) => f.startsWith('weights')), 'no weights vectors');
});

for (const [world, make] of [['engine', engineOps], ['hosted', hostedOps]]) {
  for (const file of files) {
    const doc = JSON.parse(readFileSync(path.join(VECTORS, file), 'utf8'));
    test(`${world}: ${file}`, async (t) => {
      const ops = await make();
      for (const c of doc.cases) {
        await t.test(c.name, () => {
          ops.freshStore();
          c.ops.forEach((op, i) => {
            const expect = op.expect === undefined ? null : op.expect;
            // A negative time (a wrapped clock) crosses as jco lowers it: -1 as 2^64 - 1.
            const now = op.now < 0 ? BigInt.asUintN(64, BigInt(op.now)) : op.now;
            assert.deepStrictEqual(run(ops, { ...op, now }), expect, `op ${i} (${op.op} at ${op.now})`);
          });
        });
      }
    });
  }
}
