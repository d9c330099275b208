#!/usr/bin/env bash
# Builds the ratewindow Python package, installs it with pip from this clone, and runs every check:
# rustfmt + clippy on the PyO3 crate, pytest (unit tests, every tests/vectors case, the conformance kit
# on MemoryStore sync and asyncio and on the broken stores, the no-panic test), mypy --strict on the
# package, and stubtest of the native module's stubs against the built module.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup-python.sh"
venv="$root/.venv"
py="$venv/bin/python"
export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv"
export RUST_BACKTRACE=0  # the no-panic test panics on purpose; keep its log short

cd "$root"
echo "== rustfmt / clippy (bindings-python)"
cargo fmt -p ratewindow-python --check
cargo clippy -p ratewindow-python --all-targets --quiet -- -D warnings

echo "== pip install ./bindings-python (maturin, release)"
# No build isolation: maturin comes from the pinned requirements, so the install needs no download.
"$py" -m pip install --quiet --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
  "$root/bindings-python"

echo "== servers (Redis on 6379, the three-master Redis Cluster on 7101-7103, PostgreSQL on 5432)"
. "$root/scripts/services.sh"
redis_up
postgres_up
if ! "$root/scripts/redis-cluster.sh" status > /dev/null 2>&1; then
  "$root/scripts/redis-cluster.sh" start
  trap '"$root/scripts/redis-cluster.sh" stop' EXIT  # stop the cluster this script started
fi

echo "== the fault proxy the guard tests put in front of the servers (tests/faultproxy), and its own test"
cargo build --release -p ratewindow-faultproxy --quiet
cargo test --release -p ratewindow-faultproxy --quiet

echo "== pytest"
# Run from the tests directory against the installed package, not the source tree. The files run in
# parallel processes (pytest-xdist), each file whole in one: most tests wait on servers, timers and
# worker processes, not CPU; the files share no port or key (private servers on ranges of their own,
# prefixes unique per run). The files that time answers against limits of a few hundred ms or seconds
# (the fault-proxy guards, the HTTP middleware's reset fields, the conformance kit on Redis and its Cluster,
# whose fixed-window check must answer within 800 ms: it failed once among 4 workers) run alone after them.
# RATEWINDOW_PYTEST_WORKERS=0 runs the first files in this process too, one after another.
timed=(tests/test_guard_servers.py tests/test_http_asgi.py tests/test_http_wsgi.py tests/test_redis_kit.py)
(cd "$root/bindings-python" && "$py" -m pytest -q -n "${RATEWINDOW_PYTEST_WORKERS:-4}" --dist loadfile \
  "${timed[@]/#/--ignore=}" tests)
(cd "$root/bindings-python" && "$py" -m pytest -q "${timed[@]}")

echo "== mypy --strict"
(cd "$root/bindings-python/python" && "$py" -m mypy --strict -p ratewindow)
(cd "$root/bindings-python" && "$py" -m mypy --strict tests)
"$py" -m mypy --strict "$root/examples/python/service.py" "$root/bench/python/bench.py" \
  "$root/bench/python/bench_redis.py" "$root/bench/python/bench_sql.py" \
  "$root/examples/python/http_fastapi.py" "$root/examples/python/http_flask.py" "$root/bench/python/bench_http.py"

echo "== stubtest (installed module against its stubs)"
(cd /tmp && "$py" -m mypy.stubtest ratewindow)
echo "== demo and benchmark (smoke runs)"
"$py" "$root/examples/python/service.py" > /dev/null
"$py" "$root/examples/python/http_fastapi.py" > /dev/null
"$py" "$root/examples/python/http_flask.py" > /dev/null
"$py" "$root/bench/python/bench_http.py" --check > /dev/null
"$py" "$root/bench/python/bench.py" --rounds 1 --ops 2000 > /dev/null
"$py" "$root/bench/python/bench_redis.py" --rounds 1 --ops 200 > /dev/null
"$py" "$root/bench/python/bench_sql.py" --rounds 1 --ops 50 > /dev/null
echo "python: all checks passed"
