// Real Redis servers and clients for the RedisStore suites (no mocks):
// - the machine's shared Redis on 6379 (started by scripts/services.sh when down; never restarted);
// - a three-master Cluster on RATEWINDOW_NODE_CLUSTER_PORTS (default 7111-7113, apart from the Python
//   suite's), started here through scripts/redis-cluster.sh when not healthy; scripts/test-node.sh
//   stops it after the suites;
// - PRIVATE redis-servers on 6390-6394 (privateServer), which tests restart, pause and kill.
// Clients: node-redis 6 and ioredis 6, each with the README's one-liners.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { createClient, createCluster } from 'redis';
import IORedis from 'ioredis';

import { backend, repo } from './backend.mjs';
import { createRequire } from 'node:module';

const internal = createRequire(import.meta.url)('../dist/api.js');

/**
 * The engine build the Redis suites plan with: the one under test when it has the Redis planner
 * (ts/redis-backend.ts), else the native addon (the wasm-bindgen package has none yet).
 */
export const redisBackend = typeof backend.createRedis === 'function' ? backend : internal.nativeBackend();

export const clusterPorts = (process.env.RATEWINDOW_NODE_CLUSTER_PORTS ?? '7111 7112 7113').split(/\s+/).filter(Boolean).map(Number);

/** The shared server on 6379 is up (started with the machine's own command when down). */
export function sharedRedisUp() {
  execFileSync('bash', ['-c', `source "${repo}/scripts/services.sh" && redis_up`], { stdio: 'inherit' });
}

/** The test cluster is up (idempotent). */
export function clusterUp() {
  execFileSync(join(repo, 'scripts', 'redis-cluster.sh'), ['start'], {
    stdio: 'inherit',
    env: { ...process.env, RATEWINDOW_CLUSTER_PORTS: clusterPorts.join(' '), TMPDIR: join(tmpdir(), 'ratewindow-node') },
  });
}

// --- clients: the README's one-liners -------------------------------------------------------------

/** `run` and `evalsha` for a node-redis 6 client or cluster. */
export function nodeRedisRunners(client) {
  return {
    run: (script, keys, args) => client.eval(script, { keys, arguments: args }),
    evalsha: (sha1, keys, args) => client.evalSha(sha1, { keys, arguments: args }),
  };
}

/** `run` and `evalsha` for an ioredis 6 client or cluster. */
export function ioredisRunners(redis) {
  return {
    run: (script, keys, args) => redis.eval(script, keys.length, ...keys, ...args),
    evalsha: (sha1, keys, args) => redis.evalsha(sha1, keys.length, ...keys, ...args),
  };
}

export async function nodeRedis(port = 6379, options = {}) {
  const client = createClient({ socket: { port, host: '127.0.0.1', ...options.socket }, ...options.client });
  client.on('error', () => {}); // reconnects are expected in the restart tests
  await client.connect();
  return { kind: 'node-redis', client, ...nodeRedisRunners(client), close: () => client.destroy() };
}

export async function ioredis(port = 6379, options = {}) {
  const client = new IORedis({ port, host: '127.0.0.1', lazyConnect: true, ...options });
  client.on('error', () => {});
  await client.connect();
  return { kind: 'ioredis', client, ...ioredisRunners(client), close: () => client.disconnect() };
}

export async function nodeRedisCluster() {
  const client = createCluster({ rootNodes: clusterPorts.map((port) => ({ socket: { host: '127.0.0.1', port } })) });
  client.on('error', () => {});
  await client.connect();
  return { kind: 'node-redis cluster', client, ...nodeRedisRunners(client), close: () => client.destroy() };
}

export async function ioredisCluster() {
  const client = new IORedis.Cluster(clusterPorts.map((port) => ({ host: '127.0.0.1', port })), { lazyConnect: true });
  client.on('error', () => {});
  await client.connect();
  return { kind: 'ioredis cluster', client, ...ioredisRunners(client), close: () => client.disconnect() };
}

// --- private servers (6390-6394): restarted, paused and killed by the tests -------------------------

/**
 * A redis-server of our own on `port` (6390-6394 only), with an append-only file fsynced on every
 * write so a restart keeps what was counted. `stop()` kills it (SIGKILL: no final save), `start()`
 * starts it again on the same data, `close()` stops it and removes its files.
 */
export async function privateServer(port) {
  if (!(port >= 6390 && port <= 6394)) throw new Error(`private servers use ports 6390-6394, not ${port}`);
  const dir = mkdtempSync(join(tmpdir(), `ratewindow-node-redis-${port}-`));
  let child = null;
  const server = {
    port,
    async start() {
      child = spawn('redis-server', [
        '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '',
        '--appendonly', 'yes', '--appendfsync', 'always', '--logfile', join(dir, 'log'),
      ], { stdio: 'ignore' });
      for (let i = 0; i < 100; i++) {
        try {
          execFileSync('redis-cli', ['-p', String(port), 'ping'], { stdio: 'pipe' });
          return;
        } catch {
          await sleep(50);
        }
      }
      throw new Error(`private redis-server on ${port} did not start (see ${dir}/log)`);
    },
    async stop() {
      if (child === null) return;
      const c = child;
      child = null;
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await exited;
    },
    cli(...args) {
      return execFileSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).trim();
    },
    async close() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}
