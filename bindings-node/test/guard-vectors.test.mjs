// The failure guard's vectors (tests/vectors/guard/guard.json) through the Node addon: the options
// through guard() (the errors as TypeScript names them), the rest through the addon's NativeGuard, fed
// as ts/guard.ts feeds it. The core runs the same file (core/tests/guard_vectors.rs).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import { guard, InvalidArgumentError, MemoryStore } from '../dist/index.js';
import { repo } from './backend.mjs';

const native = createRequire(import.meta.url)('../loader.cjs');
const vectors = JSON.parse(readFileSync(join(repo, 'tests', 'vectors', 'guard', 'guard.json'), 'utf8'));
const number = (v) => (typeof v === 'number' ? v : { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity }[v]);
const FIELD = { 'invalid_argument:timeout_ms': 'timeoutMs', 'invalid_argument:policy': 'onFailure', 'invalid_argument:max_keys': 'blockCache.maxKeys' };
const RECORD = native.guardRecordLayout();

/** A NativeGuard with its record. */
function nativeGuard(timeoutMs, policy, maxKeys = null) {
  const record = new Float64Array(RECORD.length);
  return { g: new native.NativeGuard(record, timeoutMs, policy === 'fallback' ? null : policy, maxKeys), record };
}

/** The verdict in the record, spelled as the vectors spell it. */
function recorded(record, allowed) {
  const r = Object.fromEntries(RECORD.map((name, i) => [name, record[i]]));
  return {
    allowed,
    retry_after_ms: allowed ? 0 : r.retryAfterMs,
    retry_timestamp: allowed || Number.isNaN(r.retryTimestamp) ? null : r.retryTimestamp,
    blocked: allowed || Number.isNaN(r.blocked) ? null : r.blocked,
    limit: allowed ? 0 : r.limit,
    remaining: allowed ? 0 : r.remaining,
    refill_after_ms: allowed ? 0 : r.refillAfterMs,
    reset_after_ms: allowed ? 0 : r.resetAfterMs,
  };
}

describe('guard vectors (tests/vectors/guard/guard.json)', () => {
  it('options', () => {
    for (const c of vectors.options) {
      const onFailure = c.policy === 'fallback' ? new MemoryStore() : c.policy;
      const options = { timeoutMs: number(c.timeout_ms), onFailure };
      if (c.max_keys !== undefined) options.blockCache = { maxKeys: number(c.max_keys) };
      if (c.error === undefined) {
        assert.doesNotThrow(() => guard(new MemoryStore(), options), JSON.stringify(c));
      } else {
        assert.throws(() => guard(new MemoryStore(), options), (e) => {
          assert.ok(e instanceof InvalidArgumentError, JSON.stringify(c));
          assert.equal(e.field, FIELD[c.error.code]);
          assert.ok(e.message.startsWith(`invalid ${FIELD[c.error.code]}: ${c.error.value} (expected `), e.message);
          return true;
        });
      }
    }
  });

  it('error codes', () => {
    for (const c of vectors.error_codes) assert.equal(native.guardIsFailure(c.code), c.failure !== null, JSON.stringify(c));
  });

  it('failures', () => {
    for (const c of vectors.failures) {
      const { g, record } = nativeGuard(number(c.timeout_ms), c.policy);
      const r = g.failed(c.failure, true);
      if (c.fallback) {
        assert.equal(r, 2);
        g.fallbackFailed();
        assert.deepEqual(recorded(record, false), c.fallback_failed);
      } else {
        assert.equal(r, c.verdict.allowed ? 1 : 0);
        assert.deepEqual(recorded(record, r === 1), c.verdict, JSON.stringify(c));
      }
    }
  });

  it('late answers', () => {
    const { g } = nativeGuard(100, 'deny');
    const ACTION = { 0: 'ignore', 1: 'release', 2: 'keep' };
    for (const c of vectors.late) assert.equal(ACTION[g.late(c.answered_allowed, c.late_allowed)], c.action, JSON.stringify(c));
  });

  for (const c of vectors.cache) {
    it(`block cache: ${c.name}`, () => {
      const { g, record } = nativeGuard(100, 'deny', number(c.max_keys));
      for (const [i, step] of c.steps.entries()) {
        const at = `step ${i}: ${JSON.stringify(step)}`;
        const entries = step.entries?.map(([key, uses, windowMs]) => ({ key, uses, windowMs }));
        switch (step.op) {
          case 'refused': {
            // As ts/guard.ts does: a refusal's blocked entry, when it names one of the call's.
            const v = step.verdict;
            const e = !v.allowed && typeof v.blocked === 'number' ? entries[v.blocked] : undefined;
            if (e) g.refused(e.key, e.uses, e.windowMs, step.started, v.retry_after_ms, v.retry_timestamp ?? NaN, v.limit === 0 ? NaN : v.reset_after_ms);
            else g.answered(v.allowed);
            break;
          }
          case 'check': {
            let wait;
            if (entries.length === 1) wait = g.check(entries[0].key, entries[0].uses, entries[0].windowMs, step.now);
            else {
              for (const e of entries) g.batchPush(e.key, e.uses, e.windowMs);
              wait = g.checkBatch(step.now);
            }
            if (step.expect === null) assert.equal(wait, 0, at);
            else {
              assert.equal(wait, step.expect.retry_after_ms, at);
              assert.deepEqual(recorded(record, false), step.expect, at);
            }
            break;
          }
          case 'forget':
            for (const e of entries) g.forget(e.key, e.uses, e.windowMs);
            break;
          case 'len':
            assert.equal(g.cached(), step.expect, at);
            break;
          default:
            throw new Error(`op ${step.op}`);
        }
      }
    });
  }
});
