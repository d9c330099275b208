#!/usr/bin/env bash
# The lock bench's load-independent measure: this Node process's instructions a pair under callgrind,
# ours (ratewindow Lock acquire + release on RedisStore) and bare (SET NX PX + compare-and-delete
# EVALSHA), and `calls` (ours with the lock's commands not planned: one engine call an operation), on
# node-redis, ioredis and a client that answers at once (noio), 64 pairs in flight. One process per
# client: all warmed up, then ours, bare, calls, ours, bare, calls for N pairs each, a dump after each
# (see BENCH_CALLGRIND in lock.mjs); a figure is the mean of its two runs.
#   REDIS_PORT=6460 bench/node/lock-instructions.sh      (a private redis-server)
#   N=2000 CLIENTS="node-redis ioredis noio" BENCH_IN_FLIGHT=64 …
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N=${N:-2000}
OUT=$(mktemp -d)
for client in ${CLIENTS:-node-redis ioredis noio}; do
  BENCH_CALLGRIND=$client BENCH_PAIRS=$N BENCH_IN_FLIGHT=${BENCH_IN_FLIGHT:-64} valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$client" \
    node "$HERE/lock.mjs" >"$OUT/$client.log" 2>&1 || { cat "$OUT/$client.log"; exit 1; }
  # Dumps: cg.<client>.1 (start-up, warm-up), then ours, bare, calls, ours, bare, calls, then the exit's.
  python3 - "$OUT/cg.$client" "$client" "$N" "${BENCH_IN_FLIGHT:-64}" <<'PY'
import sys
base, client, n, BENCH_IN_FLIGHT = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def total(i):
    for line in open(f"{base}.{i}"):
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1]) / n
runs = {"ours": (total(2), total(5)), "bare": (total(3), total(6)), "calls": (total(4), total(7))}
mean = {k: sum(v) / 2 for k, v in runs.items()}
print(f"{client:10} {BENCH_IN_FLIGHT} in flight, instructions a pair: ours {mean['ours']:,.0f}, bare {mean['bare']:,.0f}, "
      f"ours/bare {mean['ours'] / mean['bare']:.3f}; calls (not planned) {mean['calls']:,.0f}, calls/bare {mean['calls'] / mean['bare']:.3f} "
      f"(runs: " + ", ".join(f"{k} {a:,.0f} {b:,.0f}" for k, (a, b) in runs.items()) + ")")
PY
done
rm -rf "$OUT"
