// Benchmark: ratewindow's MemoryStore (napi addon) against rate-limiter-flexible's RateLimiterMemory.
//
// Workload (both): 10,000 keys taken round-robin, a limit of 5 uses per 10 s, one call at a time;
// a refusal is an answer (rate-limiter-flexible rejects, and the rejection is caught and counted).
// Runs are interleaved (ours, theirs, ours, theirs ...) and the median of each is reported, so drift of
// the machine affects both alike. Also measured: the cost of one consume in ns, of the bare crossing
// into the addon (a no-op native call) and of the native consume without the TypeScript layer.
//
//   node bench/node/bench.mjs            full run (~20 s)
//   BENCH_QUICK=1 node bench/node/bench.mjs   a smoke run (~1 s)
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { MemoryStore } = require('./dist/index.js');
const { nativeBackend } = require('./dist/api.js');
const { RateLimiterMemory } = require('rate-limiter-flexible');

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : 5;
const RUN_MS = quick ? 60 : 400;
const KEYS = Array.from({ length: 10_000 }, (_, i) => `user:${i}`);
const LIMIT = { uses: 5, windowMs: 10_000 };

/** Calls `op(i)` in batches of 1000 until `ms` have passed; returns ops/s. */
function timeSync(op, ms = RUN_MS) {
  let n = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(ms) * 1_000_000n;
  let now = start;
  while (now < end) {
    for (let j = 0; j < 1000; j++, n++) op(n);
    now = process.hrtime.bigint();
  }
  return (n * 1e9) / Number(now - start);
}

async function timeAsync(op, ms = RUN_MS) {
  let n = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(ms) * 1_000_000n;
  let now = start;
  while (now < end) {
    for (let j = 0; j < 1000; j++, n++) await op(n);
    now = process.hrtime.bigint();
  }
  return (n * 1e9) / Number(now - start);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (x) => Math.round(x).toLocaleString('en-US');

const ours = new MemoryStore();
const theirs = new RateLimiterMemory({ points: LIMIT.uses, duration: LIMIT.windowMs / 1000 });
let answers = { allowed: 0, refused: 0 };

const oursSync = (i) => {
  const v = ours.consume(KEYS[i % KEYS.length], LIMIT);
  v.allowed ? answers.allowed++ : answers.refused++;
};
const oursAwait = async (i) => {
  const v = await ours.consume(KEYS[i % KEYS.length], LIMIT);
  v.allowed ? answers.allowed++ : answers.refused++;
};
const theirsAwait = (i) =>
  theirs.consume(KEYS[i % KEYS.length]).then(
    () => { answers.allowed++; },
    (res) => {
      if (res instanceof Error) throw res;
      answers.refused++;
    },
  );

// The parts of one consume: the bare crossing, and the native consume without the TypeScript layer
// (on a store of its own, same workload, the clock read once).
const backend = nativeBackend();
const native = backend.createStore(new Float64Array(backend.recordLayout().length));
const now = Date.now();
const noop = () => backend.noop();
const nativeOnly = (i) => native.consume(KEYS[i % KEYS.length], 5, 10_000, now);

// Warm up every path (JIT, and every key's log filled to the limit).
const warm = quick ? 20 : 300;
timeSync(oursSync, warm);
await timeAsync(oursAwait, warm);
await timeAsync(theirsAwait, warm);
timeSync(noop, warm);
timeSync(nativeOnly, warm);

const results = { oursSync: [], oursAwait: [], theirs: [], noop: [], nativeOnly: [] };
for (let r = 0; r < ROUNDS; r++) {
  results.oursSync.push(timeSync(oursSync));
  results.theirs.push(await timeAsync(theirsAwait));
  results.oursAwait.push(await timeAsync(oursAwait));
  results.noop.push(timeSync(noop));
  results.nativeOnly.push(timeSync(nativeOnly));
}
const [noopOps, nativeOps] = [median(results.noop), median(results.nativeOnly)];

const [sync, awaited, rlf] = [median(results.oursSync), median(results.oursAwait), median(results.theirs)];
if (quick) console.log('(BENCH_QUICK=1: a smoke run, too short to warm up; the numbers below mean nothing)');
console.log(`workload: ${KEYS.length} keys round-robin, ${LIMIT.uses} uses per ${LIMIT.windowMs / 1000} s, ` +
  `${ROUNDS} interleaved rounds of ${RUN_MS} ms (median); answers: ${fmt(answers.allowed)} allowed, ${fmt(answers.refused)} refused`);
console.log(`ratewindow MemoryStore.consume (sync)      ${fmt(sync).padStart(12)} ops/s  ${(1e9 / sync).toFixed(0).padStart(5)} ns/op`);
console.log(`ratewindow MemoryStore.consume (awaited)   ${fmt(awaited).padStart(12)} ops/s  ${(1e9 / awaited).toFixed(0).padStart(5)} ns/op`);
console.log(`rate-limiter-flexible RateLimiterMemory    ${fmt(rlf).padStart(12)} ops/s  ${(1e9 / rlf).toFixed(0).padStart(5)} ns/op`);
console.log(`ratio (sync / rate-limiter-flexible)        ${(sync / rlf).toFixed(2)}x`);
console.log(`ratio (awaited / rate-limiter-flexible)     ${(awaited / rlf).toFixed(2)}x`);
console.log(`bare napi crossing (native noop())                ${(1e9 / noopOps).toFixed(0).padStart(5)} ns`);
console.log(`native consume without the TypeScript layer       ${(1e9 / nativeOps).toFixed(0).padStart(5)} ns`);
