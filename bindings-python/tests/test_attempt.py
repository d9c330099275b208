"""``attempt`` is one atomic store operation: under any concurrency exactly ``max_attempts`` callbacks
run, on every store (real servers), with no give-back step."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis_servers as rs
import sql_support as sq

from ratewindow import (
    AsyncPostgresStore,
    AsyncRateLimiter,
    FixedWindowStore,
    MemoryStore,
    PostgresStore,
    RateLimiter,
    SqliteStore,
)

MAX = 3


@pytest.fixture
def pg_prefix() -> Iterator[str]:
    prefix = sq.new_prefix("attempt")
    yield prefix
    sq.drop_schema(prefix)


def _threads(store: FixedWindowStore, n: int = 16) -> int:
    """``n`` threads, released together, each one ``attempt``; returns how many callbacks ran."""
    limiter, ran, lock, start = RateLimiter(store), [0], threading.Lock(), threading.Barrier(n)

    def callback() -> None:
        with lock:
            ran[0] += 1

    def one() -> None:
        start.wait()
        limiter.attempt("login:alice", MAX, callback, decay_seconds=60)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.attempts("login:alice") == MAX, "a refused attempt counts nothing"
    return ran[0]


def test_16_threads_over_memory() -> None:
    assert _threads(MemoryStore()) == MAX


def test_16_threads_over_redis() -> None:
    client = rs.sync_client()
    try:
        assert _threads(rs.sync_store(client, prefix=rs.unique_prefix("attempt"))) == MAX
    finally:
        client.close()


def test_16_threads_over_postgres(pg_prefix: str) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(sq.DSN, min_size=4, max_size=16, kwargs={"autocommit": True}) as pool:
        store = PostgresStore.using(pool, prefix=pg_prefix)
        store.install_schema()
        assert _threads(store) == MAX


def test_16_threads_over_sqlite(tmp_path: Path) -> None:
    conn = sq.sqlite_connect(tmp_path / "attempt.db")
    try:
        assert _threads(SqliteStore(conn)) == MAX
    finally:
        conn.close()


async def _tasks(limiter: AsyncRateLimiter, n: int = 40) -> int:
    ran = 0

    async def callback() -> str:
        nonlocal ran
        ran += 1
        await asyncio.sleep(0)
        return "ran"

    results = await asyncio.gather(*(limiter.attempt("login:bob", MAX, callback) for _ in range(n)))
    assert results.count("ran") == MAX and results.count(False) == n - MAX
    return ran


def test_40_tasks_over_async_redis() -> None:
    async def main() -> int:
        client = rs.async_client()
        try:
            await rs.warm_async(client)
            return await _tasks(AsyncRateLimiter(rs.async_store(client, prefix=rs.unique_prefix("attempt"))))
        finally:
            await client.aclose()

    assert asyncio.run(main()) == MAX


def test_40_tasks_over_async_postgres(pg_prefix: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    async def main() -> int:
        async with AsyncConnectionPool(sq.DSN, min_size=4, max_size=16, kwargs={"autocommit": True}) as pool:
            store = AsyncPostgresStore.using(pool, prefix=pg_prefix)
            await store.install_schema()
            return await _tasks(AsyncRateLimiter(store))

    assert asyncio.run(main()) == MAX


def test_attempt_answers_the_count_and_the_window(pg_prefix: str) -> None:
    conn: psycopg.Connection[Any] = sq.connect()
    try:
        stores: list[Callable[[], Any]] = [MemoryStore, lambda: PostgresStore.using(conn, prefix=pg_prefix)]
        for make in stores:
            store = make()
            if isinstance(store, PostgresStore):
                store.install_schema()
            first = store.attempt("k", 1, 10_000)
            assert first.allowed and first.count == 1 and 9_000 < first.reset_after_ms <= 10_000
            second = store.attempt("k", 1, 10_000)
            assert not second.allowed and second.count == 1
            hit = store.hit_window("k", 10_000)
            assert hit.count == 2 and 0 < hit.reset_after_ms <= 10_000
    finally:
        conn.close()
