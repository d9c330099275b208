#!/usr/bin/env bash
# The Rust core: unit tests, the conformance vectors, the model-based proptests, doc tests, the example.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust-env.sh
cargo test -p ratewindow-core
cargo run -q -p ratewindow-core --example timeline > /dev/null
