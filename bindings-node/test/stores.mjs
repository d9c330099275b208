// Stores written in plain JavaScript on the public CooldownStore API: a correct sliding log (a user's
// own store, which the kit must pass), one that implements `consume` alone (the defaults), and five
// deliberately broken ones, each wrong in exactly one way the kit must catch.
import { api } from './backend.mjs';

const { CooldownStore } = api;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const freeze = Object.freeze;

/** A correct sliding-window log in a Map: the check and the record in one synchronous step. */
export class LogStore extends CooldownStore {
  logs = new Map();

  times(key, now, windowMs) {
    const log = (this.logs.get(key) ?? []).filter((t) => now - t < windowMs);
    this.logs.set(key, log);
    return log;
  }

  /** The time the call must wait until, or undefined. */
  waitUntil(key, { uses, windowMs }, now) {
    const log = (this.logs.get(key) ?? []).filter((t) => now - t < windowMs);
    return log.length >= uses ? log[log.length - uses] + windowMs : undefined;
  }

  record(key, windowMs, now) {
    this.times(key, now, windowMs).push(now);
  }

  verdict(until, now) {
    return until === undefined
      ? freeze({ allowed: true, retryAfterMs: 0 })
      : freeze({ allowed: false, retryAfterMs: Math.max(1, until - now), retryTimestamp: until });
  }

  consume(key, limit) {
    const now = Date.now();
    const until = this.waitUntil(key, limit, now);
    if (until === undefined) this.record(key, limit.windowMs, now);
    return this.verdict(until, now);
  }

  batchVerdict(entries, now) {
    let blocked;
    let longest = -Infinity;
    entries.forEach(({ key, limit }, i) => {
      const until = this.waitUntil(key, limit, now);
      if (until !== undefined && until > longest) [blocked, longest] = [i, until];
    });
    if (blocked === undefined) return { allowed: true, retryAfterMs: 0 };
    return { ...this.verdict(longest, now), blocked };
  }

  consumeMany(entries) {
    const now = Date.now();
    const verdict = this.batchVerdict(entries, now);
    if (!verdict.allowed) return freeze(verdict);
    for (const { key, limit } of entries) this.record(key, limit.windowMs, now);
    let released = false;
    Object.defineProperty(verdict, 'release', {
      enumerable: false,
      value: () => {
        if (released) return;
        released = true;
        this.giveBack(entries, now);
      },
    });
    return freeze(verdict);
  }

  giveBack(entries, at) {
    for (const { key } of entries) {
      const log = this.logs.get(key) ?? [];
      const i = log.indexOf(at);
      if (i >= 0) log.splice(i, 1);
    }
  }

  peekMany(entries) {
    return freeze(this.batchVerdict(entries, Date.now()));
  }
}

/** A user's minimal store: `consume` alone, relying on the default consumeMany and peekMany. */
export class ConsumeOnlyStore extends CooldownStore {
  inner = new LogStore();
  consume(key, limit) {
    return this.inner.consume(key, limit);
  }
}

/** Broken: awaits between the check and the record, so concurrent calls all pass the check. */
export class AwaitingStore extends LogStore {
  async consume(key, limit) {
    const now = Date.now();
    const until = this.waitUntil(key, limit, now);
    await sleep(1);
    if (until === undefined) this.record(key, limit.windowMs, now);
    return this.verdict(until, now);
  }

  async consumeMany(entries) {
    const now = Date.now();
    const verdict = this.batchVerdict(entries, now);
    await sleep(1);
    if (verdict.allowed) for (const { key, limit } of entries) this.record(key, limit.windowMs, now);
    return freeze(verdict);
  }
}

/** Broken: keeps a set of call times, so calls in the same millisecond merge into one. */
export class MergingStore extends LogStore {
  record(key, windowMs, now) {
    const log = this.times(key, now, windowMs);
    if (!log.includes(now)) log.push(now);
  }
}

/** Broken: counts in fixed buckets of `windowMs` instead of a sliding window. */
export class BucketStore extends LogStore {
  waitUntil(key, { uses, windowMs }, now) {
    const start = now - (now % windowMs);
    const inBucket = (this.logs.get(key) ?? []).filter((t) => t >= start);
    return inBucket.length >= uses ? start + windowMs : undefined;
  }
}

/** Broken: a release frees every call of the key, not only its own. */
export class GreedyReleaseStore extends LogStore {
  giveBack(entries) {
    for (const { key } of entries) this.logs.delete(key);
  }
}

/** Broken: a peek records the call, as a consume would. */
export class RecordingPeekStore extends LogStore {
  peekMany(entries) {
    return this.consumeMany(entries);
  }
}
