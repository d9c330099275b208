// tests/vectors/conversations/lock/redis.json through the public RedisStore with a scripted client:
// each lock call's commands (a plain SET NX PX / DEL / GET when the store has `command`, the lock
// script otherwise) checked step by step, the replies fed as the vectors spell them (node-redis and
// ioredis give 'OK' / null; the other spellings are redis-py's), the outcome compared.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import { RedisStore } from '../dist/index.js';
import { repo, backend } from './backend.mjs';

const file = JSON.parse(readFileSync(join(repo, 'tests', 'vectors', 'conversations', 'lock', 'redis.json'), 'utf8'));
const [lockSha1, lockSource] = backend.redisScripts().slice(4);

/** The scripted client: checks each command against the next step and answers its reply or throws. */
function scripted(name, steps) {
  let at = 0;
  const answer = (sent) => {
    const step = steps[at++];
    assert.ok(step, `${name}: a command too many: ${JSON.stringify(sent)}`);
    assert.deepEqual(sent, step.command, name);
    if ('fail' in step) throw new Error(step.fail);
    return Promise.resolve(step.reply);
  };
  const script = (bySha1) => (s, keys, args) => {
    assert.equal(s, bySha1 ? lockSha1 : lockSource, `${name}: the lock script's ${bySha1 ? 'SHA1' : 'source'}`);
    return answer({ script: 'lock', by_sha1: bySha1, keys, args });
  };
  return { run: script(false), evalsha: script(true), command: (args) => answer({ command: args }), left: () => steps.length - at };
}

describe('lock conversations (Redis)', () => {
  for (const c of file.cases) {
    // The wasm-bindgen build keeps the script acquire (its size budget): it asks for no plain command.
    const skip = c.options.commands && backend.kind !== 'native' ? 'the wasm-bindgen build runs the lock by script only' : false;
    it(c.name, { skip }, async () => {
      for (const call of c.calls) {
        const client = scripted(c.name, call.steps);
        const o = c.options;
        const store = RedisStore.using(client.run, {
          backend,
          prefix: o.prefix,
          hashTag: o.hash_tag,
          evalsha: o.evalsha === false ? undefined : client.evalsha,
          command: o.commands ? client.command : undefined,
        });
        const op = call.op;
        const lock = store.lock(op.key, op.ttl ?? 1, op.owner);
        const act = { acquire: () => lock.acquire(), release: () => lock.release(), force_release: () => lock.forceRelease(), owner: () => lock.currentOwner() }[op.op];
        const want = call.outcome;
        if ('error' in want) {
          await assert.rejects(act(), (e) => {
            assert.equal(e.code, want.error === 'store' ? 'ERR_RATEWINDOW_STORE' : 'ERR_RATEWINDOW_STORE_REPLY', `${c.name}: ${e}`);
            return true;
          });
        } else {
          assert.deepEqual(await act(), 'bool' in want ? want.bool : want.owner, c.name);
        }
        assert.equal(client.left(), 0, `${c.name}: steps left`);
      }
    });
  }
});
