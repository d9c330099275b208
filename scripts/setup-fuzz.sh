#!/usr/bin/env bash
# Installs cargo-fuzz (the fuzz part of the test command needs it); skips what is present.
# The targets build with the stable toolchain under RUSTC_BOOTSTRAP=1 (libFuzzer's instrumentation
# flags are nightly-only options of rustc).
set -euo pipefail
CARGO_FUZZ_VERSION=0.13.2
if cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  exit 0
fi
cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
