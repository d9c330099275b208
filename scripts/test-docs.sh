#!/usr/bin/env bash
# The docs site in a real browser: builds target/docs (scripts/docs.sh), serves it on a loopback port,
# and has headless Chromium load the index and one page of each API reference (rustdoc, TypeDoc, pdoc).
# Fails unless every link of the index is served, each page's HTML as served and its DOM as Chromium
# rendered it name the expected API (MemoryStore, RedisStore, consume …), and each screenshot shows a
# rendered page (not one colour, enough ink). Installs Debian's chromium if it is absent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

scripts/docs.sh
py="$root/.venv/bin/python"  # made by scripts/setup-python.sh (via docs.sh)

if ! command -v chromium > /dev/null 2>&1; then
  echo "== installing chromium (Debian)"
  apt-get install -y chromium > /dev/null || { apt-get update > /dev/null && apt-get install -y chromium > /dev/null; }
fi

work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2> /dev/null || true; wait "$server" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

shots="$root/target/docs-build/screenshots"  # kept for a look
mkdir -p "$shots"
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$py" -m http.server --bind 127.0.0.1 --directory "$root/target/docs" "$port" > "$work/server.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
for _ in $(seq 50); do
  curl -fsS -o /dev/null "$base/index.html" 2> /dev/null && break
  sleep 0.1
done
echo "== serving target/docs at $base"

echo "== every link of the index is served"
links="$(grep -o 'href="[^"#:]*"' target/docs/index.html | sed 's/^href="//; s/"$//' | sort -u)"
[ "$(echo "$links" | wc -l)" -ge 5 ] || { echo "index.html links to too few pages: $links" >&2; exit 1; }
for link in $links; do
  curl -fsS -o /dev/null "$base/$link" || { echo "index.html links to $link, which is not served" >&2; exit 1; }
done

chrome() {  # chrome OUTFLAG URL: one headless run with a fresh profile
  local profile
  profile="$(mktemp -d -p "$work")"
  timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --window-size=1280,900 --virtual-time-budget=3000 "$1" "$2" 2> "$profile.log"
}

# check NAME PATH WORD...: the served HTML and the rendered DOM of PATH contain every WORD, and the
# screenshot of it is a rendered page.
check() {
  local name="$1" path="$2"
  shift 2
  echo "== $name: $path"
  curl -fsS "$base/$path" > "$work/$name.html"
  chrome --dump-dom "$base/$path" > "$work/$name.dom.html"
  chrome --screenshot="$shots/$name.png" "$base/$path" > /dev/null
  for word in "$@"; do
    grep -q -- "$word" "$work/$name.html" || { echo "$path: the served HTML does not contain '$word'" >&2; exit 1; }
    grep -q -- "$word" "$work/$name.dom.html" || { echo "$path: the rendered DOM does not contain '$word'" >&2; exit 1; }
  done
  "$py" - "$shots/$name.png" << 'EOF'
# Decodes the PNG (zlib + struct, no dependencies) and requires a rendered page: not one colour, some ink.
import struct, sys, zlib
from collections import Counter

data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(data):
    (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and colour in (2, 6), f"unexpected PNG format: depth {depth}, colour type {colour}"
        bpp = 3 if colour == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw, stride = zlib.decompress(idat), width * bpp
prev, pixels = bytearray(stride), Counter()
for y in range(height):
    line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
    kind, cur = line[0], bytearray(line[1:])
    for i in range(stride):
        a = cur[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if kind == 1: cur[i] = (cur[i] + a) & 255
        elif kind == 2: cur[i] = (cur[i] + b) & 255
        elif kind == 3: cur[i] = (cur[i] + (a + b) // 2) & 255
        elif kind == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    pixels.update(bytes(cur[i:i + 3]) for i in range(0, stride, bpp))
    prev = cur
total = width * height
background, count = pixels.most_common(1)[0]
ink = 1 - count / total
print(f"   {width}x{height}, {len(pixels)} colours, {ink:.1%} not background")
assert (width, height) == (1280, 900), "unexpected screenshot size"
assert len(pixels) >= 16 and ink >= 0.02, "the page did not render (one colour or almost blank)"
EOF
}

check index index.html ratewindow "rust/ratewindow_core/index.html" "node/index.html" "python/ratewindow.html"
check rust rust/ratewindow_core/struct.MemoryStore.html MemoryStore consume consume_many
check node-modules node/modules/index.html MemoryStore RedisStore PostgresStore SqliteStore
check node node/classes/index.MemoryStore.html MemoryStore consume consumeMany
check node-http node/modules/http_express.html throttle
check python python/ratewindow.html MemoryStore RedisStore PostgresStore consume
echo "docs: screenshots in ${shots#"$root/"}"
echo "docs: the index and the Rust, Node and Python references render in Chromium"
