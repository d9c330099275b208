// Benchmark: HTTP servers guarded by ratewindow's middleware against the same servers guarded by the
// libraries users have installed for it, in requests per second (autocannon, the same settings on both
// sides, one interleaved run: a, b, b, a, a, b ... with the median of the per-round ratios reported),
// and the server process's CPU time per request (steadier than req/s on a shared machine).
//
//   Express 4 + ratewindow/express (MemoryStore)       vs express-rate-limit 8 (its MemoryStore)
//   Express 4 + ratewindow/express (RedisStore, node-redis) vs express-rate-limit + rate-limit-redis (node-redis)
//   Fastify 5 + ratewindow/fastify (MemoryStore)       vs @fastify/rate-limit (its memory store)
//   Fastify 5 + ratewindow/fastify (RedisStore, ioredis) vs @fastify/rate-limit with ioredis
//   and the two Redis pairs again with ratewindow counting by a fixed window (`ratewindow-fixed`)
//
// The algorithms: ratewindow's middleware counts a sliding log (sliding.lua on Redis); the peers count a
// fixed window (INCR + PEXPIRE). The default pairs compare each as its users configure it; the fixed
// pairs like for like: the same middleware over the store's fixed window (`attempt`, fixed.lua), through
// the `fixedWindow` adapter below (the middleware has no fixed-window option of its own).
//
// The same app on each side: GET / answers `ok`; the client is the address a trusted proxy forwarded
// (X-Forwarded-For, one hop: 10,000 clients taken in turn), 1000 requests per minute each, so every
// request is counted and allowed (the usual case) and carries the rate-limit fields (ratewindow: the
// IETF pair; express-rate-limit: `standardHeaders: 'draft-8'`, the same pair; @fastify/rate-limit: its
// default x-ratelimit-* trio). Each server runs in its own process, warmed before the first round; Redis is
// the shared server on 127.0.0.1:6379, keys under a prefix of this run (they expire within a minute).
//
//   node bench/node/http.mjs               full run (5 rounds of 3 s per server, ~2.5 min)
//   BENCH_QUICK=1 node bench/node/http.mjs a smoke run (1 round of 1 s, ~15 s)
//   BENCH_ONLY=fastify                     the pairs whose title holds that word
//   BENCH_REDIS_PORT=6481                  Redis on a private server of that port (default the shared 6379)
//   BENCH_ROUNDS=9 BENCH_SECONDS=3         more rounds (default 5 of 3 s)
//   BENCH_RATE=2000                        both sides at that offered rate: compare the CPU a request
//   BENCH_FIXED=0                          without the like-for-like rows (ratewindow by a fixed window)
//   BENCH_WRK=1                            wrk as the load generator (one thread, the same 16 connections,
//                                          the same 10,000 forwarded clients from a Lua script) instead of
//                                          autocannon: a C client takes less of the two cores from the
//                                          servers than autocannon's JS does (not with BENCH_RATE)
import { execFile, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(import.meta.url);
const pkg = join(dirname(here), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));

const WINDOW_S = 60;
// BENCH_REDIS_PORT: a private redis-server (`redis-server --port P --save '' --appendonly no`) rather than
// the shared one on 6379, whose load from the test suites swings the Redis pairs.
const REDIS_PORT = Number(process.env.BENCH_REDIS_PORT ?? 6379);
const PER_CLIENT = 1000;
const CLIENTS = 10_000;

// --------------------------------------------------------------------------------------- the servers

/** Builds one server; answers its port. */
async function serve(variant, run) {
  const [framework, limiter, storeKind] = variant.split(':');
  const redisClient = async () => {
    const { createClient } = require('redis');
    const client = createClient({ socket: { host: '127.0.0.1', port: REDIS_PORT } });
    await client.connect();
    return client;
  };
  const ioredis = () => new (require('ioredis'))({ host: '127.0.0.1', port: REDIS_PORT });
  const { MemoryStore, RedisStore, Limit, RateLimiter } = require('./dist/index.js');
  const ourStore = async () => {
    if (storeKind === 'memory') return new MemoryStore();
    if (framework === 'express') {
      const client = await redisClient();
      // Each client's cheapest call shape (RedisStore's docs): node-redis' sendCommand, ioredis' arrays.
      return RedisStore.using((s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), {
        evalsha: (sha, keys, args) => client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
        prefix: `bench-http:${run}:`,
      });
    }
    const redis = ioredis();
    return RedisStore.using((s, keys, args) => redis.eval(s, keys.length, keys, args), {
      evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, keys, args),
      prefix: `bench-http:${run}:`,
    });
  };
  const ok = 'ok';
  // `ratewindow-fixed`: the same plugin and middleware, counting each request by the store's fixed
  // window (`attempt`: on Redis the fixed.lua script, PTTL + GET + INCRBY) instead of its sliding log:
  // the peers' own semantics (a window opened by a key's first request, all its uses back at its end).
  const fixedWindow = (store) => {
    const verdict = (max, got) => ({
      allowed: got.allowed,
      retryAfterMs: got.allowed ? 0 : got.resetAfterMs,
      limit: max,
      remaining: Math.max(0, max - got.count),
      refillAfterMs: got.resetAfterMs,
      resetAfterMs: got.resetAfterMs,
    });
    const consume = (key, limit) => {
      const got = store.attempt(key, limit.uses, limit.windowMs);
      return typeof got.then === 'function' ? got.then((g) => verdict(limit.uses, g)) : verdict(limit.uses, got);
    };
    return { consume, consumeMany: ([e]) => consume(e.key, e.limit) };
  };
  const guarded = async () => (limiter === 'ratewindow-fixed' ? { store: fixedWindow(await ourStore()) } : {});

  if (framework === 'express') {
    const app = require('express')();
    app.set('trust proxy', 1);
    if (limiter.startsWith('ratewindow')) {
      const { throttle } = require('./dist/http/express.js');
      const options = await guarded();
      const rl = new RateLimiter(options.store ? new MemoryStore() : await ourStore());
      rl.for('api', (req, { ip }) => Limit.perMinute(PER_CLIENT).by(ip));
      app.use(throttle('api', { limiter: rl, trustProxy: 1, ...options }));
    } else if (limiter === 'erl') {
      const { rateLimit } = require('express-rate-limit');
      let store;
      if (storeKind === 'redis') {
        const { RedisStore: ErlRedisStore } = require('rate-limit-redis');
        const client = await redisClient();
        store = new ErlRedisStore({ sendCommand: (...args) => client.sendCommand(args), prefix: `bench-http:${run}:erl:` });
      }
      app.use(rateLimit({ windowMs: WINDOW_S * 1000, limit: PER_CLIENT, standardHeaders: 'draft-8', legacyHeaders: false, ...(store ? { store } : {}) }));
    }
    app.get('/', (req, res) => res.send(ok));
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return server.address().port;
  }

  const app = require('fastify')({ trustProxy: '127.0.0.1' }); // the loopback proxy: one hop, as above
  if (limiter.startsWith('ratewindow')) {
    const { ratewindow } = require('./dist/http/fastify.js');
    const options = await guarded();
    const rl = new RateLimiter(options.store ? new MemoryStore() : await ourStore());
    rl.for('api', (req, { ip }) => Limit.perMinute(PER_CLIENT).by(ip));
    await app.register(ratewindow, { limiter: rl, global: 'api', trustProxy: 1, ...options });
  } else if (limiter === 'frl') {
    await app.register(require('@fastify/rate-limit'), {
      max: PER_CLIENT,
      timeWindow: WINDOW_S * 1000,
      ...(storeKind === 'redis' ? { redis: ioredis(), nameSpace: `bench-http:${run}:frl:` } : {}),
    });
  }
  app.get('/', async () => ok);
  await app.listen({ host: '127.0.0.1', port: 0 });
  return app.server.address().port;
}

if (process.argv[2] === '--serve') {
  const port = await serve(process.argv[3], process.argv[4]);
  // The driver asks for the server's CPU time around each load (robust where req/s is not: the
  // machine is shared).
  // 'exit' ends the server cleanly (so `node --cpu-prof` writes its profile).
  process.on('message', (m) => (m === 'exit' ? process.exit(0) : process.send?.(process.cpuUsage())));
  process.send?.({ port });
} else {
  await main();
}

// --------------------------------------------------------------------------------------- the driver

async function main() {
  const autocannon = require('autocannon');
  const quick = process.env.BENCH_QUICK === '1';
  const ROUNDS = quick ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
  const SECONDS = quick ? 1 : Number(process.env.BENCH_SECONDS ?? 3);
  const CONNECTIONS = 16;
  // BENCH_RATE=2000: both sides offered the same requests per second (autocannon's overallRate), so the
  // CPU a request compares at equal throughput (a loaded machine changes how many requests an event-loop
  // turn batches, and with it the CPU a request); req/s then only says whether each kept up.
  const RATE = Number(process.env.BENCH_RATE ?? 0);
  const run = Date.now().toString(36);

  const pairs = [
    ['Express + ratewindow vs express-rate-limit (memory)', 'express:ratewindow:memory', 'express:erl:memory'],
    ['Express + ratewindow vs express-rate-limit + rate-limit-redis (Redis, node-redis)', 'express:ratewindow:redis', 'express:erl:redis'],
    ['Fastify + ratewindow vs @fastify/rate-limit (memory)', 'fastify:ratewindow:memory', 'fastify:frl:memory'],
    ['Fastify + ratewindow vs @fastify/rate-limit (Redis, ioredis)', 'fastify:ratewindow:redis', 'fastify:frl:redis'],
    // Like for like: ratewindow counting by a fixed window too (BENCH_FIXED=0 leaves these out).
    ['Express + ratewindow fixed window vs express-rate-limit + rate-limit-redis (Redis, node-redis)', 'express:ratewindow-fixed:redis', 'express:erl:redis'],
    ['Fastify + ratewindow fixed window vs @fastify/rate-limit (Redis, ioredis)', 'fastify:ratewindow-fixed:redis', 'fastify:frl:redis'],
  ];
  if (process.env.BENCH_FIXED === '0') pairs.splice(4);

  // BENCH_ONLY=fastify (a word of the titles) runs those pairs alone.
  const only = process.env.BENCH_ONLY;
  if (only) pairs.splice(0, pairs.length, ...pairs.filter(([title]) => title.toLowerCase().includes(only.toLowerCase())));
  const children = [];
  const servers = new Map();
  const start = async (variant) => {
    const child = spawn(process.execPath, [here, '--serve', variant, run], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(child);
    const [{ port }] = await once(child, 'message');
    const url = `http://127.0.0.1:${port}/`;
    servers.set(url, child);
    return url;
  };
  /** The server's CPU time so far, in µs. */
  const cpu = async (url) => {
    const child = servers.get(url);
    child.send('cpu');
    const [{ user, system }] = await once(child, 'message');
    return user + system;
  };

  // The redis-server's CPU time so far, in µs (its pid from INFO; /proc of a server on this machine), or
  // undefined when it cannot be read. Steady where req/s is not; meaningful on a private server alone
  // (BENCH_REDIS_PORT), where nothing else runs commands.
  let redisPid;
  try {
    const info = execFileSync('redis-cli', ['-p', String(REDIS_PORT), 'info', 'server'], { encoding: 'utf8' });
    redisPid = Number(/process_id:(\d+)/.exec(info)?.[1]);
  } catch {
    redisPid = undefined;
  }
  const redisCpu = () => {
    try {
      const fields = readFileSync(`/proc/${redisPid}/stat`, 'utf8').split(')').pop().trim().split(' ');
      return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // clock ticks of 10 ms
    } catch {
      return undefined;
    }
  };

  let client = 0;
  const WRK = process.env.BENCH_WRK === '1' && !RATE;
  // wrk's Lua: the same clients as autocannon's setupRequest below, one per request in turn.
  const wrkScript = join(mkdtempSync(join(tmpdir(), 'rw-bench-http-')), 'clients.lua');
  writeFileSync(
    wrkScript,
    `local i = 0
request = function()
  i = (i + 1) % ${CLIENTS}
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = "10." .. math.floor(i / 256) % 256 .. "." .. i % 256 .. ".7" })
end
`,
  );
  // The fields of autocannon's result that the driver reads, from wrk's report.
  const wrkLoad = (url, seconds) =>
    new Promise((resolve, reject) =>
      execFile('wrk', ['-t1', `-c${CONNECTIONS}`, `-d${Math.max(1, Math.round(seconds))}s`, '--timeout', '10s', '-s', wrkScript, url], (error, out) => {
        if (error) return reject(error);
        const num = (re) => Number(re.exec(out)?.[1] ?? 0);
        const total = num(/(\d+) requests in/);
        const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
        resolve({
          requests: { total, average: num(/Requests\/sec:\s+([\d.]+)/) },
          non2xx: num(/Non-2xx or 3xx responses: (\d+)/),
          errors: errors ? Number(errors[1]) + Number(errors[2]) + Number(errors[3]) : 0,
          timeouts: errors ? Number(errors[4]) : 0,
          statusCodeStats: {},
        });
      }),
    );
  const load = (url, seconds) =>
    WRK ? wrkLoad(url, seconds) : autocannon({
      url,
      connections: CONNECTIONS,
      duration: seconds,
      ...(RATE ? { overallRate: RATE } : {}),
      requests: [
        {
          setupRequest: (req) => {
            client = (client + 1) % CLIENTS;
            req.headers = { ...req.headers, 'x-forwarded-for': `10.${(client >> 8) & 255}.${client & 255}.7` };
            return req;
          },
        },
      ],
    });

  const load0 = loadavg();
  const rows = [];
  try {
    for (const [title, ours, theirs] of pairs) {
      const urls = { [ours]: await start(ours), [theirs]: await start(theirs) };
      // Warm both (JIT, connection pools, Redis script cache), checking each answers 200 with its fields.
      for (const v of [ours, theirs]) {
        const res = await fetch(urls[v], { headers: { 'x-forwarded-for': '10.0.0.1' } });
        const fields = [...res.headers.keys()].filter((k) => /ratelimit/.test(k));
        if (res.status !== 200 || fields.length === 0) throw new Error(`${v}: status ${res.status}, fields ${fields}`);
        await load(urls[v], quick ? 0.5 : 1);
      }
      const ratios = [];
      const rps = { [ours]: [], [theirs]: [] };
      const cpus = { [ours]: [], [theirs]: [] };
      const totals = { [ours]: [], [theirs]: [] };
      const rcpus = { [ours]: [], [theirs]: [] };
      const onRedis = ours.endsWith(':redis') && redisCpu() !== undefined;
      let bad = 0;
      for (let r = 0; r < ROUNDS; r++) {
        const order = r % 2 === 0 ? [ours, theirs] : [theirs, ours];
        const got = {};
        for (const v of order) {
          const cpu0 = await cpu(urls[v]);
          const rcpu0 = onRedis ? redisCpu() : 0;
          const result = await load(urls[v], SECONDS);
          cpus[v].push((await cpu(urls[v])) - cpu0);
          if (onRedis) rcpus[v].push(redisCpu() - rcpu0);
          totals[v].push(result.requests.total);
          if (result.non2xx + result.errors + result.timeouts > 0) {
            bad += result.non2xx + result.errors + result.timeouts;
            console.error(`${v}: statuses ${JSON.stringify(result.statusCodeStats)}, ${result.errors} errors, ${result.timeouts} timeouts`);
          }
          got[v] = result.requests.average;
          rps[v].push(got[v]);
        }
        ratios.push(got[ours] / got[theirs]);
      }
      const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      // Server CPU per request, each round; the ratio other/ours (above 1: ratewindow spends less).
      const perReq = (v, r) => cpus[v][r] / totals[v][r];
      const cpuRatios = ratios.map((_, r) => perReq(theirs, r) / perReq(ours, r));
      const cpuOf = (v) => med(ratios.map((_, r) => perReq(v, r)));
      const redisOf = (v) => (onRedis ? med(ratios.map((_, r) => rcpus[v][r] / totals[v][r])) : undefined);
      rows.push({ title, ours: med(rps[ours]), theirs: med(rps[theirs]), ratio: med(ratios), cpuOurs: cpuOf(ours), cpuTheirs: cpuOf(theirs), cpuRatio: med(cpuRatios), redisOurs: redisOf(ours), redisTheirs: redisOf(theirs), bad });
      console.log(
        `${title}: ratewindow ${med(rps[ours]).toFixed(0)} req/s, other ${med(rps[theirs]).toFixed(0)} req/s, ` +
          `ratio ${med(ratios).toFixed(2)} (rounds ${ratios.map((x) => x.toFixed(2)).join(' ')}); server CPU µs/request ` +
          `${cpuOf(ours).toFixed(0)} vs ${cpuOf(theirs).toFixed(0)}, ratio ${med(cpuRatios).toFixed(2)} (rounds ${cpuRatios.map((x) => x.toFixed(2)).join(' ')})` +
          (onRedis ? `; redis-server CPU µs/request ${redisOf(ours).toFixed(1)} vs ${redisOf(theirs).toFixed(1)}` : '') +
          `${bad ? `, ${bad} non-2xx/errors` : ''}`,
      );
      for (const c of children.splice(0)) c.kill();
    }
  } finally {
    for (const c of children) c.kill();
    rmSync(dirname(wrkScript), { recursive: true, force: true });
  }
  const load1 = loadavg();
  console.log(`\nload average ${load0.map((x) => x.toFixed(2)).join(' ')} before, ${load1.map((x) => x.toFixed(2)).join(' ')} after; ${ROUNDS} rounds of ${SECONDS} s, ${CONNECTIONS} connections, ${WRK ? 'wrk' : 'autocannon'}${RATE ? `, ${RATE} req/s offered` : ''}`);
  console.log(
    '\n| pair | req/s ratewindow | req/s other | req/s ratio | server CPU µs/req ratewindow | other | CPU ratio (other/ours) | redis-server CPU µs/req ratewindow / other |\n|---|---|---|---|---|---|---|---|',
  );
  for (const r of rows) {
    console.log(
      `| ${r.title} | ${r.ours.toFixed(0)} | ${r.theirs.toFixed(0)} | ${r.ratio.toFixed(2)} | ${r.cpuOurs.toFixed(0)} | ${r.cpuTheirs.toFixed(0)} | ${r.cpuRatio.toFixed(2)} | ${r.redisOurs === undefined ? '' : `${r.redisOurs.toFixed(1)} / ${r.redisTheirs.toFixed(1)}`} |`,
    );
  }
}
