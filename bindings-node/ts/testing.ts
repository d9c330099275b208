/**
 * `ratewindow/testing`: the conformance kit. {@link testStore} checks any {@link CooldownStore} (a user's
 * own included) for the behaviour `MemoryStore` defines, under node:test, Vitest or Jest.
 *
 * ```ts
 * import { describe, it, expect } from 'vitest';
 * import { testStore } from 'ratewindow/testing';
 * testStore('MyStore', () => new MyStore(), { describe, it, expect });
 * ```
 *
 * It uses real time with short windows (the whole kit takes a few seconds), and every case counts under
 * keys of its own, so it can run against a database that outlives the test. It cannot see whether every
 * key expires; check that yourself.
 * @module
 */
import { deepStrictEqual, ok, strictEqual } from 'node:assert';

import { CooldownStore } from './store';
import type { Awaitable, BatchVerdict, CooldownLimit, Entry, Verdict } from './types';

/** The matchers the kit uses: Jest's and Vitest's `expect` have them. */
export interface Matchers {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toBeGreaterThanOrEqual(expected: number): void;
  toBeLessThanOrEqual(expected: number): void;
}

/** The test-runner functions the kit registers its cases with. */
export interface Runner {
  /** Groups cases (`describe` of node:test, Vitest or Jest). */
  describe(name: string, fn: () => void): unknown;
  /** Registers one async case (`it` / `test`). */
  it(name: string, fn: () => Promise<void>, timeout?: number): unknown;
  /** Jest's or Vitest's `expect`; node:test has none, so by default `node:assert` does the checking. */
  expect?: (actual: unknown) => Matchers;
}

/** The fixed-window operations, checked when the store has them. */
interface FixedWindowOps {
  hit(key: string, decayMs: number, amount?: number): Awaitable<number>;
  attempts(key: string): Awaitable<number>;
  tooManyAttempts(key: string, max: number): Awaitable<boolean>;
  remaining(key: string, max: number): Awaitable<number>;
  resetAttempts(key: string): Awaitable<void>;
  clear(key: string): Awaitable<void>;
  availableIn(key: string): Awaitable<number>;
}

/** The lock, checked when the store has `lock` (see `ts/lock.ts`). */
interface LockOps {
  lock(key: string, ttl: number, owner?: string): {
    readonly owner: string;
    acquire(): Promise<boolean>;
    release(): Promise<boolean>;
    forceRelease(): Promise<boolean>;
    currentOwner(): Promise<string | null>;
  };
}

function assertExpect(actual: unknown): Matchers {
  return {
    toBe: (expected) => strictEqual(actual, expected),
    toEqual: (expected) => deepStrictEqual(actual, expected),
    toBeGreaterThanOrEqual: (expected) =>
      ok((actual as number) >= expected, `expected ${String(actual)} to be >= ${expected}`),
    toBeLessThanOrEqual: (expected) =>
      ok((actual as number) <= expected, `expected ${String(actual)} to be <= ${expected}`),
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const clock = () => performance.now();

/** A call's result and the local times just before and just after it: the store read its clock between. */
async function timed<T>(call: () => Awaitable<T>): Promise<{ value: T; before: number; after: number }> {
  const before = clock();
  const value = await call();
  return { value, before, after: clock() };
}

/**
 * Registers the kit's cases for the store `factory` makes (one store per case; it may return a
 * promise). Cases that depend on a store's own `consumeMany` / `peekMany` expect the documented
 * defaults when the store keeps them; `release` is checked when the store's verdicts carry one; the
 * fixed-window cases run when the store has `hit`.
 */
export function testStore(
  name: string,
  factory: () => Awaitable<CooldownStore>,
  { describe, it, expect = assertExpect }: Runner,
): void {
  const run = `ratewindow-kit:${Date.now().toString(36)}:${Math.random().toString(36).slice(2, 8)}`;
  let counter = 0;
  /** A key no other case (or run) uses. */
  const key = (label: string) => `${run}:${++counter}:${label}`;
  const entry = (k: string, uses: number, windowMs: number): Entry => ({ key: k, limit: { uses, windowMs } });
  const limit = (uses: number, windowMs: number): CooldownLimit => ({ uses, windowMs });
  const ownBatch = (store: CooldownStore) => store.consumeMany !== CooldownStore.prototype.consumeMany;
  const ownPeek = (store: CooldownStore) => store.peekMany !== CooldownStore.prototype.peekMany;
  const expectAllowed = (v: Verdict) => {
    expect(v.allowed).toBe(true);
    expect(v.retryAfterMs).toBe(0);
  };
  const expectRefused = (v: Verdict, maxWait: number) => {
    expect(v.allowed).toBe(false);
    expect(v.retryAfterMs).toBeGreaterThanOrEqual(1);
    expect(v.retryAfterMs).toBeLessThanOrEqual(maxWait);
  };
  /** `actual` within [low, high], widened by 2 ms for whole-millisecond store clocks. */
  const within = (actual: number, low: number, high: number) => {
    expect(actual).toBeGreaterThanOrEqual(Math.floor(low) - 2);
    expect(actual).toBeLessThanOrEqual(Math.ceil(high) + 2);
  };
  const allowedCount = (verdicts: readonly Verdict[]) => verdicts.filter((v) => v.allowed).length;

  describe(`${name} (ratewindow conformance kit)`, () => {
    it('allows `uses` calls within a window, then refuses with the wait', async () => {
      const store = await factory();
      const k = key('uses');
      for (let i = 0; i < 3; i++) expectAllowed(await store.consume(k, limit(3, 2000)));
      expectRefused(await store.consume(k, limit(3, 2000)), 2000);
    });

    it('slides the window: no `windowMs` span ever holds more than `uses` allowed calls', async () => {
      const store = await factory();
      const k = key('slide');
      const W = 300;
      // Each allowed call, bracketed by local times: the store counted it between the two.
      const allowed: { before: number; after: number }[] = [];
      const start = clock();
      const attempt = async () => {
        const call = await timed(() => store.consume(k, limit(2, W)));
        if (call.value.allowed) allowed.push(call);
      };
      await attempt();
      await sleep(W * 0.6);
      // Five allowed calls take about 2 W; a loaded machine (CI runs four test files at once) can
      // stall the loop for a good part of that, so run until there are five or 20 W have passed.
      while (allowed.length < 5 && clock() - start < W * 20) {
        await attempt();
        await sleep(4);
      }
      // A bucketed (fixed) window lets two calls through on each side of a bucket edge, far less than W
      // apart; a sliding one keeps every third allowed call at least W after the first.
      for (let i = 2; i < allowed.length; i++) {
        expect(allowed[i]!.after - allowed[i - 2]!.before).toBeGreaterThanOrEqual(W - 2);
      }
      // And it does slide: calls leave the window, letting more through (a log that never let calls
      // leave would stop at 2).
      expect(allowed.length).toBeGreaterThanOrEqual(5);
    });

    it('counts retryAfterMs from the oldest call still in the window, one retryTimestamp per wait', async () => {
      const store = await factory();
      const k = key('oldest');
      const W = 1000;
      const c1 = await timed(() => store.consume(k, limit(2, W)));
      expectAllowed(c1.value);
      await sleep(200);
      expectAllowed(await store.consume(k, limit(2, W)));
      const r = await timed(() => store.consume(k, limit(2, W)));
      expectRefused(r.value, W);
      // The oldest call (c1) leaves at c1 + W: counting from the newest would wait 200 ms longer.
      within(r.value.retryAfterMs, c1.before + W - r.after, c1.after + W - r.before);
      await sleep(50);
      const second = await store.consume(k, limit(2, W));
      expectRefused(second, r.value.retryAfterMs);
      expect(second.retryTimestamp).toBe(r.value.retryTimestamp);
    });

    it('after a lowered limit, waits on the oldest of the newest `uses` calls', async () => {
      const store = await factory();
      const k = key('lowered');
      const W = 1000;
      expectAllowed(await store.consume(k, limit(3, W)));
      await sleep(150);
      const c2 = await timed(() => store.consume(k, limit(3, W)));
      expectAllowed(c2.value);
      await sleep(150);
      expectAllowed(await store.consume(k, limit(3, W)));
      const r = await timed(() => store.consume(k, limit(2, W)));
      expectRefused(r.value, W);
      // Of the newest 2 calls the oldest is c2: the first call would give 150 ms less, the last 150 more.
      within(r.value.retryAfterMs, c2.before + W - r.after, c2.after + W - r.before);
    });

    it('counts each key on its own', async () => {
      const store = await factory();
      const [a, b] = [key('a'), key('b')];
      expectAllowed(await store.consume(a, limit(1, 5000)));
      expectAllowed(await store.consume(b, limit(1, 5000)));
      expectRefused(await store.consume(a, limit(1, 5000)), 5000);
      expectRefused(await store.consume(b, limit(1, 5000)), 5000);
    });

    it('counts calls in the same millisecond apart', async () => {
      const store = await factory();
      const k = key('same-ms');
      const verdicts = await Promise.all(Array.from({ length: 5 }, () => store.consume(k, limit(5, 5000))));
      expect(allowedCount(verdicts)).toBe(5);
      expectRefused(await store.consume(k, limit(5, 5000)), 5000);
    });

    it('lets exactly one of 8 concurrent calls take the last use', async () => {
      const store = await factory();
      const k = key('race');
      expectAllowed(await store.consume(k, limit(3, 5000)));
      expectAllowed(await store.consume(k, limit(3, 5000)));
      const verdicts = await Promise.all(Array.from({ length: 8 }, () => store.consume(k, limit(3, 5000))));
      expect(allowedCount(verdicts)).toBe(1);
    });

    it('lets exactly one of 8 concurrent batches take the last use', async () => {
      const store = await factory();
      const [a, b] = [key('race-a'), key('race-b')];
      const batch = [entry(a, 1, 5000), entry(b, 1, 5000)];
      const verdicts = await Promise.all(Array.from({ length: 8 }, () => store.consumeMany(batch)));
      expect(allowedCount(verdicts)).toBe(1);
    });

    it('counts a batch against all its entries at once', async () => {
      const store = await factory();
      const [a, b] = [key('all-a'), key('all-b')];
      expectAllowed(await store.consumeMany([entry(a, 2, 5000), entry(b, 1, 5000)]));
      expectRefused(await store.consume(b, limit(1, 5000)), 5000);
      expectAllowed(await store.consume(a, limit(2, 5000)));
      expectRefused(await store.consume(a, limit(2, 5000)), 5000);
    });

    it('names the longest wait of a refused batch (the first refusal with the default consumeMany)', async () => {
      const store = await factory();
      const [a, b] = [key('wait-a'), key('wait-b')];
      const batch = [entry(a, 1, 600), entry(b, 1, 1200)];
      const first = await timed(() => store.consumeMany(batch));
      expectAllowed(first.value);
      const second = await timed(() => store.consumeMany(batch));
      const refused = second.value;
      expect(refused.allowed).toBe(false);
      if (ownBatch(store)) {
        expect(refused.blocked).toBe(1);
        expectRefused(refused, 1200);
        within(refused.retryAfterMs, first.before + 1200 - second.after, first.after + 1200 - second.before);
      } else {
        expect(refused.blocked).toBe(0);
        expectRefused(refused, 600);
      }
    });

    it('records nothing on a refused batch (the entries before the refusal with the default consumeMany)', async () => {
      const store = await factory();
      const [a, b] = [key('none-a'), key('none-b')];
      expectAllowed(await store.consume(b, limit(1, 5000)));
      const refused = await store.consumeMany([entry(a, 2, 5000), entry(b, 1, 5000)]);
      expect(refused.allowed).toBe(false);
      expect(refused.blocked).toBe(1);
      expectAllowed(await store.consume(a, limit(2, 5000)));
      if (ownBatch(store)) expectAllowed(await store.consume(a, limit(2, 5000)));
      expectRefused(await store.consume(a, limit(2, 5000)), 5000);
    });

    it('gives back exactly its own call on release, once (when verdicts carry release)', async () => {
      const store = await factory();
      const k = key('release');
      const batch = [entry(k, 2, 5000)];
      const first: BatchVerdict = await store.consumeMany(batch);
      expectAllowed(first);
      if (typeof first.release !== 'function') return;
      // Data, not behaviour: release is not enumerable.
      expect(Object.keys(first).includes('release')).toBe(false);
      expect(JSON.stringify(first).includes('release')).toBe(false);
      expectAllowed(await store.consumeMany(batch));
      expectRefused(await store.consumeMany(batch), 5000);
      await first.release();
      expectAllowed(await store.consumeMany(batch));
      expectRefused(await store.consumeMany(batch), 5000);
      await first.release();
      expectRefused(await store.consumeMany(batch), 5000);
    });

    it('peeks without recording, answering as consume would (everything allowed with the default peekMany)', async () => {
      const store = await factory();
      const [a, b] = [key('peek-a'), key('peek-b')];
      const batch = [entry(a, 1, 600), entry(b, 1, 1200)];
      expectAllowed(await store.peekMany(batch));
      expectAllowed(await store.peekMany(batch));
      expectAllowed(await store.consumeMany(batch));
      const peek = await timed(() => store.peekMany(batch));
      const peeked = peek.value;
      if (!ownPeek(store)) {
        expectAllowed(peeked);
        return;
      }
      const consume = await timed(() => store.consumeMany(batch));
      const consumed = consume.value;
      expect(peeked.allowed).toBe(false);
      expect(consumed.allowed).toBe(false);
      expect(peeked.blocked).toBe(consumed.blocked);
      // The same wait, less the time between the two calls.
      within(peeked.retryAfterMs - consumed.retryAfterMs, 0, consume.after - peek.before);
      if (ownBatch(store)) expect(peeked.blocked).toBe(1);
      if (peeked.retryTimestamp !== undefined && consumed.retryTimestamp !== undefined) {
        expect(peeked.retryTimestamp).toBe(consumed.retryTimestamp);
      }
      // A peek of a fresh key creates nothing either.
      const c = key('peek-c');
      expectAllowed(await store.peekMany([entry(c, 1, 5000)]));
      expectAllowed(await store.consume(c, limit(1, 5000)));
    });

    it('keeps fixed windows where from their first hit (when the store has `hit`)', async () => {
      const store = (await factory()) as CooldownStore & Partial<FixedWindowOps>;
      if (typeof store.hit !== 'function') return;
      const fixed = store as CooldownStore & FixedWindowOps;
      const k = key('fixed');
      const decay = 1000;
      expect(await fixed.attempts(k)).toBe(0);
      expect(await fixed.availableIn(k)).toBe(0);
      const first = await timed(() => fixed.hit(k, decay));
      expect(first.value).toBe(1);
      expect(await fixed.hit(k, decay, 2)).toBe(3);
      expect(await fixed.hit(k, decay, -1)).toBe(2);
      expect(await fixed.attempts(k)).toBe(2);
      expect(await fixed.tooManyAttempts(k, 2)).toBe(true);
      expect(await fixed.tooManyAttempts(k, 3)).toBe(false);
      expect(await fixed.remaining(k, 5)).toBe(3);
      expect(await fixed.remaining(k, 1)).toBe(0);
      expect(await fixed.availableIn(k)).toBe(1);
      await fixed.resetAttempts(k);
      expect(await fixed.attempts(k)).toBe(0);
      await sleep(300);
      // Hits inside the window do not move it: it ends `decay` after the first.
      // (Skipped when the machine was too slow to hit inside the window at all.)
      if (clock() < first.before + decay - 100) expect(await fixed.hit(k, decay)).toBe(1);
      await sleep(Math.max(0, first.after + decay + 50 - clock()));
      expect(await fixed.hit(k, decay)).toBe(1);
      expect(await fixed.hit(k, decay)).toBe(2);
      await fixed.clear(k);
      expect(await fixed.attempts(k)).toBe(0);
      expect(await fixed.tooManyAttempts(k, 1)).toBe(false);
      expect(await fixed.hit(k, decay)).toBe(1);
    });

    it('locks: one holder, released only by its owner, free when its TTL ends (when the store has `lock`)', async () => {
      const store = (await factory()) as CooldownStore & Partial<LockOps>;
      if (typeof store.lock !== 'function') return;
      const locks = store as CooldownStore & LockOps;
      const k = key('lock');
      let a: ReturnType<LockOps['lock']>;
      try {
        a = locks.lock(k, 5);
      } catch (e) {
        // An engine build without the lock (the wasm-bindgen package) has the method but no lock.
        if (e instanceof TypeError && /no lock/.test(e.message)) return;
        throw e;
      }
      const b = locks.lock(k, 5);
      expect(a.owner === b.owner).toBe(false);
      expect(await a.currentOwner()).toBe(null);
      expect(await a.acquire()).toBe(true);
      expect(await b.acquire()).toBe(false);
      expect(await a.acquire()).toBe(false);
      expect(await b.release()).toBe(false);
      expect(await a.currentOwner()).toBe(a.owner);
      // Restored from its token, the lock is the same lock.
      expect(await locks.lock(k, 5, a.owner).release()).toBe(true);
      expect(await a.currentOwner()).toBe(null);
      // Exactly one of 8 concurrent acquirers.
      const racers = Array.from({ length: 8 }, () => locks.lock(k, 5));
      const got = await Promise.all(racers.map((l) => l.acquire()));
      expect(got.filter(Boolean).length).toBe(1);
      const winner = racers[got.indexOf(true)]!;
      expect(await a.forceRelease()).toBe(true);
      expect(await winner.release()).toBe(false);
      // The TTL ends on the store's clock.
      const short = locks.lock(k, 0.3);
      const again = await timed(() => short.acquire());
      expect(again.value).toBe(true);
      await sleep(Math.max(0, again.after + 500 - clock()));
      expect(await a.currentOwner()).toBe(null);
      expect(await b.acquire()).toBe(true);
      await b.release();
    });
  });
}
