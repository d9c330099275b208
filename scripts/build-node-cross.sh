#!/usr/bin/env bash
# Cross-builds the Node addon for the other Linux targets of the npm packages, with Debian's cross
# compilers (not part of scripts/test.sh: each target is a full release build of several minutes):
#
#   scripts/build-node-cross.sh [aarch64-unknown-linux-gnu] [x86_64-unknown-linux-musl]
#
# Installs gcc-aarch64-linux-gnu, musl-tools and qemu-user with apt-get and the Rust targets with
# rustup if missing. Builds into target/cross (apart from the main build) and puts each
# ratewindow.<platform>.node into bindings-node/npm/<platform>/. Each addon is then checked as far as
# this machine can: its ELF header (machine, the libc it needs), and that it loads
# (dlopen, RTLD_NOW) in a tiny C host - arm64 glibc under qemu-aarch64, x64 musl natively - Node's napi_*
# functions stubbed (no arm64 Node binary is available here, so its JS is not run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/bindings-node"
targets=("$@")
# The musl addons are built by the release workflow (napi's cross toolchain): Debian has no arm64 musl
# libc to link against, and musl-gcc's x64 link does not find the libgcc_s the Rust target links
# (linking either to glibc instead would make a package that fails on Alpine; the check below refuses
# that). x86_64-unknown-linux-musl can still be asked for by name.
[ ${#targets[@]} -eq 0 ] && targets=(aarch64-unknown-linux-gnu)

need=()
command -v aarch64-linux-gnu-gcc > /dev/null || need+=(gcc-aarch64-linux-gnu)
command -v musl-gcc > /dev/null || need+=(musl-tools)
command -v qemu-aarch64 > /dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" > /dev/null
fi
rustup target add "${targets[@]}" > /dev/null

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# musl: the addon is a cdylib, so musl's libc.so is linked dynamically (-crt-static off), as Node on
# Alpine loads it, through musl-gcc (Debian's musl-tools).
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C target-feature=-crt-static"
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=musl-gcc
export CC_x86_64_unknown_linux_musl=musl-gcc CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc

cd "$PKG"
for target in "${targets[@]}"; do
  case "$target" in
    aarch64-unknown-linux-gnu) platform=linux-arm64-gnu machine=AArch64 ;;
    x86_64-unknown-linux-musl) platform=linux-x64-musl machine=X86-64 ;;
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
    *-musl) if ! grep -q '\[libc.so\]' <<< "$needed" || grep -q 'libc.so.6\|ld-linux' <<< "$needed"; then
              echo "$node_file does not link musl's libc.so alone: $needed" >&2; exit 1
            fi ;;
    *-gnu) grep -q 'libc.so.6' <<< "$needed" || { echo "$node_file links no glibc: $needed" >&2; exit 1; } ;;
  esac
  echo "$node_file: $(( $(stat -c %s "$node_file") / 1024 )) KB, built in $(( $(date +%s) - t )) s"
  echo "$needed"
  case "$platform" in
    linux-arm64-gnu) cc=aarch64-linux-gnu-gcc nm=aarch64-linux-gnu-nm run=(qemu-aarch64 -L /usr/aarch64-linux-gnu) ;;
    linux-x64-musl) cc=musl-gcc nm=nm run=() ;;  # a musl host process, run natively by ld-musl
  esac
  if true; then
    host="$(mktemp -d)"
    # Node's napi_* functions, which the addon imports, as stubs that abort if called: the loader
    # then resolves every other symbol against Debian's arm64 glibc, as it would inside Node.
    "$nm" -D --undefined-only "$node_file" | awk '$2 ~ /^napi_/ {print $2}' \
      | sed 's/.*/void &(void) { abort(); }/' | { echo '#include <stdlib.h>'; cat; } > "$host/stubs.c"
    cat > "$host/load.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
  void *init = dlsym(h, "napi_register_module_v1");
  printf("%s addon loaded: napi_register_module_v1 %s\n", argv[2], init ? "found" : "missing");
  return init ? 0 : 1;
}
C
    "$cc" -rdynamic -o "$host/load" "$host/load.c" "$host/stubs.c" -ldl
    "${run[@]}" "$host/load" "$PWD/$node_file" "$platform"
    rm -rf "$host"
  fi
done
