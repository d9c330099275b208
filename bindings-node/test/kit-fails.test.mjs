// Proves the kit can fail: each deliberately broken store must fail the case that checks what it
// breaks. The kit's cases are collected with a recording describe/it and run here.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { testStore } from '../dist/testing.js';
import { AwaitingStore, BucketStore, GreedyReleaseStore, LogStore, MergingStore, RecordingPeekStore } from './stores.mjs';

/** Runs the kit's cases one after another against `factory`; returns the failing ones and why. */
async function failures(factory) {
  const cases = [];
  testStore('under test', factory, {
    describe: (_name, fn) => fn(),
    it: (name, fn) => cases.push({ name, fn }),
  });
  const failed = [];
  for (const { name, fn } of cases) {
    await fn().catch((error) => failed.push({ name, why: error.message }));
  }
  return failed;
}

const broken = [
  ['awaits between the check and the record', () => new AwaitingStore(), /8 concurrent calls|8 concurrent batches/],
  ['merges calls in the same millisecond', () => new MergingStore(), /same millisecond/],
  ['counts in fixed buckets instead of sliding', () => new BucketStore(), /slides the window/],
  ['frees too much on release', () => new GreedyReleaseStore(), /release/],
  ['records on peek', () => new RecordingPeekStore(), /peeks without recording/],
];

// The stores are checked side by side (each runs the kit's cases in order), keeping this file to ~3 s.
describe('the kit catches every broken store', { concurrency: true }, () => {
  it('passes the correct store these are broken from', async () => {
    assert.deepEqual(await failures(() => new LogStore()), []);
  });
  for (const [what, factory, expected] of broken) {
    it(`fails a store that ${what}`, async () => {
      const failed = await failures(factory);
      assert.ok(
        failed.some(({ name }) => expected.test(name)),
        `expected a failure matching ${expected}, got ${JSON.stringify(failed)}`,
      );
    });
  }
});
