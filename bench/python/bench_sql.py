"""ratewindow's PostgresStore against a bare ``SELECT 1`` on the same psycopg connection, and
SqliteStore's throughput on a database file.

Workload: 10,000 keys hit round-robin, each limited to 5 uses per 10 s, so after its first 5 hits a
key is mostly refused. The PostgreSQL contenders share one autocommit connection (psycopg 3) to the
machine's server over its unix socket and run interleaved: every round times one batch of each, in a
rotating order; the table gives the median round's ops/s and each one's time per call against the
bare round trip. Round trips per call are counted, not assumed: libpq's protocol trace of 100 calls is
read for the ``Sync`` messages the client sent (one per round trip outside pipeline mode).

- bare: ``conn.execute("SELECT 1").fetchone()``
- ratewindow: ``PostgresStore.using(conn).consume(key, Limit(5, 10_000))``, ``consume_many`` of one
  entry and of three (three keys, one call), and ``consume`` on a connection outside autocommit
  (``BEGIN``, the statement, ``COMMIT``).
- ``consume`` on keys filled to their 5 uses first (600 s window): every timed call is a refusal,
  answered by one read of the key's row (no lock, no write).
- ``consume`` through a schema installed with ``durable=True`` (each commit waits for the WAL flush;
  by default the functions commit with ``synchronous_commit = off``).
- ``consume`` under 1,000 uses per 10 s: every timed call is allowed and recorded; and the same on a
  log made ``UNLOGGED`` after ``install_schema`` (the opt-in the README documents: no WAL for the counts,
  a crash empties them).
- before/after: ``pg_server_cpu.py`` (server CPU, this schema and statement against the previous
  ones) and ``pg_callgrind.sh`` (server instructions); the store's one-entry statement needs this
  schema's ``{p}_put1``, so a store here cannot run on the previous schema.
- server CPU per call: the CPU time of the connection's backend process (``/proc/<pid>/stat``, when the
  server runs on this machine), load-independent where wall-clock ratios are not; the load average is
  printed with the tables.
- SQLite: ``SqliteStore(sqlite3.connect(path, isolation_level=None)).consume`` on a file, in the
  default rollback journal and in WAL with ``synchronous=NORMAL``.

Run: ``.venv/bin/python bench/python/bench_sql.py [--rounds N] [--ops N] [--no-sqlite]`` (PostgreSQL on
``/var/run/postgresql``, user postgres, database test; or ``RATEWINDOW_TEST_PG``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

from ratewindow import AsyncPostgresStore, Entry, Limit, PostgresStore, SqliteStore

KEYS = 10_000
USES, WINDOW_MS = 5, 10_000
DSN = os.environ.get("RATEWINDOW_TEST_PG", "host=/var/run/postgresql user=postgres dbname=test")

Runner = Callable[[list[str]], int]


def bare(conn: psycopg.Connection[Any]) -> Runner:
    def run(keys: list[str]) -> int:
        for _ in keys:
            conn.execute("SELECT 1").fetchone()
        return 0

    return run


def consume(store: PostgresStore | SqliteStore) -> Runner:
    limit = Limit(USES, WINDOW_MS)
    call = store.consume

    def run(keys: list[str]) -> int:
        return sum(call(key, limit).allowed for key in keys)

    return run


def allowed(store: PostgresStore | SqliteStore) -> Runner:
    """``consume`` under 1,000 uses per 10 s: every timed call is allowed and recorded."""
    limit = Limit(1_000, WINDOW_MS)
    call = store.consume

    def run(keys: list[str]) -> int:
        return sum(call(key, limit).allowed for key in keys)

    return run


def refusals(store: PostgresStore, keys: list[str]) -> Runner:
    """``consume`` on keys filled to their limit first (5 uses per 600 s): every timed call is a refusal."""
    full = Limit(USES, 600_000)
    for _ in range(USES):
        for i in range(0, len(keys), 500):
            store.consume_many([Entry(key, full) for key in keys[i : i + 500]])
    assert not store.consume(keys[0], full).allowed
    call = store.consume

    def run(batch: list[str]) -> int:
        return sum(call(key, full).allowed for key in batch)

    return run


def backend_cpu(conn: psycopg.Connection[Any]) -> Callable[[], float | None]:
    """The CPU seconds the connection's server process has used so far (None: not on this machine)."""
    path = Path(f"/proc/{conn.info.backend_pid}/stat")  # known to libpq: no statement, no transaction
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float | None:
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / tick

    return read


def consume_many(store: PostgresStore, width: int) -> Runner:
    limit = Limit(USES, WINDOW_MS)
    call = store.consume_many

    def run(keys: list[str]) -> int:
        return sum(call([Entry(f"{key}:{j}", limit) for j in range(width)]).allowed for key in keys)

    return run


def round_trips(conn: psycopg.Connection[Any], run: Runner, calls: int = 100) -> float:
    """Round trips per call, from libpq's protocol trace: the client's ``Sync`` (extended protocol) and
    ``Query`` (simple protocol: ``BEGIN``, ``COMMIT``) messages, each answered before the next."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            run([f"rt:{i}" for i in range(calls)])
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        syncs = sum(1 for line in trace if "\tF\t" in line and ("\tSync" in line or "\tQuery" in line))
    return syncs / calls


def interleaved(
    runners: dict[str, Runner],
    keys: list[str],
    rounds: int,
    ops: int,
    cpu: dict[str, Callable[[], float | None]] | None = None,
) -> tuple[dict[str, float], dict[str, float | None]]:
    """Median calls/s of each runner, and (where ``cpu`` reads its connection's server process) the
    median server CPU µs per call."""
    batch = [keys[i % len(keys)] for i in range(ops)]
    for run in runners.values():  # warm-up: every key seen once, statements prepared
        run(keys[: min(len(keys), ops)])
    rates: dict[str, list[float]] = {name: [] for name in runners}
    server: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            read = (cpu or {}).get(name)
            before = read() if read else None
            start = time.perf_counter()
            runners[name](batch)
            rates[name].append(ops / (time.perf_counter() - start))
            after = read() if read else None
            if before is not None and after is not None:
                server[name].append(1e6 * (after - before) / ops)
    return (
        {name: statistics.median(v) for name, v in rates.items()},
        {name: statistics.median(v) if v else None for name, v in server.items()},
    )


AsyncOp = Callable[[int], Awaitable[Any]]


async def in_flight(prefix: str, keys: list[str], rounds: int, ops: int, inflight: int = 16) -> dict[str, float]:
    """asyncio, ``inflight`` calls at once on a psycopg ``AsyncConnectionPool`` of 8 (autocommit): a bare
    ``SELECT 1``, ``AsyncPostgresStore.consume`` refused (the keys ``{prefix}_f`` filled) and allowed
    (1,000 uses per 10 s, tables ``{prefix}_a``); interleaved rounds in a rotating order, median calls/s."""
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(DSN, min_size=8, max_size=8, kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)
    try:
        refused = AsyncPostgresStore.using(pool, prefix=f"{prefix}_f")
        allowed_store = AsyncPostgresStore.using(pool, prefix=f"{prefix}_a")
        full, open_limit = Limit(USES, 600_000), Limit(1_000, WINDOW_MS)
        n = min(len(keys), ops)

        async def bare_call(i: int) -> None:
            async with pool.connection() as conn:
                await (await conn.execute("SELECT 1")).fetchone()

        async def refused_call(i: int) -> None:
            await refused.consume(keys[i % n], full)

        async def allowed_call(i: int) -> None:
            await allowed_store.consume(keys[i % n], open_limit)

        contenders: dict[str, AsyncOp] = {
            "bare SELECT 1": bare_call,
            "AsyncPostgresStore.consume (refusals)": refused_call,
            "AsyncPostgresStore.consume (allowed)": allowed_call,
        }

        async def timed(op: AsyncOp) -> float:
            counter = iter(range(ops))

            async def worker() -> None:
                for i in counter:
                    await op(i)

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(inflight)))
            return ops / (time.perf_counter() - start)

        for op in contenders.values():  # warm-up: statements prepared on every connection
            await timed(op)
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        names = list(contenders)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rates[name].append(await timed(contenders[name]))
        return {name: statistics.median(v) for name, v in rates.items()}
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per contender (default 5)")
    parser.add_argument("--ops", type=int, default=3_000, help="calls per contender per round (default 3000)")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = parser.parse_args()
    keys = [f"user:{i}" for i in range(KEYS)]
    prefix = f"rwbench_{os.getpid()}_{secrets.token_hex(3)}"

    with psycopg.connect(DSN, autocommit=True) as conn, psycopg.connect(DSN) as tx_conn:
        store = PostgresStore.using(conn, prefix=prefix)
        store.install_schema()
        # The same tables, through functions that wait for each commit's WAL flush.
        durable = PostgresStore.using(conn, prefix=f"{prefix}_d", durable=True)
        durable.install_schema()
        PostgresStore.using(conn, prefix=f"{prefix}_f").install_schema()
        PostgresStore.using(conn, prefix=f"{prefix}_a").install_schema()
        # The UNLOGGED opt-in (the READMEs' ALTER TABLE): the same statements, no WAL for the counts.
        PostgresStore.using(conn, prefix=f"{prefix}_ua").install_schema()
        conn.execute(f"ALTER TABLE {prefix}_ua_log SET UNLOGGED".encode())
        try:
            runners = {
                "bare SELECT 1": bare(conn),
                "PostgresStore.consume": consume(store),
                "PostgresStore.consume_many (1 entry)": consume_many(store, 1),
                "PostgresStore.consume_many (3 entries)": consume_many(store, 3),
                "PostgresStore.consume (not autocommit)": consume(PostgresStore.using(tx_conn, prefix=prefix)),
                "PostgresStore.consume (durable=True)": consume(durable),
                "PostgresStore.consume (allowed: 1,000 uses per 10 s)": allowed(
                    PostgresStore.using(conn, prefix=f"{prefix}_a")
                ),
                "PostgresStore.consume (allowed, UNLOGGED log)": allowed(
                    PostgresStore.using(conn, prefix=f"{prefix}_ua")
                ),
                "PostgresStore.consume (refusals: every key full)": refusals(
                    PostgresStore.using(conn, prefix=f"{prefix}_f"), keys[: args.ops]  # the keys the rounds use
                ),
            }
            trips = {
                name: round_trips(tx_conn if "not autocommit" in name else conn, run) for name, run in runners.items()
            }
            on_conn, on_tx = backend_cpu(conn), backend_cpu(tx_conn)
            cpu = {name: on_tx if "not autocommit" in name else on_conn for name in runners}
            load_before = os.getloadavg()
            rates, server = interleaved(runners, keys, args.rounds, args.ops, cpu)
            load = (*load_before, *os.getloadavg())
            many = asyncio.run(in_flight(prefix, keys, args.rounds, args.ops))
        finally:
            for p in (prefix, *(f"{prefix}_{s}" for s in ("d", "f", "a", "ua", "n", "p", "na", "pa", "nf", "pf"))):
                conn.execute(f"DROP TABLE IF EXISTS {p}_log, {p}_windows, {p}_locks".encode())
                for (function,) in conn.execute(
                    "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE %s", [f"{p}\\_%"]
                ).fetchall():
                    conn.execute(f"DROP FUNCTION IF EXISTS {function}".encode())

    base = rates["bare SELECT 1"]
    print(f"PostgreSQL (psycopg {psycopg.__version__}, unix socket): {KEYS:,} keys round-robin, {USES} uses per")
    print(f"{WINDOW_MS // 1000} s, {args.rounds} interleaved rounds of {args.ops:,} calls; load average")
    print(f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} before, {load[3]:.1f} {load[4]:.1f} {load[5]:.1f} after")
    print(
        f"{'contender':<48} {'calls/s':>10} {'us/call':>9} {'time vs SELECT 1':>17} {'round trips':>12}"
        f" {'server CPU us/call':>19}"
    )
    for name, rate in rates.items():
        cpu_us = server[name]
        shown = f"{cpu_us:>19.1f}" if cpu_us is not None else f"{'-':>19}"
        print(f"{name:<48} {rate:>10,.0f} {1e6 / rate:>9.1f} {base / rate:>16.2f}x {trips[name]:>12.2f} {shown}")
    print(f"asyncio, 16 calls in flight on an AsyncConnectionPool of 8, {args.rounds} interleaved rounds")
    many_base = many["bare SELECT 1"]
    for name, rate in many.items():
        print(f"{name:<48} {rate:>10,.0f} {1e6 / rate:>9.1f} {many_base / rate:>16.2f}x")
    if args.no_sqlite:
        return

    print()
    print(f"SQLite {sqlite3.sqlite_version} file, the same workload, {args.rounds} rounds of {args.ops:,} calls")
    with tempfile.TemporaryDirectory() as tmp:
        for mode, pragmas in (("rollback journal", []), ("WAL, synchronous=NORMAL", ["journal_mode=WAL", "synchronous=NORMAL"])):
            lite = sqlite3.connect(Path(tmp) / f"{mode[:3]}.db", isolation_level=None)
            for pragma in pragmas:
                lite.execute(f"PRAGMA {pragma}")
            rate = interleaved({mode: consume(SqliteStore(lite))}, keys, args.rounds, args.ops)[0][mode]
            print(f"{'SqliteStore.consume, ' + mode:<48} {rate:>10,.0f} {1e6 / rate:>9.1f} us/call")
            lite.close()


if __name__ == "__main__":
    main()
