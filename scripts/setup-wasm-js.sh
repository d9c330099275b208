#!/usr/bin/env bash
# Installs what @ratewindow/wasm (bindings-wasm/js/) needs; idempotent, skips what is present:
#   - a Rust toolchain for wasm32-unknown-unknown (scripts/wasm-toolchain.sh: rustup target, else
#     Debian's rustc-web + build-std);
#   - wasm-bindgen-cli 0.2.130, the version of the crate's wasm-bindgen (they must match exactly);
#   - the package's npm dev tools (typescript, @types/node) from its package-lock.json;
#   - the Node package's npm dev tools, whose TypeScript layer and test suite this package reuses;
#   - Debian's chromium for the headless smoke test (RATEWINDOW_WASM_BROWSER=0 skips it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WASM_BINDGEN_VERSION=0.2.130

"$ROOT/scripts/wasm-toolchain.sh" setup >/dev/null

export PATH="$HOME/.cargo/bin:$PATH"
if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]; then
  # Without --locked: the CLI's own lockfile pins crates this machine's rustc may not build.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
fi

npm_ci() { # dir: `npm ci` unless node_modules is already what the lockfile says
  local dir="$1"
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund)
  fi
}
npm_ci "$ROOT/bindings-wasm/js"
npm_ci "$ROOT/bindings-node"

if [ "${RATEWINDOW_WASM_BROWSER:-1}" = 1 ] && ! command -v chromium >/dev/null; then
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
    || { as_root apt-get update -q && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
fi
