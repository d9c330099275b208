// One shard: its users' commands share one cooldown with every other shard's, counted by the manager.
import { ShardedStore } from 'ratewindow';

const id = process.argv[2];
const cooldowns = new ShardedStore({ timeoutMs: 2000 });

for (let i = 0; i < 2; i++) {
  const verdict = await cooldowns.consume('claim:alice', { uses: 3, windowMs: 10_000 });
  console.log(
    verdict.allowed
      ? `shard ${id}: alice claims (${verdict.remaining} left)`
      : `shard ${id}: alice is on cooldown for ${Math.ceil(verdict.retryAfterMs / 1000)} s`,
  );
}
process.disconnect();
