// One vocabulary with the Python package: GlobalLimit(maxAttempts, decaySeconds) and the Limit
// constructors give what tests/vocabulary/global_limit.json says (Python reads the same file), and every
// out-of-range number is a typed error naming the argument as TypeScript spells it.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { api, repo } from './backend.mjs';

const { MemoryStore, RateLimiter, Limit, GlobalLimit, Unlimited, RateWindowError, InvalidLimitError, InvalidArgumentError } = api;
const shared = JSON.parse(readFileSync(join(repo, 'tests', 'vocabulary', 'global_limit.json'), 'utf8'));
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const manual = (t = 0) => ({ t, now() { return this.t; } });
const L = (uses, windowMs) => ({ uses, windowMs });

/** Asserts `e` is the InvalidLimitError of `field` (TypeScript's spelling) given as `argument`, holding `value`. */
function limitRefused(e, field, argument, value) {
  assert.ok(e instanceof InvalidLimitError && e instanceof RateWindowError, String(e));
  assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_LIMIT');
  assert.equal(e.field, field);
  assert.equal(e.argument, argument);
  assert.ok(Object.is(e.value, value), `value ${String(e.value)} is not ${String(value)}`);
  assert.ok(e.message.startsWith(`invalid ${argument}: `), e.message);
  assert.doesNotMatch(e.message, /window_ms|_/);
  return true;
}

function argumentRefused(e, field, value) {
  assert.ok(e instanceof InvalidArgumentError && e instanceof RateWindowError, String(e));
  assert.equal(e.code, 'ERR_RATEWINDOW_INVALID_ARGUMENT');
  assert.equal(e.field, field);
  assert.ok(Object.is(e.value, value));
  assert.ok(e.message.startsWith(`invalid ${field}: `), e.message);
  return true;
}

describe('GlobalLimit and the Limit constructors, as in Python (tests/vocabulary/global_limit.json)', () => {
  for (const c of shared.global_limit) {
    const args = [c.max_attempts, ...('decay_seconds' in c ? [c.decay_seconds] : [])];
    it(`GlobalLimit(${args.join(', ')})`, () => {
      if (c.error) {
        const given = c.error.field === 'uses' ? args[0] : args[1];
        assert.throws(() => new GlobalLimit(...args), (e) => limitRefused(e, camel(c.error.field), camel(c.error.argument), given));
        return;
      }
      const limit = new GlobalLimit(...args);
      assert.deepEqual([limit.uses, limit.windowMs, limit.maxAttempts], [c.uses, c.window_ms, c.uses]);
      assert.equal(limit.decaySeconds, c.decay_seconds ?? 60);
      assert.equal(limit.fallbackKey(), c.fallback_key);
      // Counted as that window: one use, refused until the window has passed.
      const store = new MemoryStore({ clock: manual() });
      const one = new GlobalLimit(1, args[1] ?? 60);
      assert.equal(store.consume('k', one).allowed, true);
      assert.equal(store.consume('k', one).retryAfterMs, c.window_ms);
    });
  }
  for (const c of shared.constructors) {
    it(`Limit.${camel(c.call)}(${c.args.join(', ')})`, () => {
      const build = () => Limit[camel(c.call)](...c.args);
      if (c.error) {
        assert.throws(build, (e) => {
          assert.ok(e instanceof InvalidLimitError);
          assert.deepEqual([e.field, e.argument], [camel(c.error.field), camel(c.error.argument)]);
          assert.ok(e.message.startsWith(`invalid ${camel(c.error.argument)}: `), e.message);
          return true;
        });
        return;
      }
      const limit = build();
      assert.deepEqual([limit.maxAttempts, limit.windowMs], [c.uses, c.window_ms]);
    });
  }

  it('checks a Limit when it is built, naming maxAttempts and decaySeconds; Unlimited is never counted', () => {
    assert.throws(() => new Limit('k', 0), (e) => limitRefused(e, 'uses', 'maxAttempts', 0));
    assert.throws(() => new Limit('k', 5, NaN), (e) => limitRefused(e, 'windowMs', 'decaySeconds', NaN));
    assert.throws(() => new GlobalLimit(5, -0.5), (e) => limitRefused(e, 'windowMs', 'decaySeconds', -0.5));
    assert.throws(() => new Limit('k', '5'), TypeError);
    assert.throws(() => new Limit('k', 5, '60'), TypeError);
    assert.throws(() => Limit.perMinute(5, '1'), TypeError);
    assert.throws(() => new Limit(5), TypeError);
    assert.equal(new Unlimited().maxAttempts, Number.MAX_SAFE_INTEGER);
    assert.deepEqual([new Limit().maxAttempts, new Limit().decaySeconds], [60, 60]);
  });
});

describe('typed errors name the argument as TypeScript spells it', () => {
  it('cooldown limits: uses and windowMs (never the engine’s window_ms)', () => {
    const store = new MemoryStore({ clock: manual() });
    for (const call of [(l) => store.consume('k', l), (l) => store.peek('k', l), (l) => store.consumeMany([{ key: 'k', limit: l }]),
      (l) => store.peekMany([{ key: 'k', limit: l }]), (l) => api.cooldownLimit(l.uses, l.windowMs)]) {
      assert.throws(() => call(L(1, NaN)), (e) => limitRefused(e, 'windowMs', 'windowMs', NaN));
      assert.throws(() => call(L(1, 0.5)), (e) => limitRefused(e, 'windowMs', 'windowMs', 0.5));
      assert.throws(() => call(L(-1, 10)), (e) => limitRefused(e, 'uses', 'uses', -1));
    }
    assert.equal(store.size, 0);
  });

  it('MemoryStore fixed window: decayMs, amount, max, now', () => {
    const store = new MemoryStore({ clock: manual() });
    for (const bad of [0, -1, 0.5, NaN, Infinity, 4_320_000_000_000_001]) {
      assert.throws(() => store.hit('k', bad), (e) => limitRefused(e, 'windowMs', 'decayMs', bad));
    }
    for (const bad of [0.5, NaN, Infinity, 2 ** 53, -(2 ** 60)]) {
      assert.throws(() => store.hit('k', 1000, bad), (e) => argumentRefused(e, 'amount', bad));
      assert.throws(() => store.tooManyAttempts('k', bad), (e) => argumentRefused(e, 'max', bad));
      assert.throws(() => store.remaining('k', bad), (e) => argumentRefused(e, 'max', bad));
    }
    for (const bad of ['1', true, null, 1n]) {
      assert.throws(() => store.hit('k', 1000, bad), TypeError);
      assert.throws(() => store.tooManyAttempts('k', bad), TypeError);
      assert.throws(() => store.remaining('k', bad), TypeError);
    }
    const late = new MemoryStore({ clock: { now: () => -1 } });
    assert.throws(() => late.hit('k', 1000), (e) => argumentRefused(e, 'now', -1));
    assert.equal(store.attempts('k'), 0);
  });

  it('RateLimiter: decaySeconds, amount, maxAttempts', async () => {
    const limiter = new RateLimiter(new MemoryStore({ clock: manual() }));
    for (const bad of [0, -1, NaN, 0.0001]) {
      await assert.rejects(limiter.hit('k', bad), (e) => limitRefused(e, 'windowMs', 'decaySeconds', bad));
      await assert.rejects(limiter.increment('k', bad, 2), (e) => limitRefused(e, 'windowMs', 'decaySeconds', bad));
    }
    await assert.rejects(limiter.increment('k', 60, 1.5), (e) => argumentRefused(e, 'amount', 1.5));
    await assert.rejects(limiter.decrement('k', 60, NaN), (e) => argumentRefused(e, 'amount', NaN));
    for (const bad of [1.5, NaN, 2 ** 53]) {
      await assert.rejects(limiter.tooManyAttempts('k', bad), (e) => argumentRefused(e, 'maxAttempts', bad));
      await assert.rejects(limiter.remaining('k', bad), (e) => argumentRefused(e, 'maxAttempts', bad));
      await assert.rejects(limiter.retriesLeft('k', bad), (e) => argumentRefused(e, 'maxAttempts', bad));
      await assert.rejects(limiter.attempt('k', bad, () => 'ran'), (e) => argumentRefused(e, 'maxAttempts', bad));
    }
    await assert.rejects(limiter.tooManyAttempts('k', '3'), TypeError);
    await assert.rejects(limiter.hit('k', '60'), TypeError);
    assert.equal(await limiter.attempts('k'), 0); // nothing was counted by the refused calls
    assert.equal(await limiter.hit('k', 0.25), 1);
  });
});
