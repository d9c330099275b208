// A small web app guarded by ratewindow, on plain node:http (the same middleware runs in Express 4 and 5;
// Fastify has `ratewindow/fastify`):
//   GET  /        5 per minute and 100 per hour per client (two limits, one batch)
//   POST /login   3 failed logins per minute per client: a successful one costs nothing (after()),
//                 refusals answered with a JSON body of our own (response())
//   GET  /health  not limited
//
//   node examples/node/http-server.mjs          serve on http://127.0.0.1:8080
//   node examples/node/http-server.mjs --demo   serve on a free port, send a few requests, print, exit
import { createServer } from 'node:http';

import { Limit, MemoryStore, RateLimiter } from 'ratewindow';
import { throttle } from 'ratewindow/express';

const limiter = new RateLimiter(new MemoryStore());
limiter.for('api', (req, { ip }) => [Limit.perMinute(5).by(ip), Limit.perHour(100).by(ip)]);
limiter.for('login', (req, { ip }) =>
  Limit.perMinute(3)
    .by(ip)
    .after((res) => /** @type {import('node:http').ServerResponse} */ (res).statusCode >= 400)
    .response(() => ({ error: 'too many failed logins, try again later' })),
);

// Behind a reverse proxy, add `trustProxy: 1` (its X-Forwarded-For entry is then the client).
const guards = { api: throttle('api', { limiter }), login: throttle('login', { limiter }) };

/** @param {import('node:http').IncomingMessage} req @param {import('node:http').ServerResponse} res */
function app(req, res) {
  const url = new URL(req.url ?? '/', 'http://x');
  const route = req.method === 'POST' && url.pathname === '/login' ? 'login' : url.pathname === '/health' ? null : 'api';
  /** @param {unknown} [err] */
  const next = (err) => {
    if (err) {
      // A store failure (or a request the limiter refuses to key) arrives here.
      res.statusCode = /** @type {{ statusCode?: number }} */ (err).statusCode ?? 500;
      res.end('error\n');
      return;
    }
    if (route === 'login') {
      const ok = url.searchParams.has('ok');
      res.statusCode = ok ? 200 : 401;
      res.end(ok ? 'welcome\n' : 'wrong password\n');
    } else {
      res.end('hello\n');
    }
  };
  if (route === null) next();
  else guards[route](req, res, next);
}

const demo = process.argv.includes('--demo');
const server = createServer(app).listen(demo ? 0 : 8080, '127.0.0.1', async () => {
  const address = server.address();
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 8080}`;
  if (!demo) {
    console.log(`listening on ${base}`);
    return;
  }
  const show = async (/** @type {string} */ method, /** @type {string} */ path) => {
    const res = await fetch(base + path, { method });
    const fields = ['retry-after', 'ratelimit-policy', 'ratelimit'].filter((h) => res.headers.has(h)).map((h) => `${h}: ${res.headers.get(h)}`);
    console.log(`${method} ${path} -> ${res.status} ${(await res.text()).trim()}${fields.length ? `  [${fields.join('; ')}]` : ''}`);
  };
  for (let i = 0; i < 6; i++) await show('GET', '/');
  await show('POST', '/login?ok');
  for (let i = 0; i < 4; i++) await show('POST', '/login');
  await show('GET', '/health');
  server.close();
});
