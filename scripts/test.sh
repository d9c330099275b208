#!/usr/bin/env bash
# Runs every test of ratewindow, installing what each part needs first (safe to run twice).
#
#   scripts/test.sh                 every part
#   scripts/test.sh core node       only these parts (core, fuzz, node, python, wasm-component, wasm-js, packaging, docs)
#
# Each part is scripts/test-<part>.sh and can be run alone for a quick inner loop.
set -euo pipefail
cd "$(dirname "$0")/.."

all=(core fuzz node python wasm-component wasm-js packaging docs)
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=("${all[@]}")

started=$(date +%s)
for part in "${parts[@]}"; do
  script="scripts/test-$part.sh"
  if [ ! -f "$script" ]; then
    echo "unknown part '$part' (known: ${all[*]})" >&2
    exit 2
  fi
  echo "=== $part"
  t=$(date +%s)
  bash "$script"
  echo "=== $part passed in $(( $(date +%s) - t )) s"
done
echo "=== all passed (${parts[*]}) in $(( $(date +%s) - started )) s"
