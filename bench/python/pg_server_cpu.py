"""Server CPU a call of the PostgreSQL one-entry consume: this schema against the previous one.

Load-independent where wall-clock is not: each side runs on its own connection (prepared, autocommit),
on tables of its own that are fresh and the same size, and the CPU time of its backend process is read
from ``/proc/<pid>/stat`` (the server must run on this machine), in interleaved rounds; the median of
the per-round ratios is printed with the load average.

Workloads: ``allowed`` (10,000 keys round-robin, 1,000 uses per 10 s: every call recorded),
``refused`` (10,000 keys filled to 5 uses per 600 s: every call refused by the read), ``new`` (a new
key each call: the insert), ``busy`` (one key, ``--ops`` uses per 600 s, its log growing to ``--ops``
entries and out of line; the refusals after it are timed apart).

Run: ``.venv/bin/python bench/python/pg_server_cpu.py [--rounds 7] [--ops 15000] [allowed refused new busy]``
(PostgreSQL on ``/var/run/postgresql``, user postgres, database test; or ``RATEWINDOW_TEST_PG``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from ratewindow import Entry, Limit, PostgresStore

DSN = os.environ.get("RATEWINDOW_TEST_PG", "host=/var/run/postgresql user=postgres dbname=test")
PREVIOUS_SCHEMA = Path(__file__).resolve().parents[2] / "core" / "tests" / "data" / "postgres_schema_take1_cas.sql"
KEYS = 10_000


class Side:
    """One schema under its own prefix, its statement prepared on its own connection."""

    def __init__(self, name: str, prefix: str, previous: bool) -> None:
        self.name, self.prefix = name, prefix
        self.conn: psycopg.Connection[Any] = psycopg.connect(DSN, autocommit=True)
        store = PostgresStore.using(self.conn, prefix=prefix)
        if previous:
            self.conn.execute(PREVIOUS_SCHEMA.read_text().replace("{p}", prefix).encode())
        else:
            store.install_schema()
        # The one-entry consume statement as the store sends it (the text is fixed by the conversation
        # vectors, tests/vectors/conversations/sql.json), under this side's prefix.
        self.sql = (PREVIOUS_STATEMENT if previous else STATEMENT).replace("ratewindow_", f"{prefix}_").encode()
        self.pg = self.conn.pgconn
        result = self.pg.prepare(b"one", self.sql)
        if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
            raise RuntimeError(result.error_message.decode())
        self.stat = Path(f"/proc/{self.conn.info.backend_pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")
        self.cpu: list[float] = []
        self.n = 0

    def call(self, key: str, uses: int, window_ms: int) -> bytes:
        self.n += 1
        params = [key.encode(), f"{self.name}-{self.n}".encode(), b"%d" % uses, b"%d" % window_ms, b"t"]
        result = self.pg.exec_prepared(b"one", params)
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            raise RuntimeError(result.error_message.decode())
        value = result.get_value(0, 0)
        return value or b""

    def seconds(self) -> float:
        fields = self.stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.prefix}_log, {self.prefix}_windows, {self.prefix}_locks".encode())
        for (function,) in self.conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE %s", [f"{self.prefix}\\_%"]
        ).fetchall():
            self.conn.execute(f"DROP FUNCTION IF EXISTS {function}".encode())
        self.conn.close()


# The one-entry consume (core/src/sql/postgres.rs, `Postgres::one_entry`, mode 'c'), default prefix.
STATEMENT = (
    "SELECT (CASE WHEN s.u > s.now - $4::bigint THEN ARRAY[0, s.u + $4::bigint, s.now, "
    "s.ats[s.n] + $4::bigint, $3::bigint] ELSE ratewindow_put1($2::text, $1::text, $3::bigint, "
    "$4::bigint, $5::boolean, s.ats, s.now, s.t) END)::text AS verdict FROM (SELECT l.ats, l.ctid AS t, "
    "cardinality(l.ats) AS n, l.ats[greatest(cardinality(l.ats) - $3::bigint + 1, 0)] AS u, "
    "greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, l.ats[cardinality(l.ats)]) "
    "AS now FROM (SELECT) AS o LEFT JOIN "
    "ratewindow_log AS l ON l.key = $1::text OFFSET 0) AS s"
)
# The previous version's (PREVIOUS_SCHEMA's): an allowed call ran {p}_take1, handed the ids too.
PREVIOUS_STATEMENT = (
    "SELECT (CASE WHEN s.u > s.now - $4::bigint THEN ARRAY[0, s.u + $4::bigint, s.now, "
    "s.ats[s.n] + $4::bigint, $3::bigint] ELSE ratewindow_take1('c', $2::text, $1::text, $3::bigint, "
    "$4::bigint, $5::boolean, s.ats, s.ids, s.now) END)::text AS verdict FROM (SELECT l.ats, l.ids, "
    "cardinality(l.ats) AS n, CASE WHEN cardinality(l.ats) >= $3::bigint THEN "
    "l.ats[cardinality(l.ats) - $3::bigint + 1] END AS u, greatest(floor(extract(epoch FROM "
    "clock_timestamp()) * 1000)::bigint, l.ats[cardinality(l.ats)]) AS now FROM (SELECT) AS o LEFT JOIN "
    "ratewindow_log AS l ON l.key = $1::text OFFSET 0) AS s"
)


def timed(side: Side, calls: list[tuple[str, int, int]]) -> float:
    """Server CPU µs a call of ``calls`` on ``side``."""
    before = side.seconds()
    for key, uses, window_ms in calls:
        side.call(key, uses, window_ms)
    return 1e6 * (side.seconds() - before) / len(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=15_000, help="calls a side a round (busy: the key's uses)")
    parser.add_argument("workloads", nargs="*", default=["allowed", "refused", "new", "busy"])
    args = parser.parse_args()
    tag = f"rwcpu_{os.getpid()}_{secrets.token_hex(2)}"
    for workload in args.workloads:
        sides = [Side("previous", f"{tag}_{workload}_p", True), Side("this", f"{tag}_{workload}_t", False)]
        load = os.getloadavg()[0]
        try:
            results: dict[str, list[list[float]]] = {s.name: [] for s in sides}
            for r in range(args.rounds):
                for side in sides[r % 2 :] + sides[: r % 2]:
                    k = f"{workload}{r}"
                    if workload == "allowed":
                        if r == 0:
                            for i in range(KEYS):
                                side.call(f"a{i}", 1_000, 10_000)
                        row = [timed(side, [(f"a{(r * args.ops + i) % KEYS}", 1_000, 10_000) for i in range(args.ops)])]
                    elif workload == "refused":
                        if r == 0:
                            for i in range(KEYS):
                                for _ in range(5):
                                    side.call(f"f{i}", 5, 600_000)
                        row = [timed(side, [(f"f{i % KEYS}", 5, 600_000) for i in range(args.ops)])]
                    elif workload == "new":
                        row = [timed(side, [(f"{k}:{i}", 1_000, 10_000) for i in range(args.ops)])]
                    else:
                        calls = [(k, args.ops, 600_000)] * args.ops
                        row = [timed(side, calls), timed(side, calls)]  # allowed up to the limit, then refused
                    results[side.name].append(row)
            print(f"{workload} ({args.rounds} rounds of {args.ops:,} calls, load {load:.1f} -> {os.getloadavg()[0]:.1f})")
            for side in sides:
                cols = list(zip(*results[side.name]))
                shown = " / ".join(f"{statistics.median(c):.1f}" for c in cols)
                ratios = " / ".join(
                    f"{statistics.median(a / b if b else float('nan') for a, b in zip(c, base)):.2f}x"
                    for c, base in zip(cols, zip(*results["previous"]))
                )
                print(f"  {side.name:<9} server CPU us a call {shown}   vs previous {ratios}")
        finally:
            for side in sides:
                side.close()
        time.sleep(0.1)


if __name__ == "__main__":
    main()
