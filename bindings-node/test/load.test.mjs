// The package loads both ways, from its own name, with one module instance behind both.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';

const require = createRequire(import.meta.url);

test('require and import give the same classes', async () => {
  const cjs = require('ratewindow');
  const esm = await import('ratewindow');
  for (const name of ['MemoryStore', 'CooldownStore', 'RateLimiter', 'Limit', 'GlobalLimit', 'Unlimited', 'cooldownLimit',
    'RateWindowError', 'InvalidLimitError', 'InvalidArgumentError', 'InternalError']) {
    assert.equal(typeof cjs[name], 'function', name);
    assert.equal(esm[name], cjs[name], name);
  }
  const store = new esm.MemoryStore();
  assert.ok(store instanceof cjs.CooldownStore);
  assert.equal(store.consume('k', { uses: 1, windowMs: 100 }).allowed, true);
  assert.equal(typeof require('ratewindow/testing').testStore, 'function');
  assert.equal((await import('ratewindow/testing')).testStore, require('ratewindow/testing').testStore);
  assert.equal(require('ratewindow/package.json').engines.node, '>=20');
});

test('loading the package starts no timer: a script using it exits at once', () => {
  const script = `const { MemoryStore } = require('ratewindow'); const s = new MemoryStore();
    for (let i = 0; i < 1000; i++) s.consume('k' + i, { uses: 1, windowMs: 3600000 }); console.log('done');`;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000, cwd: new URL('..', import.meta.url) });
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout.trim(), 'done');
});
