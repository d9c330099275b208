#!/usr/bin/env bash
# Runs the Node demo, a simulated bot with stacked cooldowns (examples/node/bot.mjs), building the addon
# first if needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! ls "$ROOT"/bindings-node/ratewindow.*.node >/dev/null 2>&1 || [ ! -f "$ROOT/bindings-node/dist/index.js" ]; then
  "$ROOT/scripts/build-node.sh" >&2
else
  "$ROOT/scripts/setup-node.sh"
fi
exec node "$ROOT/examples/node/bot.mjs"
