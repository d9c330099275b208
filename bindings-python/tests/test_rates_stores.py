"""GCRA and the sliding-window counter on the networked stores: every gcra/counter vector case without a
mixed batch on a real Redis (127.0.0.1:6379), PostgreSQL and SQLite (names of this run's own),
through each store's machine timed at the vector's ``now`` (``rate_call(..., now=)``) and driven by the
store's own driver; the public RedisStore, AsyncRedisStore, PostgresStore and SqliteStore on their
clocks; a batch mixing algorithms counted by each (test_mixed_stores.py has their walks and races)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import pytest
import redis
import redis_servers as rs
import sql_support as sql

from ratewindow import (
    CounterLimit,
    Entry,
    GcraLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    PostgresStore,
    RedisStore,
    SqliteStore,
    Verdict,
    _ratewindow,
)

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"
FILES = sorted([*(VECTORS / "gcra").glob("*.json"), *(VECTORS / "counter").glob("*.json")])
CASES = [(path, case) for path in FILES for case in json.loads(path.read_text())["cases"]]
MIXED = {"consume_mixed", "peek_mixed", "release"}


@pytest.fixture(scope="module")
def client() -> redis.Redis:
    return rs.sync_client(connections=2)


def limit_of(op: dict[str, Any]) -> GcraLimit | CounterLimit:
    l = op["limit"]
    if op["op"].startswith("gcra"):
        return GcraLimit(l["uses"], l["window_ms"], l.get("burst"))
    return CounterLimit(l["uses"], l["window_ms"])


def fields(v: Verdict) -> dict[str, Any]:
    return {
        "allowed": v.allowed,
        "limit": v.limit,
        "refill_after_ms": v.refill_after_ms,
        "remaining": v.remaining,
        "reset_after_ms": v.reset_after_ms,
        "retry_after_ms": v.retry_after_ms,
        "retry_timestamp": v.retry_timestamp,
    }


@pytest.fixture(scope="module")
def pg() -> Any:
    """One connection and a schema of this run's own for every PostgreSQL test here."""
    prefix = sql.new_prefix("rates")
    with sql.connect() as conn:
        PostgresStore(conn, prefix=prefix).install_schema()
        yield conn, prefix
        conn.execute(f"DROP TABLE IF EXISTS {prefix}_gcra, {prefix}_counters".encode())
    sql.drop_schema(prefix)


def a_store(kind: str, client: Any, pg: Any, tmp_path: Path) -> RedisStore | PostgresStore | SqliteStore:
    if kind == "redis":
        return rs.sync_store(client, prefix=rs.unique_prefix("rates"))
    if kind == "postgres":
        return PostgresStore(pg[0], prefix=pg[1])
    return SqliteStore(sql.sqlite_connect(tmp_path / "rates.db"))


@pytest.mark.parametrize(("path", "case"), CASES, ids=[f"{p.parent.name}/{p.stem}:{c['name']}" for p, c in CASES])
@pytest.mark.parametrize("kind", ["redis", "postgres", "sqlite"])
def test_vector_on_a_networked_store(
    client: Any, pg: Any, tmp_path: Path, kind: str, path: Path, case: dict[str, Any]
) -> None:
    if any(op["op"] in MIXED for op in case["ops"]):
        pytest.skip("batches mixing algorithms: the memory stores only")
    store = a_store(kind, client, pg, tmp_path)
    tag = rs.unique_prefix("") if kind == "postgres" else ""  # one PostgreSQL table for every case
    for i, op in enumerate(case["ops"]):
        name = op["op"]
        try:
            if name.endswith("_limit"):
                limit_of(op)
                got: Any = {"ok": True}
            elif name.endswith("_reset"):
                limit = GcraLimit(1, 1) if name.startswith("gcra") else CounterLimit(1, 1)
                got = store._run(_ratewindow.rate_call(store._machine, "reset", tag + op["key"], limit, now=op["now"]))
            else:
                what: Literal["consume", "peek"] = "consume" if name.endswith("_consume") else "peek"
                call = _ratewindow.rate_call(
                    store._machine, what, tag + op["key"], limit_of(op), op.get("cost", 1), now=op["now"]
                )
                got = fields(store._run(call))
        except InvalidLimitError as e:
            got = {"error": "invalid_rate", "field": e.field}
        except InvalidArgumentError as e:
            assert e.field == "cost"
            got = {"error": "invalid_rate", "field": "cost"}
        assert got == op["expect"], f"{path.name} / {case['name']} / op #{i} {op}"


@pytest.mark.parametrize("kind", ["redis", "postgres", "sqlite"])
def test_each_store_counts_gcra_and_the_counter_on_its_clock(
    client: Any, pg: Any, tmp_path: Path, kind: str
) -> None:
    store = a_store(kind, client, pg, tmp_path)
    tokens, me = GcraLimit(100, 60_000), rs.unique_prefix("alice")
    first = store.consume(me, tokens, cost=60)
    assert (first.allowed, first.limit, first.remaining) == (True, 100, 40)
    refused = store.consume(me, tokens, cost=50)
    assert not refused.allowed and refused.remaining == 40
    assert 5_000 < refused.retry_after_ms <= 6_000 and refused.blocked is None
    assert store.peek(me, tokens, cost=40).allowed
    store.reset(me, tokens)
    assert store.peek(me, tokens).remaining == 100
    per_second = CounterLimit(2, 1000)
    assert store.consume("c", per_second, cost=2).allowed
    assert not store.consume("c", per_second).allowed
    with pytest.raises(InvalidArgumentError) as caught:
        store.consume("c", per_second, cost=3)
    assert caught.value.field == "cost"
    mixed = [Entry("c", per_second), Entry("s", Limit(1, 1000))]
    # Every store counts a mixed batch (test_mixed_stores.py): refused here by the counter.
    assert store.consume_many(mixed).blocked == 0
    assert store.consume("s", Limit(1, 1000)).allowed, "the sliding log is untouched"


def test_async_redis_store_counts_gcra() -> None:
    async def run() -> None:
        client = rs.async_client()
        try:
            store = rs.async_store(client, prefix=rs.unique_prefix("rates-async"))
            g = GcraLimit(2, 1000, 2)
            assert (await store.consume("k", g, cost=2)).allowed
            refused = await store.consume("k", g)
            assert not refused.allowed and 1 <= refused.retry_after_ms <= 500
            await store.reset("k", g)
            assert (await store.peek("k", g, cost=2)).allowed
        finally:
            await client.aclose()

    asyncio.run(run())
