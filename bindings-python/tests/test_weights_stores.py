"""Weighted calls on the sliding log (a call costing ``cost`` uses) on the networked stores: every
tests/vectors/weights/ case on MemoryStore and SqliteStore at the vectors' times (their ``clock``; a
cost that is not an ``int`` is Python's ``TypeError``), through the public
API; RedisStore and AsyncRedisStore (127.0.0.1:6379, the server's clock) and SqliteStore on their own
clocks by the same behaviours; PostgreSQL refusing a weighted call as UnsupportedError with nothing
written (or counting it). The fixed window's ``attempt(..., cost=n)`` on every store, sync and asyncio."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

import psycopg
import pytest
import redis
import redis_servers as rs
import sql_support as sql

from ratewindow import (
    AsyncMemoryStore,
    AsyncPostgresStore,
    Entry,
    InvalidArgumentError,
    Limit,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SqliteStore,
    UnsupportedError,
    Verdict,
)

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "weights" / "weights.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())["cases"]


def limit_of(l: dict[str, Any]) -> Limit:
    return Limit(l["uses"], l["window_ms"])


def entries_of(entries: list[dict[str, Any]]) -> list[Entry]:
    return [Entry(e["key"], limit_of(e["limit"]), e.get("cost")) for e in entries]


def single(v: Verdict) -> dict[str, Any]:
    return {
        "allowed": v.allowed,
        "retry_after_ms": v.retry_after_ms,
        "retry_timestamp": v.retry_timestamp,
        "limit": v.limit,
        "remaining": v.remaining,
        "refill_after_ms": v.refill_after_ms,
        "reset_after_ms": v.reset_after_ms,
    }


def batch(v: Verdict) -> dict[str, Any]:
    return {**single(v), "blocked": v.blocked}


def not_an_int(op: dict[str, Any]) -> bool:
    """Whether the op gives a cost that is not an ``int`` (Python's spelling: a ``TypeError``)."""
    costs = [op.get("cost"), *(e.get("cost") for e in op.get("entries", []))]
    return any(isinstance(c, float) for c in costs)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_weights_vector(tmp_path: Path, kind: str, case: dict[str, Any]) -> None:
    now = [0]
    store: MemoryStore | SqliteStore
    if kind == "memory":
        store = MemoryStore(lambda: now[0])
    else:
        store = SqliteStore(sql.sqlite_connect(tmp_path / "weights.db"), clock=lambda: now[0])
    ids: dict[str, Verdict] = {}
    for i, op in enumerate(case["ops"]):
        now[0] = op["now"]
        name = op["op"]
        got: Any
        try:
            if name == "consume":
                got = single(store.consume(op["key"], limit_of(op["limit"]), cost=op.get("cost", 1)))
            elif name == "peek":
                got = single(store.peek(op["key"], limit_of(op["limit"]), cost=op.get("cost", 1)))
            elif name == "consume_many":
                v = store.consume_many(entries_of(op["entries"]))
                if "id" in op:
                    ids[op["id"]] = v
                got = batch(v)
            elif name == "peek_many":
                got = batch(store.peek_many(entries_of(op["entries"])))
            elif name == "release":
                ids[op["id"]].release()
                got = None
            else:
                raise AssertionError(f"unknown vector op {name}")
        except InvalidArgumentError as e:
            assert e.field == "cost" or e.field.endswith("].cost"), e.field
            got = {"error": "invalid_argument", "field": "cost"}
        except TypeError:
            if not not_an_int(op):
                raise
            got = {"error": "invalid_argument", "field": "cost"}
        assert got == op.get("expect"), f"{case['name']} / op #{i} {op}"


def own_clock(store: RedisStore | SqliteStore | PostgresStore) -> None:
    """The weighted behaviours on a store's own clock (a window nothing leaves during the test)."""
    limit, key = Limit(5, 60_000), rs.unique_prefix("w")
    first = store.consume(key, limit, cost=3)
    assert (first.allowed, first.limit, first.remaining) == (True, 5, 2)
    refused = store.consume(key, limit, cost=3)
    assert (refused.allowed, refused.remaining) == (False, 2)
    assert 0 < refused.retry_after_ms <= 60_000
    assert store.peek(key, limit, cost=2).allowed and not store.peek(key, limit, cost=3).allowed
    assert store.peek(key, limit).remaining == 2, "peeks and the refusal record nothing"
    assert store.consume(key, limit, cost=1).remaining == 1

    big, other, g = Limit(10, 60_000), key + ":b", key + ":g"
    v = store.consume_many([Entry(other, big, 4), Entry(g, big, 2)])
    assert (v.allowed, v.remaining) == (True, 6)
    w = store.consume_many([Entry(other, big, 3)])
    assert (w.allowed, w.remaining) == (True, 3)
    v.release()
    assert store.peek(other, big).remaining == 7, "release gave back exactly 4"
    assert store.peek(g, big).remaining == 10, "and the other entry its 2"
    v.release()
    assert store.peek(other, big).remaining == 7, "a second release gives back nothing"
    blocked = store.consume_many([Entry(other, big, 8), Entry(g, big, 1)])
    assert (blocked.allowed, blocked.blocked) == (False, 0)
    assert store.peek(g, big).remaining == 10, "a refused batch counts nothing"
    w.release()
    assert store.peek(other, big).remaining == 10

    for cost in (0, 6, -1):
        with pytest.raises(InvalidArgumentError) as caught:
            store.consume(key + ":x", limit, cost=cost)
        assert (caught.value.field, caught.value.value) == ("cost", cost)
        with pytest.raises(InvalidArgumentError):
            store.peek(key + ":x", limit, cost=cost)
    with pytest.raises(InvalidArgumentError) as caught:
        store.consume_many([Entry(key + ":x", limit), Entry(key + ":y", limit, 9)])
    assert caught.value.field == "entries[1].cost"
    with pytest.raises(TypeError):
        store.consume(key + ":x", limit, cost=1.5)  # type: ignore[arg-type]
    assert store.peek(key + ":x", limit).remaining == 5
    assert store.peek(key + ":y", limit).remaining == 5


@pytest.mark.parametrize("evalsha", [True, False])
def test_redis_counts_weighted_calls(evalsha: bool) -> None:
    client = rs.sync_client(connections=2)
    try:
        own_clock(rs.sync_store(client, evalsha=evalsha, prefix=rs.unique_prefix("weights")))
    finally:
        client.close()


def test_redis_weighted_calls_share_a_key_with_calls_costing_1() -> None:
    client: redis.Redis = rs.sync_client(connections=2)
    try:
        store = rs.sync_store(client, prefix=rs.unique_prefix("weights"))
        limit = Limit(4, 60_000)
        assert store.consume("k", limit).remaining == 3
        assert store.consume("k", limit, cost=2).remaining == 1
        assert store.consume("k", limit).remaining == 0
        assert not store.consume("k", limit).allowed
        assert not store.consume("k", limit, cost=2).allowed
    finally:
        client.close()


def test_sqlite_counts_weighted_calls_on_its_clock(tmp_path: Path) -> None:
    own_clock(SqliteStore(sql.sqlite_connect(tmp_path / "own.db")))


def test_async_redis_counts_and_gives_back_weighted_calls() -> None:
    async def run() -> None:
        client = rs.async_client()
        try:
            store = rs.async_store(client, prefix=rs.unique_prefix("weights-async"))
            limit = Limit(5, 60_000)
            first = await store.consume("k", limit, cost=3)
            assert (first.allowed, first.remaining) == (True, 2)
            assert not (await store.consume("k", limit, cost=3)).allowed
            assert (await store.peek("k", limit, cost=2)).allowed
            v = await store.consume_many([Entry("k", limit, 2)])
            assert (v.allowed, v.remaining) == (True, 0)
            await v.release()  # type: ignore[misc]
            assert (await store.peek("k", limit)).remaining == 2
            with pytest.raises(InvalidArgumentError):
                await store.consume("k", limit, cost=6)
        finally:
            await client.aclose()

    asyncio.run(run())


def test_postgres_refuses_a_weighted_call_writing_nothing_or_counts_it() -> None:
    """The binding passes the cost to the core's machine whatever the store: while the core refuses a
    weighted call on PostgreSQL it is UnsupportedError with nothing written; once it counts them, the
    same behaviours as on Redis and SQLite."""
    prefix = sql.new_prefix("weights")
    try:
        with sql.connect() as conn:
            store = PostgresStore(conn, prefix=prefix)
            store.install_schema()
            limit = Limit(5, 60_000)
            try:
                first = store.consume("k", limit, cost=2)
            except UnsupportedError as e:
                assert e.algorithm == "weighted sliding"
            else:
                assert (first.allowed, first.remaining) == (True, 3)
                own_clock(store)
                return
            calls: list[Callable[[], Verdict]] = [
                lambda: store.peek("k", limit, cost=2),
                lambda: store.consume_many([Entry("k", limit), Entry("j", limit, 3)]),
                lambda: store.peek_many([Entry("k", limit, 3)]),
            ]
            for call in calls:
                with pytest.raises(UnsupportedError) as caught:
                    call()
                assert caught.value.algorithm == "weighted sliding"
            count = conn.execute(f"SELECT count(*) FROM {prefix}_log".encode()).fetchone()
            assert count is not None and count[0] == 0
            with pytest.raises(InvalidArgumentError):
                store.consume("k", limit, cost=0)
            assert store.consume("k", limit, cost=1).remaining == 4
    finally:
        sql.drop_schema(prefix)


# --- the fixed window's attempt with a cost ----------------------------------------------------------


def attempt_cost(store: Any) -> None:
    """``attempt(..., cost=n)`` on a store whose window outlives the test: ``cost`` hits counted only
    when the count plus ``cost`` is at most ``max``, else nothing; bad costs typed, counting nothing."""
    key = rs.unique_prefix("a")
    first = store.attempt(key, 5, 60_000, cost=3)
    assert (first.allowed, first.count) == (True, 3)
    assert 0 < first.reset_after_ms <= 60_000
    refused = store.attempt(key, 5, 60_000, cost=3)
    assert (refused.allowed, refused.count) == (False, 3), "a cost above what is left counts nothing"
    assert 0 < refused.reset_after_ms <= 60_000
    assert store.attempt(key, 5, 60_000, cost=2).allowed and store.attempts(key) == 5
    assert not store.attempt(key, 5, 60_000).allowed and store.attempts(key) == 5
    big = store.attempt(key + ":big", 5, 60_000, cost=6)
    assert (big.allowed, big.count, store.attempts(key + ":big")) == (False, 0, 0)
    assert store.attempt(key + ":one", 5, 60_000, cost=1).count == 1
    for cost in (0, -1, 2**32, -(2**70)):
        with pytest.raises(InvalidArgumentError) as caught:
            store.attempt(key + ":x", 5, 60_000, cost=cost)
        assert (caught.value.field, caught.value.value) == ("cost", cost)
    for wrong in (1.5, "2", True):
        with pytest.raises(TypeError):
            store.attempt(key + ":x", 5, 60_000, cost=wrong)
    assert store.attempts(key + ":x") == 0


async def attempt_cost_async(store: Any) -> None:
    """:func:`attempt_cost`'s behaviours, awaited."""
    key = rs.unique_prefix("a")
    first = await store.attempt(key, 5, 60_000, cost=3)
    assert (first.allowed, first.count) == (True, 3)
    assert not (await store.attempt(key, 5, 60_000, cost=3)).allowed
    assert (await store.attempt(key, 5, 60_000, cost=2)).allowed and await store.attempts(key) == 5
    assert not (await store.attempt(key, 5, 60_000)).allowed
    with pytest.raises(InvalidArgumentError) as caught:
        await store.attempt(key + ":x", 5, 60_000, cost=0)
    assert (caught.value.field, caught.value.value) == ("cost", 0)
    with pytest.raises(TypeError):
        await store.attempt(key + ":x", 5, 60_000, cost=1.5)
    assert await store.attempts(key + ":x") == 0


def test_memory_attempt_with_a_cost() -> None:
    attempt_cost(MemoryStore())


def test_memory_attempt_with_a_cost_at_the_window_edge() -> None:
    now = [1_000]
    store = MemoryStore(lambda: now[0])
    assert store.attempt("k", 4, 100, cost=4).allowed
    now[0] = 1_099
    assert (store.attempt("k", 4, 100, cost=1).allowed, store.available_in_ms("k")) == (False, 1)
    now[0] = 1_100
    fresh = store.attempt("k", 4, 100, cost=3)
    assert (fresh.allowed, fresh.count, fresh.reset_after_ms) == (True, 3, 100), "a window that ended counts from 0"


def test_async_memory_attempt_with_a_cost() -> None:
    asyncio.run(attempt_cost_async(AsyncMemoryStore()))


@pytest.mark.parametrize("evalsha", [True, False])
def test_redis_attempt_with_a_cost(evalsha: bool) -> None:
    client = rs.sync_client(connections=2)
    try:
        attempt_cost(rs.sync_store(client, evalsha=evalsha, prefix=rs.unique_prefix("wattempt")))
    finally:
        client.close()


def test_async_redis_attempt_with_a_cost() -> None:
    async def run() -> None:
        client = rs.async_client()
        try:
            await attempt_cost_async(rs.async_store(client, prefix=rs.unique_prefix("wattempt-async")))
        finally:
            await client.aclose()

    asyncio.run(run())


def test_sqlite_attempt_with_a_cost(tmp_path: Path) -> None:
    attempt_cost(SqliteStore(sql.sqlite_connect(tmp_path / "attempt.db")))


def test_postgres_attempt_with_a_cost() -> None:
    prefix = sql.new_prefix("wattempt")
    try:
        with sql.connect() as conn:
            store = PostgresStore(conn, prefix=prefix)
            store.install_schema()
            attempt_cost(store)
    finally:
        sql.drop_schema(prefix)


def test_async_postgres_attempt_with_a_cost() -> None:
    prefix = sql.new_prefix("wattempta")

    async def run() -> None:
        conn = await psycopg.AsyncConnection.connect(sql.DSN, autocommit=True)
        try:
            store = AsyncPostgresStore(conn, prefix=prefix)
            await store.install_schema()
            await attempt_cost_async(store)
        finally:
            await conn.close()

    try:
        asyncio.run(run())
    finally:
        sql.drop_schema(prefix)
