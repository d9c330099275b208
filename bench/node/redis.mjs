// Benchmark: ratewindow's RedisStore against the same client's bare EVALSHA of a trivial script, and
// against rate-limiter-flexible's RateLimiterRedis (and RateLimiterUnion for batches).
//
// Workload: 10,000 keys taken round-robin, 5 uses per 10 s, on the shared Redis (127.0.0.1:6379), with
// node-redis 6 and ioredis 6, 1 and 64 calls in flight. A refusal is an answer (rate-limiter-flexible
// rejects; the rejection is caught and counted). Contenders run interleaved (a, b, c, a, b, c ...) and
// the median of each is reported, so drift of the machine affects all alike.
//   - ours:    RedisStore.consume (EVALSHA of the sliding-log script: trim, count, record, expire)
//   - bare:    client.evalSha of `return 1` with the same key and argument count (the floor: a client
//              round trip of EVALSHA); target: ours >= 0.9x of it
//   - script:  client.evalSha of ratewindow's own sliding-log script, keys and args written by hand (what
//              the store's layer costs over the script it runs)
//   - rlf:     RateLimiterRedis.consume (a fixed window, one INCR + PEXPIRE script)
//   - batch3:  RedisStore.consumeMany of 3 entries (3 keys, all or nothing); target <= 1.15x the time of one
//   - union3:  RateLimiterUnion of three RateLimiterRedis (three scripts, and points burnt on the ones
//              that passed when another refuses)
//
//   node bench/node/redis.mjs               full run (~40 s)
//   BENCH_QUICK=1 node bench/node/redis.mjs a smoke run (~3 s)
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore } = require('./dist/index.js');
const { RateLimiterRedis, RateLimiterUnion } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const IORedis = require('ioredis');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : 5;
const RUN_MS = quick ? 60 : 250;
const N = 10_000;
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const LIMIT = { uses: 5, windowMs: 10_000 };
const run = `bench:${Date.now().toString(36)}:`;
const TRIVIAL = 'return 1';

/** Runs `op(i)` with `inflight` calls in flight for `ms`; returns completed calls per second. */
async function throughput(op, inflight, ms = RUN_MS, usage = null) {
  let next = 0;
  let done = 0;
  const end = performance.now() + ms;
  const start = performance.now();
  const cpu0 = process.cpuUsage();
  const worker = async () => {
    while (performance.now() < end) {
      await op(next++);
      done++;
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  const cpu = process.cpuUsage(cpu0);
  if (usage) usage.push((cpu.user + cpu.system) / done);
  return (done * 1000) / (performance.now() - start);
}

/** Server time per script call (µs), from INFO commandstats: EVAL and EVALSHA together. */
async function serverStats(c) {
  const info = String(await c.info());
  let calls = 0;
  let usec = 0;
  for (const m of info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+),usec=(\d+)/g)) {
    calls += Number(m[1]);
    usec += Number(m[2]);
  }
  return { calls, usec };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (x) => Math.round(x).toLocaleString('en-US').padStart(8);

async function clients() {
  const nr = createClient({ socket: { host: '127.0.0.1', port: 6379 } });
  await nr.connect();
  const io = new IORedis({ host: '127.0.0.1', port: 6379 });
  return [
    {
      name: 'node-redis',
      client: nr,
      rlfOptions: { storeClient: nr, useRedisPackage: true },
      run: (s, keys, args) => nr.eval(s, { keys, arguments: args }),
      evalsha: (sha, keys, args) => nr.evalSha(sha, { keys, arguments: args }),
      load: (s) => nr.scriptLoad(s),
      info: () => nr.info('commandstats'),
      close: () => nr.destroy(),
    },
    {
      name: 'ioredis',
      client: io,
      rlfOptions: { storeClient: io },
      run: (s, keys, args) => io.eval(s, keys.length, ...keys, ...args),
      evalsha: (sha, keys, args) => io.evalsha(sha, keys.length, ...keys, ...args),
      load: (s) => io.script('LOAD', s),
      info: () => io.info('commandstats'),
      close: () => io.disconnect(),
    },
  ];
}

const answers = { allowed: 0, refused: 0 };
const count = (v) => (v.allowed ? answers.allowed++ : answers.refused++);
const refusedRlf = (e) => {
  if (e instanceof Error) throw e;
  answers.refused++;
};

const results = [];
for (const c of await clients()) {
  const store = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: run });
  const sha = await c.load(TRIVIAL);
  await c.load(store.scripts.sliding.source);
  const bareArgs = ['c', 'x', '1', '5', '10000']; // the argument count of a one-entry consume
  const opts = (p) => ({ ...c.rlfOptions, points: LIMIT.uses, duration: LIMIT.windowMs / 1000, keyPrefix: `${run}${p}` });
  const rlf = new RateLimiterRedis(opts('rlf'));
  const union = new RateLimiterUnion(new RateLimiterRedis(opts('u1')), new RateLimiterRedis(opts('u2')), new RateLimiterRedis(opts('u3')));
  const contenders = {
    ours: (i) => store.consume(KEYS[i % N], LIMIT).then(count),
    bare: (i) => c.evalsha(sha, [`${run}bare:${KEYS[i % N]}`], bareArgs),
    // The same sliding-log script sent by hand (keys and args written out, a fresh id per call): what
    // RedisStore costs over the script it runs.
    script: (i) => c.evalsha(store.scripts.sliding.sha1, [`${run}script:log:${KEYS[i % N]}`], ['c', randomUUID(), '1', '5', '10000']),
    rlf: (i) => rlf.consume(KEYS[i % N]).then(() => answers.allowed++, refusedRlf),
    batch3: (i) => {
      const k = KEYS[i % N];
      return store.consumeMany([
        { key: `${k}:a`, limit: LIMIT },
        { key: `${k}:b`, limit: LIMIT },
        { key: `${k}:c`, limit: LIMIT },
      ]).then(count);
    },
    union3: (i) => union.consume(KEYS[i % N]).then(() => answers.allowed++, refusedRlf),
  };
  for (const inflight of [1, 64]) {
    // Warm up (scripts loaded, connections and JIT hot), then interleave.
    for (const op of Object.values(contenders)) await throughput(op, inflight, quick ? 20 : 100);
    const samples = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
    const cpu = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
    const server = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const [name, op] of Object.entries(contenders)) {
        const before = await serverStats(c);
        samples[name].push(await throughput(op, inflight, RUN_MS, cpu[name]));
        const after = await serverStats(c);
        server[name].push((after.usec - before.usec) / Math.max(1, after.calls - before.calls));
      }
    }
    const m = Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, median(xs)]));
    const cpuM = Object.fromEntries(Object.entries(cpu).map(([k, xs]) => [k, median(xs)]));
    const serverM = Object.fromEntries(Object.entries(server).map(([k, xs]) => [k, median(xs)]));
    results.push({ client: c.name, inflight, ...m, cpu: cpuM, server: serverM });
  }
  await c.close();
}

console.log(`RedisStore benchmark: 10,000 keys round-robin, 5 uses / 10 s, median of ${ROUNDS} interleaved runs (calls/s)`);
console.log('client      in flight     ours     bare   script      rlf   batch3   union3 | ours/bare ours/script ours/rlf 3-batch time/1 batch3/union3');
for (const r of results) {
  console.log(
    `${r.client.padEnd(11)} ${String(r.inflight).padStart(9)} ${fmt(r.ours)} ${fmt(r.bare)} ${fmt(r.script)} ${fmt(r.rlf)} ${fmt(r.batch3)} ${fmt(r.union3)} |` +
      `     ${(r.ours / r.bare).toFixed(2)}x      ${(r.ours / r.script).toFixed(2)}x    ${(r.ours / r.rlf).toFixed(2)}x          ${(r.ours / r.batch3).toFixed(2)}x         ${(r.batch3 / r.union3).toFixed(2)}x`,
  );
}
console.log('\nCost per call, µs (median): this process\'s CPU (client + ratewindow) / the server\'s time in scripts per script run');
console.log('client      in flight        ours        bare      script         rlf      batch3      union3');
const pair = (r, k) => `${r.cpu[k].toFixed(1)}/${r.server[k].toFixed(1)}`.padStart(11);
for (const r of results) {
  console.log(`${r.client.padEnd(11)} ${String(r.inflight).padStart(9)} ${['ours', 'bare', 'script', 'rlf', 'batch3', 'union3'].map((k) => pair(r, k)).join(' ')}`);
}
console.log(`(answers: ${answers.allowed} allowed, ${answers.refused} refused)`);
