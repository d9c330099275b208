// The raw backend boundary under hostile numbers: the module must answer or throw a coded error, and
// never trap (a key with a lone surrogate is refused as invalid_argument:key). The TypeScript layer
// filters most of these first; the engine must not rely on it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

import { createBackend } from '../backend.mjs';

const backend = createBackend();
/** A store with its record (where each call leaves the rest of its answer). */
const fresh = (record = new Float64Array(backend.recordLayout().length)) => Object.assign(backend.createStore(record), { record });

const HOSTILE = [NaN, Infinity, -Infinity, -0, -1, 0.5, 1.5, 2 ** 53, 2 ** 64, 1e308, -1e308, 4_320_000_000_000_001, Number.MIN_VALUE];
const numbers = [0, 1, 1000, ...HOSTILE];

/** Runs `f`; it may answer or throw a coded refusal of a number, and nothing else. */
function answers(f, what) {
  try {
    const r = f();
    assert.ok(r === undefined || typeof r === 'number' || typeof r === 'boolean', `${what} returned ${r}`);
  } catch (e) {
    assert.ok(!(e instanceof WebAssembly.RuntimeError), `${what} trapped: ${e}`);
    assert.match(String(e.code), /^invalid_(limit:(uses|window_ms)|argument:(now|amount|max|key))$/, `${what} threw ${e}`);
  }
}

test('no hostile number traps any store method', () => {
  const store = fresh();
  const keys = ['', 'k', '\u{1F600}', '\uD800', 'x'.repeat(10_000)];
  let calls = 0;
  for (const a of numbers) {
    for (const b of numbers) {
      for (const key of keys) {
        answers(() => store.consume(key, a, b, a), `consume(${a}, ${b})`);
        answers(() => store.peek(key, a, b, b), `peek(${a}, ${b})`);
        answers(() => store.hit(key, a, b, b), `hit(${a}, ${b})`);
        answers(() => store.hitWindow(key, b, a, a), `hitWindow(${b}, ${a})`);
        answers(() => store.attempt(key, a, b, a), `attempt(${a}, ${b})`);
        answers(() => store.tooManyAttempts(key, a, b), 'tooManyAttempts');
        answers(() => store.remaining(key, a, b), 'remaining');
        answers(() => store.availableIn(key, a), 'availableIn');
        answers(() => store.availableInMs(key, b), 'availableInMs');
        answers(() => store.attempts(key, a), 'attempts');
        answers(() => store.resetAttempts(key, a), 'resetAttempts');
        calls += 11;
      }
      answers(() => store.batchPush('k', a, b), 'batchPush');
      answers(() => store.batchPush('j', b, a), 'batchPush');
      answers(() => store.batchConsume(a), 'batchConsume');
      answers(() => store.release(a, b), 'release');
      answers(() => store.dropRelease(b), 'dropRelease');
      answers(() => store.batchPeek(b), 'batchPeek');
      answers(() => store.purge(a), 'purge');
      answers(() => backend.checkLimit(a, b), 'checkLimit');
    }
  }
  assert.ok(calls > 1000);
  assert.equal(typeof store.size(), 'number');
});

test('an invalid limit throws the core\'s coded error and records nothing', () => {
  const store = fresh();
  assert.throws(() => store.consume('k', NaN, 1000, 0), { code: 'invalid_limit:uses', message: /invalid uses: NaN/ });
  assert.throws(() => store.consume('k', 1, NaN, 0), { code: 'invalid_limit:window_ms', message: /invalid windowMs: NaN/ });
  assert.throws(() => store.hit('k', 0, 1, 0), { code: 'invalid_limit:window_ms', message: /invalid decayMs: 0/ });
  assert.throws(() => store.hit('k', 1000, 0.5, 0), { code: 'invalid_argument:amount', message: /invalid amount: 0.5/ });
  assert.throws(() => store.attempt('k', NaN, 1000, 0), { code: 'invalid_argument:max' });
  assert.throws(() => store.consume('k', 1, 1000, -1), { code: 'invalid_argument:now', message: /invalid now: -1 \(expected a safe integer >= 0\)/ });
  assert.throws(() => backend.checkLimit(0, 1), { code: 'invalid_limit:uses' });
  assert.equal(store.size(), 0);
  // A refused push clears the pending batch: the next batch starts empty.
  store.batchPush('a', 1, 1000);
  assert.throws(() => store.batchPush('b', -1, 1000), { code: 'invalid_limit:uses' });
  assert.ok(store.batchConsume(0) > 0);
  assert.equal(store.size(), 0, 'the cleared batch recorded nothing');
});

test('a panic is an error with code "panic", many times over, and the module keeps working', () => {
  const store = fresh();
  assert.equal(store.consume('before', 1, 60_000, 0), 0);
  // Each trap leaves the aborted frames' shadow stack behind unless the wrapper resets it: 20000 of
  // them would run the 1 MiB stack out.
  for (let i = 0; i < 20_000; i++) {
    try {
      backend.panicForTest(`panic ${i}`);
      assert.fail('no throw');
    } catch (e) {
      if (e.code !== 'panic' || !e.message.includes(`panic ${i}`)) assert.fail(`${i}: ${e}`);
      if (!(e.cause instanceof WebAssembly.RuntimeError)) assert.fail(`${i}: cause ${e.cause}`);
    }
  }
  assert.equal(store.consume('before', 1, 60_000, 1), 60_000, 'the store kept its state');
  assert.equal(fresh().consume('after', 1, 1000, 0), 0);
  assert.equal(backend.noop(), 0);
});

test('release handles are held until released or dropped', () => {
  const store = fresh();
  store.batchPush('a', 2, 1000);
  const h1 = store.batchConsume(0);
  store.batchPush('a', 2, 1000);
  const h2 = store.batchConsume(1);
  assert.ok(h1 > 0 && h2 > h1);
  assert.equal(store.releaseHandles(), 2);
  store.batchPush('a', 2, 1000);
  store.batchPush('b', 2, 1000);
  assert.equal(store.batchConsume(2), -1000);
  assert.equal(store.record[4], 0, 'blocked');
  store.release(h1, 3);
  store.release(h1, 3);
  store.dropRelease(h2);
  assert.equal(store.releaseHandles(), 0);
  store.batchPush('a', 2, 1000);
  assert.ok(store.batchConsume(4) > 0, 'the released call gave its use back');
});

test('keys cross exactly: non-ASCII, long ones, and after the memory grows', () => {
  const store = fresh();
  const keys = [
    'a', 'A', ' a', 'é', 'e\u0301', '\u{1F600}', '\u{1F600}x', 'x\u{1F600}', '日本', 'ß'.repeat(70_000),
    'ß'.repeat(69_999) + 's', 'k'.repeat(300_000), '',
  ];
  for (const key of keys) assert.equal(store.consume(key, 1, 60_000, 0), 0, `first call to ${key.slice(0, 9)}`);
  for (const key of keys) assert.equal(store.consume(key, 1, 60_000, 1), 60_000, `second call to ${key.slice(0, 9)}`);
  // Enough keys to grow the module's memory several times: each must still be read as written.
  const many = 60_000;
  for (let i = 0; i < many; i++) assert.equal(store.consume(`user:${i}:\u00e9`, 1, 60_000, 2), 0);
  for (let i = 0; i < many; i += 7) assert.equal(store.consume(`user:${i}:\u00e9`, 1, 60_000, 3), 60_002);
  assert.equal(store.size(), keys.length + many);
  assert.equal(store.hit('ß'.repeat(70_000), 1_000, 2, 4), 2);
  assert.equal(store.attempts('ß'.repeat(70_000), 5), 2);
});

test('a key that outgrows the buffer halfway through keeps its first part', () => {
  const store = fresh();
  // ASCII first (written byte by byte into a buffer sized for it), then enough non-ASCII to grow it.
  const key = 'p'.repeat(400_000) + '\u00e9'.repeat(400_000);
  const sibling = 'p'.repeat(400_000) + '\u00e9'.repeat(399_999) + 'e';
  assert.equal(store.consume(key, 1, 60_000, 0), 0);
  assert.equal(store.consume(sibling, 1, 60_000, 0), 0, 'a different key');
  assert.equal(store.consume(key, 1, 60_000, 1), 60_000, 'the same key');
});

test('two backends over one module instance share its key buffer safely', async () => {
  const { createWasmBackend } = await import('../dist/wasm.js');
  const { initSync } = await import('../pkg/ratewindow_wasm.js');
  const exports = initSync(); // already instantiated: returns the instance's exports
  const one = createWasmBackend(exports).createStore(new Float64Array(6));
  const two = createWasmBackend(exports).createStore(new Float64Array(6));
  assert.equal(one.consume('a', 1, 60_000, 0), 0);
  // `two` grows the shared buffer past anything before (so it moves); `one` must write where it now is.
  assert.equal(two.consume('z'.repeat(16_000_000), 1, 60_000, 0), 0);
  assert.equal(one.consume('b', 1, 60_000, 1), 0);
  assert.equal(one.consume('a', 1, 60_000, 2), 60_000);
  assert.equal(one.consume('b', 1, 60_000, 2), 60_001);
  assert.equal(one.size(), 2);
});

test('a trap inside a store call retires that store; the others and new ones carry on', () => {
  // A real trap on a store's path: the glue's consume is swapped, in a child process, for a call that
  // panics in the module (the engine itself has no input that panics).
  const script = `
    const { createBackend } = await import(${JSON.stringify(new URL('../backend.mjs', import.meta.url).href)});
    const glue = await import(${JSON.stringify(new URL('../pkg/ratewindow_wasm.js', import.meta.url).href)});
    const backend = createBackend();
/** A store with its record (where each call leaves the rest of its answer). */
const fresh = (record = new Float64Array(backend.recordLayout().length)) => Object.assign(backend.createStore(record), { record });
    const other = backend.createStore(new Float64Array(6));
    other.consume('k', 1, 60000, 0);
    const store = fresh();
    store.hit('h', 60000, 2, 0);
    const consume = glue.WasmStore.prototype.consume;
    glue.WasmStore.prototype.consume = () => glue.panicForTest('inside consume');
    const seen = [];
    for (const call of [() => store.consume('k', 1, 1000, 1), () => store.attempts('h', 1), () => store.size()]) {
      try { call(); seen.push('no error'); } catch (e) { seen.push(e.code + ': ' + e.message); }
    }
    glue.WasmStore.prototype.consume = consume;
    seen.push(other.consume('k', 1, 60000, 2), backend.createStore(new Float64Array(6)).consume('k', 1, 1000, 2));
    console.log(JSON.stringify(seen));`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), [
    'panic: ratewindow (wasm) panicked: inside consume',
    'panic: ratewindow (wasm) panicked: inside consume',
    'panic: ratewindow (wasm) panicked: inside consume',
    60000,
    0,
  ]);
});

test('each answer leaves the rest in the store\'s record, laid out as backend.ts reads it', () => {
  assert.deepEqual(backend.recordLayout(), ['limit', 'remaining', 'refillAfterMs', 'resetAfterMs', 'blocked', 'allowed']);
  const a = fresh();
  const b = fresh();
  assert.equal(a.consume('k', 2, 1000, 0), 0);
  assert.deepEqual([...a.record.subarray(0, 4)], [2, 1, 1000, 1000]);
  assert.equal(b.peek('k', 5, 1000, 0), 0);
  assert.deepEqual([...b.record.subarray(0, 4)], [5, 5, 0, 0]);
  assert.deepEqual([...a.record.subarray(0, 4)], [2, 1, 1000, 1000], 'another store\'s call leaves this record alone');
  assert.equal(a.attempt('f', 1, 500, 10), 1);
  assert.deepEqual([a.record[5], a.record[3]], [1, 500]);
  assert.equal(a.attempt('f', 1, 500, 20), 1);
  assert.deepEqual([a.record[5], a.record[3]], [0, 490]);
  assert.equal(a.hitWindow('f', 500, 2, 110), 3);
  assert.equal(a.record[3], 400);
  // The record keeps working after the memory grows (its view is remade).
  for (let i = 0; i < 50_000; i++) a.consume(`grow:${i}`, 1, 60_000, 30);
  assert.equal(a.consume('k', 2, 1000, 40), 0);
  assert.deepEqual([...a.record.subarray(0, 4)], [2, 0, 960, 1000]);
});
