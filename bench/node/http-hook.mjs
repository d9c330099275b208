// Benchmark: ratewindow/fastify's hook alone, with no I/O: its CPU a request in this Node process,
// load-independent under callgrind. The RedisStore's client answers every call with the reply the
// server gave once (a resolved promise), so what is measured is the hook, the addon's crossings and the
// store's JS layer; the request and reply are the few fields the hook reads (Fastify itself is not
// run). 16 calls in flight, 10,000 clients forwarded by one trusted proxy, as in http.mjs.
//
//   REDIS_PORT=6465 node bench/node/http-hook.mjs            CPU µs a call (min / median of R rounds)
//   PLUGIN=1 ...                                             the plugin's hook (else throttle()'s)
//   FIXED=1 ...                                              counted by the fixed window (attempt)
//   PKG=/path/to/bindings-node ...                           another build (a before/after)
//   CG=1 W=50000 N=20000 valgrind --tool=callgrind --instr-atstart=no node bench/node/http-hook.mjs
//        instructions of N calls after W warm ones (instrumentation on around the N calls only)
//   FRESH=1 ...                                              a client never seen before each call (every
//                                                            store key new: its call planned first)
//   UNPLANNED_KEYS=1 ...                                     each new key planned by the engine (a
//                                                            crossing), as before keys were planned from
//                                                            the last plan of the same limit
import { createRequire } from 'node:module';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
const ex = promisify(execFile);
const PKG = process.env.PKG ?? new URL('../../bindings-node', import.meta.url).pathname;
const require = createRequire(PKG + '/package.json');
const { RedisStore, Limit, RateLimiter } = require('./dist/index.js');
const { throttle } = require('./dist/http/fastify.js');
const Redis = require('ioredis');
const redis = new Redis({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT ?? 6379) });
let captured;
const real = RedisStore.using((s, k, a) => redis.eval(s, k.length, k, a), { evalsha: async (sha, k, a) => (captured = await redis.evalsha(sha, k.length, k, a)), prefix: 'bhook:' });
if (process.env.FIXED) await real.attempt('x', 1000, 60000); else await real.consume('x', Limit.perMinute(1000));
redis.disconnect();
const reply0 = captured;
const store = RedisStore.using((s, k, a) => Promise.resolve(reply0), { evalsha: (sha, k, a) => Promise.resolve(reply0), prefix: 'bhook:' });
if (process.env.UNPLANNED_KEYS) store.keyPrefixes = [null, null, null, null];
const fixedWindow = (store) => {
  const verdict = (max, got) => ({ allowed: got.allowed, retryAfterMs: got.allowed ? 0 : got.resetAfterMs, limit: max, remaining: Math.max(0, max - got.count), refillAfterMs: got.resetAfterMs, resetAfterMs: got.resetAfterMs });
  const consume = (key, limit) => { const got = store.attempt(key, limit.uses, limit.windowMs); return typeof got.then === 'function' ? got.then((g) => verdict(limit.uses, g)) : verdict(limit.uses, got); };
  return { consume, consumeMany: ([e]) => consume(e.key, e.limit) };
};
const extra = process.env.FIXED ? { store: fixedWindow(store) } : {};
const rl = new RateLimiter(store);
rl.for('api', (req, { ip }) => Limit.perMinute(1000).by(ip));
let hook;
if (process.env.PLUGIN) {
  const { ratewindow } = require('./dist/http/fastify.js');
  const route = { config: {} };
  ratewindow({ addHook: (_n, f) => f(route) }, { limiter: rl, global: 'api', trustProxy: 1, ...extra }, () => {});
  hook = route.onRequest[0];
} else hook = throttle('api', { limiter: rl, trustProxy: 1, ...extra });
// As Fastify's hook runner: a promise answered is waited on, else the hook calls done.
const call = (req, reply) => new Promise((resolve, reject) => { const r = hook(req, reply, (e) => (e ? reject(e) : resolve())); if (r && typeof r.then === 'function') r.then(() => resolve(), reject); });
const socket = { remoteAddress: '127.0.0.1' };
const reqs = Array.from({ length: 10000 }, (_, c) => ({ headers: { 'x-forwarded-for': `10.${(c >> 8) & 255}.${c & 255}.7` }, raw: { socket } }));
class Reply { constructor() { this.h = {}; this.sent = false; this.raw = {}; } header(k, v) { this.h[k.toLowerCase()] = v; return this; } code() { return this; } send() { return this; } }
let n = 0;
// FRESH: a new client each call (10.x.y.z from a counter past the 10,000 kept ones).
const fresh = process.env.FRESH ? () => { const c = 65536 + n++; return { headers: { 'x-forwarded-for': `10.${(c >> 16) & 255}.${(c >> 8) & 255}.${c & 255}` }, raw: { socket } }; } : undefined;
async function loop(calls) {
  const one = async () => { for (let i = 0; i < calls / 16; i++) { const r = new Reply(); await call(fresh ? fresh() : reqs[n++ % 10000], r); } };
  await Promise.all(Array.from({ length: 16 }, one));
}
{ const r = new Reply(); await call(reqs[0], r); console.log(r.h); }
const N = Number(process.env.N ?? 100000);
await loop(Number(process.env.W ?? 100000));
if (process.env.CG) { await ex('callgrind_control', ['-i', 'on', String(process.pid)]); }
const xs = [];
for (let r = 0; r < Number(process.env.R ?? 1); r++) { const c0 = process.cpuUsage(); await loop(N); const c = process.cpuUsage(c0); xs.push((c.user + c.system) / N); }
if (process.env.CG) { await ex('callgrind_control', ['-i', 'off', String(process.pid)]); }
console.log('µs CPU a call: min', Math.min(...xs).toFixed(3), 'median', [...xs].sort((a, b) => a - b)[xs.length >> 1].toFixed(3));
process.exit(0);
