// A panic inside the engine must become a catchable error, never an abort of the process.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { api, backend } from './backend.mjs';

test('a Rust panic is thrown as an error with code "panic" and the process lives on', () => {
  for (let i = 0; i < 3; i++) {
    assert.throws(() => backend.panicForTest('deliberate test panic'), (e) => {
      assert.equal(e.code, 'panic');
      assert.match(e.message, /deliberate test panic/);
      return true;
    });
  }
  // The engine still works after it.
  const store = new api.MemoryStore();
  assert.equal(store.consume('after-panic', { uses: 1, windowMs: 1000 }).allowed, true);
});

test('a panic in a child process leaves it exiting normally (no abort signal)', () => {
  const script = `
    const { backend } = await import(${JSON.stringify(new URL('./backend.mjs', import.meta.url).href)});
    try { backend.panicForTest('child panic'); } catch (e) { console.log('caught', e.code); }
    console.log('alive');`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    env: { ...process.env, RUST_BACKTRACE: '0' },
  });
  assert.equal(child.signal, null, child.stderr);
  assert.equal(child.status, 0, child.stderr);
  assert.match(child.stdout, /caught panic\nalive/);
  void fileURLToPath;
});
