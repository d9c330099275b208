// Hostile input at the boundary (issue 11), on the memory store (addon or wasm-bindgen package, see
// backend.mjs) and the SQLite store (the call machines): keys are bytes-exact — a key with a lone
// surrogate is refused with InvalidArgumentError naming its position, never counted as U+FFFD — and a
// clock outside 0 .. 2^53 - 1 is refused without touching the store.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { api } from './backend.mjs';
import { InvalidArgumentError, RedisStore } from '../dist/index.js';

const one = () => api.cooldownLimit(1, 60_000);

function refusesKey(fn, field, at) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof api.InvalidArgumentError, `${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_ARGUMENT');
    assert.equal(e.field, field);
    assert.match(e.message, new RegExp(`^invalid ${field.replace(/[[\]]/g, '\\$&')}: not valid Unicode \\(a lone surrogate at UTF-16 index ${at}\\)`));
    return true;
  });
}

describe('keys are bytes-exact', () => {
  it('three users whose keys differ only in a lone surrogate never share a cooldown', () => {
    const store = new api.MemoryStore();
    assert.equal(store.consume('s\uFFFD', one()).allowed, true);
    refusesKey(() => store.consume('s\uD800', one()), 'key', 1);
    refusesKey(() => store.consume('s\uDC00', one()), 'key', 1);
    refusesKey(() => store.peek('\uDC00s', one()), 'key', 0);
    refusesKey(() => store.hit('s\uD800', 1000), 'key', 1);
    refusesKey(() => store.attempts('s\uD800'), 'key', 1);
    refusesKey(() => store.clear('s\uD800'), 'key', 1);
    // A real U+FFFD and a well-formed pair are keys like any other.
    assert.equal(store.consume('s\uFFFD', one()).allowed, false);
    assert.equal(store.consume('s\uD83D\uDE00', one()).allowed, true);
    assert.equal(store.consume('s\uD83D\uDE00', one()).allowed, false);
  });

  it('a long key (past the 128-byte stack buffer) is checked too', () => {
    const store = new api.MemoryStore();
    const long = 'é'.repeat(100);
    refusesKey(() => store.consume(`${long}\uD800`, one()), 'key', 100);
    assert.equal(store.consume(`${long}\uFFFD`, one()).allowed, true);
    assert.equal(store.consume(`${long}\uFFFD`, one()).allowed, false);
  });

  it("a batch names the entry whose key is refused, and records nothing", () => {
    const store = new api.MemoryStore();
    refusesKey(
      () => store.consumeMany([{ key: 'ok', limit: one() }, { key: 'fine', limit: one() }, { key: 'x\uDBFF', limit: one() }]),
      'entries[2].key',
      1,
    );
    assert.equal(store.consume('ok', one()).allowed, true, 'the refused batch recorded nothing');
    refusesKey(() => store.peekMany([{ key: '\uD800', limit: one() }]), 'entries[0].key', 0);
    // The store is usable after a refused batch: no entry of it is left pending.
    assert.equal(store.consumeMany([{ key: 'fine', limit: one() }]).allowed, true);
  });
});

describe('times', () => {
  for (const bad of [-1, 2 ** 53, 2 ** 64, 1.5, NaN]) {
    it(`a clock reading ${bad} is refused and cannot expire the store`, () => {
      let t = 1_000;
      const store = new api.MemoryStore({ clock: { now: () => t } });
      assert.equal(store.consume('alice', one()).allowed, true);
      t = bad;
      assert.throws(() => store.consume('other', one()), (e) => e instanceof api.InvalidArgumentError && e.field === 'now');
      assert.throws(() => store.hit('w', 1000), (e) => e instanceof api.InvalidArgumentError && e.field === 'now');
      t = 1_001;
      assert.equal(store.consume('alice', one()).allowed, false);
    });
  }
});

describe('prefixes', () => {
  it('a Redis prefix that could name another prefix\'s keys is refused', () => {
    const run = async () => null;
    // `p:` + `log:x` and `p:log:` + `x` would be one Redis key.
    for (const prefix of ['p:log:', 'plog:', 'a:win:']) {
      assert.throws(() => new RedisStore(run, { prefix }), /must not contain "log:", "win:", "lck:", "gcr:" or "ctr:"/);
    }
    for (const prefix of ['p:', 'p:lo', '', 'ratewindow:']) new RedisStore(run, { prefix });
  });

  // Both backends: the addon's call boundary and the wasm-bindgen package's (bindings-wasm/js/src/calls.rs,
  // which reads each key again as UTF-16 when wasm-bindgen's conversion holds U+FFFD).
  it('a Redis store names the key or the entry whose key is refused, in every call', async () => {
    const store = new RedisStore(async () => { throw new Error('not reached'); }, { prefix: 'hostile:' });
    const refused = (field) => (e) => e instanceof InvalidArgumentError && e.field === field && /lone surrogate/.test(e.message);
    await assert.rejects(store.consumeMany([{ key: 'ok', limit: one() }, { key: '\uDFFF', limit: one() }]), refused('entries[1].key'));
    await assert.rejects(store.peekMany([{ key: 'x\uD800', limit: one() }]), refused('entries[0].key'));
    await assert.rejects(store.consume('s\uD800', one()), refused('key'));
    // (A single `peek` is refused too, but named `entries[0].key`: drive.ts sends it as a batch of one.)
    await assert.rejects(store.peek('s\uDC00', one()), (e) => e instanceof InvalidArgumentError && /lone surrogate/.test(e.message));
    await assert.rejects(store.hit('s\uD800', 1000), refused('key'));
    await assert.rejects(store.attempt('s\uD800', 3, 1000), refused('key'));
    await assert.rejects(store.attempts('s\uD800'), refused('key'));
    await assert.rejects(store.clear('s\uD800'), refused('key'));
  });
});
