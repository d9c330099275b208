// Every Redis case of tests/vectors/conversations/*.json through the component's public `RedisStore`
// (hosted world, jco) with a scripted client: each script the component's call machine sends is checked
// against the case's next step and answered with its reply, or the step's failure is thrown as an Error
// (the host hands its message to the machine). Outcome, error kind and give-back failures must match.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

import { attempt, batchJson as batch, hostedOps, num, s64, verdictJson as verdict } from './component.mjs';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const DIR = path.join(ROOT, 'tests', 'vectors', 'conversations');
const files = readdirSync(DIR).filter((f) => f.endsWith('.json')).sort();

// A script as the core ships it: without its comment lines (first non-blank characters `--`), every
// other byte kept (the core's `sql::schema_text!`).
const shipped = (source) => source.split(/(?<=\n)/).filter((line) => !/^[ \t]*--/.test(line)).join('');

// The scripts' names by SHA1, from the core's Lua sources.
const SCRIPTS = new Map(
  ['sliding', 'fixed', 'weighted'].map((name) => {
    const source = shipped(readFileSync(path.join(ROOT, 'core', 'src', 'redis', `${name}.lua`), 'utf8'));
    return [createHash('sha1').update(source).digest('hex'), name];
  }),
);
const sha1 = (text) => createHash('sha1').update(text).digest('hex');

const scriptValue = (v) => {
  if (v === null) return { tag: 'nil' };
  if (typeof v === 'number') return Number.isInteger(v) ? { tag: 'integer', val: BigInt(v) } : { tag: 'float', val: v };
  if (typeof v === 'string') return { tag: 'text', val: v };
  throw new Error(`a reply value cannot be ${JSON.stringify(v)}`);
};
const scriptReply = (r) => (Array.isArray(r) ? { tag: 'array', val: r.map(scriptValue) } : { tag: 'value', val: scriptValue(r) });

/** A scripted client for one call: checks each command, answers with the step's reply or throws its failure. */
function scripted(steps) {
  const state = { next: 0, callId: null, mismatches: [] };
  state.run = (script, scriptSha1, keys, args) => {
    const step = steps[state.next];
    if (!step) {
      state.mismatches.push(`a command after the last step: ${JSON.stringify([keys, args])}`);
      throw new Error('the conversation has no more steps');
    }
    state.next += 1;
    if (step.command) {
      const bySha1 = script === '';
      if (!bySha1 && sha1(script) !== scriptSha1) state.mismatches.push(`the source sent is not ${scriptSha1}`);
      const want = step.command;
      const gotArgs = args.map((a, i) => {
        if (want.args?.[i] !== '{call_id}') return a;
        if (a === '' || (state.callId !== null && state.callId !== a)) state.mismatches.push(`call id ${a}`);
        state.callId = a;
        return '{call_id}';
      });
      const got = { script: SCRIPTS.get(scriptSha1) ?? '?', by_sha1: bySha1, keys: [...keys], args: gotArgs };
      try {
        assert.deepStrictEqual(got, want);
      } catch {
        state.mismatches.push(`step ${state.next - 1}: sent ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
      }
    }
    if ('fail' in step) throw new Error(step.fail);
    return scriptReply(step.reply);
  };
  return state;
}

const KINDS = { 'store-failed': 'store', 'malformed-reply': 'reply', protocol: 'protocol', unsupported: 'unsupported' };
const limit = (l) => ({ uses: l.uses, windowMs: l.window_ms });
const entries = (list) => list.map((e) => ({ key: e.key, limit: limit(e.limit), cost: e.cost }));

/** Runs one public call on `store`; its outcome in the vectors' shape, and its release token. */
function call(store, op, tokens) {
  const outcome = (fn, ok) => {
    const r = attempt(fn);
    if (r.err) return { error: KINDS[r.err.tag] ?? r.err.tag };
    return ok(r.ok);
  };
  let token = null;
  const consumed = (single) => (c) => {
    token = c.release ?? null;
    return { verdict: single ? verdict(c.verdict) : batch(c.verdict), release: token !== null };
  };
  const int = (n) => ({ int: num(n) });
  const unit = () => ({ unit: null });
  let out;
  switch (op.op) {
    case 'consume':
      if (op.cost !== undefined) out = outcome(() => store.consumeCost(op.key, limit(op.limit), op.cost), consumed(true));
      else out = outcome(() => store.consume(op.key, limit(op.limit)), consumed(true));
      break;
    case 'consume_many':
      out = outcome(() => store.consumeMany(entries(op.entries)), consumed(false));
      break;
    case 'peek':
      if (op.cost !== undefined) out = outcome(() => store.peekCost(op.key, limit(op.limit), op.cost), (v) => ({ verdict: verdict(v), release: false }));
      else out = outcome(() => store.peek(op.key, limit(op.limit)), (v) => ({ verdict: verdict(v), release: false }));
      break;
    case 'peek_many':
      out = outcome(() => store.peekMany(entries(op.entries)), (v) => ({ verdict: batch(v), release: false }));
      break;
    case 'release':
      out = outcome(() => store.release(tokens[op.of]), unit);
      break;
    case 'hit':
      out = outcome(() => store.hitWindow(op.key, op.decay_ms, s64(op.amount)), (h) => ({
        hit: { count: num(h.count), reset_after_ms: num(h.resetAfterMs) },
      }));
      break;
    case 'attempt':
      out = outcome(() => store.attempt(op.key, s64(op.max), op.decay_ms), (a) => ({
        attempt: { allowed: a.allowed, count: num(a.count), reset_after_ms: num(a.resetAfterMs) },
      }));
      break;
    case 'attempts':
      out = outcome(() => store.attempts(op.key), int);
      break;
    case 'too_many_attempts':
      out = outcome(() => store.tooManyAttempts(op.key, s64(op.max)), (b) => ({ bool: b }));
      break;
    case 'remaining':
      out = outcome(() => store.remaining(op.key, s64(op.max)), int);
      break;
    case 'available_in':
      out = outcome(() => store.availableIn(op.key), int);
      break;
    case 'available_in_ms':
      out = outcome(() => store.availableInMs(op.key), int);
      break;
    case 'reset_attempts':
      out = outcome(() => store.resetAttempts(op.key), unit);
      break;
    case 'clear':
      out = outcome(() => store.clear(op.key), unit);
      break;
    default:
      throw new Error(`unknown op ${op.op}`);
  }
  tokens.push(token);
  return out;
}

// The component's redis-store has no batch mixing algorithms (its core is built without the `mixed`
// feature, which needs the SQL machines): cases with `consume_mixed` / `peek_mixed` are left out, and
// counted below.
const mixes = (c) => c.calls.some((call) => call.op.op === 'consume_mixed' || call.op.op === 'peek_mixed');
let ran = 0;
let left = 0;
let weighted = 0;
for (const file of files) {
  const doc = JSON.parse(readFileSync(path.join(DIR, file), 'utf8'));
  for (const c of doc.cases.filter((c) => c.store === 'redis')) {
    if (mixes(c)) {
      left += 1;
      continue;
    }
    if (c.calls.some((call) => call.op.cost !== undefined)) weighted += 1;
    test(`${file}: ${c.name}`, async () => {
      const ops = await hostedOps();
      const o = c.options ?? {};
      const store = new ops.redis.RedisStore({ prefix: o.prefix, hashTagBefore: o.hash_tag, evalsha: o.evalsha });
      const tokens = [];
      c.calls.forEach((step, i) => {
        const script = scripted(step.steps);
        ops.host.runner = script.run;
        ops.host.giveBackFailures = [];
        const got = call(store, step.op, tokens);
        assert.deepStrictEqual(script.mismatches, [], `call ${i}`);
        assert.equal(script.next, step.steps.length, `call ${i}: ran ${script.next} of ${step.steps.length} steps`);
        assert.deepStrictEqual(got, step.outcome, `call ${i}: ${JSON.stringify(step.op)}`);
        for (const f of ops.host.giveBackFailures) assert.ok(f.callId && f.message);
        assert.deepStrictEqual(
          ops.host.giveBackFailures.map((f) => ({ keys: f.keys })),
          step.give_back_failures ?? [],
          `call ${i}: give-back failures`,
        );
      });
      ran += 1;
    });
  }
}

test('every Redis conversation ran', () => {
  assert.ok(ran >= 19, `${ran} cases`);
  assert.ok(weighted >= 1 && left >= 1 && left <= 2, `${weighted} weighted cases, ${left} mixed left out`);
});
