// One contending process of mixed-stores.test.mjs on Redis: connects its own client, waits for the
// common start time, fires `calls` concurrent mixed batches (the user's GCRA and counter, one global
// sliding log of `uses`) and prints how many were allowed.
//   node mixed-redis-worker.mjs <client: node-redis|ioredis> <target: single|cluster> <startAt ms> <calls> <uses> <prefix> <hashTag|-> <worker>
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';

import { ioredis, ioredisCluster, nodeRedis, nodeRedisCluster } from './redis-servers.mjs';

const { RedisStore } = createRequire(import.meta.url)('../dist/index.js');
const [kind, target, startAt, calls, uses, prefix, hashTag, worker] = process.argv.slice(2);
const connect = { 'node-redis': { single: nodeRedis, cluster: nodeRedisCluster }, ioredis: { single: ioredis, cluster: ioredisCluster } };
const client = await connect[kind][target]();
const store = RedisStore.using(client.run, { evalsha: client.evalsha, prefix, ...(hashTag === '-' ? {} : { hashTag }) });
await sleep(Math.max(0, Number(startAt) - Date.now()));
const verdicts = await Promise.all(
  Array.from({ length: Number(calls) }, (_, i) => {
    const user = `api:user${worker}-${i % 4}`;
    return store.consumeMany([
      { key: user, limit: { algorithm: 'gcra', uses: 1000, windowMs: 60_000, burst: 1000 } },
      { key: user, limit: { algorithm: 'counter', uses: 1000, windowMs: 3_600_000 } },
      { key: 'api', limit: { uses: Number(uses), windowMs: 3_600_000 } },
    ]);
  }),
);
process.stdout.write(JSON.stringify({ allowed: verdicts.filter((v) => v.allowed).length }));
await client.close();
