"""Exactly-once under contention, across processes: 4 processes x 64 concurrent calls at the same keys
(``uses = 10``) let exactly 10 through, on PostgreSQL and on one SQLite file; the same for 3-entry
batches; and batches naming the same keys in opposite orders never deadlock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sql_support as sq

from ratewindow import PostgresStore, SqliteStore

PROCESSES = 4
WORKER = Path(__file__).with_name("sql_worker.py")
PREFIX = sq.new_prefix("race")


@pytest.fixture(scope="module", autouse=True)
def schema() -> Iterator[None]:
    with sq.connect() as conn:
        PostgresStore.using(conn, prefix=PREFIX).install_schema()
    yield
    sq.drop_schema(PREFIX)


def race(backend: str, scenario: str, target: str) -> list[dict[str, object]]:
    key = f"{scenario}:{time.time_ns()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WORKER.parent), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), backend, scenario, target, key],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(PROCESSES)
    ]
    for proc in procs:  # every process set up (imports, pool filled) before any fires
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    results = []
    for proc in procs:
        out, err = proc.communicate("go\n", timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


@pytest.mark.parametrize(
    ("backend", "scenario"),
    [("pg-async", "single"), ("pg-sync", "batch"), ("pg-async", "batch")],
)
def test_postgres_lets_exactly_the_limit_through(backend: str, scenario: str) -> None:
    results = race(backend, scenario, PREFIX)
    assert [r["errors"] for r in results] == [[]] * PROCESSES
    assert sum(int(str(r["allowed"])) for r in results) == 10


@pytest.mark.parametrize("scenario", ["single", "batch"])
def test_one_sqlite_file_lets_exactly_the_limit_through(scenario: str, tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    SqliteStore(sq.sqlite_connect(path)).install_schema()
    results = race("sqlite", scenario, str(path))
    assert [r["errors"] for r in results] == [[]] * PROCESSES
    assert sum(int(str(r["allowed"])) for r in results) == 10


@pytest.mark.parametrize("backend", ["pg-sync", "sqlite"])
def test_batches_naming_keys_in_opposite_orders_never_deadlock(backend: str, tmp_path: Path) -> None:
    target = PREFIX if backend != "sqlite" else str(tmp_path / "order.db")
    if backend == "sqlite":
        SqliteStore(sq.sqlite_connect(target))
    results = race(backend, "opposite", target)
    assert [r["errors"] for r in results] == [[]] * PROCESSES, "a deadlock would surface as a StoreError"
    assert sum(int(str(r["allowed"])) for r in results) == PROCESSES * 64
