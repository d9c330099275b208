#!/usr/bin/env bash
# The RedisStore bench's load-independent measure: this Node process's instructions a call under
# callgrind (see redis-instructions.mjs), per client: RedisStore consume refused / allowed, attempt,
# GCRA, rate-limiter-flexible and a bare `return 1` EVALSHA, 64 calls in flight.
#   REDIS_PORT=6460 bench/node/redis-instructions.sh        (a private redis-server)
#   BENCH_CALLS=2000 CLIENTS="node-redis ioredis" BENCH_CONTENDERS=refused,bare …
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N=${BENCH_CALLS:-2000}
OUT=$(mktemp -d)
for client in ${CLIENTS:-node-redis ioredis}; do
  TAG="rwins:$client:$(date +%s%N):"
  [ "${BENCH_NOIO:-}" = 1 ] || BENCH_TAG=$TAG BENCH_FILL=1 BENCH_CALLGRIND=$client node "$HERE/redis-instructions.mjs"
  BENCH_TAG=$TAG BENCH_CALLGRIND=$client BENCH_CALLS=$N valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$client" \
    node "$HERE/redis-instructions.mjs" >"$OUT/$client.log" 2>&1 || { cat "$OUT/$client.log"; exit 1; }
  python3 - "$OUT/cg.$client" "$client" "$N" "${BENCH_CONTENDERS:-refused,allowed,fixedRefused,fixedAllowed,gcraRefused,gcraAllowed,rlfRefused,rlfAllowed,bare,bare3}" <<'PY'
import sys
base, client, n, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(',')
def total(i):
    for line in open(f"{base}.{i}"):
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
# Dumps: .1 the warm-up, then each contender's N run and 3N run, in order.
out = {k: (total(3 + 2 * j) - total(2 + 2 * j)) / (2 * n) for j, k in enumerate(names)}
print(f"{client}: instructions a call (64 in flight, this Node process): " + ", ".join(f"{k} {v:,.0f}" for k, v in out.items()))
PY
done
rm -rf "$OUT"
