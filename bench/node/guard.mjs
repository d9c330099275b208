// Benchmark: the failure guard (guard(store, options), bindings-node/ts/guard.ts) on the shared Redis
// (127.0.0.1:6379, or REDIS_PORT), node-redis 6 and ioredis 6.
//
// 1. happy path: what the guard costs when the store answers in time. 10,000 keys round-robin, a limit
//    never reached (every call allowed and recorded), 64 calls in flight (and 1, for reference):
//      - store:     RedisStore.consume
//      - guarded:   guard(RedisStore).consume  (the store's single consume asked for its release,
//                   which a late answer and a failed call need: no batch of one entry)
//      - many1:     RedisStore.consumeMany of one entry (what guarded ran underneath before)
//      - gmany1:    guard(RedisStore).consumeMany of one entry
//    target: guarded >= 0.97x store (the guard costs at most 3 %).
// 2. refused (the peers' abuse workload): 10,000 keys, 5 uses per window, every key filled first
//    (6 calls each: the last is its first refusal, which the block cache then remembers), then timed
//    refusals, 64 in flight. The window is 60 s rather than the peers' 10 s (as in redis.mjs) so that
//    the fill of three contenders (180,000 calls) outlives the timed rounds on a loaded machine; a
//    refusal costs the same either way:
//      - cached:    guard(RedisStore, { blockCache: true }).consume: refused from the local cache
//      - store:     RedisStore.consume (a round trip per refusal)
//      - rlf:       rate-limiter-flexible RateLimiterRedis.consume on the same client (rejections
//                   caught and counted)
//    target: cached >= 20x rlf. The fill and the timed rounds fit in the window (checked: every timed
//    call must be a refusal).
// 3. no I/O: the guard's own CPU per call and promises per call, with a client that answers at once.
// Contenders run interleaved (a, b, c, a, b, c …); each ratio is the median of the per-round ratios.
// BENCH_PKG=<dir> benches the package built in another checkout (default: this one's bindings-node).
//
//   node bench/node/guard.mjs                full run (~1 min)
//   BENCH_QUICK=1 node bench/node/guard.mjs  a smoke run
//   BENCH_CLIENTS=ioredis …                  one client
//   REDIS_PORT=6450 …                        a private redis-server (default: the shared 6379)
//   BENCH_ROUNDS=9 BENCH_RUN_MS=1000 …       more / longer rounds (default 7 of 250 ms: +-10 % a round
//                                            at 64 in flight; 1 s rounds are steadier)
//   BENCH_PARTS=happy,noio …                 some of the parts (happy, refused, noio; default all)
//   BENCH_INFLIGHT=64 …                      the happy path at these calls in flight (default 64,1)
import { createHook } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = process.env.BENCH_PKG ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore, guard } = require('./dist/index.js');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const IORedis = require('ioredis');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : Number(process.env.BENCH_ROUNDS ?? 7);
const RUN_MS = quick ? 40 : Number(process.env.BENCH_RUN_MS ?? 250);
const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379);
const parts = (process.env.BENCH_PARTS ?? 'happy,refused,noio').split(',');
const N = quick ? 200 : 10_000;
const KEYS = Array.from({ length: N }, (_, i) => `user:${i}`);
const clientNames = (process.env.BENCH_CLIENTS ?? 'node-redis,ioredis').split(',');
const run = `benchguard:${Date.now().toString(36)}:`;

/** The redis-server's CPU time (s) from /proc, when it runs on this host (REDIS_PID, or its INFO's process_id). */
let redisPid;
function serverCpu() {
  if (redisPid === undefined) return undefined;
  try {
    const f = readFileSync(`/proc/${redisPid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, in clock ticks of 10 ms
  } catch {
    return undefined;
  }
}

/**
 * Runs `op(i)` with `inflight` calls in flight for `ms`; returns completed calls per second, and pushes
 * this process's CPU time per call (µs) onto `cpu` (steadier than throughput on a loaded machine).
 */
async function throughput(op, inflight, ms = RUN_MS, cpu = null, server = null) {
  let next = 0;
  const server0 = serverCpu();
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
  const used = process.cpuUsage(cpu0);
  if (cpu) cpu.push((used.user + used.system) / done);
  if (server && server0 !== undefined) server.push(((serverCpu() - server0) * 1e6) / done);
  return (done * 1000) / (performance.now() - start);
}

async function clients() {
  const nr = createClient({ socket: { host: '127.0.0.1', port: REDIS_PORT } });
  await nr.connect();
  redisPid = process.env.REDIS_PID ?? /process_id:(\d+)/.exec(await nr.sendCommand(['INFO', 'server']))?.[1];
  const io = new IORedis({ host: '127.0.0.1', port: REDIS_PORT });
  return [
    {
      name: 'node-redis',
      rlfOptions: { storeClient: nr, useRedisPackage: true },
      run: (s, keys, args) => nr.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]),
      evalsha: (sha, keys, args) => nr.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
      del: async (pattern) => {
        for await (const keys of nr.scanIterator({ MATCH: pattern, COUNT: 1000 })) if (keys.length) await nr.del(keys);
      },
      close: () => nr.destroy(),
    },
    {
      name: 'ioredis',
      rlfOptions: { storeClient: io },
      run: (s, keys, args) => io.eval(s, keys.length, keys, args),
      evalsha: (sha, keys, args) => io.evalsha(sha, keys.length, keys, args),
      del: async (pattern) => {
        let cursor = '0';
        do {
          const [next, keys] = await io.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
          cursor = next;
          if (keys.length) await io.del(...keys);
        } while (cursor !== '0');
      },
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

/** Runs `op` over every key `uses` times (256 at once). */
async function fill(op, uses) {
  const batch = 256;
  for (let i = 0; i < N * uses; i += batch) await Promise.all(Array.from({ length: Math.min(batch, N * uses - i) }, (_, j) => op(i + j)));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Interleaved rounds of `contenders` at `inflight`: medians and per-round ratio medians. */
async function race(contenders, inflight) {
  for (const op of Object.values(contenders)) await throughput(op, inflight, quick ? 20 : 100); // warm up
  const samples = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
  const cpu = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
  const srv = Object.fromEntries(Object.keys(contenders).map((k) => [k, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, op] of Object.entries(contenders)) samples[name].push(await throughput(op, inflight, RUN_MS, cpu[name], srv[name]));
  }
  const server = Object.fromEntries(Object.entries(srv).map(([k, xs]) => [k, xs.length ? median(xs) : NaN]));
  const m = Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, median(xs)]));
  const ratio = (a, b) => median(samples[a].map((x, i) => x / samples[b][i]));
  const us = Object.fromEntries(Object.entries(cpu).map(([k, xs]) => [k, median(xs)]));
  const rounds = (a, b) => samples[a].map((x, i) => (x / samples[b][i]).toFixed(2)).join(' ');
  return { m, ratio, us, rounds, server };
}

const fmt = (x) => Math.round(x).toLocaleString('en-US').padStart(10);
const x = (v) => `${v.toFixed(3)}x`;
console.log(`guard benchmark: ${N} keys round-robin, median of ${ROUNDS} interleaved rounds of ${RUN_MS} ms; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);

for (const c of (await clients()).filter((c) => clientNames.includes(c.name))) {
  // 1. the happy path
  const ALLOWED = { uses: 1_000_000_000, windowMs: 10_000 };
  const tag = `${run}${c.name}:`;
  const store = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: `${tag}happy:` });
  const guarded = guard(store, { timeoutMs: 5000 });
  const happy = {
    store: (i) => store.consume(KEYS[i % N], ALLOWED).then(count),
    guarded: (i) => guarded.consume(KEYS[i % N], ALLOWED).then(count),
    many1: (i) => store.consumeMany([{ key: KEYS[i % N], limit: ALLOWED }]).then(count),
    gmany1: (i) => guarded.consumeMany([{ key: KEYS[i % N], limit: ALLOWED }]).then(count),
  };
  for (const inflight of parts.includes('happy') ? (process.env.BENCH_INFLIGHT ?? '64,1').split(',').map(Number) : []) {
    const { m, ratio, us, rounds, server } = await race(happy, inflight);
    console.log(
      `${c.name.padEnd(10)} happy path, ${String(inflight).padStart(2)} in flight: store ${fmt(m.store)}  guarded ${fmt(m.guarded)}  many1 ${fmt(m.many1)}  gmany1 ${fmt(m.gmany1)} calls/s | ` +
        `guarded/store ${x(ratio('guarded', 'store'))} (target >= 0.97)  gmany1/many1 ${x(ratio('gmany1', 'many1'))}  guarded/many1 ${x(ratio('guarded', 'many1'))}`,
    );
    console.log(
      `${''.padEnd(10)}   this process's CPU per call: store ${us.store.toFixed(1)} µs  guarded ${us.guarded.toFixed(1)}  many1 ${us.many1.toFixed(1)}  gmany1 ${us.gmany1.toFixed(1)} ` +
        `(the guard's own: ${(us.gmany1 - us.many1).toFixed(1)} µs; consume through consumeMany: ${(us.many1 - us.store).toFixed(1)} µs)`,
    );
    if (!Number.isNaN(server.store)) {
      console.log(
        `${''.padEnd(10)}   redis-server CPU per call (pid ${redisPid}): store ${server.store.toFixed(1)} µs  guarded ${server.guarded.toFixed(1)}  many1 ${server.many1.toFixed(1)}  gmany1 ${server.gmany1.toFixed(1)}`,
      );
    }
    console.log(`${''.padEnd(10)}   guarded/store by round: ${rounds('guarded', 'store')}`);
  }
  const gs = guarded.stats();
  if (gs.timeouts + gs.storeErrors > 0) console.log(`  (the guard saw ${gs.timeouts} timeouts and ${gs.storeErrors} store errors: the machine is overloaded)`);

  // 2. refused traffic with the block cache
  if (!parts.includes('refused')) {
    await guarded.close();
    await c.del(`${tag}*`);
    await c.close();
    continue;
  }
  const LIMIT = { uses: 5, windowMs: 60_000 };
  const refusedStore = RedisStore.using(c.run, { evalsha: c.evalsha, prefix: `${tag}refused:` });
  const cached = guard(RedisStore.using(c.run, { evalsha: c.evalsha, prefix: `${tag}cached:` }), { timeoutMs: 5000, blockCache: true });
  const rlf = new RateLimiterRedis({ ...c.rlfOptions, points: LIMIT.uses, duration: LIMIT.windowMs / 1000, keyPrefix: `${tag}rlf` });
  const refused = {
    cached: (i) => cached.consume(KEYS[i % N], LIMIT).then(count),
    store: (i) => refusedStore.consume(KEYS[i % N], LIMIT).then(count),
    rlf: (i) => rlf.consume(KEYS[i % N]).then(() => answers.allowed++, refusedRlf),
  };
  const t0 = performance.now();
  // uses + 1 calls a key: the last is each key's first refusal (which the block cache then remembers).
  for (const op of Object.values(refused)) await fill(op, LIMIT.uses + 1);
  const filled = performance.now() - t0;
  answers.allowed = 0;
  answers.refused = 0;
  const { m, ratio } = await race(refused, 64);
  const elapsed = performance.now() - t0;
  console.log(
    `${c.name.padEnd(10)} refused (5 per 60 s, filled in ${(filled / 1000).toFixed(1)} s), 64 in flight: cached ${fmt(m.cached)}  store ${fmt(m.store)}  rlf ${fmt(m.rlf)} calls/s | ` +
      `cached/rlf ${x(ratio('cached', 'rlf'))} (target >= 20)  cached/store ${x(ratio('cached', 'store'))}  store/rlf ${x(ratio('store', 'rlf'))}`,
  );
  const cs = cached.stats();
  console.log(`  timed calls: ${answers.refused} refused, ${answers.allowed} allowed (must be 0: the window outlived the run, ${(elapsed / 1000).toFixed(1)} s); cache hits ${cs.cacheHits}`);
  await guarded.close();
  await cached.close();
  await c.del(`${tag}*`);
  await c.close();
}
// 3. The guard's own cost, load-independent: a client that answers at once with a real allowed reply (no
//    I/O): this process's CPU per call and the promises made per call (each one a microtask hop or a
//    reaction), store.consume against guard(store).consume, 64 and 1 in flight, interleaved.
if (parts.includes('noio')) {
  const reply = [1, 999_999_999, 9_999, 10_000, Date.now()]; // the one-entry allowed reply of sliding.lua
  const answer = () => Promise.resolve(reply);
  const store = RedisStore.using(answer, { evalsha: answer, prefix: `${run}noio:` });
  const guarded = guard(store, { timeoutMs: 5000 });
  const ALLOWED = { uses: 1_000_000_000, windowMs: 10_000 };
  const ops = { store: (k) => store.consume(k, ALLOWED), guarded: (k) => guarded.consume(k, ALLOWED) };
  const calls = quick ? 2_000 : 20_000;
  const pass = async (op, inflight) => {
    let i = 0;
    const worker = async () => {
      while (i < calls) await op(KEYS[i++ % N]);
    };
    await Promise.all(Array.from({ length: inflight }, worker));
  };
  let promises = 0;
  const hook = createHook({
    init(_id, type) {
      if (type === 'PROMISE') promises++;
    },
  });
  for (const inflight of [64, 1]) {
    for (const op of Object.values(ops)) await pass(op, inflight); // warm up
    const us = { store: [], guarded: [] };
    for (let r = 0; r < ROUNDS; r++) {
      for (const name of r % 2 === 0 ? ['store', 'guarded'] : ['guarded', 'store']) {
        const t = process.cpuUsage();
        await pass(ops[name], inflight);
        const d = process.cpuUsage(t);
        us[name].push((d.user + d.system) / calls);
      }
    }
    const made = {};
    hook.enable();
    for (const [name, op] of Object.entries(ops)) {
      promises = 0;
      await pass(op, inflight);
      made[name] = promises / calls;
    }
    hook.disable();
    console.log(
      `no I/O     ${String(inflight).padStart(2)} in flight: CPU per call store ${median(us.store).toFixed(2)} µs  guarded ${median(us.guarded).toFixed(2)} µs (the guard's own ${(median(us.guarded) - median(us.store)).toFixed(2)} µs) | ` +
        `promises per call store ${made.store.toFixed(2)}  guarded ${made.guarded.toFixed(2)}`,
    );
  }
  await guarded.close();
}
console.log(`load average after: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
