// The guard's effect on the clients' write batching, counted rather than timed: run under strace, once
// per (contender, client), it makes 40,000 consumes at 64 in flight on a private redis-server, and strace
// counts the socket syscalls. node-redis coalesces the commands issued before its setImmediate into one
// write; ioredis writes each command at once. If the guard's promise hops delayed the next command past
// that point, guarded would need more writes a call than store.
//
//   for c in node-redis ioredis; do for w in store guarded; do
//     strace -f -c -e trace=write,writev,read -o /tmp/guard-$c-$w.txt node bench/node/guard-syscalls.mjs $w $c
//     echo "$c $w: $(grep -E ' (write|writev|read)$' /tmp/guard-$c-$w.txt | awk '{printf "%s=%s ", $NF, $4}')"
//   done; done
//
// REDIS_PORT (default 6379), BENCH_CALLS (default 40000), BENCH_PKG (default this checkout's bindings-node).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = process.env.BENCH_PKG ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bindings-node');
const require = createRequire(join(pkg, 'package.json'));
const { RedisStore, guard } = require('./dist/index.js');
const { createClient } = require('redis');
const IORedis = require('ioredis');

const [which = 'store', client = 'node-redis'] = process.argv.slice(2);
const port = Number(process.env.REDIS_PORT ?? 6379);
const calls = Number(process.env.BENCH_CALLS ?? 40_000);
let run, evalsha, close;
if (client === 'node-redis') {
  const nr = createClient({ socket: { host: '127.0.0.1', port } });
  await nr.connect();
  run = (s, keys, args) => nr.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]);
  evalsha = (sha, keys, args) => nr.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]);
  close = () => nr.destroy();
} else {
  const io = new IORedis({ host: '127.0.0.1', port });
  run = (s, keys, args) => io.eval(s, keys.length, keys, args);
  evalsha = (sha, keys, args) => io.evalsha(sha, keys.length, keys, args);
  close = () => io.disconnect();
}
const prefix = `benchguardsys:${Date.now().toString(36)}:`;
const store = RedisStore.using(run, { evalsha, prefix });
const guarded = guard(store, { timeoutMs: 5000 });
const ALLOWED = { uses: 1_000_000_000, windowMs: 10_000 };
const op = which === 'guarded' ? (k) => guarded.consume(k, ALLOWED) : (k) => store.consume(k, ALLOWED);
await op('warm'); // the script loaded
let i = 0;
let allowed = 0;
await Promise.all(
  Array.from({ length: 64 }, async () => {
    while (i < calls) if ((await op(`user:${i++ % 10_000}`)).allowed) allowed++;
  }),
);
if (allowed !== calls) throw new Error(`${calls - allowed} calls were not allowed`);
await guarded.close();
close();
console.log(`${client} ${which}: ${calls} consumes at 64 in flight`);
