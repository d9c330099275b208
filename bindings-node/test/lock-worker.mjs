// One process of the lock suite: opens its own client on a store (kind: redis-node | redis-io, each
// with `-cmd` for a store with `command` | cluster-node-cmd | cluster-io-cmd: the suite's Redis
// Cluster, with `command` | pg | sqlite; target: a prefix or a file), then
//   race <key> <n>           says `ready`, waits for `go` on stdin, fires n acquires at once (each its
//                            own lock, its own owner) and prints how many got the lock;
//   release <key> <owner>    restores the lock from its owner token and prints what release answered.
import { createInterface } from 'node:readline';

import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createClient } from 'redis';

import { PostgresStore, RedisStore, SqliteStore } from '../dist/index.js';
import { ioredisCluster, nodeRedisCluster } from './redis-servers.mjs';
import { pgPool } from './sql-helpers.mjs';

const [kind, target, mode, key, arg] = process.argv.slice(2);

let store;
let close;
// `-cmd`: the store has `command` too (acquire by a plain SET NX PX).
if (kind === 'redis-node' || kind === 'redis-node-cmd') {
  const client = createClient({ url: 'redis://127.0.0.1:6379' });
  await client.connect();
  store = RedisStore.using((s, keys, args) => client.sendCommand(['EVAL', s, String(keys.length), ...keys, ...args]), {
    evalsha: (sha, keys, args) => client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]),
    command: kind === 'redis-node-cmd' ? (args) => client.sendCommand(args) : undefined,
    prefix: target,
  });
  close = () => client.quit();
} else if (kind === 'redis-io' || kind === 'redis-io-cmd') {
  const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true });
  await redis.connect();
  store = RedisStore.using((s, keys, args) => redis.eval(s, keys.length, keys, args), {
    evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, keys, args),
    command: kind === 'redis-io-cmd' ? (args) => redis.call(args[0], args.slice(1)) : undefined,
    prefix: target,
  });
  close = () => redis.quit();
} else if (kind === 'cluster-node-cmd' || kind === 'cluster-io-cmd') {
  // The plain SET routed by its key, as in lock.test.mjs' Cluster case.
  const c = kind === 'cluster-node-cmd' ? await nodeRedisCluster() : await ioredisCluster();
  const command = kind === 'cluster-node-cmd' ? (args) => c.client.sendCommand(args[1], false, args) : (args) => c.client.call(args[0], args.slice(1));
  store = RedisStore.using(c.run, { evalsha: c.evalsha, command, prefix: target });
  close = () => c.close();
} else if (kind === 'pg') {
  const pool = pgPool(8);
  store = PostgresStore.using(pool, { prefix: target });
  await Promise.all(Array.from({ length: 8 }, () => pool.query('SELECT 1')));
  close = () => pool.end();
} else {
  const db = new Database(target);
  db.pragma('busy_timeout = 10000');
  store = new SqliteStore(db);
  close = () => db.close();
}

if (mode === 'release') {
  console.log(String(await store.lock(key, 60, arg).release()));
} else {
  const n = Number(arg);
  console.log('ready');
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) if (line === 'go') break;
  lines.close();
  process.stdin.destroy();
  const got = await Promise.all(Array.from({ length: n }, () => store.lock(key, 60).acquire()));
  console.log(String(got.filter(Boolean).length));
}
await close();
