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

for part in "${parts[@]}"; do
  if [ ! -f "scripts/test-$part.sh" ]; then
    echo "unknown part '$part' (known: ${all[*]})" >&2
    exit 2
  fi
done

# The wasmtime host crate of the wasm-component part is the heaviest build of all (a cold release build of
# wasmtime and cranelift, minutes of CPU) and needs nothing the other parts make. When that part comes
# after others, it is built in the background from the start, at the lowest priority, on the CPU the
# earlier parts leave idle while their tests wait on servers and timers; the part itself then finds it
# built (or builds the rest, and shows any error, itself).
prebuild=""
prebuild_log="${TMPDIR:-/tmp}/ratewindow-wasm-host-build.$$.log"
stop_prebuild() {
  if [ -n "$prebuild" ]; then
    kill -- "-$prebuild" 2> /dev/null || true
    wait "$prebuild" 2> /dev/null || true
    prebuild=""
    rm -f "$prebuild_log"
  fi
}
trap stop_prebuild EXIT
if [ "${parts[0]}" != wasm-component ] && [[ " ${parts[*]} " == *" wasm-component "* ]]; then
  setsid nice -n 19 bash scripts/test-wasm-component.sh --build-host > "$prebuild_log" 2>&1 &
  prebuild=$!
  echo "=== building the wasmtime host in the background (pid $prebuild, log $prebuild_log)"
fi

started=$(date +%s)
for part in "${parts[@]}"; do
  script="scripts/test-$part.sh"
  if [ "$part" = wasm-component ] && [ -n "$prebuild" ]; then
    status=0
    wait "$prebuild" || status=$?
    prebuild=""
    echo "=== the background build of the wasmtime host ended (exit $status)"
    [ "$status" -eq 0 ] || tail -20 "$prebuild_log"
    rm -f "$prebuild_log"
  fi
  echo "=== $part"
  t=$(date +%s)
  bash "$script"
  echo "=== $part passed in $(( $(date +%s) - t )) s"
done
echo "=== all passed (${parts[*]}) in $(( $(date +%s) - started )) s"
