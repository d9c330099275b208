#!/usr/bin/env bash
# Installs what the WebAssembly parts need (idempotent; skips what is present):
#   - a Rust toolchain for wasm32-unknown-unknown (rustup target, else Debian's rustc-web + build-std),
#     chosen by scripts/wasm-toolchain.sh (RATEWINDOW_WASM_TOOLCHAIN=auto|rustup|debian);
#   - the pinned npm tools of bindings-wasm/ (jco), from its package-lock.json.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$ROOT/scripts/wasm-toolchain.sh" setup >/dev/null

if [ -f "$ROOT/bindings-wasm/package-lock.json" ]; then
  if [ ! -x "$ROOT/bindings-wasm/node_modules/.bin/jco" ] \
     || [ "$ROOT/bindings-wasm/package-lock.json" -nt "$ROOT/bindings-wasm/node_modules/.package-lock.json" ]; then
    (cd "$ROOT/bindings-wasm" && npm ci --no-audit --no-fund)
  fi
fi
