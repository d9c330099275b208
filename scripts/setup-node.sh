#!/usr/bin/env bash
# Installs what the Node addon needs (idempotent; skips what is present):
#   - checks Node >= 20, npm and cargo are on PATH;
#   - the pinned npm packages of bindings-node/ (@napi-rs/cli, typescript, @types/node,
#     rate-limiter-flexible for the benchmark), from its package-lock.json, by `npm ci`;
#   - examples/node/node_modules/ratewindow -> bindings-node, so the examples import 'ratewindow'.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/bindings-node"

command -v node >/dev/null || { echo "setup-node: node (>= 20) is required" >&2; exit 1; }
node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' \
  || { echo "setup-node: Node >= 20 is required (found $(node --version))" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup-node: npm is required" >&2; exit 1; }
command -v cargo >/dev/null || { echo "setup-node: cargo (Rust) is required" >&2; exit 1; }

# Two setups at once in one clone (two test parts, or a build beside a test) would run `npm ci` twice,
# and each wipes node_modules under the other: one at a time, by a lock on the package directory.
if command -v flock >/dev/null; then
  exec 9> "$PKG/.setup-node.lock"
  flock 9
fi
if [ ! -x "$PKG/node_modules/.bin/napi" ] || [ ! -x "$PKG/node_modules/.bin/tsc" ] \
   || [ "$PKG/package-lock.json" -nt "$PKG/node_modules/.package-lock.json" ]; then
  (cd "$PKG" && npm ci --no-audit --no-fund)
fi
# better-sqlite3 (SqliteStore tests and bench): npm 11 skips its install script and its prebuilt binary
# is on GitHub, so it is compiled here against the Debian Node headers (/usr/include/node), once.
if [ ! -f "$PKG/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]; then
  (cd "$PKG" && npm_config_nodedir=/usr npm rebuild better-sqlite3 --no-audit --no-fund)
fi

mkdir -p "$ROOT/examples/node/node_modules"
ln -sfn ../../../bindings-node "$ROOT/examples/node/node_modules/ratewindow"
