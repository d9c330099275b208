// The web demo (examples/node/http-server.mjs --demo) runs and answers as its comments say: two limits
// on GET /, a successful login free and the fourth failed one refused with the limit's own response.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

import { repo } from './backend.mjs';
import { assertSecondsLeft } from './http-servers.mjs';

it('examples/node/http-server.mjs --demo', () => {
  const start = Date.now();
  const out = execFileSync(process.execPath, [join(repo, 'examples', 'node', 'http-server.mjs'), '--demo'], { encoding: 'utf8' });
  const statuses = out.trim().split('\n').map((line) => /-> (\d+)/.exec(line)[1]);
  assert.deepEqual(statuses, ['200', '200', '200', '200', '200', '429', '200', '401', '401', '401', '429', '200']);
  const refused = /POST \/login -> 429 \{"error":"too many failed logins, try again later"\}  \[retry-after: (\d+);/.exec(out);
  assert.ok(refused, out);
  // 60, or less by each second begun since the demo started (a loaded machine may take more than one).
  assertSecondsLeft(refused[1], start, 60, 'Retry-After');
  assert.match(out, /ratelimit-policy: "api.0";q=5;w=60, "api.1";q=100;w=3600/);
});
