#!/usr/bin/env bash
# The Rust toolchain for wasm32-unknown-unknown, shared by every WebAssembly part of ratewindow.
#
#   scripts/wasm-toolchain.sh setup          make a toolchain available (idempotent), print which one
#   scripts/wasm-toolchain.sh env            print `export` lines for it:  eval "$(scripts/wasm-toolchain.sh env)"
#   scripts/wasm-toolchain.sh cargo ARGS...  run `cargo ARGS... <target args>` with it, e.g.
#                                            scripts/wasm-toolchain.sh cargo build --release -p my-crate
#
# Two toolchains, picked by RATEWINDOW_WASM_TOOLCHAIN = auto (default) | rustup | debian:
#   rustup  the rustup toolchain with `rustup target add wasm32-unknown-unknown` (needs static.rust-lang.org)
#   debian  Debian's rustc-web, cargo-web, rust-web-src and lld-19 (apt): /usr/bin/cargo builds std from
#           source (-Zbuild-std, RUSTC_BOOTSTRAP=1) and links with wasm-ld-19.
# `auto` tries rustup first and falls back to debian. Both produce the same kind of module.
#
# Exported by `env` (and set for `cargo`):
#   WASM_TOOLCHAIN    rustup | debian
#   WASM_CARGO        the cargo binary to run
#   WASM_CARGO_ARGS   arguments to append to `cargo build` (the target, and -Zbuild-std for debian)
#   WASM_TARGET_DIR   a target dir of its own per toolchain (override with WASM_TARGET_DIR)
#   WASM_OUT_SUBDIR   where artifacts land under the target dir: wasm32-unknown-unknown/<profile>
#   plus, for debian: RUSTC, RUSTC_BOOTSTRAP, CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET=wasm32-unknown-unknown
CHOICE="${RATEWINDOW_WASM_TOOLCHAIN:-auto}"

log() { echo "wasm-toolchain: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

rustup_ready() {
  command -v rustup >/dev/null && (cd "$ROOT" && rustup target list --installed 2>/dev/null) | grep -qx "$TARGET"
}

try_rustup() {
  rustup_ready && return 0
  command -v rustup >/dev/null || return 1
  log "rustup target add $TARGET"
  (cd "$ROOT" && timeout 300 rustup target add "$TARGET" >&2) || return 1
  rustup_ready
}

debian_ready() {
  [ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ] && command -v wasm-ld-19 >/dev/null \
    && [ -d "$(/usr/bin/rustc --print sysroot)/lib/rustlib/src/rust/library" ]
}

try_debian() {
  debian_ready && return 0
  command -v apt-get >/dev/null || return 1
  log "apt-get install rustc-web cargo-web rust-web-src lld-19"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q rustc-web cargo-web rust-web-src lld-19 >&2 \
    || { as_root apt-get update -q >&2 && as_root env DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -q rustc-web cargo-web rust-web-src lld-19 >&2; } || return 1
  debian_ready
}

pick() {
  case "$CHOICE" in
    rustup) try_rustup && echo rustup ;;
    debian) try_debian && echo debian ;;
    auto) if try_rustup; then echo rustup; elif try_debian; then echo debian; else return 1; fi ;;
    *) log "RATEWINDOW_WASM_TOOLCHAIN must be auto, rustup or debian (got '$CHOICE')"; return 2 ;;
  esac
}

emit_env() {
  local which="$1"
  case "$which" in
    rustup)
      echo "export WASM_TOOLCHAIN=rustup"
      echo "export WASM_CARGO=cargo"
      echo "export WASM_CARGO_ARGS='--target $TARGET'"
      echo "export WASM_TARGET_DIR='${WASM_TARGET_DIR:-$ROOT/target-wasm}'"
      ;;
    debian)
      echo "export WASM_TOOLCHAIN=debian"
      echo "export WASM_CARGO=/usr/bin/cargo"
      echo "export WASM_CARGO_ARGS='--target $TARGET -Zbuild-std=std,panic_abort'"
      echo "export WASM_TARGET_DIR='${WASM_TARGET_DIR:-$ROOT/target-wasm-debian}'"
      echo "export RUSTC=/usr/bin/rustc"
      echo "export RUSTC_BOOTSTRAP=1"
      echo "export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-19"
      ;;
  esac
  echo "export WASM_OUT_SUBDIR=$TARGET"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  setup)
    which="$(pick)" || { log "no toolchain for $TARGET (tried: $CHOICE)"; exit 1; }
    log "using the $which toolchain"
    echo "$which"
    ;;
  env)
    which="$(pick)" || { log "no toolchain for $TARGET (tried: $CHOICE)"; exit 1; }
    emit_env "$which"
    ;;
  cargo)
    which="$(pick)" || { log "no toolchain for $TARGET (tried: $CHOICE)"; exit 1; }
    eval "$(emit_env "$which")"
    export CARGO_TARGET_DIR="$WASM_TARGET_DIR"
    log "$which: $WASM_CARGO $* $WASM_CARGO_ARGS (target dir $CARGO_TARGET_DIR)"
    # shellcheck disable=SC2086 # WASM_CARGO_ARGS is a list of words
    exec "$WASM_CARGO" "$@" $WASM_CARGO_ARGS
    ;;
  *)
    sed -n '2,22p' "$0" >&2
    exit 2
    ;;
esac
