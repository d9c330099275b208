// Headless Chromium smoke test of @ratewindow/wasm: serves bindings-wasm/js/ over HTTP, opens
// browser/index.html (which imports dist/index.js and awaits init()), and checks what the page posts
// back. Needs `chromium` (Debian) and a built package (scripts/build-wasm-js.sh).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const root = fileURLToPath(new URL('..', import.meta.url));
const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.map': 'application/json' };

let resolveResult;
const result = new Promise((r) => (resolveResult = r));
const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (req.method === 'POST' && url.pathname === '/result') {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      res.end('ok');
      resolveResult(JSON.parse(body));
    });
    return;
  }
  const file = normalize(join(root, decodeURIComponent(url.pathname)));
  if (!file.startsWith(root) || file.includes(`${sep}node_modules${sep}`)) return res.writeHead(403).end();
  try {
    if (!statSync(file).isFile()) throw new Error('not a file');
    res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' });
    res.end(readFileSync(file));
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const { port } = server.address();

// Everything Chromium writes (its profile, and the singleton sockets it puts in TMPDIR) goes under one
// fresh directory, removed at the end.
const scratch = mkdtempSync(join(tmpdir(), 'ratewindow-chromium-'));
const profile = join(scratch, 'profile');
mkdirSync(join(scratch, 'tmp'));
const chromium = spawn(
  process.env.CHROMIUM ?? 'chromium',
  [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage',
    `--user-data-dir=${profile}`, '--remote-debugging-port=0',
    `http://127.0.0.1:${port}/browser/index.html`,
  ],
  // Its own process group, so the renderer and helper processes it starts are stopped with it.
  { stdio: ['ignore', 'ignore', 'pipe'], detached: true, env: { ...process.env, TMPDIR: join(scratch, 'tmp') } },
);
let stderr = '';
chromium.stderr.on('data', (c) => (stderr += c));
const exited = new Promise((r) => chromium.on('exit', (code, signal) => r({ code, signal })));

let timer;
try {
  const outcome = await Promise.race([
    result,
    exited.then(({ code, signal }) => ({ ok: false, error: `chromium exited early (${code ?? signal}): ${stderr.slice(-2000)}` })),
    new Promise((r) => (timer = setTimeout(() => r({ ok: false, error: `no result in 60 s: ${stderr.slice(-2000)}` }), 60_000))),
  ]);
  assert.ok(outcome.ok, outcome.error);
  const out = outcome.out;
  const quota = (remaining) => ({ limit: 2, remaining, refillAfterMs: 1000, resetAfterMs: 1000 });
  assert.deepEqual(out.consume, [
    { allowed: true, retryAfterMs: 0, ...quota(1) },
    { allowed: true, retryAfterMs: 0, ...quota(0) },
    { allowed: false, retryAfterMs: 1000, retryTimestamp: 1000, ...quota(0) },
  ]);
  assert.equal(out.afterRelease, true);
  assert.deepEqual(out.nan, { invalidLimit: true, code: 'ERR_RATEWINDOW_INVALID_LIMIT', field: 'uses' });
  assert.equal(out.panic, 'panic');
  assert.equal(out.stillWorks, true);
  assert.deepEqual(out.gcra, [true, 100]);
  assert.deepEqual(out.counter, [true, false]);
  assert.deepEqual(out.attempt, ['ran', false]);
  console.log(`chromium smoke test passed (${out.userAgent.match(/(?:Headless)?Chrome\/[\d.]+/)?.[0]}): consume ${out.nsPerConsume} ns/call in the page`);
} finally {
  clearTimeout(timer);
  const stop = (signal) => {
    try {
      process.kill(-chromium.pid, signal); // the group this script started
    } catch {
      // Already gone.
    }
  };
  stop('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
  stop('SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  server.close();
  try {
    rmSync(scratch, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
  } catch (e) {
    console.warn(`could not remove Chromium's scratch directory ${scratch}: ${e.message}`);
  }
}
