// The conversation vectors' runner (tests/vectors/conversations/*.json, format in their README.md),
// shared by the Node package (conversations.test.mjs, the napi addon) and @ratewindow/wasm
// (bindings-wasm/js/test/conversations.test.mjs, its own public stores): every case runs through the
// PUBLIC stores (RedisStore, PostgresStore, SqliteStore) over a scripted client — a function in place
// of the user's client that checks each command against the case's next step and answers with its
// reply or rows, or throws its failure — and must reach the case's outcome, the same error kind and
// the same failed give-backs.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = join(root, 'tests', 'vectors', 'conversations');

// The weighted and mixed scripts (weights.json) are not in `store.scripts`: named by their text as the
// core ships it (without its comment lines, `sql::schema_text!`) and its SHA1.
const shipped = (source) => source.split(/(?<=\n)/).filter((line) => !/^[ \t]*--/.test(line)).join('');
const MORE_SCRIPTS = {};
for (const name of ['weighted', 'mixed']) {
  const source = shipped(readFileSync(join(root, 'core', 'src', 'redis', `${name}.lua`), 'utf8'));
  MORE_SCRIPTS[source] = name;
  MORE_SCRIPTS[createHash('sha1').update(source).digest('hex')] = name;
}

/** Runs every conversation vector through `api`'s public stores, each made with `backend`. */
export function conversationSuite(api, backend, title = 'conversation vectors through the public stores') {
  const limitOf = (l) => ({ uses: l.uses, windowMs: l.window_ms });
  // An entry's `cost` (weights.json) is passed only when the vector gives one.
  const withCost = (entry, cost) => (cost === undefined ? entry : { ...entry, cost });
  const entriesOf = (entries) => entries.map((e) => withCost({ key: e.key, limit: limitOf(e.limit) }, e.cost));
  /** A mixed batch's entries (`algorithm`: sliding, gcra or counter) as the public API's limits. */
  const mixedOf = (entries) =>
    entries.map((e) => {
      const l = limitOf(e.limit);
      const limit = e.algorithm === 'sliding' ? l
        : e.algorithm === 'gcra' ? { algorithm: 'gcra', ...l, ...(e.limit.burst === undefined ? {} : { burst: e.limit.burst }) }
        : { algorithm: e.algorithm, ...l };
      return withCost({ key: e.key, limit }, e.cost);
    });
  const options = (op) => (op.cost === undefined ? [] : [{ cost: op.cost }]);

  /** The steps of the call under way, checked and answered one command at a time. */
  class Script {
    constructor() {
      this.steps = [];
      this.at = 0;
      this.callId = undefined;
      this.where = '';
    }

    start(steps, where) {
      this.steps = steps;
      this.at = 0;
      this.callId = undefined;
      this.where = where;
    }

    /** `{call_id}` in the expected values stands for the call's id: a non-empty string, the same all call long. */
    values(expected, got, what) {
      assert.equal(got.length, expected.length, `${this.where}: ${what} ${JSON.stringify(got)}`);
      expected.forEach((e, i) => {
        if (e === '{call_id}') {
          assert.ok(typeof got[i] === 'string' && got[i].length > 0, `${this.where}: a call id`);
          this.callId ??= got[i];
          assert.equal(got[i], this.callId, `${this.where}: the same call id all call long`);
        } else {
          assert.deepEqual(got[i], e, `${this.where}: ${what} #${i}`);
        }
      });
    }

    next() {
      const step = this.steps[this.at++];
      assert.ok(step !== undefined, `${this.where}: the call asked for more than its ${this.steps.length} steps`);
      return step;
    }

    answer(step) {
      if ('fail' in step) throw new Error(step.fail);
      return 'rows' in step ? step.rows : step.reply;
    }

    done() {
      assert.equal(this.at, this.steps.length, `${this.where}: the call ended after ${this.at} of ${this.steps.length} steps`);
    }
  }

  /** A RedisStore over a scripted client. */
  function redisStore(options, script, reports) {
    const names = { ...MORE_SCRIPTS };
    const run = (text, bySha1, keys, args) => {
      const step = script.next();
      const c = step.command;
      if (c !== undefined) {
        assert.equal(names[text], c.script, `${script.where}: the script`);
        assert.equal(bySha1, c.by_sha1, `${script.where}: by_sha1`);
        assert.deepEqual(keys, c.keys, `${script.where}: keys`);
        script.values(c.args, args, 'args');
      }
      return script.answer(step);
    };
    const store = api.RedisStore.using((source, keys, args) => run(source, false, keys, args), {
      backend,
      prefix: options.prefix ?? 'ratewindow:',
      hashTag: options.hash_tag,
      evalsha: options.evalsha === false ? undefined : (sha1, keys, args) => run(sha1, true, keys, args),
      onGiveBackError: (e) => reports.push(e),
    });
    for (const [name, s] of Object.entries(store.scripts)) {
      names[s.sha1] = name;
      names[s.source] = name;
    }
    return store;
  }

  /** Checks one SQL statement the store runs against the current step; answers on the step's last one. */
  function sqlStatement(script, state, sql, params) {
    if (state.step === undefined) {
      state.step = script.next();
      state.at = 0;
    }
    const step = state.step;
    const c = step.command;
    if (c !== undefined) {
      assert.equal(sql, c.sql[state.at], `${script.where}: statement #${state.at}`);
      script.values(c.params[state.at], params, `params of statement #${state.at}`);
    }
    state.at++;
    const last = c === undefined || state.at === c.sql.length;
    if ('fail' in step || last) state.step = undefined;
    if ('fail' in step) throw new Error(step.fail);
    return last ? step.rows : [];
  }

  function postgresStore(options, script) {
    const state = {};
    return api.PostgresStore.using(async (sql, params) => sqlStatement(script, state, sql, params), { backend, prefix: options.prefix });
  }

  function sqliteStore(options, script, clock) {
    const state = {};
    const db = {
      exec: () => undefined, // the connection setup
      prepare: (sql) => ({
        run: (...params) => sqlStatement(script, state, sql, params),
        all: (...params) => sqlStatement(script, state, sql, params),
      }),
    };
    return new api.SqliteStore(db, { backend, prefix: options.prefix, clock });
  }

  /** The public call of `op` on `store`, awaited; `verdicts` holds earlier calls' verdicts (for `release`). */
  async function call(store, op, verdicts) {
    switch (op.op) {
      case 'consume': return { verdict: await store.consume(op.key, limitOf(op.limit), ...options(op)), batch: false };
      case 'peek': return { verdict: await store.peek(op.key, limitOf(op.limit), ...options(op)), batch: false };
      case 'consume_many': return { verdict: await store.consumeMany(entriesOf(op.entries)), batch: true };
      case 'peek_many': return { verdict: await store.peekMany(entriesOf(op.entries)), batch: true };
      case 'consume_mixed': return { verdict: await store.consumeMany(mixedOf(op.entries)), batch: true };
      case 'peek_mixed': return { verdict: await store.peekMany(mixedOf(op.entries)), batch: true };
      case 'release': return { unit: (await verdicts[op.of].release()) ?? null };
      case 'hit': {
        const h = await store.hitWindow(op.key, op.decay_ms, op.amount);
        return { hit: { count: h.count, reset_after_ms: h.resetAfterMs } };
      }
      case 'attempt': {
        const a = await store.attempt(op.key, op.max, op.decay_ms);
        return { attempt: { allowed: a.allowed, count: a.count, reset_after_ms: a.resetAfterMs } };
      }
      case 'attempts': return { int: await store.attempts(op.key) };
      case 'too_many_attempts': return { bool: await store.tooManyAttempts(op.key, op.max) };
      case 'remaining': return { int: await store.remaining(op.key, op.max) };
      case 'available_in': return { int: await store.availableIn(op.key) };
      case 'available_in_ms': return { int: await store.availableInMs(op.key) };
      case 'reset_attempts': return { unit: (await store.resetAttempts(op.key)) ?? null };
      case 'clear': return { unit: (await store.clear(op.key)) ?? null };
      default: throw new Error(`unknown conversation op ${JSON.stringify(op.op)}: teach this runner`);
    }
  }

  /** A public error as its kind: the one typed error per kind. */
  function kindOf(e) {
    if (e instanceof api.StoreReplyError) return 'reply';
    if (e instanceof api.StoreError) return 'store';
    if (e instanceof api.InternalError) return 'protocol';
    if (e instanceof TypeError) return 'unsupported';
    throw e;
  }

  function verdictFields(v, batch) {
    const out = { allowed: v.allowed, retry_after_ms: v.retryAfterMs, retry_timestamp: v.retryTimestamp ?? null };
    if (batch) out.blocked = v.blocked ?? null;
    return { ...out, limit: v.limit, remaining: v.remaining, refill_after_ms: v.refillAfterMs, reset_after_ms: v.resetAfterMs };
  }

  async function runCase(testCase, file) {
    const script = new Script();
    const reports = [];
    const clock = { t: 0, now() { return this.t; } };
    const options = testCase.options ?? {};
    const store =
      testCase.store === 'redis' ? redisStore(options, script, reports)
      : testCase.store === 'postgres' ? postgresStore(options, script)
      : sqliteStore(options, script, clock);
    const verdicts = [];
    for (const [i, c] of testCase.calls.entries()) {
      const where = `${file} / ${testCase.name} / call #${i} (${c.op.op})`;
      script.start(c.steps, where);
      reports.length = 0;
      if (c.now !== undefined) clock.t = c.now;
      try {
        const answer = await call(store, c.op, verdicts);
        if (answer.verdict !== undefined) {
          verdicts[i] = answer.verdict;
          // Node's single verdicts (consume, peek) have neither `blocked` nor `release` (as MemoryStore's):
          // those two fields are compared on batches.
          const expected = { ...c.outcome.verdict };
          if (!answer.batch) delete expected.blocked;
          const got = { verdict: verdictFields(answer.verdict, answer.batch), release: typeof answer.verdict.release === 'function' };
          assert.deepEqual(got, { verdict: expected, release: answer.batch ? c.outcome.release : false }, where);
        } else {
          assert.deepEqual(answer, c.outcome, where);
        }
      } catch (e) {
        if (e instanceof assert.AssertionError) throw e;
        assert.deepEqual({ error: kindOf(e) }, c.outcome, `${where}: ${e}`);
      }
      script.done();
      assert.deepEqual(
        reports.map((r) => ({ keys: [...r.keys] })),
        (c.give_back_failures ?? []).map((f) => ({ keys: f.keys })),
        `${where}: the failed give-backs`,
      );
      for (const r of reports) assert.ok(r instanceof api.GiveBackError && r.cause instanceof Error, where);
    }
  }

  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  describe(title, () => {
    it('finds conversation files', () => assert.ok(files.length > 0, `no *.json in ${dir}`));
    for (const file of files) {
      const doc = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      describe(file, () => {
        for (const testCase of doc.cases) it(testCase.name, () => runCase(testCase, file));
      });
    }
  });
}
