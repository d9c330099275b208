#!/usr/bin/env bash
# Builds @ratewindow/wasm (bindings-wasm/js/):
#   1. the crate ratewindow-wasm for wasm32-unknown-unknown (scripts/wasm-toolchain.sh picks rustup or
#      Debian's build-std toolchain), in its own target dir (target-wasm-js-<toolchain>/ unless WASM_TARGET_DIR);
#   2. wasm-bindgen --target web into bindings-wasm/js/pkg/ (ESM glue that every runtime can load; no
#      name or producers section;
#      `--keep-lld-exports` keeps `__stack_pointer`, which the JS wrapper resets after a trap);
#   3. the Node package's TypeScript layer (bindings-node/ts/, minus its addon loader native.ts) staged
#      with this package's entry points into bindings-wasm/js/build/, relative imports given their `.js`
#      (ES modules need the full name), and compiled by tsc into bindings-wasm/js/dist/: only what the
#      entry points reach (tsconfig.json `files`), i.e. the memory store, the rate limiter, the errors
#      and the kit.
# Assumes scripts/setup-wasm-js.sh has run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/bindings-wasm/js"
USER_TARGET_DIR="${WASM_TARGET_DIR:-}"
eval "$("$ROOT/scripts/wasm-toolchain.sh" env)"
# A target dir of our own per toolchain: the component's builds use other profile settings.
export WASM_TARGET_DIR="${USER_TARGET_DIR:-$ROOT/target-wasm-js-$WASM_TOOLCHAIN}"

# Speed first (this package is what a hot path calls); panics abort on wasm32 and the crate never
# panics on host input.
export CARGO_PROFILE_RELEASE_OPT_LEVEL="${RATEWINDOW_WASM_OPT_LEVEL:-3}" CARGO_PROFILE_RELEASE_LTO=fat \
  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_PANIC=abort
(cd "$ROOT" && "$ROOT/scripts/wasm-toolchain.sh" cargo build --release -q -p ratewindow-wasm)
module="$WASM_TARGET_DIR/$WASM_OUT_SUBDIR/release/ratewindow_wasm.wasm"

rm -rf "$PKG/pkg"
wasm-bindgen --target web --keep-lld-exports --remove-name-section --remove-producers-section --out-dir "$PKG/pkg" "$module"

# Stage the TypeScript layer: theirs under build/layer/ (with our native.ts), ours at build/.
rm -rf "$PKG/build" "$PKG/dist"
mkdir -p "$PKG/build/layer"
for f in "$ROOT"/bindings-node/ts/*.ts; do
  [ "$(basename "$f")" = native.ts ] && continue
  cp "$f" "$PKG/build/layer/"
done
cp "$PKG/ts/native.ts" "$PKG/build/layer/native.ts"
for f in "$PKG"/ts/*.ts; do
  [ "$(basename "$f")" = native.ts ] && continue
  cp "$f" "$PKG/build/"
done
# `from './store'` -> `from './store.js'` (only relative specifiers without an extension).
node - "$PKG/build" <<'JS'
const fs = require('node:fs');
const path = require('node:path');
const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
  d.isDirectory() ? walk(path.join(dir, d.name)) : d.name.endsWith('.ts') ? [path.join(dir, d.name)] : []);
for (const file of walk(process.argv[2])) {
  const src = fs.readFileSync(file, 'utf8');
  const out = src.replace(/(\bfrom\s+|\bimport\s*\(\s*)(['"])(\.{1,2}\/[^'"]+?)\2/g, (all, lead, q, spec) =>
    /\.(m?js|json)$/.test(spec) ? all : `${lead}${q}${spec}.js${q}`);
  if (out !== src) fs.writeFileSync(file, out);
}
JS
(cd "$PKG" && node_modules/.bin/tsc -p tsconfig.json)
echo "@ratewindow/wasm: $(stat -c %s "$PKG/pkg/ratewindow_wasm_bg.wasm") bytes of wasm ($WASM_TOOLCHAIN toolchain, $(stat -c %s "$module") before wasm-bindgen)"
