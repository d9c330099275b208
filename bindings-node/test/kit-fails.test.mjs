// Proves the kit can fail: each deliberately broken store must fail the case that checks what it
// breaks. The kit's cases are collected with a recording describe/it and run here.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { testStore } from '../dist/testing.js';
import { AwaitingStore, BucketStore, GreedyReleaseStore, LogStore, MergingStore, RecordingPeekStore } from './stores.mjs';

/** Runs the kit against `factory`, returning the names of the failing cases. */
async function failures(factory) {
  const cases = [];
  testStore('under test', factory, {
    describe: (_name, fn) => fn(),
    it: (name, fn) => cases.push({ name, fn }),
  });
  const results = await Promise.all(
    cases.map(({ name, fn }) => fn().then(() => undefined, (error) => ({ name, error }))),
  );
  return results.filter(Boolean).map((r) => r.name);
}

const broken = [
  ['awaits between the check and the record', () => new AwaitingStore(), /8 concurrent calls|8 concurrent batches/],
  ['merges calls in the same millisecond', () => new MergingStore(), /same millisecond/],
  ['counts in fixed buckets instead of sliding', () => new BucketStore(), /slides the window/],
  ['frees too much on release', () => new GreedyReleaseStore(), /release/],
  ['records on peek', () => new RecordingPeekStore(), /peeks without recording/],
];

describe('the kit catches every broken store', () => {
  it('passes the correct store these are broken from', async () => {
    assert.deepEqual(await failures(() => new LogStore()), []);
  });
  for (const [what, factory, expected] of broken) {
    it(`fails a store that ${what}`, async () => {
      const failed = await failures(factory);
      assert.ok(
        failed.some((name) => expected.test(name)),
        `expected a failure matching ${expected}, got ${JSON.stringify(failed)}`,
      );
    });
  }
});
