// Two builds of @ratewindow/wasm side by side: the memory store's plain calls (costing 1) on each, in
// interleaved rounds, CPU time a call (process.cpuUsage, user + system), so a change to the module can
// be judged on a loaded machine. Each build is a directory holding its `dist/` and `pkg/` (copy them
// aside before rebuilding): the wasm engine of each, through the Node package's TypeScript layer.
//   BEFORE=/tmp/wasm-before AFTER=bindings-wasm/js node bindings-wasm/js/bench/before-after.mjs
// ROUNDS (default 9) rounds of N (default 300,000) calls an operation and build; the medians, and
// after/before as a ratio. CG=1 (under `valgrind --tool=callgrind --instr-atstart=no`): per build and
// operation, N then 3N calls between callgrind dumps (instructions a call = difference / 2N); OPS picks
// operations.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);
const api = require('../../../bindings-node/dist/api.js');

const N = Number(process.env.N ?? 300_000);
const ROUNDS = Number(process.env.ROUNDS ?? 9);
const dirOf = (d) => (isAbsolute(d) ? d : resolve(process.cwd(), d));
const builds = {
  before: dirOf(process.env.BEFORE ?? '/tmp/wasm-before'),
  after: dirOf(process.env.AFTER ?? join(import.meta.dirname ?? '.', '..')),
};

const keys = Array.from({ length: 1000 }, (_, i) => `user:${i}`);
const limit = { uses: 1_000_000_000, windowMs: 1_000 };
const batch = [
  { key: 'click:alice', limit },
  { key: 'click', limit },
];
let sink = 0;

/** The operations on one build. */
async function opsOf(dir) {
  const { wasmBackend } = await import(pathToFileURL(join(dir, 'dist', 'backend-node.js')).href);
  const backend = wasmBackend();
  const raw = backend.createStore(new Float64Array(backend.recordLayout().length));
  let t = 0;
  const { MemoryStore } = api.createApi(backend);
  const store = new MemoryStore({ clock: { now: () => t } });
  const refusing = new MemoryStore({ clock: { now: () => t } });
  return {
    'backend consume, one key': (i) => { sink += raw.consume('user:1', 1_000_000_000, 1_000, i); },
    'MemoryStore.consume, 1000 keys': (i) => { t = i; sink += store.consume(keys[i % 1000], limit).remaining; },
    'MemoryStore.consume, refused': (i) => { t = i; sink += refusing.consume('busy', { uses: 1, windowMs: 1e12 }).retryAfterMs; },
    'MemoryStore.peekMany, 2 entries': (i) => { t = i; sink += store.peekMany(batch).remaining; },
    'MemoryStore.attempt': (i) => { t = i; sink += store.attempt(keys[i % 1000], 1_000_000_000, 60_000).count; },
  };
}

const ops = {};
for (const [name, dir] of Object.entries(builds)) ops[name] = await opsOf(dir);
// OPS: a comma-separated subset of the operations (by the start of their names), e.g. OPS=backend,MemoryStore.consume
const only = process.env.OPS?.split(',');
const names = Object.keys(ops.before).filter((n) => only === undefined || only.some((o) => n.startsWith(o)));
const loop = (f, n) => { for (let i = 0; i < n; i++) f(i); };

if (process.env.CG === '1') {
  const dump = () => execFileSync('callgrind_control', ['-d', String(process.pid)], { stdio: 'ignore' });
  for (const op of names) for (const build of Object.keys(builds)) loop(ops[build][op], 50_000);
  execFileSync('callgrind_control', ['-i', 'on', String(process.pid)], { stdio: 'ignore' });
  dump();
  for (const op of names) {
    for (const build of Object.keys(builds)) {
      console.log(`dump: ${build} ${op} N=${N} then 3N`);
      loop(ops[build][op], N);
      dump();
      loop(ops[build][op], 3 * N);
      dump();
    }
  }
} else {
  const cpu = {};
  for (const op of names) for (const build of Object.keys(builds)) loop(ops[build][op], 200_000);
  for (let r = 0; r < ROUNDS; r++) {
    for (const op of names) {
      // Alternate which build goes first, so neither always runs right after the other's GC.
      for (const build of r % 2 === 0 ? ['before', 'after'] : ['after', 'before']) {
        const c0 = process.cpuUsage();
        loop(ops[build][op], N);
        const c = process.cpuUsage(c0);
        ((cpu[op] ??= { before: [], after: [] })[build]).push(((c.user + c.system) * 1000) / N);
      }
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`CPU ns a call, median of ${ROUNDS} interleaved rounds of ${N}; load ${loadavg()[0].toFixed(1)}`);
  for (const op of names) {
    const b = med(cpu[op].before);
    const a = med(cpu[op].after);
    console.log(`${op.padEnd(34)} before ${b.toFixed(1).padStart(7)}  after ${a.toFixed(1).padStart(7)}  after/before ${(a / b).toFixed(3)}`);
  }
}
if (sink === 0.5) console.log(sink);
