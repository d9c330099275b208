#!/usr/bin/env bash
# Installs what the WebAssembly component needs (idempotent; skips what is present):
#   - a Rust toolchain for wasm32-unknown-unknown (rustup target, else Debian's rustc-web + build-std),
#     chosen by scripts/wasm-toolchain.sh (RATEWINDOW_WASM_TOOLCHAIN=auto|rustup|debian);
#   - the pinned npm tools of bindings-wasm/ (jco), from its package-lock.json;
#   - the Python host's packages (wasmtime, pytest) into the shared venv .venv, from
#     bindings-wasm/host-py/requirements.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

"$ROOT/scripts/wasm-toolchain.sh" setup >/dev/null

if [ -f "$ROOT/bindings-wasm/package-lock.json" ]; then
  if [ ! -x "$ROOT/bindings-wasm/node_modules/.bin/jco" ] \
     || [ "$ROOT/bindings-wasm/package-lock.json" -nt "$ROOT/bindings-wasm/node_modules/.package-lock.json" ]; then
    (cd "$ROOT/bindings-wasm" && npm ci --no-audit --no-fund)
  fi
fi

venv="$ROOT/.venv"
reqs="$ROOT/bindings-wasm/host-py/requirements.txt"
stamp="$venv/.ratewindow-wasm-component-requirements"
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
  echo "$want" > "$stamp"
fi
