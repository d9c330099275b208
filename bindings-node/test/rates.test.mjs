// GCRA and the sliding-window counter through the public API beyond the vectors: the limit builders,
// typed errors naming the field, shapes refused as TypeErrors, a mixed batch's release, and the
// networked stores checking batches that name these limits before sending anything.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { api, backend } from './backend.mjs';

const supported = typeof backend.checkRate === 'function';
const clockAt = (t) => ({ t, now() { return this.t; } });

describe('GCRA and counter limits', { skip: !supported && 'the wasm-bindgen build leaves GCRA and the counter out' }, () => {
  it('builds frozen limits, burst defaulting to uses', () => {
    const g = api.gcraLimit(10, 1000);
    assert.deepEqual(g, { algorithm: 'gcra', uses: 10, windowMs: 1000, burst: 10 });
    assert.ok(Object.isFrozen(g));
    assert.deepEqual(api.counterLimit(5, 60_000), { algorithm: 'counter', uses: 5, windowMs: 60_000 });
  });

  it('refuses each field with a typed error naming it', () => {
    const field = (f, fn) =>
      assert.throws(fn, (e) => e instanceof api.InvalidLimitError && e.field === f && e.code === 'ERR_RATEWINDOW_INVALID_LIMIT' && e.message.startsWith(`invalid ${f}:`));
    field('uses', () => api.gcraLimit(0, 1000));
    field('windowMs', () => api.gcraLimit(1, 1.5));
    field('burst', () => api.gcraLimit(10, 1000, 0));
    field('burst', () => api.gcraLimit(1_000_000_000, 86_400_000)); // burst x windowMs past 2^53
    field('uses', () => api.counterLimit(1_000_000_000, 86_400_000));
    const store = new api.MemoryStore({ clock: clockAt(0) });
    field('burst', () => store.consume('k', { algorithm: 'gcra', uses: 2, windowMs: 1000, burst: NaN }));
    for (const cost of [0, 3, 1.5, -1, NaN, Infinity]) {
      assert.throws(
        () => store.consume('k', { algorithm: 'gcra', uses: 2, windowMs: 1000 }, { cost }),
        (e) => e instanceof api.InvalidArgumentError && e.field === 'cost' && Object.is(e.value, cost),
      );
    }
    assert.throws(() => store.peek('k', api.counterLimit(2, 1000), { cost: 3 }), (e) => e instanceof api.InvalidArgumentError && e.field === 'cost');
    assert.equal(store.size, 0, 'a refused call records nothing');
  });

  it('refuses wrong shapes as TypeErrors', () => {
    const store = new api.MemoryStore({ clock: clockAt(0) });
    assert.throws(() => store.consume('k', { algorithm: 'gcra', uses: '2', windowMs: 1000 }), TypeError);
    assert.throws(() => store.consume('k', { algorithm: 'gcra', uses: 2, windowMs: 1000, burst: '3' }), TypeError);
    assert.throws(() => store.consume('k', { algorithm: 'bucket', uses: 2, windowMs: 1000 }), TypeError);
    assert.throws(() => store.consume('k', api.gcraLimit(2, 1000), { cost: '2' }), TypeError);
    assert.throws(() => store.consume('k', api.gcraLimit(2, 1000), 2), TypeError);
    assert.throws(() => store.reset('k', { uses: 2, windowMs: 1000 }), TypeError);
    assert.throws(() => store.consumeMany([{ key: 'a', limit: api.gcraLimit(2, 1000) }, { key: 1, limit: { uses: 1, windowMs: 1 } }]), TypeError);
  });

  it('counts a weighted call, refuses until the cost is back, and resets', () => {
    const clock = clockAt(1_000);
    const store = new api.MemoryStore({ clock });
    const tokens = api.gcraLimit(100, 60_000); // 100 tokens a minute, one back every 600 ms
    assert.equal(store.consume('llm:alice', tokens, { cost: 60 }).remaining, 40);
    const refused = store.consume('llm:alice', tokens, { cost: 50 });
    assert.deepEqual([refused.allowed, refused.retryAfterMs, refused.remaining], [false, 6_000, 40]);
    clock.t += 6_000;
    assert.equal(store.peek('llm:alice', tokens, { cost: 50 }).allowed, true);
    store.reset('llm:alice', tokens);
    assert.equal(store.peek('llm:alice', tokens).remaining, 100);
    // A counter and a sliding log of the same name are other keys.
    assert.equal(store.consume('llm:alice', { uses: 1, windowMs: 1000 }).allowed, true);
    assert.equal(store.consume('llm:alice', api.counterLimit(1, 1000)).allowed, true);
  });

  it('mixes algorithms in one all-or-nothing batch; release gives the whole call back; a weighted sliding call', () => {
    const clock = clockAt(0);
    const store = new api.MemoryStore({ clock });
    const perUser = api.gcraLimit(2, 1000);
    const global = { uses: 1, windowMs: 10_000 };
    const first = store.consumeMany([{ key: 'u:a', limit: perUser }, { key: 'all', limit: global }]);
    assert.equal(first.allowed, true);
    const refused = store.consumeMany([{ key: 'u:b', limit: perUser, cost: 2 }, { key: 'all', limit: global }]);
    assert.deepEqual([refused.allowed, refused.blocked, refused.retryAfterMs], [false, 1, 10_000]);
    assert.equal(store.peek('u:b', perUser).remaining, 2, 'nothing was recorded for the refused batch');
    first.release();
    assert.equal(store.consumeMany([{ key: 'u:b', limit: perUser, cost: 2 }, { key: 'all', limit: global }]).allowed, true);
    assert.equal(store.peek('u:a', perUser).remaining, 2, 'the release gave the GCRA use back too');
    const weighted = store.consume('w', { uses: 5, windowMs: 1000 }, { cost: 3 });
    assert.deepEqual([weighted.allowed, weighted.remaining], [true, 2]);
    assert.equal(store.peek('w', { uses: 5, windowMs: 1000 }, { cost: 3 }).allowed, false);
    assert.throws(() => store.consume('w', { uses: 5, windowMs: 1000 }, { cost: 6 }), (e) => e instanceof api.InvalidArgumentError && e.field === 'cost');
    assert.throws(
      () => store.peekMany([{ key: 'x', limit: perUser }, { key: 'y', limit: api.counterLimit(5, 1000), cost: 6 }]),
      (e) => e instanceof api.InvalidArgumentError && e.field === 'entries[1].cost' && e.message.startsWith('invalid entries[1].cost: 6 ('),
    );
    assert.equal(store.peekMany([{ key: 'x', limit: perUser }]).allowed, true, 'a refused entry cleared the pending batch');
  });
});

describe('PostgresStore', () => {
  // PostgresStore, RedisStore and SqliteStore count batches that name GCRA or counter limits on their
  // servers (mixed-stores.test.mjs); a batch's entries are checked before anything is sent.
  it('checks a batch naming GCRA or counter limits before sending anything: a typed error naming the entry', async () => {
    const { PostgresStore, InvalidArgumentError } = await import('../dist/index.js');
    const pg = PostgresStore.using(async () => { throw new Error('never reached'); });
    for (const limit of [{ algorithm: 'gcra', uses: 1, windowMs: 1000 }, { algorithm: 'counter', uses: 1, windowMs: 1000 }]) {
      await assert.rejects(async () => pg.consumeMany([{ key: 's', limit: { uses: 1, windowMs: 1000 } }, { key: 'k', limit, cost: 2 }]), (e) => e instanceof InvalidArgumentError && e.field === 'entries[1].cost');
      await assert.rejects(async () => pg.peekMany([{ key: 'k', limit, cost: 2 }, { key: 's', limit: { uses: 1, windowMs: 1000 } }]), InvalidArgumentError);
    }
  });
});
