#!/usr/bin/env bash
# Tests @ratewindow/wasm (bindings-wasm/js/): sets up, builds (crate -> wasm-bindgen -> TypeScript), then
#   1. the unit tests on the host of the crate and of the glue it shares with the napi addon
#      (ratewindow-js-glue: numbers, keys, the record, the memory store's operations under hostile
#      numbers), cargo fmt --check, and clippy -D warnings (the crate for wasm32, rustup toolchain only:
#      Debian's rustc-web has no clippy; the glue for the host);
#   2. the Node package's own test files for the memory store and rate limiter (bindings-node/test/:
#      vectors, the conformance kit on MemoryStore, RateLimiter, errors, panics) with
#      RATEWINDOW_BACKEND=wasm, unchanged;
#   3. this package's typings (a consumer type-checked with bundler and node16 resolution, and without
#      the DOM lib) and its tests
#      (bindings-wasm/js/test/: the entry points, hostile numbers at the boundary, keys, traps, the
#      record, the vectors through the package's own MemoryStore, the size budget);
#   4. a smoke test in headless Chromium (Debian's `chromium`, installed by the setup);
#      RATEWINDOW_WASM_BROWSER=0 skips it.
# Exits non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"

"$ROOT/scripts/setup-wasm-js.sh"
"$ROOT/scripts/build-wasm-js.sh"

echo "== ratewindow-wasm and ratewindow-js-glue: fmt, clippy, host unit tests"
(cd "$ROOT" && cargo test -q -p ratewindow-wasm -p ratewindow-js-glue)
(cd "$ROOT" && cargo clippy -q -p ratewindow-js-glue --all-targets -- -D warnings)
if cargo fmt --version >/dev/null 2>&1; then
  (cd "$ROOT" && cargo fmt --check -p ratewindow-wasm -p ratewindow-js-glue)
else
  echo "(cargo fmt --check skipped: no rustfmt)"
fi
eval "$("$ROOT/scripts/wasm-toolchain.sh" env)"
if [ "$WASM_TOOLCHAIN" = rustup ]; then
  # shellcheck disable=SC2086 # WASM_CARGO_ARGS is a list of words
  (cd "$ROOT" && CARGO_TARGET_DIR="${WASM_TARGET_DIR:-$ROOT/target-wasm-js-rustup}" \
    cargo clippy -q -p ratewindow-wasm --all-targets $WASM_CARGO_ARGS -- -D warnings)
else
  echo "(clippy skipped: the $WASM_TOOLCHAIN toolchain has none)"
fi

echo "== the Node package's suite on the wasm backend"
# Its files for what this build carries: the vectors, the conformance kit on MemoryStore (and on stores
# in plain JS), the TypeScript layer's unit tests (MemoryStore, RateLimiter, Limit, errors), panics,
# GCRA / the counter / mixed batches on the memory store (rates.test.mjs), and weighted calls
# (weights-stores.test.mjs: the weights vectors on MemoryStore and SqliteStore, the weighted calls and
# the attempt's cost on the real Redis and PostgreSQL, every store on this build's engine: the suite
# picks it as its default backend and as its Redis backend). Not load.test.mjs (it loads the
# `ratewindow` package by name: the napi addon); this package's own tests run the conversation vectors
# and Redis through its public entry.
NODE_SUITE=(vectors.test.mjs rates-vectors.test.mjs rates.test.mjs weights-stores.test.mjs kit.test.mjs kit-fails.test.mjs unit.test.mjs panic.test.mjs)
(cd "$ROOT/bindings-node" && npm run -s build:ts)
for f in "${NODE_SUITE[@]}"; do
  [ -f "$ROOT/bindings-node/test/$f" ] || { echo "bindings-node/test/$f is gone: update NODE_SUITE" >&2; exit 1; }
done
(cd "$ROOT/bindings-node" && RATEWINDOW_BACKEND=wasm node --test --test-reporter=dot "${NODE_SUITE[@]/#/test/}")

echo "== @ratewindow/wasm's typings, as a user's tsc sees them (bundler and node16 resolution, with and without the DOM lib)"
(cd "$ROOT/bindings-wasm/js" && for res in bundler node16 node16-nodom; do node_modules/.bin/tsc -p "test/types/tsconfig.$res.json"; done)

echo "== @ratewindow/wasm's own tests"
(cd "$ROOT/bindings-wasm/js" && node --test --test-reporter=dot test/)

if [ "${RATEWINDOW_WASM_BROWSER:-1}" = 1 ]; then
  echo "== headless Chromium smoke test"
  node "$ROOT/bindings-wasm/js/browser/smoke.mjs"
else
  echo "(headless Chromium smoke test skipped: RATEWINDOW_WASM_BROWSER=0)"
fi
echo "@ratewindow/wasm: all tests passed"
