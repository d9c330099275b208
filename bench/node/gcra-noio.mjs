// Client CPU a GCRA consume without I/O: RedisStore.consume(key, gcraLimit) whose evalsha answers a
// canned reply the server gave (refused text, allowed-full integer), against a bare call answering 1,
// 64 in flight, 10,000 keys, interleaved rounds; process.cpuUsage per call. CG=1: N then 3N calls with
// callgrind dumps (instructions a call = difference / 2N).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { loadavg } from 'node:os';
const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore, gcraLimit } = require('./dist/index.js');
const N = Number(process.env.N ?? 200000);
const KEYS = Array.from({ length: 10000 }, (_, i) => `user:${i}`);
const refusedReply = '0 1796185214804 1796185157 971148';
const allowedReply = 1796185144671;
const mk = (reply) => RedisStore.using(() => Promise.resolve(reply), { evalsha: () => Promise.resolve(reply), prefix: 'b:' });
const sr = mk(refusedReply), sa = mk(allowedReply);
const lr = gcraLimit(5, 60000, 5), la = gcraLimit(1000000, 1000000, 1000000);
let sink = 0;
const bareEval = (sha, keys, args) => Promise.resolve(1);
const ops = {
  refused: (k) => sr.consume(k, lr).then((v) => { sink += v.allowed ? 1 : 0; }),
  allowed: (k) => sa.consume(k, la).then((v) => { sink += v.allowed ? 1 : 0; }),
  bare: (k) => bareEval('x', [k], ['60000', '12000', '48000']).then((v) => { sink += v; }),
};
async function run(op, n) {
  let next = 0;
  await Promise.all(Array.from({ length: 64 }, async () => { while (next < n) { const i = next++; await op(KEYS[i % 10000]); } }));
}
if (process.env.CG === '1') {
  const dump = () => execFileSync('callgrind_control', ['-d', String(process.pid)], { stdio: 'ignore' });
  const names = (process.env.OPS ?? 'refused,allowed,bare').split(',');
  for (const name of names) await run(ops[name], 20000);
  dump();
  for (const name of names) { await run(ops[name], N); dump(); await run(ops[name], 3 * N); dump(); }
} else {
  const rounds = Number(process.env.ROUNDS ?? 7);
  const res = { refused: [], allowed: [], bare: [] };
  for (const name of Object.keys(ops)) await run(ops[name], 20000);
  for (let r = 0; r < rounds; r++) for (const [name, op] of Object.entries(ops)) {
    const c0 = process.cpuUsage(); await run(op, N); const c = process.cpuUsage(c0);
    res[name].push((c.user + c.system) / N);
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`CPU a call (µs, median of ${rounds}): ` + Object.entries(res).map(([k, v]) => `${k} ${med(v).toFixed(3)}`).join(', ') + `; load ${loadavg()[0].toFixed(1)}`);
}
