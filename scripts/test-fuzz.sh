#!/usr/bin/env bash
# The fuzz part of the test command: builds the cargo-fuzz targets in fuzz/ (libFuzzer, with overflow
# and debug assertions on) and runs each for a few seconds from the committed seeds in fuzz/seeds/,
# about 48 s of fuzzing in all. A crash fails the part and leaves its input in fuzz/artifacts/.
#
#   scripts/test-fuzz.sh              every target, FUZZ_SECONDS (12) each
#   FUZZ_SECONDS=300 scripts/test-fuzz.sh decoders    one target, longer
#
# The targets need libFuzzer's instrumentation flags, nightly-only options of rustc: they build with
# the stable toolchain under RUSTC_BOOTSTRAP=1 (no nightly toolchain needed), without a sanitizer (the
# core forbids unsafe code).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-fuzz.sh

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(call_machines decoders inputs memory_model)
seconds="${FUZZ_SECONDS:-12}"
export RUSTC_BOOTSTRAP=1
flags=(-s none -O -a)

cargo fuzz build "${flags[@]}" --fuzz-dir fuzz
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for target in "${targets[@]}"; do
  mkdir -p "$work/$target" "fuzz/seeds/$target"
  echo "--- fuzz $target (${seconds} s)"
  # New inputs go to the scratch corpus (the first directory); the committed seeds are only read.
  status=0
  cargo fuzz run "${flags[@]}" --fuzz-dir fuzz "$target" "$work/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -max_len=1024 >"$work/$target.log" 2>&1 || status=$?
  grep -E "^Done|panicked|SUMMARY|Failing input|Test unit written" "$work/$target.log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$work/$target.log" >&2
    echo "fuzz $target failed (exit $status); the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
