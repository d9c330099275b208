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
- before/after in the same run: ``consume`` and the refusals through a query function of the bench's
  own, once with this schema and once with the previous one (the upgrade-test fixture
  ``core/tests/data/postgres_schema_0_1_log.sql``, its one-entry statement swapped in): the ratio of
  the two is printed.
- SQLite: ``SqliteStore(sqlite3.connect(path, isolation_level=None)).consume`` on a file, in the
  default rollback journal and in WAL with ``synchronous=NORMAL``.

Run: ``.venv/bin/python bench/python/bench_sql.py [--rounds N] [--ops N]`` (PostgreSQL on
``/var/run/postgresql``, user postgres, database test; or ``RATEWINDOW_TEST_PG``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from ratewindow import Entry, Limit, PostgresStore, SqliteStore

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


FIXTURE = Path(__file__).resolve().parents[2] / "core" / "tests" / "data" / "postgres_schema_0_1_log.sql"
PREV_ONE = (
    "SELECT allowed, retry_after_ms, retry_timestamp, blocked, now_ms, quota_limit, remaining, refill_after_ms, "
    "reset_after_ms FROM {p}_sliding1($1, $2, $3, $4::bigint, $5::bigint, $6::boolean)"
)


def swapped(conn: psycopg.Connection[Any], prefix: str, *, prev: bool) -> PostgresStore:
    """A store under ``prefix`` through a query function on ``conn`` (``$1`` placeholders, statements
    prepared by psycopg as for the store's own). ``prev``: the schema is the previous one (the
    upgrade-test fixture) and the one-entry statement is swapped for its ``{p}_sliding1`` (PL/pgSQL
    reading the row itself). The same store code and client either way: the pair is a before/after
    in one interleaved run."""
    old_one = PREV_ONE.replace("{p}", prefix)

    def query(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        if prev and sql.startswith("SELECT v[1] = 1 AS allowed"):
            sql = old_one
        with psycopg.RawCursor(conn) as cur:
            cur.execute(sql.encode(), params)
            result = cur.pgresult
            return cur.fetchall() if result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK else []

    if prev:
        conn.execute(FIXTURE.read_text().replace("{p}", prefix).encode())
    else:
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
        try:
            runners = {
                "bare SELECT 1": bare(conn),
                "PostgresStore.consume": consume(store),
                "PostgresStore.consume_many (1 entry)": consume_many(store, 1),
                "PostgresStore.consume_many (3 entries)": consume_many(store, 3),
                "PostgresStore.consume (not autocommit)": consume(PostgresStore.using(tx_conn, prefix=prefix)),
                "PostgresStore.consume (durable=True)": consume(durable),
                "PostgresStore.consume (refusals: every key full)": refusals(
                    PostgresStore.using(conn, prefix=f"{prefix}_f"), keys[: args.ops]  # the keys the rounds use
                ),
                # Before/after: the same query function, this schema's one-entry statement and the last.
                "query fn: consume": consume(swapped(conn, f"{prefix}_n", prev=False)),
                "query fn: consume, previous statement": consume(swapped(conn, f"{prefix}_p", prev=True)),
                "query fn: refusals": refusals(swapped(conn, f"{prefix}_nf", prev=False), keys[: args.ops]),
                "query fn: refusals, previous statement": refusals(
                    swapped(conn, f"{prefix}_pf", prev=True), keys[: args.ops]
                ),
            }
            trips = {
                name: round_trips(tx_conn if "not autocommit" in name else conn, run) for name, run in runners.items()
            }
            rates = interleaved(runners, keys, args.rounds, args.ops)
        finally:
            for p in (prefix, *(f"{prefix}_{s}" for s in ("d", "f", "n", "p", "nf", "pf"))):
                conn.execute(f"DROP TABLE IF EXISTS {p}_log, {p}_windows".encode())
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
    for what in ("consume", "refusals"):
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
