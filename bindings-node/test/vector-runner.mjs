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
const verdict = (v) => ({ allowed: v.allowed, retry_after_ms: v.retryAfterMs, retry_timestamp: v.retryTimestamp ?? null });
const batch = (v) => ({ ...verdict(v), blocked: v.blocked ?? null });

/**
 * Runs one case. `open(clock)` makes a fresh store reading `clock.now()` and returns `{ store, close }`;
 * `api` is the package (for `cooldownLimit` and `InvalidLimitError`).
 */
function runCase(api, open, testCase, file) {
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
        if (!(e instanceof api.InvalidLimitError)) throw e;
        assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_LIMIT');
        got = { error: 'invalid_limit', field: e.field === 'windowMs' ? 'window_ms' : e.field };
      }
      assert.deepStrictEqual(got, op.expect ?? null, `${file} / ${testCase.name} / op #${i} ${JSON.stringify(op)}`);
    });
  } finally {
    close?.();
  }
}

/**
 * Registers a suite `title` running every vector file on stores made by `open`; the files named in
 * `skip` get a skipped test saying `why`.
 */
export function vectorSuite(title, api, open, { skip = [], why = '' } = {}) {
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
        for (const testCase of doc.cases) it(testCase.name, () => runCase(api, open, testCase, file));
      });
    }
  });
}
