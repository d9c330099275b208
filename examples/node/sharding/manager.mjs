// A shard manager with three shard processes sharing cooldowns: each shard's ShardedStore asks this
// process, which counts every shard's calls in one MemoryStore, over the IPC channel fork() opened.
// Run: node examples/node/sharding/manager.mjs
// (discord.js: the same serveShards(store, child) on each shard's 'spawn' event, ShardedStore in the bot.)
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { MemoryStore, serveShards } from 'ratewindow';

const store = new MemoryStore();
const shard = fileURLToPath(new URL('./shard.mjs', import.meta.url));

const exits = [0, 1, 2].map((id) => {
  const child = fork(shard, [String(id)]);
  serveShards(store, child);
  return new Promise((resolve) => child.on('exit', resolve));
});
const exitCodes = await Promise.all(exits);

// Every shard's calls were counted here: 3 uses per user per 10 s, in all, whatever shard answered.
const left = store.peek('claim:alice', { uses: 3, windowMs: 10_000 });
console.log(`manager: alice has ${left.remaining} claims left, next in ${left.retryAfterMs} ms`);
// Six claims from three shards, three allowed in all: a shard counting on its own would leave some here.
if (left.allowed || left.remaining !== 0 || exitCodes.some((code) => code !== 0)) {
  console.error('manager: the shards did not share their counts');
  process.exitCode = 1;
}
