// @ts-check
// A simulated bot: one button handler with stacked cooldowns (3 clicks per 10 s for each user, 100 per
// minute for everyone), five users clicking at their own rates for 30 seconds. It prints who was
// allowed and, when refused, how long the wait is and which cooldown refused.
//
// Run it with `scripts/demo-node.sh` (or `node examples/node/bot.mjs` once bindings-node is built).
// The simulated clock plays the 30 seconds at once; a real bot just writes `new MemoryStore()`.
import { MemoryStore } from 'ratewindow';

/** Virtual time, so the demo runs in an instant and prints the same every time. */
const clock = { t: Date.UTC(2026, 0, 1), now() { return this.t; } };
const start = clock.t;
const store = new MemoryStore({ clock });

/** @type {import('ratewindow').CooldownLimit} */
const perUser = { uses: 3, windowMs: 10_000 };
/** @type {import('ratewindow').CooldownLimit} */
const everyone = { uses: 100, windowMs: 60_000 };
const cooldownNames = ['per-user cooldown (3 per 10 s)', 'global cooldown (100 per minute)'];

/** The button handler: counts the click against both cooldowns at once, all or nothing. */
function onButtonClick(/** @type {string} */ user) {
  const verdict = store.consumeMany([
    { key: `button:check-in:${user}`, limit: perUser },
    { key: 'button:check-in', limit: everyone },
  ]);
  const at = `t=${((clock.t - start) / 1000).toFixed(1).padStart(5)}s`;
  if (verdict.allowed) {
    console.log(`${at}  ${user.padEnd(6)} allowed`);
  } else {
    const wait = (verdict.retryAfterMs / 1000).toFixed(1);
    console.log(`${at}  ${user.padEnd(6)} refused: wait ${wait}s (${cooldownNames[verdict.blocked ?? 0]})`);
  }
  return verdict.allowed;
}

/** Five users and the interval between their clicks, in ms. */
const users = { alice: 1_000, bob: 2_500, carol: 4_000, dave: 700, erin: 9_000 };
const next = Object.fromEntries(Object.keys(users).map((user, i) => [user, start + i * 100]));
const tally = Object.fromEntries(Object.keys(users).map((user) => [user, { allowed: 0, refused: 0 }]));

for (;;) {
  const [user, at] = Object.entries(next).sort((a, b) => a[1] - b[1])[0] ?? [];
  if (user === undefined || at === undefined || at - start > 30_000) break;
  clock.t = at;
  tally[user][onButtonClick(user) ? 'allowed' : 'refused']++;
  next[user] = at + users[/** @type {keyof typeof users} */ (user)];
}

console.log('\nafter 30 s:');
for (const [user, { allowed, refused }] of Object.entries(tally)) {
  console.log(`  ${user.padEnd(6)} ${String(allowed).padStart(2)} allowed, ${String(refused).padStart(2)} refused`);
}
