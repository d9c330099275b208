// Benchmark: ratewindow's RedisStore against the same client's bare EVALSHA of a trivial script, and
// against rate-limiter-flexible's RateLimiterRedis (and RateLimiterUnion for batches).
//
// Workload (the peers' harness): 10,000 keys taken round-robin on the Redis at 127.0.0.1:$REDIS_PORT (6379),
// node-redis 6 and ioredis 6, 1 and 64 calls in flight, two variants:
//   - refused: 5 uses per 60 s, every contender's keys filled first (5 calls each), so the timed calls
//     are all refusals (abuse traffic). 60 s rather than the peers' 10 s so that the fill outlives the
//     timed rounds of both in-flight settings (a refusal costs the same either way);
//   - allowed: a limit the keys never reach (10^9 per 10 s), every timed call allowed and recorded.
// A refusal is an answer (rate-limiter-flexible rejects; the rejection is caught and counted).
// Contenders run interleaved (a, b, c, a, b, c ...), 5 rounds; each ratio is the median of the
// per-round ratios, so drift of the machine affects all alike.
//   - ours:    RedisStore.consume (EVALSHA of the sliding-log script: trim, count, record, expire)
//   - bare:    client.evalSha of `return 1` with the same key and argument count (the floor: a client
//              round trip of EVALSHA); target: ours >= 0.9x of it
//   - script:  client.evalSha of ratewindow's own sliding-log script, keys and args written by hand (what
//              the store's layer costs over the script it runs)
//   - rlf:     RateLimiterRedis.consume (a fixed window, one INCR + PEXPIRE script)
//   - fixed:   RedisStore.attempt(key, uses, windowMs), ratewindow's fixed window (fixed.lua: GET, PTTL,
//              and INCR when below the limit): rlf's verdict like for like, one point a call, except
//              that a refusal is not counted (rlf counts it, so a flood keeps its key over the limit)
//   - slog:    a plain exact sliding-log script (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE; the server's
//              TIME; a counter as the member), keys and args written by hand: what a user would write
//   - batch3:  RedisStore.consumeMany of 3 entries (3 keys, all or nothing); target <= 1.15x the time of one
//   - union3:  RateLimiterUnion of three RateLimiterRedis (three scripts, and points burnt on the ones
//              that passed when another refuses)
//
//   node bench/node/redis.mjs               full run (~3 min)
//   BENCH_QUICK=1 node bench/node/redis.mjs a smoke run
//   BENCH_VARIANTS=refused … / BENCH_CLIENTS=ioredis …   a part of it
//   REDIS_PORT=6430 …   a private redis-server (default: the shared 6379);  BENCH_ROUNDS=9 …   more rounds
// The last line is ratewindow's own CPU per consume with a client that answers at once (no I/O).
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
const ROUNDS = quick ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379);
const RUN_MS = quick ? 40 : 250;
const N = quick ? 200 : 10_000;
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const VARIANTS = {
  refused: { uses: 5, windowMs: 60_000 },
  allowed: { uses: 1_000_000_000, windowMs: 10_000 },
};
const variants = (process.env.BENCH_VARIANTS ?? (quick ? 'refused' : 'refused,allowed')).split(',');
const clientNames = (process.env.BENCH_CLIENTS ?? 'node-redis,ioredis').split(',');
const run = `bench:${Date.now().toString(36)}:`;
const TRIVIAL = 'return 1';
/** The plain exact sliding log a user would write: trim, count, record if below the limit. */
const SLOG = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, n + 1}
end
return {0, n}`;
let member = 0;

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

async function clients() {
  const nr = createClient({ socket: { host: '127.0.0.1', port: REDIS_PORT } });
  await nr.connect();
  const io = new IORedis({ host: '127.0.0.1', port: REDIS_PORT });
  return [
    {
      name: 'node-redis',
      client: nr,
      rlfOptions: { storeClient: nr, useRedisPackage: true },
      // The shapes each client handles fastest (RedisStore's docs), for every contender alike:
      // node-redis' sendCommand skips evalSha's argument parser (~10 % of its CPU a call).
      run: (s, keys, args) => nr.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]),
      evalsha: (sha, keys, args) => nr.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
      load: (s) => nr.scriptLoad(s),
      info: () => nr.info('commandstats'),
      close: () => nr.destroy(),
    },
    {
      name: 'ioredis',
      client: io,
      rlfOptions: { storeClient: io },
      // ioredis flattens array arguments itself: no spread.
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

/** Runs `op` over every key `uses` times (256 at once): the refusal variant's fill. */
async function fill(op, uses) {
  const batch = 256;
  for (let i = 0; i < N * uses; i += batch) await Promise.all(Array.from({ length: Math.min(batch, N * uses - i) }, (_, j) => op(i + j)));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// The host side alone (measured first, before any client ran): one RedisStore.consume whose client answers at once (a resolved promise of a
// refusal's 9 numbers), so the line is the JS layer plus the two crossings into the addon.
let hostLine;
{
  const now = Date.now();
  const reply = [0, 1000, now + 1000, 0, now, 0, 0, 1000, 5000];
  const answer = () => Promise.resolve(reply);
  const store = RedisStore.using(answer, { evalsha: answer, prefix: `${run}host:` });
  const limit = VARIANTS.refused;
  // In a function: a loop at a module's top level is not optimised.
  const round = async (ms) => {
    let i = 0;
    const end = performance.now() + ms;
    const cpu0 = process.cpuUsage();
    while (performance.now() < end) for (let j = 0; j < 64; j++) await store.consume(KEYS[i++ % N], limit);
    const cpu = process.cpuUsage(cpu0);
    return (cpu.user + cpu.system) / i;
  };
  await round(300); // warm-up (the optimising compiler needs more than a smoke round)
  const perCall = [];
  for (let r = 0; r < (quick ? 1 : 5); r++) perCall.push(await round(quick ? 50 : 300));
  hostLine = (`ratewindow's own cost per consume without I/O (JS layer and crossings): ${median(perCall).toFixed(2)} µs CPU`);
}

const results = [];
for (const c of (await clients()).filter((c) => clientNames.includes(c.name))) {
  const sha = await c.load(TRIVIAL);
  const slogSha = await c.load(SLOG);
  for (const variant of variants) {
    const LIMIT = VARIANTS[variant];
    const tag = `${run}${c.name}:${variant}:`;
    const store = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: tag });
    await c.load(store.scripts.sliding.source);
    const bareArgs = ['5:10000', 'x']; // the arguments of a one-entry consume (the limit, the id)
    // The store's own command for one consume, as it sends it (two calls: the piece that differs is
    // the call's id), so `script` sends exactly that with a fresh id, whatever the script's layout.
    const seen = [];
    const spy = RedisStore.using(c.run, { evalsha: (sha1, keys, args) => (seen.push(args), c.evalsha(sha1, keys, args)), prefix: `${tag}spy:` });
    await spy.consume('a', LIMIT);
    await spy.consume('a', LIMIT);
    const idAt = seen[0].findIndex((a, i) => a !== seen[1][i]);
    const scriptArgs = () => {
      const args = [...seen[0]];
      args[idAt] = `m${member++}`;
      return args;
    };
    const slogArgs = [String(LIMIT.windowMs), String(LIMIT.uses)];
    const opts = (p) => ({ ...c.rlfOptions, points: LIMIT.uses, duration: LIMIT.windowMs / 1000, keyPrefix: `${tag}${p}` });
    const rlf = new RateLimiterRedis(opts('rlf'));
    const union = new RateLimiterUnion(new RateLimiterRedis(opts('u1')), new RateLimiterRedis(opts('u2')), new RateLimiterRedis(opts('u3')));
    const contenders = {
      ours: (i) => store.consume(KEYS[i % N], LIMIT).then(count),
      bare: (i) => c.evalsha(sha, [`${tag}bare:${KEYS[i % N]}`], bareArgs),
      // The same sliding-log script sent by hand (keys and args written out, a fresh id per call): what
      // RedisStore costs over the script it runs.
      script: (i) => c.evalsha(store.scripts.sliding.sha1, [`${tag}script:log:${KEYS[i % N]}`], scriptArgs()),
      slog: (i) => c.evalsha(slogSha, [`${tag}slog:${KEYS[i % N]}`], [...slogArgs, `m${member++}`]),
      rlf: (i) => rlf.consume(KEYS[i % N]).then(() => answers.allowed++, refusedRlf),
      fixed: (i) => store.attempt(KEYS[i % N], LIMIT.uses, LIMIT.windowMs).then(count),
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
    if (variant === 'refused') {
      for (const [name, op] of Object.entries(contenders)) if (name !== 'bare') await fill(op, LIMIT.uses);
    }
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
      const ratio = (a, b) => median(samples[a].map((x, i) => x / samples[b][i]));
      const ratios = { bare: ratio('ours', 'bare'), script: ratio('ours', 'script'), slog: ratio('ours', 'slog'), rlf: ratio('ours', 'rlf'), fixed: ratio('fixed', 'rlf'), batch: ratio('ours', 'batch3'), union: ratio('batch3', 'union3') };
      const cpuM = Object.fromEntries(Object.entries(cpu).map(([k, xs]) => [k, median(xs)]));
      const serverM = Object.fromEntries(Object.entries(server).map(([k, xs]) => [k, median(xs)]));
      results.push({ client: c.name, variant, inflight, ...m, ratios, cpu: cpuM, server: serverM });
    }
  }
  await c.close();
}

const fmt = (x) => Math.round(x).toLocaleString('en-US').padStart(8);
const { loadavg } = await import('node:os');
console.log(`RedisStore benchmark: ${N} keys round-robin on 127.0.0.1:${REDIS_PORT}, median of ${ROUNDS} interleaved rounds (calls/s; ratios: medians of per-round ratios); load average at the end ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.log('client      variant in flight     ours     bare   script     slog      rlf    fixed   batch3   union3 | ours/bare ours/script ours/slog ours/rlf fixed/rlf 3-batch time/1 batch3/union3');
for (const r of results) {
  const x = (v) => `${v.toFixed(2)}x`.padStart(9);
  console.log(
    `${r.client.padEnd(11)} ${r.variant.padEnd(7)} ${String(r.inflight).padStart(9)} ${fmt(r.ours)} ${fmt(r.bare)} ${fmt(r.script)} ${fmt(r.slog)} ${fmt(r.rlf)} ${fmt(r.fixed)} ${fmt(r.batch3)} ${fmt(r.union3)} |` +
      `${x(r.ratios.bare)}${x(r.ratios.script)}${x(r.ratios.slog)}${x(r.ratios.rlf)}${x(r.ratios.fixed)}${x(r.ratios.batch)}${x(r.ratios.union)}`,
  );
}
console.log("\nCost per call, µs (median): this process's CPU (client + ratewindow) / the server's time in scripts per script run");
console.log('client      variant in flight        ours        bare      script        slog         rlf       fixed      batch3      union3');
const pair = (r, k) => `${r.cpu[k].toFixed(1)}/${r.server[k].toFixed(1)}`.padStart(11);
for (const r of results) {
  console.log(`${r.client.padEnd(11)} ${r.variant.padEnd(7)} ${String(r.inflight).padStart(9)} ${['ours', 'bare', 'script', 'slog', 'rlf', 'fixed', 'batch3', 'union3'].map((k) => pair(r, k)).join(' ')}`);
}
console.log(`(answers: ${answers.allowed} allowed, ${answers.refused} refused)`);

console.log(hostLine);
