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
- ``consume`` under 1,000 uses per 10 s: every timed call is allowed and recorded.
- before/after in the same run: ``consume``, allowed calls and refusals through a query function of
  the bench's own, once with this one-entry statement and once with the previous one (``PREV_ONE``:
  nine columns, six parameters), on the same schema: the ratio of the two is printed.
- SQLite: ``SqliteStore(sqlite3.connect(path, isolation_level=None)).consume`` on a file, in the
  default rollback journal and in WAL with ``synchronous=NORMAL``.

Run: ``.venv/bin/python bench/python/bench_sql.py [--rounds N] [--ops N]`` (PostgreSQL on
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


# The one-entry consume before its verdict became one text column (505e728 … 9b1afb0^): nine columns,
# the mode and all six values as parameters (mode, id, key, uses, window, relaxed).
PREV_ONE = (
    'SELECT v[1] = 1 AS allowed, v[2] AS retry_after_ms, v[3] AS retry_timestamp, v[4] AS blocked, v['
    '5] AS now_ms, v[6] AS quota_limit, v[7] AS remaining, v[8] AS refill_after_ms, v[9] AS reset_aft'
    'er_ms FROM (SELECT CASE WHEN s.u > s.now - s.w THEN ARRAY[0, greatest(1, s.u + s.w - s.now), s.u'
    ' + s.w, 0, s.now, s.uses, 0, greatest(1, s.u + s.w - s.now), s.ats[s.n] + s.w - s.now] ELSE {p}_'
    'take1($1, $2, $3, s.uses, s.w, $6::boolean, s.ats, s.ids, s.now) END AS v FROM (SELECT l.ats, l.'
    'ids, cardinality(l.ats) AS n, CASE WHEN cardinality(l.ats) >= $4::bigint THEN l.ats[cardinality('
    'l.ats) - $4::bigint + 1] END AS u, greatest(floor(extract(epoch FROM clock_timestamp()) * 1000):'
    ':bigint, l.ats[cardinality(l.ats)]) AS now, $4::bigint AS uses, $5::bigint AS w FROM (SELECT) AS'
    ' o LEFT JOIN {p}_log AS l ON l.key = $3 OFFSET 0) AS s OFFSET 0) AS t'
)


def swapped(conn: psycopg.Connection[Any], prefix: str, *, prev: bool) -> PostgresStore:
    """A store under ``prefix`` through a query function on ``conn`` (``$1`` placeholders, statements
    prepared by psycopg as for the store's own), on this schema. ``prev``: the one-entry consume is
    swapped for the previous statement (:data:`PREV_ONE`, its parameters reordered), whose nine columns
    the store decodes as before. The same store code and client either way: the pair is a
    before/after in one interleaved run."""
    old_one = PREV_ONE.replace("{p}", prefix)

    def query(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        if prev and sql.startswith("SELECT (CASE WHEN s.u") and "_take1('c'" in sql:
            sql = old_one
            params = ["c", params[1], params[0], *params[2:]]
        with psycopg.RawCursor(conn) as cur:
            cur.execute(sql.encode(), params)
            result = cur.pgresult
            return cur.fetchall() if result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK else []

    PostgresStore.using(conn, prefix=prefix).install_schema()
    return PostgresStore.using(query, prefix=prefix)


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


def interleaved(runners: dict[str, Runner], keys: list[str], rounds: int, ops: int) -> dict[str, float]:
    batch = [keys[i % len(keys)] for i in range(ops)]
    for run in runners.values():  # warm-up: every key seen once, statements prepared
        run(keys[: min(len(keys), ops)])
    rates: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            runners[name](batch)
            rates[name].append(ops / (time.perf_counter() - start))
    return {name: statistics.median(v) for name, v in rates.items()}


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
                "PostgresStore.consume (refusals: every key full)": refusals(
                    PostgresStore.using(conn, prefix=f"{prefix}_f"), keys[: args.ops]  # the keys the rounds use
                ),
                # Before/after: the same query function, this schema's one-entry statement and the last.
                "query fn: consume": consume(swapped(conn, f"{prefix}_n", prev=False)),
                "query fn: consume, previous statement": consume(swapped(conn, f"{prefix}_p", prev=True)),
                "query fn: allowed": allowed(swapped(conn, f"{prefix}_na", prev=False)),
                "query fn: allowed, previous statement": allowed(swapped(conn, f"{prefix}_pa", prev=True)),
                "query fn: refusals": refusals(swapped(conn, f"{prefix}_nf", prev=False), keys[: args.ops]),
                "query fn: refusals, previous statement": refusals(
                    swapped(conn, f"{prefix}_pf", prev=True), keys[: args.ops]
                ),
            }
            trips = {
                name: round_trips(tx_conn if "not autocommit" in name else conn, run) for name, run in runners.items()
            }
            rates = interleaved(runners, keys, args.rounds, args.ops)
            many = asyncio.run(in_flight(prefix, keys, args.rounds, args.ops))
        finally:
            for p in (prefix, *(f"{prefix}_{s}" for s in ("d", "f", "a", "n", "p", "na", "pa", "nf", "pf"))):
                conn.execute(f"DROP TABLE IF EXISTS {p}_log, {p}_windows, {p}_locks".encode())
                for (function,) in conn.execute(
                    "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE %s", [f"{p}\\_%"]
                ).fetchall():
                    conn.execute(f"DROP FUNCTION IF EXISTS {function}".encode())

    base = rates["bare SELECT 1"]
    print(f"PostgreSQL (psycopg {psycopg.__version__}, unix socket): {KEYS:,} keys round-robin, {USES} uses per")
    print(f"{WINDOW_MS // 1000} s, {args.rounds} interleaved rounds of {args.ops:,} calls")
    print(f"{'contender':<48} {'calls/s':>10} {'us/call':>9} {'time vs SELECT 1':>17} {'round trips':>12}")
    for name, rate in rates.items():
        print(f"{name:<48} {rate:>10,.0f} {1e6 / rate:>9.1f} {base / rate:>16.2f}x {trips[name]:>12.2f}")
    print(f"asyncio, 16 calls in flight on an AsyncConnectionPool of 8, {args.rounds} interleaved rounds")
    many_base = many["bare SELECT 1"]
    for name, rate in many.items():
        print(f"{name:<48} {rate:>10,.0f} {1e6 / rate:>9.1f} {many_base / rate:>16.2f}x")
    for what in ("consume", "allowed", "refusals"):
        after, before = rates[f"query fn: {what}"], rates[f"query fn: {what}, previous statement"]
        print(f"{what}: this schema's one-entry statement / the previous one: {after / before:.2f}x calls/s")

    print()
    print(f"SQLite {sqlite3.sqlite_version} file, the same workload, {args.rounds} rounds of {args.ops:,} calls")
    with tempfile.TemporaryDirectory() as tmp:
        for mode, pragmas in (("rollback journal", []), ("WAL, synchronous=NORMAL", ["journal_mode=WAL", "synchronous=NORMAL"])):
            lite = sqlite3.connect(Path(tmp) / f"{mode[:3]}.db", isolation_level=None)
            for pragma in pragmas:
                lite.execute(f"PRAGMA {pragma}")
            rate = interleaved({mode: consume(SqliteStore(lite))}, keys, args.rounds, args.ops)[mode]
            print(f"{'SqliteStore.consume, ' + mode:<48} {rate:>10,.0f} {1e6 / rate:>9.1f} us/call")
            lite.close()


if __name__ == "__main__":
    main()
