// Loads the ratewindow component (transpiled by `jco transpile --instantiation async`) in Node, for both
// worlds, behind one interface of ops: the shape the conformance vectors speak.
//
//   engine: the pure world; every call takes `now` (a BigInt of Unix ms).
//   hosted: the store reads the host's clock through the imported `ratewindow:engine/clock`; this host's
//           clock is `host.clockMs`, set before each op.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The version of the WIT package `ratewindow:engine` (wit/*.wit). */
export const WIT_VERSION = '0.2.0';
/** Where scripts/test-wasm-component.sh puts the transpiled components. */
export const JCO_DIR = process.env.RATEWINDOW_JCO_DIR ?? path.join(here, '..', 'component', 'dist', 'jco');

async function load(world, imports) {
  const dir = path.join(JCO_DIR, world);
  const { instantiate } = await import(path.join(dir, `ratewindow-${world}.js`));
  const getCoreModule = async (file) => WebAssembly.compile(await readFile(path.join(dir, file)));
  return instantiate(getCoreModule, imports);
}

/** The component's exports for the `engine` world. */
export async function loadEngine() {
  return load('engine', {});
}

/** The component's exports for the `hosted` world, and the host state its clock reads. */
export async function loadHosted() {
  // `realTime`: `nowMs` reads Date.now() and `sleepMs` blocks the thread (Atomics.wait: the import is
  // synchronous), for a lock's `block` on a real store; otherwise `nowMs` is `host.clockMs` and `sleepMs`
  // moves it. Sleeps asked for are kept in `host.sleptMs`.
  const host = { clockMs: 0n, clockReads: 0, realTime: false, sleptMs: [] };
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const clock = {
    nowMs() {
      host.clockReads += 1;
      return host.realTime ? BigInt(Date.now()) : host.clockMs;
    },
    sleepMs(ms) {
      host.sleptMs.push(Number(ms));
      if (host.realTime) Atomics.wait(pause, 0, 0, Number(ms));
      else host.clockMs += BigInt(ms);
    },
  };
  // `store-io`: the Redis store's scripts go to `host.runner(script, sha1, keys, args)`, the host's
  // client: it returns the reply (a `reply` variant) or throws, and the error's message goes back to the
  // component's call machine as it is (the machine classifies it; this host never does). Without a
  // runner, scripts fail with `host.noClient`. Give-backs that failed are collected in
  // `host.giveBackFailures`; call ids come from crypto.getRandomValues.
  host.noClient = 'this host has no Redis client';
  host.runner = null;
  host.giveBackFailures = [];
  const storeIo = {
    runScript(script, sha1, keys, args) {
      if (!host.runner) return { tag: 'err', val: host.noClient };
      try {
        return { tag: 'ok', val: host.runner(script, sha1, keys, args) };
      } catch (e) {
        return { tag: 'err', val: e instanceof Error ? e.message : String(e) };
      }
    },
    query(_statements) {
      return { tag: 'err', val: 'this host has no SQL client' };
    },
    randomBytes(n) {
      return crypto.getRandomValues(new Uint8Array(n));
    },
    giveBackFailed(failure) {
      host.giveBackFailures.push(failure);
    },
  };
  // jco's generated code looks the interface up without its version; its typings name it with one.
  const exports = await load('hosted', {
    'ratewindow:engine/clock': clock,
    [`ratewindow:engine/clock@${WIT_VERSION}`]: clock,
    'ratewindow:engine/store-io': storeIo,
    [`ratewindow:engine/store-io@${WIT_VERSION}`]: storeIo,
  });
  return { exports, host };
}

// jco lowers a BigInt to u64/s64 with BigInt.asUintN/asIntN, wrapping out-of-range values silently:
// this host refuses them instead.
const U64_MAX = 2n ** 64n - 1n;
const S64_MIN = -(2n ** 63n);
const S64_MAX = 2n ** 63n - 1n;
export function u64(n) {
  const v = BigInt(n);
  if (v < 0n || v > U64_MAX) throw new RangeError(`expected 0 to ${U64_MAX}, got ${n}`);
  return v;
}
export function s64(n) {
  const v = BigInt(n);
  if (v < S64_MIN || v > S64_MAX) throw new RangeError(`expected ${S64_MIN} to ${S64_MAX}, got ${n}`);
  return v;
}

/** A BigInt from the component as a JSON number (the vectors' integers are within 2^53). */
export const num = (v) => (typeof v === 'bigint' ? Number(v) : v);

/** A verdict in the vectors' JSON shape, quota fields included. */
export const verdictJson = (v) => ({
  allowed: v.allowed,
  retry_after_ms: num(v.retryAfterMs),
  retry_timestamp: v.retryTimestamp === undefined ? null : num(v.retryTimestamp),
  limit: v.limit,
  remaining: v.remaining,
  refill_after_ms: num(v.refillAfterMs),
  reset_after_ms: num(v.resetAfterMs),
});

/** A batch verdict in the vectors' JSON shape. */
export const batchJson = (v) => ({ ...verdictJson(v), blocked: v.blocked === undefined ? null : v.blocked });

const limit = (l) => ({ uses: l.uses, windowMs: l.window_ms });
// An entry's `cost` (the weights vectors) crosses as the WIT `option<f64>`: undefined is none.
const entries = (list) => list.map((e) => ({ key: e.key, limit: limit(e.limit), cost: e.cost }));

/**
 * Runs `fn` and gives `{ ok }` or `{ err }` where `err` is the component's `error` variant: jco throws
 * a `result`'s error as a ComponentError carrying it as `payload`. Anything else (a trap) rethrows.
 */
export function attempt(fn) {
  try {
    return { ok: fn() };
  } catch (e) {
    if (e && typeof e === 'object' && 'payload' in e && e.payload && typeof e.payload.tag === 'string') {
      return { err: e.payload };
    }
    throw e;
  }
}

/** Ops over a component's store. `timed` is true for the engine world (now passed to every call). */
class Ops {
  constructor(api, limits, timed, setClock) {
    this.api = api;
    this.limits = limits;
    this.timed = timed;
    this.setClock = setClock;
    this.store = null;
    this.tokens = new Map();
  }

  at(now) {
    const n = u64(now);
    if (!this.timed) this.setClock(n);
    return this.timed ? [n] : [];
  }

  freshStore() {
    for (const token of this.tokens.values()) token[Symbol.dispose]();
    this.tokens.clear();
    if (this.store) this.store[Symbol.dispose]();
    this.store = new this.api.MemoryStore();
  }

  checkLimit(l) {
    return attempt(() => this.limits.checkLimit(limit(l)));
  }

  consume(key, l, now) {
    return attempt(() => this.store.consume(key, limit(l), ...this.at(now)));
  }

  peek(key, l, now) {
    return attempt(() => this.store.peek(key, limit(l), ...this.at(now)));
  }

  /** A sliding-log call costing `cost` uses (`consume-cost`). */
  consumeCost(key, l, cost, now) {
    return attempt(() => this.store.consumeCost(key, limit(l), cost, ...this.at(now)));
  }

  peekCost(key, l, cost, now) {
    return attempt(() => this.store.peekCost(key, limit(l), cost, ...this.at(now)));
  }

  consumeMany(list, now, id) {
    const r = attempt(() => this.store.consumeMany(entries(list), ...this.at(now)));
    if (r.err) return r;
    const { verdict, release } = r.ok;
    if (release) {
      if (id !== undefined) this.tokens.set(id, release);
      else release[Symbol.dispose]();
    }
    return { ok: verdict };
  }

  peekMany(list, now) {
    return attempt(() => this.store.peekMany(entries(list), ...this.at(now)));
  }

  release(id, now) {
    const token = this.tokens.get(id);
    const args = this.at(now);
    if (token) this.store.release(token, ...args);
  }

  hit(key, decayMs, amount, now) {
    return attempt(() => this.store.hit(key, decayMs, s64(amount), ...this.at(now)));
  }

  hitWindow(key, decayMs, amount, now) {
    return attempt(() => this.store.hitWindow(key, decayMs, s64(amount), ...this.at(now)));
  }

  attempt(key, max, decayMs, now) {
    return attempt(() => this.store.attempt(key, s64(max), decayMs, ...this.at(now)));
  }

  attempts(key, now) {
    return this.store.attempts(key, ...this.at(now));
  }

  tooManyAttempts(key, max, now) {
    return this.store.tooManyAttempts(key, s64(max), ...this.at(now));
  }

  remaining(key, max, now) {
    return this.store.remaining(key, s64(max), ...this.at(now));
  }

  availableIn(key, now) {
    return this.store.availableIn(key, ...this.at(now));
  }

  availableInMs(key, now) {
    return this.store.availableInMs(key, ...this.at(now));
  }

  resetAttempts(key, now) {
    return this.store.resetAttempts(key, ...this.at(now));
  }

  clear(key, now) {
    if (!this.timed) this.setClock(u64(now));
    return this.store.clear(key);
  }

  // GCRA and the sliding-window counter (limits in the vectors' JSON shape, `algorithm` 'gcra' or
  // 'counter').

  checkRate(algorithm, l) {
    return attempt(() => this.limits.checkRate(rateLimit(algorithm, l)));
  }

  consumeRate(key, algorithm, l, cost, now) {
    return attempt(() => this.store.consumeRate(key, rateLimit(algorithm, l), cost, ...this.at(now)));
  }

  peekRate(key, algorithm, l, cost, now) {
    return attempt(() => this.store.peekRate(key, rateLimit(algorithm, l), cost, ...this.at(now)));
  }

  resetRate(key, algorithm, now) {
    if (!this.timed) this.setClock(u64(now));
    return this.store.resetRate(key, algorithm);
  }

  consumeMixed(list, now, id) {
    const r = attempt(() => this.store.consumeMixed(mixedEntries(list), ...this.at(now)));
    if (r.err) return r;
    const { verdict, release } = r.ok;
    if (release) {
      if (id !== undefined) this.tokens.set(id, release);
      else release[Symbol.dispose]();
    }
    return { ok: verdict };
  }

  peekMixed(list, now) {
    return attempt(() => this.store.peekMixed(mixedEntries(list), ...this.at(now)));
  }
}

/** A GCRA or counter limit of the vectors as the WIT `rate-limit` variant (jco: `{ tag, val }`). */
export function rateLimit(algorithm, l) {
  if (algorithm === 'gcra') return { tag: 'gcra', val: { uses: l.uses, windowMs: l.window_ms, burst: l.burst } };
  return { tag: algorithm, val: limit(l) };
}

/** Entries of a mixed batch of the vectors (`algorithm`, `key`, `limit`, `cost`) as `mixed-entry`s. */
export const mixedEntries = (list) =>
  list.map((e) => ({ key: e.key, limit: rateLimit(e.algorithm, e.limit), cost: e.cost ?? 1 }));

/** Ops over the `engine` world. */
export async function engineOps() {
  const exports = await loadEngine();
  return new Ops(exports.memory, exports.limits, true, null);
}

/** Ops over the `hosted` world, with its host state. */
export async function hostedOps() {
  const { exports, host } = await loadHosted();
  const ops = new Ops(exports.clockedMemory, exports.limits, false, (n) => {
    host.clockMs = n;
  });
  ops.host = host;
  ops.redis = exports.redis;
  ops.lock = exports.lock;
  ops.clockedMemory = exports.clockedMemory;
  return ops;
}
