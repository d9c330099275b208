#!/usr/bin/env bash
# The Rust core: unit tests, the conformance vectors, the model-based proptests, the Redis scripts
# and the Redis call machine against a real server and a real Cluster (started if not running), doc tests, and the example.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust-env.sh
source scripts/services.sh
redis_up
postgres_up
# The Redis call machine's Cluster fallback runs against a real three-master cluster.
if ! scripts/redis-cluster.sh status > /dev/null 2>&1; then
  scripts/redis-cluster.sh start
  trap 'scripts/redis-cluster.sh stop' EXIT  # stop the cluster this script started
fi
export RATEWINDOW_CLUSTER_PORTS="${RATEWINDOW_CLUSTER_PORTS:-7101 7102 7103}"
cargo test -p ratewindow-core
cargo test -p ratewindow-tower  # the axum layer: a real server and client on loopback
cargo run -q -p ratewindow-core --example timeline > /dev/null
