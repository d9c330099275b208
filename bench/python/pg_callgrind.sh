#!/usr/bin/env bash
# Server instructions a call, by callgrind: PostgresStore's one-entry consume (allowed and refused, on a
# logged and an UNLOGGED log), RateLimiterPostgres's upsert and a bare SELECT 1. Load-independent where
# CPU time is not (a backend's /proc CPU a call grew 2-8x at load 11-19 on the project machine).
#
# A private PostgreSQL cluster (initdb in a temp dir, its own socket and port) is filled over its socket,
# then stopped; each case runs in a single-user backend under valgrind: PREPARE once, then EXECUTEs of the
# statement as the store sends it (tests/vectors/conversations/sql.json's text, taken from
# pg_server_cpu.py, on this tree's schema). A call's instructions are (a run of 2N calls - a run of N)/N,
# so start-up cancels; the EXECUTE's own parse is in every row (most of the SELECT 1 row). fsync=off:
# no wait is counted either way. 10,000 keys; allowed = 1,000 uses per 10 s, refused = every key full
# (5 uses per hour).
#
#   bash bench/python/pg_callgrind.sh            (as root: runs the server as user postgres; or as postgres)
#   N=500 PG_BIN=/usr/lib/postgresql/15/bin PG_PORT=5499 bash bench/python/pg_callgrind.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PORT=${PG_PORT:-5499}
N=${N:-1000}
dir=$(mktemp -d /tmp/rw-pgcg.XXXXXX)
chmod 777 "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  as_pg "$BIN/pg_ctl" -D "$dir/data" stop -m fast >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
as_pg "$BIN/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
start() { as_pg "$BIN/pg_ctl" -D "$dir/data" -o "-p $PORT -k $dir -c listen_addresses=''" -l "$dir/log" -w start >/dev/null; }
stop() { as_pg "$BIN/pg_ctl" -D "$dir/data" stop -m fast -w >/dev/null; }
sql() { psql -h "$dir" -p "$PORT" -U postgres -d postgres -q -v ON_ERROR_STOP=1 "$@"; }

# The one-entry consume as the store sends it (default prefix), and the schema of this tree.
stmt=$(sed -n '/^STATEMENT = (/,/^)/p' "$here/pg_server_cpu.py" | sed '1d;$d' | sed 's/^ *"//; s/" *$//' | tr -d '\n')
one() { # prefix uses window relaxed
  local s=${stmt//ratewindow_/$1_}
  s=${s//\$3::bigint/$2::bigint}; s=${s//\$4::bigint/$3::bigint}; s=${s//\$5::boolean/$4}
  echo "PREPARE q(text, text) AS $s"
}
one rw_a 1000 10000 true >"$dir/allowed.sql"
one rw_a 1000 10000 false >"$dir/allowed_durable.sql"
one rw_u 1000 10000 true >"$dir/allowed_unlogged.sql"
one rw_f 5 3600000 true >"$dir/refused.sql"
echo 'PREPARE q(text, text) AS SELECT 1' >"$dir/bare.sql"
now='(extract(epoch FROM clock_timestamp()) * 1000)::bigint'
echo "PREPARE q(text, text) AS INSERT INTO rlf VALUES (\$1, 1, $now + 10000) ON CONFLICT(key) DO UPDATE SET \
points = CASE WHEN (rlf.expire <= $now OR rlf.expire IS NULL) THEN 1 ELSE rlf.points + 1 END, \
expire = CASE WHEN (rlf.expire <= $now OR rlf.expire IS NULL) THEN excluded.expire ELSE rlf.expire END \
RETURNING points, expire" >"$dir/rlf.sql"
chmod 644 "$dir"/*.sql

start
for p in rw_a rw_u rw_f; do
  { sed "s/{p}/$p/g" "$root/core/src/sql/postgres_schema.sql"; echo 'COMMIT;'; } | sql >/dev/null
done
sql -c 'ALTER TABLE rw_u_log SET UNLOGGED' \
  -c 'CREATE TABLE rlf (key varchar(255) PRIMARY KEY, points int NOT NULL DEFAULT 0, expire bigint)'
fill() { # statement file, passes
  { cat "$1"; echo ';'; for ((k = 0; k < $2; k++)); do for ((i = 0; i < 10000; i++)); do echo "EXECUTE q('$i', 'fill$k-$i');"; done; done; } | sql >/dev/null
}
fill "$dir/allowed.sql" 1
fill "$dir/allowed_unlogged.sql" 1
fill "$dir/rlf.sql" 1
fill "$dir/refused.sql" 5
stop

run() { # statement file, calls, first key -> instructions
  { cat "$1"; for ((i = 0; i < $2; i++)); do echo "EXECUTE q('$(((i + $3) % 10000))', 'c$i-$3');"; done; } >"$dir/in"
  as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$BIN/postgres" --single -D "$dir/data" \
    -c fsync=off "${@:4}" postgres <"$dir/in" >/dev/null 2>"$dir/err"
  grep -o 'Collected : [0-9]*' "$dir/err" | awk '{print $3}'
}
case_() { # label, statement file, extra -c options...
  local a b
  a=$(run "$2" "$N" 0 "${@:3}")
  b=$(run "$2" $((2 * N)) 5000 "${@:3}")
  printf '%-44s %9d instructions a call\n' "$1" $(((b - a) / N))
}
echo "server instructions a call (callgrind, single-user backend, N=$N; load $(cut -d' ' -f1-3 /proc/loadavg))"
case_ 'refused (every key full)' "$dir/refused.sql"
case_ 'allowed (relaxed commit, the default)' "$dir/allowed.sql"
case_ 'allowed (durable)' "$dir/allowed_durable.sql"
case_ 'allowed (UNLOGGED log)' "$dir/allowed_unlogged.sql"
case_ 'RateLimiterPostgres upsert (relaxed)' "$dir/rlf.sql" -c synchronous_commit=off
case_ 'RateLimiterPostgres upsert (durable)' "$dir/rlf.sql"
case_ 'bare SELECT 1' "$dir/bare.sql"
