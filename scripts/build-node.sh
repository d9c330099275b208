#!/usr/bin/env bash
# Builds the Node addon (release) and its TypeScript layer: bindings-node/ratewindow.<platform>.node and
# bindings-node/dist/. Calls setup-node.sh first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup-node.sh"
cd "$ROOT/bindings-node"
npx napi build --platform --release --no-js --dts native.d.ts
npx tsc -p tsconfig.json
