// The RedisStore bench's load-independent measure: this Node process's instructions a call under
// callgrind, for each contender of `redis.mjs` / `gcra-redis.mjs` on one client (node-redis or ioredis),
// 64 calls in flight, 10,000 keys round-robin. Each contender runs N then 3N calls with a callgrind dump
// after each; a figure is (instructions of the 3N run - of the N run) / 2N, so start-up, the dumps and
// anything per run cancel out. Run it with `bench/node/redis-instructions.sh`.
//   - refused / allowed: RedisStore.consume, all refusals (5 per 60 s, keys filled) / all allowed
//   - fixed:  RedisStore.attempt (refused variant: over its max; allowed: below)
//   - gcra:   RedisStore.consume of a GCRA limit (refused: burst spent; allowed: a rate never reached)
//   - rlf:    rate-limiter-flexible's RateLimiterRedis.consume (refused / allowed like `refused`/`allowed`)
//   - bare:   the client's EVALSHA of `return 1`, one key and 5 arguments (a sliding consume's count)
//   - bare3:  the same with 3 arguments (a GCRA consume's count)
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore, gcraLimit } = require('./dist/index.js');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const IORedis = require('ioredis');

const which = process.env.BENCH_CALLGRIND ?? 'node-redis';
const PORT = Number(process.env.REDIS_PORT ?? 6379);
const N = Number(process.env.BENCH_CALLS ?? 2000);
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 64);
const names = (process.env.BENCH_CONTENDERS ?? 'refused,allowed,fixedRefused,fixedAllowed,gcraRefused,gcraAllowed,rlfRefused,rlfAllowed,bare,bare3').split(',');
const KEYS = Array.from({ length: 10_000 }, (_, i) => `user:${i}`);
// The keys' prefix: BENCH_TAG (the .sh fills the keys in a plain process first, then measures).
const tag = process.env.BENCH_TAG ?? `rwins:${Date.now().toString(36)}:`;

const dump = (label) =>
  new Promise((resolve, reject) => execFile('callgrind_control', ['-d', label, String(process.pid)], (e) => (e ? reject(e) : resolve())));

let client;
let c;
if (which === 'node-redis') {
  client = createClient({ socket: { host: '127.0.0.1', port: PORT } });
  await client.connect();
  c = {
    run: (s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]),
    evalsha: (sha, keys, args) => client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
    load: (s) => client.scriptLoad(s),
    rlf: { storeClient: client, useRedisPackage: true },
    close: () => client.destroy(),
  };
} else {
  client = new IORedis({ host: '127.0.0.1', port: PORT });
  c = {
    run: (s, keys, args) => client.eval(s, keys.length, keys, args),
    evalsha: (sha, keys, args) => client.evalsha(sha, keys.length, keys, args),
    load: (s) => client.script('LOAD', s),
    rlf: { storeClient: client },
    close: () => client.disconnect(),
  };
}
let store = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: tag });
const refused = { uses: 5, windowMs: 600_000 };
const allowed = { uses: 1_000_000_000, windowMs: 600_000 };
const gcraRefused = gcraLimit(1, 600_000, 1);
const gcraAllowed = gcraLimit(1_000_000, 1_000, 1_000_000);
const rlfOf = (p, uses) => new RateLimiterRedis({ ...c.rlf, points: uses, duration: 600, keyPrefix: `${tag}${p}` });
const rlfR = rlfOf('rlfr', 5);
const rlfA = rlfOf('rlfa', 1_000_000_000);
const sha = await c.load('return 1');
const args5 = ['5:10000', 'x']; // a one-entry consume's arguments (the limit, the id)
const args3 = ['1', '2', '3'];
const ignore = () => undefined;
const fns = {
  refused: (k) => store.consume(k, refused),
  allowed: (k) => store.consume(`a:${k}`, allowed),
  fixedRefused: (k) => store.attempt(`f:${k}`, 5, 600_000),
  fixedAllowed: (k) => store.attempt(`fa:${k}`, 1_000_000_000, 600_000),
  gcraRefused: (k) => store.consume(`g:${k}`, gcraRefused),
  gcraAllowed: (k) => store.consume(`ga:${k}`, gcraAllowed),
  rlfRefused: (k) => rlfR.consume(k).then(ignore, ignore),
  rlfAllowed: (k) => rlfA.consume(k).then(ignore, ignore),
  bare: (k) => c.evalsha(sha, [`${tag}bare:${k}`], args5),
  bare3: (k) => c.evalsha(sha, [`${tag}bare:${k}`], args3),
};

// BENCH_NOIO=1: ratewindow's own cost alone: each contender's store answers at once with a reply the
// server gave it (captured here, after the fill), so the figure is the JS layer and its crossings.
if (process.env.BENCH_NOIO === '1') {
  const replies = {};
  for (const name of ['refused', 'allowed', 'fixedRefused', 'fixedAllowed', 'gcraRefused', 'gcraAllowed']) {
    const spy = RedisStore.using(c.run, { evalsha: (sha1, keys, args) => Promise.resolve(c.evalsha(sha1, keys, args)).then((r) => (replies[name] = r)), prefix: `${tag}capture:${Date.now()}:` });
    store = spy;
    for (let i = 0; i < 7; i++) await fns[name]('capture');
  }
  for (const name of Object.keys(replies)) {
    const reply = replies[name];
    const at = RedisStore.using(() => Promise.resolve(reply), { evalsha: () => Promise.resolve(reply), prefix: tag });
    const op = fns[name];
    fns[name] = (k) => {
      store = at;
      return op(k);
    };
  }
}

let cursor = 0;
const run = async (fn, n) => {
  let next = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < n) {
        next++;
        await fn(KEYS[cursor++ % KEYS.length]);
      }
    }),
  );
};

// Fill (BENCH_FILL=1, outside callgrind): every key over its limit for the refused variants.
if (process.env.BENCH_FILL === '1') {
  for (const name of ['refused', 'fixedRefused', 'gcraRefused', 'rlfRefused']) if (names.includes(name)) for (let i = 0; i < 6; i++) await run(fns[name], KEYS.length);
  await c.close();
  process.exit(0);
}
for (const name of names) await run(fns[name], N);
await dump('warm');
for (const name of names) {
  await run(fns[name], N);
  await dump(`${name}-1`);
  await run(fns[name], 3 * N);
  await dump(`${name}-3`);
}
await c.close();
process.exit(0);
