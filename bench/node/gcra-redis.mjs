// Benchmark: GCRA and the sliding-window counter on RedisStore (one script on one key, issue 17)
// against the same client's bare EVALSHA of `return 1`, the GCRA script sent by hand, and
// rate-limiter-flexible's RateLimiterRedis (a fixed window: INCR + PEXPIRE).
//
// Workload: 10,000 keys round-robin on the Redis at 127.0.0.1:$REDIS_PORT (6379), node-redis and
// ioredis, 1 and 64 calls in flight, two variants:
//   - refused: 5 per 60 s (burst 5), every contender's keys filled first, so the timed calls refuse;
//   - allowed: 1,000,000 per 1,000,000 ms (a use a ms, burst 1,000,000): every timed call allowed.
// Contenders interleaved, 5 rounds; each ratio is the median of the per-round ratios.
//   - gcra:    RedisStore.consume(key, gcraLimit(...))          target: >= 0.9x of bare
//   - bare:    client.evalSha of `return 1`, one key and as many arguments as the GCRA call sends
//              (3 for these whole-ms limits since bc35248; 7 before)
//   - bare0:   client.evalSha of `return 1`, one key, no arguments (the bare floor)
//   - bare7:   client.evalSha of `return 1`, one key and 7 arguments (the GCRA call's before bc35248)
//   - script:  the GCRA script by EVALSHA, keys and args as the store sends them (the store's layer)
//   - counter: RedisStore.consume(key, counterLimit(...))
//   - rlf:     RateLimiterRedis.consume (points = uses, duration = window)
// Also the server's time a script call (INFO commandstats) and this process's CPU a call.
//
// Fairness (as lock.mjs, 4b34a08): node-redis 6 arms `AbortSignal.timeout(commandOptions.timeout)` for
// every command (its default 5,000 ms), and each timer fires 5 s later whether or not the reply came.
// Back-to-back 250 ms rounds charged a contender with the timers of the commands another had sent some
// 20 rounds earlier: with 7 contenders, gcra's rounds paid mostly for bare's (the 59.8 against 30.6 µs a
// call of the 06:39 run at 64 in flight). Now the client's timeout is set explicitly (node-redis'
// default unless BENCH_NODE_REDIS_TIMEOUT says), after every node-redis round the bench waits the
// timeout + 250 ms and counts that wait's CPU to the round's contender (each pays for exactly its own
// timers; the throughput is the round's alone), and a full GC (not counted) runs before every round.
// With the default timeout a full node-redis run takes ~13 min; BENCH_NODE_REDIS_TIMEOUT=0 (no timers,
// no waits) ~1 min.
//
//   node bench/node/gcra-redis.mjs        BENCH_QUICK=1 …  a smoke run;  REDIS_PORT=6475 …  a private
//   server;  BENCH_CLIENTS=ioredis …;  BENCH_VARIANTS=allowed …;  BENCH_ROUNDS=9 …;
//   BENCH_CONTENDERS=gcra,bare,rlf …  some contenders only;  BENCH_INFLIGHT=64 …;
//   BENCH_NODE_REDIS_TIMEOUT=0 …  node-redis without its per-command timers
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore, gcraLimit, counterLimit } = require('./dist/index.js');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const IORedis = require('ioredis');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379);
const RUN_MS = quick ? 40 : 250;
const N = quick ? 200 : 10_000;
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const VARIANTS = {
  refused: { uses: 5, windowMs: 60_000, burst: 5 },
  allowed: { uses: 1_000_000, windowMs: 1_000_000, burst: 1_000_000 },
};
const variants = (process.env.BENCH_VARIANTS ?? (quick ? 'refused' : 'refused,allowed')).split(',');
const clientNames = (process.env.BENCH_CLIENTS ?? 'node-redis,ioredis').split(',');
const run = `bench-gcra:${Date.now().toString(36)}:`;
const only = process.env.BENCH_CONTENDERS?.split(',');
const inflights = (process.env.BENCH_INFLIGHT ?? '1,64').split(',').map(Number);
// node-redis 6's per-command timeout (its default, 5000 ms, unless BENCH_NODE_REDIS_TIMEOUT says).
const NODE_REDIS_TIMEOUT = Number(process.env.BENCH_NODE_REDIS_TIMEOUT ?? 5000);
// A full collection before every round (not counted to any contender).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc');

/**
 * Calls a second over `ms` at `inflight` in flight; with `usage`, this process's CPU a call pushed to it,
 * counting `drainMs` of waiting after the round (for the round's own node-redis timers to fire).
 */
async function throughput(op, inflight, ms, usage, drainMs = 0) {
  let next = 0;
  let done = 0;
  gc();
  const start = performance.now();
  const end = start + ms;
  const cpu0 = process.cpuUsage();
  const worker = async () => {
    while (performance.now() < end) {
      await op(next++);
      done++;
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  const rate = (done * 1000) / (performance.now() - start);
  if (usage) {
    if (drainMs > 0) await sleep(drainMs);
    const cpu = process.cpuUsage(cpu0);
    usage.push((cpu.user + cpu.system) / done);
  }
  return rate;
}

async function serverStats(info) {
  let calls = 0;
  let usec = 0;
  for (const m of String(await info()).matchAll(/cmdstat_eval(?:sha)?:calls=(\d+),usec=(\d+)/g)) {
    calls += Number(m[1]);
    usec += Number(m[2]);
  }
  return { calls, usec };
}

async function clients() {
  const nr = createClient({ socket: { host: '127.0.0.1', port: REDIS_PORT }, commandOptions: { timeout: NODE_REDIS_TIMEOUT } });
  await nr.connect();
  const io = new IORedis({ host: '127.0.0.1', port: REDIS_PORT });
  return [
    {
      name: 'node-redis',
      // Every command's timer fires this long after it was sent: a round waits for its own.
      drainMs: NODE_REDIS_TIMEOUT > 0 ? NODE_REDIS_TIMEOUT + 250 : 0,
      rlfOptions: { storeClient: nr, useRedisPackage: true },
      run: (s, keys, args) => nr.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]),
      evalsha: (sha, keys, args) => nr.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
      load: (s) => nr.scriptLoad(s),
      info: () => nr.info('commandstats'),
      close: () => nr.destroy(),
    },
    {
      name: 'ioredis',
      drainMs: 0,
      rlfOptions: { storeClient: io },
      run: (s, keys, args) => io.eval(s, keys.length, keys, args),
      evalsha: (sha, keys, args) => io.evalsha(sha, keys.length, keys, args),
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
async function fill(op, uses) {
  const batch = 256;
  for (let i = 0; i < N * uses; i += batch) await Promise.all(Array.from({ length: Math.min(batch, N * uses - i) }, (_, j) => op(i + j)));
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const results = [];
const made = await clients();
// A client not asked for is closed at once (an open one kept the process alive after the results).
for (const c of made.filter((c) => !clientNames.includes(c.name))) await c.close();
for (const c of made.filter((c) => clientNames.includes(c.name))) {
  const bareSha = await c.load('return 1');
  for (const variant of variants) {
    const L = VARIANTS[variant];
    const tag = `${run}${c.name}:${variant}:`;
    const store = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: tag });
    const gcra = gcraLimit(L.uses, L.windowMs, L.burst);
    const counter = counterLimit(L.uses, L.windowMs);
    // The store's own GCRA command (SHA1, args), seen once through a spy.
    let seen;
    const spy = RedisStore.using(c.run, { evalsha: (sha1, keys, args) => ((seen = { sha1, args }), c.evalsha(sha1, keys, args)), prefix: `${tag}spy:` });
    await spy.consume('a', gcra);
    const bareArgs = seen.args.map(() => '1');
    const bare7Args = Array.from({ length: 7 }, () => '1');
    const rlf = new RateLimiterRedis({ ...c.rlfOptions, points: L.uses, duration: L.windowMs / 1000, keyPrefix: `${tag}rlf` });
    const all = {
      gcra: (i) => store.consume(KEYS[i % N], gcra).then(count),
      bare: (i) => c.evalsha(bareSha, [`${tag}bare:${KEYS[i % N]}`], bareArgs),
      bare0: (i) => c.evalsha(bareSha, [`${tag}bare:${KEYS[i % N]}`], []),
      bare7: (i) => c.evalsha(bareSha, [`${tag}bare:${KEYS[i % N]}`], bare7Args),
      script: (i) => c.evalsha(seen.sha1, [`${tag}script:${KEYS[i % N]}`], seen.args),
      counter: (i) => store.consume(KEYS[i % N], counter).then(count),
      rlf: (i) => rlf.consume(KEYS[i % N]).then(() => answers.allowed++, refusedRlf),
    };
    const contenders = Object.fromEntries(Object.entries(all).filter(([name]) => only === undefined || only.includes(name)));
    if (variant === 'refused') {
      for (const [name, op] of Object.entries(contenders)) if (!name.startsWith('bare')) await fill(op, L.uses);
    }
    for (const inflight of inflights) {
      for (const op of Object.values(contenders)) await throughput(op, inflight, quick ? 20 : 100);
      if (c.drainMs > 0) await sleep(c.drainMs);
      const samples = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
      const cpu = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
      const server = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
      for (let r = 0; r < ROUNDS; r++) {
        for (const [name, op] of Object.entries(contenders)) {
          const before = await serverStats(c.info);
          samples[name].push(await throughput(op, inflight, RUN_MS, cpu[name], c.drainMs));
          const after = await serverStats(c.info);
          server[name].push((after.usec - before.usec) / Math.max(1, after.calls - before.calls));
        }
      }
      const ratio = (a, b) => (samples[a] && samples[b] ? median(samples[a].map((x, i) => x / samples[b][i])) : NaN);
      results.push({
        client: c.name,
        variant,
        inflight,
        m: Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, median(xs)])),
        ratios: [ratio('gcra', 'bare'), ratio('gcra', 'bare0'), ratio('gcra', 'bare7'), ratio('gcra', 'script'), ratio('gcra', 'rlf'), ratio('counter', 'rlf')],
        cpu: Object.fromEntries(Object.entries(cpu).map(([k, xs]) => [k, median(xs)])),
        server: Object.fromEntries(Object.entries(server).map(([k, xs]) => [k, median(xs)])),
      });
    }
  }
  await c.close();
}

const names = ['gcra', 'bare', 'bare0', 'bare7', 'script', 'counter', 'rlf'];
const fmt = (x) => (x === undefined ? '-' : Math.round(x).toLocaleString('en-US')).padStart(8);
console.log(`GCRA / counter on RedisStore: ${N} keys round-robin on 127.0.0.1:${REDIS_PORT}, median of ${ROUNDS} interleaved rounds (calls/s); node-redis command timeout ${NODE_REDIS_TIMEOUT} ms (its timers waited out and counted to their round); load average at the end ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.log(`client      variant in flight ${names.map((n) => n.padStart(8)).join(' ')} | gcra/bare gcra/bare0 gcra/bare7 gcra/script gcra/rlf counter/rlf`);
for (const r of results) {
  const x = (v) => `${v.toFixed(2)}x`.padStart(10);
  console.log(`${r.client.padEnd(11)} ${r.variant.padEnd(7)} ${String(r.inflight).padStart(9)} ${names.map((n) => fmt(r.m[n])).join(' ')} |${r.ratios.map(x).join('')}`);
}
console.log("\nCost per call, µs (median): this process's CPU / the server's time in scripts per script run");
for (const r of results) {
  console.log(`${r.client.padEnd(11)} ${r.variant.padEnd(7)} ${String(r.inflight).padStart(9)} ${names.map((n) => (r.cpu[n] === undefined ? '-' : `${r.cpu[n].toFixed(1)}/${r.server[n].toFixed(1)}`).padStart(11)).join(' ')}`);
}
console.log(`(answers: ${answers.allowed} allowed, ${answers.refused} refused)`);
