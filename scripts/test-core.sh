#!/usr/bin/env bash
# The Rust core: unit tests, the conformance vectors, the model-based proptests, the Redis scripts
# against a real server (started if not running), doc tests, and the example.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust-env.sh
source scripts/services.sh
redis_up
postgres_up
cargo test -p ratewindow-core
cargo run -q -p ratewindow-core --example timeline > /dev/null
