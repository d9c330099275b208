// The conformance vectors (tests/vectors/*.json, format in tests/vectors/README.md) as node:test
// suites, run on any store the caller makes: the memory store (vectors.test.mjs) and SqliteStore
// (sqlite-vectors.test.mjs) share this one runner. Every field is compared, null included.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { repo } from './backend.mjs';

const dir = process.env.RATEWINDOW_VECTORS_DIR ?? join(repo, 'tests', 'vectors');

const limitOf = (l) => ({ uses: l.uses, windowMs: l.window_ms });
const entriesOf = (entries) => entries.map((e) => ({ key: e.key, limit: limitOf(e.limit) }));
const QUOTA = ['limit', 'remaining', 'refill_after_ms', 'reset_after_ms'];
const plain = (v) => ({ allowed: v.allowed, retry_after_ms: v.retryAfterMs, retry_timestamp: v.retryTimestamp ?? null });
const withQuota = (v) => ({
  ...plain(v),
  limit: v.limit,
  remaining: v.remaining,
  refill_after_ms: v.refillAfterMs,
  reset_after_ms: v.resetAfterMs,
});
const attemptOf = (a) => ({ allowed: a.allowed, count: a.count, reset_after_ms: a.resetAfterMs });

/**
 * Runs one case. `open(clock)` makes a fresh store reading `clock.now()` and returns `{ store, close }`;
 * `api` is the package (for `cooldownLimit` and `InvalidLimitError`).
 */
function runCase(api, open, testCase, file, quota) {
  const verdict = quota ? withQuota : plain;
  const batch = (v) => {
    const { limit, remaining, refill_after_ms, reset_after_ms, ...rest } = verdict(v);
    return quota ? { ...rest, blocked: v.blocked ?? null, limit, remaining, refill_after_ms, reset_after_ms } : { ...rest, blocked: v.blocked ?? null };
  };
  const clock = { t: 0, now() { return this.t; } };
  const { store, close } = open(clock);
  const ids = new Map();
  try {
    testCase.ops.forEach((op, i) => {
      clock.t = op.now;
      let got;
      try {
        switch (op.op) {
          case 'consume': got = verdict(store.consume(op.key, limitOf(op.limit))); break;
          case 'peek': got = verdict(store.peek(op.key, limitOf(op.limit))); break;
          case 'consume_many': {
            const v = store.consumeMany(entriesOf(op.entries));
            if (op.id !== undefined) ids.set(op.id, v);
            got = batch(v);
            break;
          }
          case 'peek_many': got = batch(store.peekMany(entriesOf(op.entries))); break;
          case 'release': got = ids.get(op.id)?.release?.() ?? null; break;
          case 'hit': got = store.hit(op.key, op.decay_ms, op.amount); break;
          case 'attempt': got = attemptOf(store.attempt(op.key, op.max, op.decay_ms)); break;
          case 'hit_window': {
            const h = store.hitWindow(op.key, op.decay_ms, op.amount);
            got = { count: h.count, reset_after_ms: h.resetAfterMs };
            break;
          }
          case 'attempts': got = store.attempts(op.key); break;
          case 'too_many_attempts': got = store.tooManyAttempts(op.key, op.max); break;
          case 'remaining': got = store.remaining(op.key, op.max); break;
          case 'available_in': got = store.availableIn(op.key); break;
          case 'available_in_ms': got = store.availableInMs(op.key); break;
          case 'reset_attempts': got = store.resetAttempts(op.key) ?? null; break;
          case 'clear': got = store.clear(op.key) ?? null; break;
          case 'limit': api.cooldownLimit(op.uses, op.window_ms); got = { ok: true }; break;
          default: throw new Error(`unknown vector op ${JSON.stringify(op.op)}: teach this runner`);
        }
      } catch (e) {
        if (e instanceof api.InvalidArgumentError && e.field === 'now') {
          // invalid_time.json: a clock reading outside 0 .. 2^53 - 1.
          assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_ARGUMENT');
          got = { error: 'invalid_argument', field: 'now' };
        } else {
          if (!(e instanceof api.InvalidLimitError)) throw e;
          assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_LIMIT');
          got = { error: 'invalid_limit', field: e.field === 'windowMs' ? 'window_ms' : e.field };
        }
      }
      let expect = op.expect ?? null;
      if (!quota && expect !== null && typeof expect === 'object' && 'limit' in expect) {
        expect = Object.fromEntries(Object.entries(expect).filter(([k]) => !QUOTA.includes(k)));
      }
      assert.deepStrictEqual(got, expect, `${file} / ${testCase.name} / op #${i} ${JSON.stringify(op)}`);
    });
  } finally {
    close?.();
  }
}

/**
 * Registers a suite `title` running every vector file on stores made by `open`; the files named in
 * `skip` (and the cases whose names match `skipCases`) get a skipped test saying `why`. `quota`: compare the verdicts' quota fields (the stores that give them).
 */
export function vectorSuite(title, api, open, { skip = [], skipCases = null, why = '', quota = true } = {}) {
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  describe(title, () => {
    it('finds vector files', () => assert.ok(files.length > 0, `no *.json in ${dir}`));
    for (const file of files) {
      if (skip.includes(file)) {
        it(`${file}: ${why}`, { skip: true }, () => {});
        continue;
      }
      const doc = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      describe(file, () => {
        for (const testCase of doc.cases) {
          if (skipCases?.test(testCase.name)) it(`${testCase.name}: ${why}`, { skip: true }, () => {});
          else it(testCase.name, () => runCase(api, open, testCase, file, quota));
        }
      });
    }
  });
}
