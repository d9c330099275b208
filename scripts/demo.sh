#!/usr/bin/env bash
# Runs the demos on the embedded in-memory store, installing what they need (safe to run twice).
#
#   scripts/demo.sh            the Node bot (examples/node/bot.mjs), then the Rust timeline and the
#                              Python service
#   scripts/demo.sh node       one of: node, rust, python
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust-env.sh

demos=("$@")
[ ${#demos[@]} -eq 0 ] && demos=(node rust python)
for demo in "${demos[@]}"; do
  case "$demo" in
    rust) echo "=== Rust: core/examples/timeline.rs"; cargo run -q -p ratewindow-core --example timeline ;;
    node) echo "=== Node: examples/node/bot.mjs"; bash scripts/demo-node.sh ;;
    python) echo "=== Python: examples/python/service.py"; bash scripts/demo-python.sh ;;
    *) echo "unknown demo '$demo' (node, rust, python)" >&2; exit 2 ;;
  esac
done
