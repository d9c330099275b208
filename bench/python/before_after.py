"""Before / after: this checkout's Python package against an earlier build of it, interleaved.

Two builds of one package cannot share a process, so each round runs one short worker process per
side, in alternating order (before, after; then after, before; …); the table gives each side's median
calls/s, the median of the per-round ratios (after / before: above 1, after is faster) and their
spread (lowest and highest round). Beside the wall-clock rate, each worker reports its own CPU time per
call (``time.process_time``: the Python layer, the call machine and the client library) and, for
Redis, the redis-server's CPU time per call (from ``/proc``, when the server runs on this machine and
its pid is known: a private server holds no one else's traffic, so that is the script's cost).

Workload (the peers' own): 10,000 keys round-robin, 5 uses a key —

- ``refused``: every key filled with its 5 uses first (untimed, through the store's ``consume_many``
  in batches), under a 600 s window so the fill outlasts the run: every timed call is a refusal (the
  workers check it and report the share allowed);
- ``allowed``: the same keys under a limit they never reach (10^9 uses per 10 s): every timed call is
  allowed and recorded.

Contenders: ``MemoryStore.consume``, ``RedisStore.consume`` (redis-py, one thread, ``from_client``) and
``PostgresStore.consume`` (psycopg 3, autocommit), one call in flight. Each side and variant has its
own key prefix (and SQL name prefix), so the two never share state.

Run against a private redis-server (the shared 6379 carries every other bench's keys)::

    git worktree add /tmp/before <commit>   # build a wheel there, install it into a venv of its own
    redis-server --port 6430 --save '' --appendonly no --daemonize yes
    .venv/bin/python bench/python/before_after.py --before-python /tmp/before/.venv/bin/python \\
        --redis-url redis://127.0.0.1:6430/0 [--rounds 15] [--seconds 1] [--contenders redis,postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

KEYS = 10_000
USES = 5
WINDOW_MS = {"refused": 600_000, "allowed": 10_000}
NEVER = 1_000_000_000
FILL_BATCH = 500
DSN = os.environ.get("RATEWINDOW_TEST_PG", "host=/var/run/postgresql user=postgres dbname=test")


def server_cpu(pid: int | None) -> float:
    """The CPU seconds (user + system) process ``pid`` has used, or 0 without one."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker(contender: str, variant: str, prefix: str, seconds: float, redis_url: str) -> dict[str, float]:
    """Times one contender in this process: calls/s, this process's CPU µs a call, the Redis server's."""
    from ratewindow import Entry, Limit, MemoryStore, PostgresStore, RedisStore

    keys = [f"user:{i}" for i in range(KEYS)]
    window = WINDOW_MS[variant]
    limit = Limit(NEVER if variant == "allowed" else USES, window)
    fill = Limit(USES, window)
    pid = None
    store: MemoryStore | RedisStore | PostgresStore
    if contender == "memory":
        store = MemoryStore()
    elif contender == "redis":
        import redis

        client = redis.Redis.from_url(redis_url)
        info = client.info("server")
        # The server's CPU is read only when it runs here (its pid is ours to see).
        pid = int(info["process_id"]) if os.path.exists(f"/proc/{info['process_id']}/stat") else None
        store = RedisStore.from_client(client, prefix=f"{prefix}:")
    else:
        import psycopg

        conn = psycopg.connect(DSN, autocommit=True)
        pg = PostgresStore.using(conn, prefix=prefix.replace(":", "_"))
        pg.install_schema()
        store = pg
    if variant == "refused" and store.peek(keys[-1], fill).allowed:
        for _ in range(USES):
            for i in range(0, KEYS, FILL_BATCH):
                store.consume_many([Entry(key, fill) for key in keys[i : i + FILL_BATCH]])
    consume = store.consume
    for i in range(2_000):  # warm up
        consume(keys[i % KEYS], limit)
    calls = allowed = 0
    cpu0, server0 = time.process_time(), server_cpu(pid)
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(64):
            allowed += consume(keys[calls % KEYS], limit).allowed
            calls += 1
    wall = time.perf_counter() - start
    cpu, server = time.process_time() - cpu0, server_cpu(pid) - server0
    return {
        "rate": calls / wall,
        "cpu_us": cpu / calls * 1e6,
        "server_us": server / calls * 1e6 if pid else float("nan"),
        "allowed": allowed / calls,
    }


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}-{max(xs):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-python", required=True, help="the interpreter with the earlier build")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per worker")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="the Redis server (default: $REDIS_URL or the shared 6379; prefer a private one)",
    )
    parser.add_argument("--contenders", default="memory,redis,postgres", help="comma-separated subset")
    parser.add_argument("--variants", default="refused,allowed", help="comma-separated subset")
    parser.add_argument("--worker", nargs=4, metavar=("CONTENDER", "VARIANT", "PREFIX", "SECONDS"))
    args = parser.parse_args()
    if args.worker:
        contender, variant, prefix, seconds = args.worker
        print(json.dumps(worker(contender, variant, prefix, float(seconds), args.redis_url)))
        return
    pythons = {"before": args.before_python, "after": sys.executable}
    run = f"ba{int(time.time()):x}"
    load = os.getloadavg()
    print(
        f"before: {args.before_python}\nafter:  {sys.executable}\nredis:  {args.redis_url}\n"
        f"{args.rounds} rounds of {args.seconds} s per side; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
        "median calls/s; CPU µs a call (client = the worker process, server = redis-server);"
        " after/before: median of per-round ratios [lowest-highest round]"
    )
    try:
        for contender in args.contenders.split(","):
            for variant in args.variants.split(","):
                results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
                ratios = []
                for r in range(args.rounds):
                    order = list(pythons.items()) if r % 2 == 0 else list(pythons.items())[::-1]
                    for side, python in order:
                        prefix = f"{run}_{side}_{contender}_{variant}"
                        out = subprocess.run(
                            [python, __file__, "--before-python", "-", "--redis-url", args.redis_url,
                             "--worker", contender, variant, prefix, str(args.seconds)],
                            capture_output=True, text=True,
                        )
                        if out.returncode != 0:
                            raise SystemExit(f"the {side} worker ({contender}, {variant}) failed:\n{out.stderr}")
                        results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
                    ratios.append(results["after"][-1]["rate"] / results["before"][-1]["rate"])

                def med(side: str, field: str) -> float:
                    return statistics.median(x[field] for x in results[side])

                cols = [f"{contender:8} {variant:8}"]
                for side in pythons:
                    server = med(side, "server_us")
                    cols.append(
                        f"{side} {med(side, 'rate'):>7,.0f}/s cpu {med(side, 'cpu_us'):5.1f}"
                        + ("" if server != server else f" srv {server:5.1f}")
                        + f" ({max(x['allowed'] for x in results[side]):.0%} allowed)"
                    )
                cols.append(f"after/before {statistics.median(ratios):.3f} [{spread(ratios)}]")
                print("  ".join(cols), flush=True)
    finally:
        if "postgres" in args.contenders:
            import psycopg

            with psycopg.connect(DSN, autocommit=True) as conn:
                for (sql,) in conn.execute(
                    "SELECT 'DROP TABLE IF EXISTS ' || quote_ident(relname) || ' CASCADE' FROM pg_class"
                    " WHERE relkind = 'r' AND relname LIKE %(p)s UNION ALL"
                    " SELECT 'DROP FUNCTION IF EXISTS ' || oid::regprocedure::text FROM pg_proc WHERE proname LIKE %(p)s",
                    {"p": f"{run}%"},
                ).fetchall():
                    conn.execute(sql)
        if "redis" in args.contenders:
            import redis

            client = redis.Redis.from_url(args.redis_url)
            for key in client.scan_iter(match=f"{run}_*", count=10_000):
                client.unlink(key)


if __name__ == "__main__":
    main()
