"""Batches mixing algorithms (sliding-log, GCRA and counter entries in one all-or-nothing
``consume_many``) on SqliteStore (real files): a seeded walk equal to MemoryStore field by field,
processes racing a batch whose global entry is the bottleneck (exactly its uses pass), the release of
the sliding-log calls, bad input (typed errors, nothing written). RedisStore, AsyncRedisStore,
PostgresStore and AsyncPostgresStore refuse a mixed batch as UnsupportedError with nothing sent.
``RATEWINDOW_SEED`` replays a walk."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sql_support as sql

from ratewindow import (
    AsyncPostgresStore,
    AsyncRedisStore,
    CounterLimit,
    Entry,
    GcraLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SqliteStore,
    UnsupportedError,
    Verdict,
)

FIELDS = (
    "allowed",
    "retry_after_ms",
    "retry_timestamp",
    "blocked",
    "limit",
    "remaining",
    "refill_after_ms",
    "reset_after_ms",
)

# One key name under two algorithms is two keys; a key under two limits of its algorithm is one.
RULES: list[tuple[str, list[Any]]] = [
    ("a", [Limit(3, 1000), Limit(5, 2500)]),
    ("a", [GcraLimit(3, 1000, 2), GcraLimit(3, 1000, 3)]),
    ("b", [GcraLimit(10, 1000, 5), GcraLimit(7, 3000, 4)]),
    ("c", [CounterLimit(4, 1000)]),
    ("d", [CounterLimit(9, 700), CounterLimit(9, 1400)]),
    ("g", [Limit(6, 1500)]),
]


def fields(v: Verdict) -> tuple[Any, ...]:
    return tuple(getattr(v, f) for f in FIELDS)


def top(limit: Any) -> int:
    if isinstance(limit, GcraLimit):
        return int(limit.burst)
    return int(limit.uses)


def test_a_seeded_walk_gives_memory_stores_verdicts(tmp_path: Path) -> None:
    seed = int(os.environ.get("RATEWINDOW_SEED", time.time_ns() % 2**31))
    print(f"RATEWINDOW_SEED={seed}")
    rng = random.Random(seed)
    now = [1_000_000]
    lite = SqliteStore(sql.sqlite_connect(tmp_path / "walk.db"), clock=lambda: now[0])
    memory = MemoryStore(lambda: now[0])
    for step in range(600):
        now[0] += rng.randrange(4) * rng.randrange(160)
        entries: list[Entry] = []
        for _ in range(1 + rng.randrange(4)):
            key, choices = RULES[rng.randrange(len(RULES))]
            limit = rng.choice(choices)
            entries.append(Entry(key, limit, 1 + rng.randrange(min(top(limit), 3))))
        if all(isinstance(e.limit, Limit) for e in entries):
            entries.append(Entry("b", GcraLimit(10, 1000, 5), 1))
        peek = rng.randrange(4) == 0
        want = memory.peek_many(entries) if peek else memory.consume_many(entries)
        got = lite.peek_many(entries) if peek else lite.consume_many(entries)
        assert fields(got) == fields(want), f"step {step} at {now[0]}: {entries} (RATEWINDOW_SEED={seed})"
        slides = any(isinstance(e.limit, Limit) for e in entries)
        assert got.releasable == (got.allowed and not peek and slides), f"step {step}"


def test_release_gives_back_the_sliding_calls_and_keeps_the_gcra_use(tmp_path: Path) -> None:
    now = [5000]
    connection = sql.sqlite_connect(tmp_path / "release.db")
    store = SqliteStore(connection, clock=lambda: now[0])
    entries = [Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(1, 10_000))]
    v = store.consume_many(entries)
    assert v.allowed and v.releasable
    now[0] = 5001
    refused = store.consume_many(entries)
    assert (refused.allowed, refused.blocked) == (False, 1)
    v.release()
    assert connection.execute("SELECT count(*) FROM ratewindow_calls").fetchone()[0] == 0
    assert store.consume_many(entries).allowed
    # 1 of the burst of 2 was left before this call, and this call took it.
    assert not store.peek("u", GcraLimit(2, 1000, 2)).allowed


WORKER = """
import sqlite3, sys
from ratewindow import CounterLimit, GcraLimit, Limit, SqliteStore
path, index, calls, uses = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = SqliteStore(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
allowed = 0
for _ in range(calls):
    v = store.consume_many([
        (f"user{index}", GcraLimit(100, 1000, 100)),
        (f"user{index}", CounterLimit(100, 60_000)),
        ("global", Limit(uses, 60_000)),
    ])
    allowed += v.allowed
print(allowed)
"""


def test_processes_racing_a_global_entry_let_exactly_its_uses_pass(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    SqliteStore(sql.sqlite_connect(path))  # the schema, before the race
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(i), "15", "20"], stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    allowed = 0
    for w in workers:
        out, _ = w.communicate(timeout=120)
        assert w.returncode == 0
        allowed += int(out)
    assert allowed == 20
    connection = sql.sqlite_connect(path)
    assert connection.execute("SELECT count(*) FROM ratewindow_calls WHERE key = 'global'").fetchone()[0] == 20
    # All or nothing: the users' counters hold exactly the calls the global entry let pass.
    assert connection.execute("SELECT coalesce(sum(cur), 0) FROM ratewindow_counters").fetchone()[0] == 20


def test_bad_input_is_a_typed_error_and_writes_nothing(tmp_path: Path) -> None:
    connection = sql.sqlite_connect(tmp_path / "bad.db")
    store = SqliteStore(connection)
    with pytest.raises(InvalidArgumentError) as e:
        store.consume_many([Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(3, 1000), 4)])
    assert e.value.field == "entries[1].cost"
    with pytest.raises(InvalidArgumentError):
        store.peek_many([Entry("u", CounterLimit(2, 1000), 3), Entry("all", Limit(3, 1000))])
    with pytest.raises(InvalidLimitError):
        GcraLimit(2, 1000, 0)
    with pytest.raises(TypeError):
        store.consume_many([Entry("u", GcraLimit(2, 1000, 2), "1")])  # type: ignore[arg-type]
    rows = connection.execute(
        "SELECT (SELECT count(*) FROM ratewindow_calls) + (SELECT count(*) FROM ratewindow_gcra)"
        " + (SELECT count(*) FROM ratewindow_counters)"
    ).fetchone()[0]
    assert rows == 0


MIXED = [Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(3, 1000))]


def never(*_: Any) -> Any:
    raise AssertionError("nothing may be sent")


async def never_async(*_: Any) -> Any:
    raise AssertionError("nothing may be sent")


@pytest.mark.parametrize("store", [RedisStore.using(never), PostgresStore.using(never)], ids=["redis", "postgres"])
def test_other_stores_refuse_a_mixed_batch(store: RedisStore | PostgresStore) -> None:
    with pytest.raises(UnsupportedError):
        store.consume_many(MIXED)
    with pytest.raises(UnsupportedError):
        store.peek_many(MIXED)


@pytest.mark.parametrize(
    "store", [AsyncRedisStore.using(never_async), AsyncPostgresStore.using(never_async)], ids=["redis", "postgres"]
)
def test_other_async_stores_refuse_a_mixed_batch(store: AsyncRedisStore | AsyncPostgresStore) -> None:
    async def go() -> None:
        with pytest.raises(UnsupportedError):
            await store.consume_many(MIXED)
        with pytest.raises(UnsupportedError):
            await store.peek_many(MIXED)

    asyncio.run(go())
