"""Before / after: this checkout's Python package against an earlier build of it, interleaved.

Two builds of one package cannot share a process, so each round runs one short worker process per
side, alternating before, after, before, after …; the table gives each side's median ops/s and the
median of the per-round ratios (after / before: above 1, after is faster).

Workload (the peers' own): 10,000 keys round-robin, 5 uses per 10 s — filled first, so every timed
call is a refusal ("refused") — and an allowed-traffic variant: the same keys under a limit they never
reach ("allowed"). Contenders: ``MemoryStore.consume``, ``RedisStore.consume`` (redis-py, one thread)
and ``PostgresStore.consume`` (psycopg 3, autocommit), one call in flight.

Run::

    git worktree add /tmp/before <commit>   # build a wheel there, install it into a venv of its own
    .venv/bin/python bench/python/before_after.py --before-python /tmp/before/.venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

KEYS = 10_000
USES, WINDOW_MS = 5, 10_000
NEVER = 1_000_000_000
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DSN = os.environ.get("RATEWINDOW_TEST_PG", "host=/var/run/postgresql user=postgres dbname=test")


def worker(contender: str, variant: str, prefix: str, seconds: float) -> float:
    """Times one contender in this process; returns calls per second."""
    from ratewindow import Limit, MemoryStore, PostgresStore, RedisStore

    keys = [f"user:{i}" for i in range(KEYS)]
    limit = Limit(NEVER if variant == "allowed" else USES, WINDOW_MS)
    fill = Limit(USES, WINDOW_MS)
    if contender == "memory":
        store = MemoryStore()
        for i in range(KEYS * USES):
            store.consume(keys[i % KEYS], fill)
    elif contender == "redis":
        import redis

        store = RedisStore.from_client(redis.Redis.from_url(REDIS_URL), prefix=f"{prefix}:")
    else:
        import psycopg

        conn = psycopg.connect(DSN, autocommit=True)
        store = PostgresStore.using(conn, prefix=prefix.replace(":", "_"))
        store.install_schema()
    if contender != "memory" and variant == "refused" and store.peek(keys[-1], fill).allowed:
        for i in range(KEYS * USES):
            store.consume(keys[i % KEYS], fill)
    consume = store.consume
    for i in range(2_000):  # warm up
        consume(keys[i % KEYS], limit)
    calls, start = 0, time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(64):
            consume(keys[calls % KEYS], limit)
            calls += 1
    return calls / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-python", required=True, help="the interpreter with the earlier build")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--worker", nargs=4, metavar=("CONTENDER", "VARIANT", "PREFIX", "SECONDS"))
    args = parser.parse_args()
    if args.worker:
        contender, variant, prefix, seconds = args.worker
        print(worker(contender, variant, prefix, float(seconds)))
        return
    pythons = {"before": args.before_python, "after": sys.executable}
    run = f"ba{int(time.time()):x}"
    print(f"before: {args.before_python}\nafter:  {sys.executable}\n(ops/s, median of {args.rounds} rounds)")
    for contender in ("memory", "redis", "postgres"):
        for variant in ("refused", "allowed"):
            rates: dict[str, list[float]] = {"before": [], "after": []}
            ratios = []
            for _ in range(args.rounds):
                for side, python in pythons.items():
                    prefix = f"{run}_{side}_{contender}_{variant}"
                    out = subprocess.run(
                        [python, __file__, "--before-python", "-", "--worker", contender, variant, prefix, str(args.seconds)],
                        check=True, capture_output=True, text=True,
                    )
                    rates[side].append(float(out.stdout.strip().splitlines()[-1]))
                ratios.append(rates["after"][-1] / rates["before"][-1])
            print(
                f"{contender:9} {variant:8} before {statistics.median(rates['before']):>10,.0f}/s"
                f"  after {statistics.median(rates['after']):>10,.0f}/s  after/before {statistics.median(ratios):.3f}"
            )
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        for (sql,) in conn.execute(
            "SELECT 'DROP TABLE IF EXISTS ' || quote_ident(relname) || ' CASCADE' FROM pg_class"
            " WHERE relkind = 'r' AND relname LIKE %(p)s UNION ALL"
            " SELECT 'DROP FUNCTION IF EXISTS ' || oid::regprocedure::text FROM pg_proc WHERE proname LIKE %(p)s",
            {"p": f"{run}%"},
        ).fetchall():
            conn.execute(sql)


if __name__ == "__main__":
    main()
