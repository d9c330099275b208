#!/usr/bin/env bash
# Builds and tests the Node addon `ratewindow` (bindings-node/): Rust lint, the native build, the
# TypeScript build and type checks (package and examples), then every node:test suite (unit, the
# conformance vectors, the kit on MemoryStore and against five broken stores, the panic test, loading
# by require and import), the demo and a short benchmark run. Exits non-zero on any failure.
#
# RATEWINDOW_BACKEND=wasm runs the same suites on the wasm-bindgen package (see bindings-node/test/backend.mjs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/bindings-node"

step() { printf '\n== node: %s\n' "$*"; }

step "setup and build"
"$ROOT/scripts/build-node.sh"

step "cargo fmt and clippy (ratewindow-node)"
(cd "$ROOT" && cargo fmt -p ratewindow-node -- --check)
(cd "$ROOT" && cargo clippy -p ratewindow-node --all-targets -- -D warnings)

step "tsc --noEmit (package, examples, the addon against the backend interface)"
(cd "$PKG" && npx tsc --noEmit -p tsconfig.json)
(cd "$PKG" && npx tsc --noEmit -p ../examples/node/tsconfig.json)
(cd "$PKG" && npx tsc -p test/types/tsconfig.json)  # the addon's generated types implement ts/backend.ts

step "services the store suites talk to (PostgreSQL on its unix socket, Redis, a Redis Cluster)"
# shellcheck source=services.sh
source "$ROOT/scripts/services.sh"
postgres_up
redis_up  # the shared Redis on 6379 (RedisStore suites; private servers on 6390-6394 are the tests' own)
# A three-master Redis Cluster of the Node suites' own (ports apart from the Python suite's), stopped on exit.
export RATEWINDOW_NODE_CLUSTER_PORTS="${RATEWINDOW_NODE_CLUSTER_PORTS:-7111 7112 7113}"
node_cluster() {
  RATEWINDOW_CLUSTER_PORTS="$RATEWINDOW_NODE_CLUSTER_PORTS" TMPDIR="${TMPDIR:-/tmp}/ratewindow-node" \
    "$ROOT/scripts/redis-cluster.sh" "$@"
}
node_cluster start
trap 'node_cluster stop' EXIT

step "the fault proxy the guard tests put in front of the servers (tests/faultproxy)"
(cd "$ROOT" && cargo build --release -p ratewindow-faultproxy --quiet)

step "node:test suites (backend: ${RATEWINDOW_BACKEND:-native})"
# The files run in parallel processes (node's default here is one at a time: cores - 1): most of their
# time is waiting on servers, timers and process start, not CPU; they share no port or key (private
# servers on ports of their own, prefixes per process). guard.test.mjs runs alone after them: its
# fault-proxy cases time answers against timeouts of a few hundred ms, which a loaded machine can miss.
# RATEWINDOW_NODE_TEST_CONCURRENCY=1 runs every file one after another.
suites=()
for f in "$PKG"/test/*.test.mjs; do
  [ "$(basename "$f")" = guard.test.mjs ] || suites+=("test/$(basename "$f")")
done
(cd "$PKG" && node --test --test-concurrency="${RATEWINDOW_NODE_TEST_CONCURRENCY:-4}" --test-reporter=spec "${suites[@]}")
(cd "$PKG" && node --test --test-reporter=spec test/guard.test.mjs)

step "examples: the demo bot, three shards sharing cooldowns through their manager, and a user's own store under the kit"
node "$ROOT/examples/node/bot.mjs" > /dev/null
node "$ROOT/examples/node/sharding/manager.mjs" > /dev/null
node --test --test-reporter=spec "$ROOT/examples/node/my-store.test.mjs"

step "benchmark (short run)"
(cd "$ROOT" && BENCH_QUICK=1 node bench/node/bench.mjs)
(cd "$ROOT" && BENCH_QUICK=1 node bench/node/sql.mjs)
(cd "$ROOT" && BENCH_QUICK=1 node bench/node/redis.mjs)

echo
echo "node: all passed"
