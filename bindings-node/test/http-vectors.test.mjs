// tests/vectors/http/http.json (format: tests/vectors/README.md, section HTTP) through the addon's HTTP
// functions as the middleware calls them (dist/http/native.js): the store entries of a request, the
// response fields of a verdict, whole flows on a MemoryStore, the client's address. The core runs the
// same file (core/tests/http_vectors.rs), and so does the Python package.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { repo } from './backend.mjs';

const require = createRequire(import.meta.url);
const { Limit, Unlimited, MemoryStore } = require('../dist/index.js');
const { plan, headers, fieldNames, ClientAddress, HttpInputError, IETF, LEGACY } = require('../dist/http/native.js');

const doc = JSON.parse(readFileSync(join(repo, 'tests', 'vectors', 'http', 'http.json'), 'utf8'));

/** A text field: a string, or `{prefix?, repeat, times, suffix?}`. */
const text = (v) => (typeof v === 'string' ? v : `${v.prefix ?? ''}${v.repeat.repeat(v.times)}${v.suffix ?? ''}`);

/** A case's limits as users build them: `Limit`s (the window in seconds) and `Unlimited`s. */
const limitsOf = (c) => c.limits.map((l) => (l.unlimited ? new Unlimited() : new Limit(text(l.key), l.uses, l.window_ms / 1000)));

const flagsOf = (c) => (c.ietf ? IETF : 0) | (c.legacy ? LEGACY : 0);

/** The verdict a store would give, from the file's snake_case. */
const verdictOf = (v) => ({
  allowed: v.allowed,
  retryAfterMs: v.retry_after_ms,
  ...(v.retry_timestamp === null ? {} : { retryTimestamp: v.retry_timestamp }),
  ...(v.blocked === null ? {} : { blocked: v.blocked }),
  limit: v.limit,
  remaining: v.remaining,
  refillAfterMs: v.refill_after_ms,
  resetAfterMs: v.reset_after_ms,
});

/** Runs `f`; a thrown HttpInputError is `{ error: reason }`. */
function outcome(f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof HttpInputError) return { error: e.reason };
    throw e;
  }
}

/** The response fields as `[[name, value], ...]`, as the middleware sets them. */
function fields(name, entries, verdict, flags, now) {
  const out = [];
  const names = fieldNames();
  headers(name, { entries }, verdict, flags, (field, v) => out.push([names[field], v]), now);
  return out;
}

describe('http.json', () => {
  it('the key limit is the core\'s', () => {
    assert.equal(doc.max_key_bytes, 1024);
  });

  it(`request_entries (${doc.request_entries.length} cases)`, () => {
    for (const c of doc.request_entries) {
      const limits = limitsOf(c);
      const got = outcome(() => {
        const p = plan(c.limiter, limits);
        const entries = (p?.entries ?? []).map((e, i) => ({ key: e.key, uses: e.limit.uses, window_ms: e.limit.windowMs, source: p.sources[i] }));
        return { entries };
      });
      const expect = c.expect.entries ? { entries: c.expect.entries.map((e) => ({ ...e, key: text(e.key) })) } : c.expect;
      assert.deepEqual(got, expect, c.name);
    }
  });

  it(`response_headers (${doc.response_headers.length} cases)`, () => {
    for (const c of doc.response_headers) {
      const verdict = verdictOf(c.verdict);
      const entries = c.limits.map((l) => ({ limit: { uses: l.uses, windowMs: l.window_ms } }));
      assert.deepEqual({ status: verdict.allowed ? null : 429, headers: fields(c.limiter, entries, verdict, flagsOf(c), c.now_ms) }, c.expect, c.name);
    }
  });

  it(`flows through a MemoryStore (${doc.flows.length} cases)`, async () => {
    for (const c of doc.flows) {
      let now = 0;
      const store = new MemoryStore({ clock: { now: () => now } });
      const limits = limitsOf(c);
      c.requests.forEach((request, i) => {
        now = request.now_ms;
        const p = plan(c.limiter, limits);
        const verdict = p === undefined ? { allowed: true, retryAfterMs: 0 } : store.consumeMany(p.entries);
        const got = {
          status: verdict.allowed ? null : 429,
          blocked: verdict.blocked === undefined ? null : p.sources[verdict.blocked],
          headers: p === undefined ? [] : fields(c.limiter, p.entries, verdict, flagsOf(c), now),
        };
        assert.deepEqual(got, request.expect, `${c.name} #${i}`);
      });
    }
  });

  it(`client_address (${doc.client_address.length} cases)`, () => {
    for (const c of doc.client_address) {
      const t = c.trust ?? {};
      const got = outcome(() => {
        const address = new ClientAddress({
          ...(t.hops !== undefined ? { trustProxy: t.hops } : t.proxies !== undefined ? { trustProxy: t.proxies } : {}),
          ...(t.header !== undefined ? { proxyHeader: t.header } : {}),
          ...(t.ipv6_prefix !== undefined ? { ipv6Prefix: t.ipv6_prefix } : {}),
        });
        // The middleware reads only the header the trust names.
        const value = address.header === 'forwarded' ? c.forwarded : address.header === 'x-forwarded-for' ? c.x_forwarded_for : undefined;
        return { address: address.of(text(c.peer), value === undefined ? undefined : text(value)) };
      });
      assert.deepEqual(got, c.expect, c.name);
    }
  });
});
