// Real HTTP servers on loopback for the HTTP middleware suites (test/http-*.test.mjs): Express 4,
// Express 5, Fastify 5 and 4 (the plugin, or the hook on one route) and plain node:http, each guarding
// the same routes with ratewindow. Clients are Node's own fetch (undici).
import { createServer } from 'node:http';
import { createRequire } from 'node:module';

import express4 from 'express';
import express5 from 'express5';
import Fastify from 'fastify';
import Fastify4 from 'fastify4';

const require = createRequire(import.meta.url);
const expressMw = require('../dist/http/express.js');
const fastifyMw = require('../dist/http/fastify.js');

/** Every framework the suites run on. */
export const FRAMEWORKS = ['express4', 'express5', 'fastify', 'fastify-hook', 'fastify4', 'fastify4-hook', 'node:http'];

/** The Fastify majors: `fastify` (5) and `fastify4`, each as the plugin (`kind`) or the hook (`kind-hook`). */
export const FASTIFY = ['fastify', 'fastify4'];

/**
 * The route's answer: status `?status=` (default 200), body `ok`. An error reaching the framework's
 * error handling is answered `{ error, code, reason }` with the error's `statusCode` (default 500),
 * so the tests see which error went where.
 */
function status(url) {
  return Number(new URL(url, 'http://x').searchParams.get('status') ?? 200);
}

function errorBody(err) {
  return { error: err.name, code: err.code, reason: err.reason, message: err.message };
}

/**
 * Starts `kind` on 127.0.0.1 with `GET /` guarded by `throttle(source, options)`; answers `{ url, close }`.
 */
export async function serve(kind, source, options) {
  if (kind === 'express4' || kind === 'express5') {
    const app = (kind === 'express4' ? express4 : express5)();
    app.get('/', expressMw.throttle(source, options), (req, res) => {
      res.status(status(req.url)).send('ok');
    });
    app.use((err, req, res, next) => {
      res.status(err.statusCode ?? 500).json(errorBody(err));
    });
    return listen(createServer(app));
  }
  if (kind === 'node:http') {
    const guard = expressMw.throttle(source, options);
    const server = createServer((req, res) => {
      guard(req, res, (err) => {
        if (err !== undefined) {
          res.statusCode = err.statusCode ?? 500;
          res.setHeader('Content-Type', 'application/json');
          res.end(JSON.stringify(errorBody(err)));
          return;
        }
        res.statusCode = status(req.url);
        res.end('ok');
      });
    });
    return listen(server);
  }
  if (kind.startsWith('fastify')) {
    const major = kind.startsWith('fastify4') ? Fastify4 : Fastify;
    const app = major();
    app.setErrorHandler((err, request, reply) => {
      reply.code(err.statusCode ?? 500).send(errorBody(err));
    });
    const handler = async (request, reply) => {
      reply.code(status(request.url));
      return 'ok';
    };
    if (!kind.endsWith('-hook')) {
      await app.register(fastifyMw.ratewindow, { ...options, global: source });
      app.get('/', handler);
      app.get('/free', { config: { throttle: false } }, handler);
    } else {
      app.get('/', { onRequest: fastifyMw.throttle(source, options) }, handler);
    }
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address();
    return { url: `http://127.0.0.1:${port}/`, close: () => app.close() };
  }
  throw new Error(`unknown framework ${kind}`);
}

function listen(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/`,
        close: () =>
          new Promise((done) => {
            server.closeAllConnections?.();
            server.close(() => done());
          }),
      });
    });
  });
}

/** `n` requests at once; answers `[{ status, headers, body }]` in the order sent. */
export async function burst(url, n, init = {}) {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const res = await fetch(url, init);
      return { status: res.status, headers: res.headers, body: await res.text() };
    }),
  );
}

/** One request. */
export async function get(url, init = {}) {
  const [one] = await burst(url, 1, init);
  return one;
}

/**
 * Checks `seconds` (a `Retry-After` or a `RateLimit` field's `t`, a string or number) is what is left of
 * a `windowS` window opened at or after `start` (ms, read before the window's first request): whole
 * seconds rounded up, so `windowS` when the answer came within a second of the window's first request,
 * and one less for every second begun since. A loaded machine may take more than a second between two
 * requests, so the floor comes from the time that passed, not from a constant.
 */
export function assertSecondsLeft(seconds, start, windowS = 60, what = 'seconds left') {
  const got = Number(seconds);
  const low = windowS - Math.ceil((Date.now() - start) / 1000);
  if (!(Number.isInteger(got) && got >= low && got <= windowS)) {
    throw new Error(`${what}: ${seconds}, expected ${low}..${windowS} (${Date.now() - start} ms since the window opened)`);
  }
}

/** Checks a `RateLimit` field is `"name";r=R;t=T` with `t` as {@link assertSecondsLeft} says. */
export function assertRateLimit(field, name, remaining, start, windowS = 60) {
  const parsed = /^"([^"]+)";r=(\d+);t=(\d+)$/.exec(field ?? '');
  if (!parsed || parsed[1] !== name || Number(parsed[2]) !== remaining) {
    throw new Error(`RateLimit: ${field}, expected "${name}";r=${remaining};t=...`);
  }
  assertSecondsLeft(parsed[3], start, windowS, `RateLimit ${field}: t`);
}
