#!/usr/bin/env bash
# Runs the Node demos, three shards sharing cooldowns through their manager (examples/node/sharding/)
# and a simulated bot with stacked cooldowns (examples/node/bot.mjs), building the addon first if needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! ls "$ROOT"/bindings-node/ratewindow.*.node >/dev/null 2>&1 || [ ! -f "$ROOT/bindings-node/dist/index.js" ]; then
  "$ROOT/scripts/build-node.sh" >&2
else
  "$ROOT/scripts/setup-node.sh"
fi
# A shard manager with three shard processes sharing cooldowns (under a second).
node "$ROOT/examples/node/sharding/manager.mjs"
exec node "$ROOT/examples/node/bot.mjs"
