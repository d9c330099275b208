// A server whose peer has no IP address: Express and Fastify (4 and 5) listening on a Unix socket, as
// behind nginx. The core decides (tests/vectors/http/http.json, client_address): a trusted hop's
// forwarded address is the client; with none believed the request is refused as `no_peer` (500),
// never counted as one client shared by every request.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import express from 'express';
import Fastify from 'fastify';
import Fastify4 from 'fastify4';

const require = createRequire(import.meta.url);
const { MemoryStore, RateLimiter, Limit } = require('../dist/index.js');
const expressMw = require('../dist/http/express.js');
const fastifyMw = require('../dist/http/fastify.js');

let dir;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'rw-http-peer-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** One GET over the Unix socket `path`: `{ status, body }`. */
function get(path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: path, path: '/', headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** `kind` on a fresh Unix socket, `GET /` guarded by one request a minute per client address. */
async function serve(kind, options) {
  const limiter = new RateLimiter(new MemoryStore());
  const seen = [];
  limiter.for('api', (req, { ip }) => {
    seen.push(ip);
    return Limit.perMinute(1).by(ip);
  });
  const path = join(dir, `${kind}-${seen.length}-${Math.random().toString(36).slice(2)}.sock`);
  const errorBody = (err) => ({ reason: err.reason, message: err.message });
  if (kind === 'express') {
    const app = express();
    app.get('/', expressMw.throttle('api', { limiter, ...options }), (req, res) => res.send('ok'));
    app.use((err, req, res, next) => res.status(err.statusCode ?? 500).json(errorBody(err)));
    const server = createServer(app);
    await new Promise((resolve) => server.listen(path, resolve));
    return { path, seen, close: () => new Promise((resolve) => server.close(resolve)) };
  }
  const app = (kind === 'fastify4' ? Fastify4 : Fastify)();
  app.setErrorHandler((err, request, reply) => reply.code(err.statusCode ?? 500).send(errorBody(err)));
  await app.register(fastifyMw.ratewindow, { limiter, global: 'api', ...options });
  app.get('/', async () => 'ok');
  await app.listen({ path });
  return { path, seen, close: () => app.close() };
}

describe('a peer without an IP address (Unix socket)', { concurrency: true }, () => {
  for (const kind of ['express', 'fastify', 'fastify4']) {
    it(`${kind}: behind a trusted hop the forwarded address is the client; none believed is no_peer`, async () => {
      const server = await serve(kind, { trustProxy: 1 });
      try {
        const xff = (value) => get(server.path, { 'X-Forwarded-For': value });
        assert.equal((await xff('203.0.113.7')).status, 200);
        assert.equal((await xff('198.51.100.2')).status, 200);
        assert.equal((await xff('10.0.0.1, 203.0.113.7')).status, 429); // the same client, counted apart
        const garbage = await xff('not-an-ip');
        assert.equal(garbage.status, 500);
        assert.equal(JSON.parse(garbage.body).reason, 'no_peer');
        assert.equal((await get(server.path)).status, 500);
        assert.deepEqual(server.seen.slice(0, 3), ['203.0.113.7', '198.51.100.2', '203.0.113.7']);
      } finally {
        await server.close();
      }
    });

    it(`${kind}: without trustProxy every request is no_peer (500), not one shared client`, async () => {
      const server = await serve(kind, {});
      try {
        const answers = [await get(server.path), await get(server.path, { 'X-Forwarded-For': '203.0.113.7' })];
        assert.deepEqual(answers.map((a) => [a.status, JSON.parse(a.body).reason]), [[500, 'no_peer'], [500, 'no_peer']]);
      } finally {
        await server.close();
      }
    });
  }
});
