#!/usr/bin/env bash
# Cross-builds the Node addon for the other Linux targets of the npm packages, with Debian's cross
# compilers (not part of scripts/test.sh: each target is a full release build of several minutes):
#
#   scripts/build-node-cross.sh [aarch64-unknown-linux-gnu] [x86_64-unknown-linux-musl] [aarch64-unknown-linux-musl]
#
# Installs gcc-aarch64-linux-gnu, musl-tools and qemu-user with apt-get and the Rust targets with
# rustup if missing. Builds into target/cross (apart from the main build) and puts each
# ratewindow.<platform>.node into bindings-node/npm/<platform>/. Each addon is then checked as far as
# this machine can: its ELF header (machine, interpreter/libc), and for arm64 glibc, that it loads
# (dlopen, RTLD_NOW) under qemu-aarch64 in a tiny C host with Debian's arm64 glibc, Node's napi_*
# functions stubbed (no arm64 Node binary is available here, so its JS is not run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/bindings-node"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl)

need=()
command -v aarch64-linux-gnu-gcc > /dev/null || need+=(gcc-aarch64-linux-gnu)
command -v musl-gcc > /dev/null || need+=(musl-tools)
command -v qemu-aarch64 > /dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" > /dev/null
fi
rustup target add "${targets[@]}" > /dev/null

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# musl: the addon is a cdylib, so the C runtime must be linked dynamically (-crt-static off), as
# Node on Alpine loads it; the aarch64 musl link goes through the glibc cross gcc with Rust's own
# self-contained musl crt objects.
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C target-feature=-crt-static"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C target-feature=-crt-static"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
export CC_x86_64_unknown_linux_musl=musl-gcc CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc

cd "$PKG"
for target in "${targets[@]}"; do
  case "$target" in
    aarch64-unknown-linux-gnu) platform=linux-arm64-gnu machine=AArch64 ;;
    x86_64-unknown-linux-musl) platform=linux-x64-musl machine=X86-64 ;;
    aarch64-unknown-linux-musl) platform=linux-arm64-musl machine=AArch64 ;;
    *) echo "build-node-cross: unknown target $target" >&2; exit 2 ;;
  esac
  echo "== $target"
  t=$(date +%s)
  npx napi build --platform --release --strip --target "$target" --target-dir "$ROOT/target/cross" \
    --output-dir "npm/$platform" --no-js --no-dts-header > /dev/null
  node_file="npm/$platform/ratewindow.$platform.node"
  readelf -h "$node_file" | grep -q "Machine:.*$machine" || { echo "$node_file is not $machine" >&2; exit 1; }
  needed="$(readelf -d "$node_file" | grep NEEDED || true)"
  case "$platform" in
    *-musl) grep -q 'libc.musl\|libc.so' <<< "$needed" || { echo "$node_file links no libc: $needed" >&2; exit 1; } ;;
    *-gnu) grep -q 'libc.so.6' <<< "$needed" || { echo "$node_file links no glibc: $needed" >&2; exit 1; } ;;
  esac
  echo "$node_file: $(( $(stat -c %s "$node_file") / 1024 )) KB, built in $(( $(date +%s) - t )) s"
  echo "$needed"
  if [ "$platform" = linux-arm64-gnu ]; then
    host="$(mktemp -d)"
    # Node's napi_* functions, which the addon imports, as stubs that abort if called: the loader
    # then resolves every other symbol against Debian's arm64 glibc, as it would inside Node.
    aarch64-linux-gnu-nm -D --undefined-only "$node_file" | awk '$2 ~ /^napi_/ {print $2}' \
      | sed 's/.*/void &(void) { abort(); }/' | { echo '#include <stdlib.h>'; cat; } > "$host/stubs.c"
    cat > "$host/load.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
  void *init = dlsym(h, "napi_register_module_v1");
  printf("loaded under qemu-aarch64: napi_register_module_v1 %s\n", init ? "found" : "missing");
  return init ? 0 : 1;
}
C
    aarch64-linux-gnu-gcc -rdynamic -o "$host/load" "$host/load.c" "$host/stubs.c" -ldl
    qemu-aarch64 -L /usr/aarch64-linux-gnu "$host/load" "$PWD/$node_file"
    rm -rf "$host"
  fi
done
