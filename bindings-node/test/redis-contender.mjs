// One contending process of redis-contention.test.mjs: connects its own client, waits for the common
// start time, fires `calls` concurrent calls at the given keys and prints how many were allowed.
//   node redis-contender.mjs <client: node-redis|ioredis> <target: single|cluster> <startAt ms> <calls> <uses> <prefix> <hashTag|-> key...
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';

import { ioredis, ioredisCluster, nodeRedis, nodeRedisCluster } from './redis-servers.mjs';

const { RedisStore } = createRequire(import.meta.url)('../dist/index.js');
const [kind, target, startAt, calls, uses, prefix, hashTag, ...keys] = process.argv.slice(2);
const connect = { 'node-redis': { single: nodeRedis, cluster: nodeRedisCluster }, ioredis: { single: ioredis, cluster: ioredisCluster } };
const client = await connect[kind][target]();
const store = RedisStore.using(client.run, { evalsha: client.evalsha, prefix, ...(hashTag === '-' ? {} : { hashTag }) });
const entries = keys.map((key) => ({ key, limit: { uses: Number(uses), windowMs: 30_000 } }));
await sleep(Math.max(0, Number(startAt) - Date.now()));
const verdicts = await Promise.all(
  Array.from({ length: Number(calls) }, () => (entries.length === 1 ? store.consume(keys[0], entries[0].limit) : store.consumeMany(entries))),
);
process.stdout.write(JSON.stringify({ allowed: verdicts.filter((v) => v.allowed).length }));
await client.close();
