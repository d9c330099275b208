// @ts-check
// A store of your own, checked by the conformance kit under node:test:
//   node --test examples/node/my-store.test.mjs
// It implements `consume` alone; the kit then expects the default consumeMany (entries counted in order,
// stopping at the first refusal) and the default peekMany (everything allowed).
import { describe, it } from 'node:test';
import { CooldownStore } from 'ratewindow';
import { testStore } from 'ratewindow/testing';

/** Keeps each key's call times in a Map; the check and the record happen in one synchronous step. */
class MapStore extends CooldownStore {
  /** @type {Map<string, number[]>} */
  calls = new Map();

  /**
   * @param {string} key
   * @param {import('ratewindow').CooldownLimit} limit
   * @returns {import('ratewindow').Verdict}
   */
  consume(key, { uses, windowMs }) {
    const now = Date.now();
    const live = (this.calls.get(key) ?? []).filter((t) => now - t < windowMs);
    this.calls.set(key, live);
    if (live.length >= uses) {
      const retryTimestamp = /** @type {number} */ (live[live.length - uses]) + windowMs;
      return { allowed: false, retryAfterMs: Math.max(1, retryTimestamp - now), retryTimestamp };
    }
    live.push(now);
    return { allowed: true, retryAfterMs: 0 };
  }
}

testStore('MapStore', () => new MapStore(), { describe, it });
