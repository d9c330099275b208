#!/usr/bin/env bash
# The WebAssembly component: setup, build both worlds (wasm32-unknown-unknown, `jco new`, read back and
# size-checked by build-wasm-component.sh), then every test in three real hosts:
#   Rust    bindings-wasm/host-rs   wasmtime 48 (component model, bindgen!)   cargo test
#           (incl. the hosted world's Redis store against the real server on 127.0.0.1:6379)
#   Python  bindings-wasm/host-py   wasmtime-py 50 (wasmtime.component)       pytest
#   Node    bindings-wasm/host-node jco transpile                             node --test
# The wasmtime host crate is built in its own target dir (target-wasm-host): heavy once, cached after.
# RATEWINDOW_WASM_TOOLCHAIN=rustup|debian forces a toolchain for the guest (default: auto).
#
#   scripts/test-wasm-component.sh               the whole part
#   scripts/test-wasm-component.sh --build-host  only builds the wasmtime host's tests (scripts/test.sh runs
#                                                this in the background, niced, while the earlier parts test)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/rust-env.sh

# cargo for the wasmtime host crate, in its own target dir (target-wasm-host). No LTO and more codegen
# units: wasmtime compiles and links much faster; host-call speed is unchanged.
host_cargo() {
  CARGO_TARGET_DIR="${RATEWINDOW_WASM_HOST_TARGET:-$ROOT/target-wasm-host}" \
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo test --release -q -p ratewindow-host-rs "$@"
}
if [ "${1:-}" = --build-host ]; then
  host_cargo --no-run
  exit
fi

bash scripts/setup-wasm.sh
bash scripts/build-wasm-component.sh

echo "--- jco transpile"
JCO="$ROOT/bindings-wasm/node_modules/.bin/jco"
for world in engine hosted; do
  out="$ROOT/bindings-wasm/component/dist/jco/$world"
  rm -rf "$out"
  "$JCO" transpile "bindings-wasm/component/dist/ratewindow-$world.wasm" -o "$out" \
    --instantiation async --name "ratewindow-$world" --no-typescript -q
  # jco 1.35's generated code reads process.env.JCO_DEBUG on every task step, which costs ~4x the call
  # itself in Node; read it once at load instead (same behaviour, JCO_DEBUG still honoured).
  js="$out/ratewindow-$world.js"
  grep -q 'if (!globalThis?.process?.env?.JCO_DEBUG) { return; }' "$js"
  sed -i -e 's/if (!globalThis?.process?.env?.JCO_DEBUG) { return; }/if (!JCO_DEBUG_AT_LOAD) { return; }/' \
    -e '0,/^  const _debugLog = /s//  const JCO_DEBUG_AT_LOAD = globalThis?.process?.env?.JCO_DEBUG;\n  const _debugLog = /' "$js"
done
echo '{ "type": "module" }' > "$ROOT/bindings-wasm/component/dist/jco/package.json"

echo "--- Rust host (wasmtime)"
# shellcheck source=services.sh
source "$ROOT/scripts/services.sh"
redis_up
host_cargo

echo "--- Python host (wasmtime-py)"
(cd bindings-wasm/host-py && "$ROOT/.venv/bin/python" -m mypy --no-incremental)
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider bindings-wasm/host-py

echo "--- Node host (jco)"
(cd bindings-wasm && node --test host-node/)
