// Benchmark: ratewindow's Lock on Redis against the bare pattern on the same client — `SET key owner NX
// PX ttl` to acquire and a compare-and-delete script (EVALSHA) to release — on node-redis and ioredis.
//
// One operation is a pair: acquire a lock on a key of its own (1,000 keys round-robin, a fresh owner
// token each time), then release it. Contenders run interleaved in one process, 1 and 64 pairs in
// flight; each ratio is the median of the per-round ratios of ours over bare (throughput; target >=
// 0.9x). A round gives each contender RUN_MS in slices of SLICE_MS (default 100 ms), alternating
// ours, bare, bare, ours, ...: on a machine whose other load moves by the second, both contenders see
// the same load within a round (whole 1 s turns each, the old default, swung the per-round ratio
// 0.53-1.71 at load 0.3-2, and their 7-round medians moved 0.80-1.12 between runs).
//   - ours:  store.lock(key, 10).acquire() then .release()   (the store has `command`: the acquire is a
//            plain SET NX PX, the release an EVALSHA of the lock script)
//   - bare:  SET key owner NX PX 10000, then EVALSHA of `if GET == owner then DEL` (the seed's shape)
//
//   node bench/node/lock.mjs               full run (~5 min: node-redis' rounds wait for their timers)
//   BENCH_QUICK=1 node bench/node/lock.mjs a smoke run;  BENCH_PARTS=noio …  only the client CPU with no I/O
//   REDIS_PORT=6440 …  a private redis-server (default: the shared 6379);  BENCH_ROUNDS=9 …  more rounds
//   BENCH_RUN_MS=2000 …  longer rounds (default 1000);  BENCH_PKG=<dir> …  the package built in another checkout
//   BENCH_SLICE_MS=1000 …  one turn a contender a round (the method before slices; default 100)
//   BENCH_NODE_REDIS_TIMEOUT=0 …  node-redis without its per-command timeout (default: node-redis 6's
//            own default, 5000 ms, set explicitly so both contenders share it)
//
// Fairness (both contenders share one client with the same options, on both clients):
//   - node-redis 6 arms `AbortSignal.timeout(commandOptions.timeout)` for every command (its default
//     5,000 ms), and that timer fires 5 s later whether or not the reply came, making a `DOMException`
//     and keeping the signal alive until then. So after every node-redis round the bench waits the
//     timeout (+250 ms) until the round's own timers have all fired, and splits the CPU of that wait
//     between the contenders by the pairs each made (two commands, two timers a pair on both sides); no
//     timer of a round fires in the next. Within a round the slices alternate, so a slice meets the
//     timers of earlier slices of both contenders alike. The throughput is the slices' alone.
//   - A warm-up round of each contender (not recorded), so the JIT and the scripts are warm for both.
//   - A full GC (not counted) before every round, so no contender starts with the other's garbage.
// Beside each ratio: this process's and the redis-server's CPU per pair (the server's from /proc when it
// runs on this host), which a loaded machine moves far less than the throughput, and the server's own
// time running the pair's commands (`INFO commandstats` usec, reset before each round: a private
// server only, since CONFIG RESETSTAT clears its counters).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = process.env.BENCH_PKG ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore } = require('./dist/index.js');
const { createClient } = require('redis');
const IORedis = require('ioredis');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : Number(process.env.BENCH_ROUNDS ?? 7);
const RUN_MS = quick ? 100 : Number(process.env.BENCH_RUN_MS ?? 1000);
const SLICE_MS = Math.min(RUN_MS, Number(process.env.BENCH_SLICE_MS ?? 100));
const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379);
// node-redis 6's per-command timeout (its default, 5000 ms, unless BENCH_NODE_REDIS_TIMEOUT says).
const NODE_REDIS_TIMEOUT = Number(process.env.BENCH_NODE_REDIS_TIMEOUT ?? 5000);
// A full collection between rounds (not counted to either contender).
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc');
// The locks' TTL (s): 10, or 600 under callgrind (where a pair at 64 in flight can take seconds).
const TTL = process.env.BENCH_CALLGRIND ? 600 : 10;
const TTL_MS = String(TTL * 1000);
const KEYS = Array.from({ length: 1000 }, (_, i) => `${process.env.BENCH_KEYS ?? 'benchlock'}:${i}`);
const CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

async function clients() {
  const nodeRedis = createClient({ url: `redis://127.0.0.1:${REDIS_PORT}`, commandOptions: { timeout: NODE_REDIS_TIMEOUT } });
  await nodeRedis.connect();
  redisPid ??= /process_id:(\d+)/.exec(await nodeRedis.sendCommand(['INFO', 'server']))?.[1];
  const io = new IORedis({ host: '127.0.0.1', port: REDIS_PORT });
  const cadNode = await nodeRedis.scriptLoad(CAD);
  await io.script('LOAD', CAD);
  admin = createClient({ url: `redis://127.0.0.1:${REDIS_PORT}` });
  await admin.connect();
  const nr = {
    name: 'node-redis',
    // Every command's timer fires this long after it was sent: a round waits for its own.
    drainMs: NODE_REDIS_TIMEOUT > 0 ? NODE_REDIS_TIMEOUT + 250 : 0,
    close: () => nodeRedis.quit(),
    makeStore: () =>
      RedisStore.using((s, keys, args) => nodeRedis.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), {
        evalsha: (sha, keys, args) => nodeRedis.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
        command: (args) => nodeRedis.sendCommand(args),
        prefix: 'rwbench:',
      }),
    set: (key, owner) => nodeRedis.sendCommand(['SET', key, owner, 'NX', 'PX', TTL_MS]),
    cad: (key, owner) => nodeRedis.sendCommand(['EVALSHA', cadNode, '1', key, owner]),
  };
  const ior = {
    name: 'ioredis',
    drainMs: 0,
    close: () => io.quit(),
    makeStore: () =>
      RedisStore.using((s, keys, args) => io.eval(s, keys.length, keys, args), {
        evalsha: (sha, keys, args) => io.evalsha(sha, keys.length, keys, args),
        command: (args) => io.call(args[0], args.slice(1)),
        prefix: 'rwbench:',
      }),
    set: (key, owner) => io.set(key, owner, 'PX', Number(TTL_MS), 'NX'),
    cad: (key, owner) => io.evalsha(cadNode, 1, key, owner),
  };
  for (const c of [nr, ior]) c.store = c.makeStore();
  return [nr, ior];
}

function contenders(c) {
  return {
    ours: async (key) => {
      const lock = c.store.lock(key, TTL);
      if (!(await lock.acquire())) throw new Error('ours: not acquired');
      if (!(await lock.release())) throw new Error('ours: not released');
    },
    bare: async (key) => {
      const owner = randomUUID();
      if ((await c.set(`rwbare:${key}`, owner)) !== 'OK') throw new Error('bare: not acquired');
      if (Number(await c.cad(`rwbare:${key}`, owner)) !== 1) throw new Error('bare: not released');
    },
  };
}

/** The redis-server's CPU time (µs) from /proc when it runs on this host (REDIS_PID, or its INFO's process_id). */
let redisPid = process.env.REDIS_PID;
/** A node-redis client for CONFIG RESETSTAT / INFO commandstats. */
let admin;

/** The server's time running commands since the last reset (µs), and the calls, by `INFO commandstats`. */
async function commandTime() {
  const info = await admin.sendCommand(['INFO', 'commandstats']);
  let usec = 0;
  for (const m of info.matchAll(/^cmdstat_(\w+):calls=(\d+),usec=(\d+)/gm)) if (m[1] !== 'info' && m[1] !== 'config') usec += Number(m[3]);
  return usec;
}
function serverCpu() {
  if (redisPid === undefined) return undefined;
  try {
    const f = readFileSync(`/proc/${redisPid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * 10_000; // utime + stime, clock ticks of 10 ms
  } catch {
    return undefined;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One round of every contender in `fns`: each runs `ms` in all, in slices of `sliceMs` alternating
 * A, B, B, A, ... (each slice `inFlight` pairs at once, waited out before the next contender's), a
 * full GC first (not counted). Pushes each contender's pairs a second (pairs over the slices' own
 * time) onto `rates`, and its CPU per pair (this process, the server) and the server's command time
 * per pair onto `cpu`; then waits `drainMs` for the round's node-redis timers, whose CPU is split by
 * the pairs each contender made.
 */
async function measureRound(fns, inFlight, ms, sliceMs, rates, cpu, drainMs = 0) {
  const names = Object.keys(fns);
  const acc = Object.fromEntries(names.map((n) => [n, { done: 0, time: 0, client: 0, server: 0, commands: 0 }]));
  gc();
  if (admin) await admin.sendCommand(['CONFIG', 'RESETSTAT']);
  let usec0 = admin ? await commandTime() : 0;
  const per = KEYS.length / inFlight;
  const slices = Math.max(1, Math.round(ms / sliceMs));
  for (let s = 0; s < slices; s++) {
    for (const name of s % 2 === 0 ? names : [...names].reverse()) {
      const fn = fns[name];
      const a = acc[name];
      let done = 0;
      const cpu0 = process.cpuUsage();
      const server0 = serverCpu();
      const start = performance.now();
      const until = start + sliceMs;
      await Promise.all(
        Array.from({ length: inFlight }, async (_, w) => {
          let i = 0;
          while (performance.now() < until) {
            await fn(KEYS[Math.floor(w * per) + (i++ % Math.max(1, Math.floor(per)))]);
            done++;
          }
        }),
      );
      a.time += performance.now() - start;
      const used = process.cpuUsage(cpu0);
      a.client += used.user + used.system;
      if (server0 !== undefined) a.server += serverCpu() - server0;
      a.done += done;
      if (admin) {
        const usec = await commandTime();
        a.commands += usec - usec0;
        usec0 = usec;
      }
    }
  }
  if (drainMs > 0) {
    const cpu0 = process.cpuUsage();
    const server0 = serverCpu();
    await sleep(drainMs);
    const used = process.cpuUsage(cpu0);
    const all = names.reduce((t, n) => t + acc[n].done, 0);
    for (const n of names) {
      acc[n].client += ((used.user + used.system) * acc[n].done) / all;
      if (server0 !== undefined) acc[n].server += ((serverCpu() - server0) * acc[n].done) / all;
    }
  }
  for (const n of names) {
    const a = acc[n];
    rates[n]?.push((a.done / a.time) * 1000);
    if (cpu) {
      cpu[n].client.push(a.client / a.done);
      if (redisPid !== undefined) cpu[n].server.push(a.server / a.done);
      if (admin) cpu[n].commands.push(a.commands / a.done);
    }
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Under callgrind (BENCH_CALLGRIND=node-redis|ioredis|noio): both contenders warmed up, then each run
// for BENCH_PAIRS pairs at BENCH_IN_FLIGHT in flight, twice, interleaved (ours, bare, calls, ...), a
// callgrind dump after each (`callgrind_control -d`, run from this process): each dump's instruction
// count is one run's, which the machine's load does not move. `bench/node/lock-instructions.sh` runs it
// and prints instructions a pair.
if (process.env.BENCH_CALLGRIND) {
  const { execFile } = await import('node:child_process');
  const dump = (label) =>
    new Promise((resolve, reject) => execFile('callgrind_control', ['-d', label, String(process.pid)], (e) => (e ? reject(e) : resolve())));
  const which = process.env.BENCH_CALLGRIND;
  const pairs = Number(process.env.BENCH_PAIRS ?? 2000);
  const inFlight = Number(process.env.BENCH_IN_FLIGHT ?? 64);
  const noio = {
    name: 'noio',
    close: () => undefined,
    makeStore: () => RedisStore.using(() => Promise.resolve(1), { evalsha: () => Promise.resolve(1), command: () => Promise.resolve('OK'), prefix: 'rwbench:' }),
    set: () => Promise.resolve('OK'),
    cad: () => Promise.resolve(1),
  };
  noio.store = noio.makeStore();
  const cs = which === 'noio' ? [noio] : await clients();
  const c = cs.find((x) => x.name === which);
  const fns = contenders(c);
  // `calls`: ours with the lock's commands not planned (each operation one engine call: the path
  // before the plan, and a store without `command`'s), for the difference.
  const unplanned = Object.defineProperty(c.makeStore(), 'prepareLock', { value: () => undefined });
  fns.calls = contenders({ ...c, store: unplanned }).ours;
  const runPairs = async (fn, n) => {
    let next = 0;
    const per = KEYS.length / inFlight;
    await Promise.all(
      Array.from({ length: inFlight }, async (_, w) => {
        let i = 0;
        while (next < n) {
          next++;
          await fn(KEYS[Math.floor(w * per) + (i++ % Math.max(1, Math.floor(per)))]);
        }
      }),
    );
  };
  const order = ['ours', 'bare', 'calls', 'ours', 'bare', 'calls'];
  for (const name of order) await runPairs(fns[name], Math.max(200, pairs / 4));
  await dump('warm');
  for (const name of order) {
    await runPairs(fns[name], pairs);
    await dump(name);
  }
  for (const x of cs) await x.close();
  await admin?.quit();
  process.exit(0);
}

const noioOnly = process.env.BENCH_PARTS === 'noio';
const cs = noioOnly ? [] : await clients();
console.log(
  `lock bench: ${ROUNDS} rounds x ${RUN_MS} ms per contender in slices of ${SLICE_MS} ms, node-redis command timeout ${NODE_REDIS_TIMEOUT} ms, load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`,
);
for (const c of cs) {
  const fns = contenders(c);
  for (const inFlight of [1, 64]) {
    await measureRound(fns, inFlight, RUN_MS, SLICE_MS, {}, undefined, c.drainMs); // warm-up, not recorded
    const rates = { ours: [], bare: [] };
    const cpu = { ours: { client: [], server: [], commands: [] }, bare: { client: [], server: [], commands: [] } };
    for (let r = 0; r < ROUNDS; r++) {
      // The first contender alternates by round too.
      await measureRound(r % 2 === 0 ? fns : { bare: fns.bare, ours: fns.ours }, inFlight, RUN_MS, SLICE_MS, rates, cpu, c.drainMs);
    }
    const ratios = rates.ours.map((o, i) => o / rates.bare[i]);
    console.log(
      `${c.name.padEnd(10)} ${String(inFlight).padStart(2)} in flight: ours ${median(rates.ours).toFixed(0)} pairs/s, bare ${median(rates.bare).toFixed(0)} pairs/s, ours/bare ${median(ratios).toFixed(2)}x (rounds ${ratios.map((x) => x.toFixed(2)).join(' ')})`,
    );
    const server = cpu.ours.server.length
      ? `; redis-server (pid ${redisPid}) ours ${median(cpu.ours.server).toFixed(1)} µs, bare ${median(cpu.bare.server).toFixed(1)} µs`
      : '';
    const drained = c.drainMs > 0 ? ` (with the ${c.drainMs} ms wait for its timers after the round)` : '';
    console.log(`${''.padEnd(10)}    CPU per pair${drained}: this process ours ${median(cpu.ours.client).toFixed(1)} µs, bare ${median(cpu.bare.client).toFixed(1)} µs${server}`);
    console.log(`${''.padEnd(10)}    commandstats per pair: ours ${median(cpu.ours.commands).toFixed(2)} µs, bare ${median(cpu.bare.commands).toFixed(2)} µs`);
  }
  await c.close();
}
await admin?.quit();
admin = undefined;
// The client side alone: each contender's CPU per pair with a client that answers at once (no I/O),
// interleaved, median of the rounds.
{
  const fake = {
    store: RedisStore.using(() => Promise.resolve(1), { evalsha: () => Promise.resolve(1), command: () => Promise.resolve('OK'), prefix: 'rwbench:' }),
    set: () => Promise.resolve('OK'),
    cad: () => Promise.resolve(1),
  };
  const fns = contenders(fake);
  const us = { ours: [], bare: [] };
  const pairs = quick ? 2_000 : 20_000;
  for (const name of ['ours', 'bare']) for (let i = 0; i < pairs; i++) await fns[name](KEYS[i % KEYS.length]); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    for (const name of r % 2 === 0 ? ['ours', 'bare'] : ['bare', 'ours']) {
      gc();
      const t = process.cpuUsage();
      for (let i = 0; i < pairs; i++) await fns[name](KEYS[i % KEYS.length]);
      const d = process.cpuUsage(t);
      us[name].push((d.user + d.system) / pairs);
    }
  }
  console.log(`client CPU per pair, no I/O: ours ${median(us.ours).toFixed(1)} us, bare ${median(us.bare).toFixed(1)} us (ours - bare ${(median(us.ours) - median(us.bare)).toFixed(1)} us)`);
}
console.log(`load after: ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
