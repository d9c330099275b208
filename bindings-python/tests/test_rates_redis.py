"""GCRA and the sliding-window counter on a real Redis (127.0.0.1:6379, a prefix of this run's own):
every gcra/counter vector case without a mixed batch, through the binding's machine timed at the
vector's ``now`` (``rate_call(..., now=)``) and driven by RedisStore's own driver; the public
RedisStore and AsyncRedisStore on the server's clock; the cases mixing algorithms in one batch wait
for the core's Redis batch (UnsupportedError)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import pytest
import redis
import redis_servers as rs

from ratewindow import (
    CounterLimit,
    Entry,
    GcraLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    RedisStore,
    UnsupportedError,
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


@pytest.mark.parametrize(("path", "case"), CASES, ids=[f"{p.parent.name}/{p.stem}:{c['name']}" for p, c in CASES])
def test_vector_on_redis(client: Any, path: Path, case: dict[str, Any]) -> None:
    if any(op["op"] in MIXED for op in case["ops"]):
        pytest.skip("batches mixing algorithms on Redis: not in the core yet (the memory stores run them)")
    store = rs.sync_store(client, prefix=rs.unique_prefix("rates"))
    for i, op in enumerate(case["ops"]):
        name = op["op"]
        try:
            if name.endswith("_limit"):
                limit_of(op)
                got: Any = {"ok": True}
            elif name.endswith("_reset"):
                limit = GcraLimit(1, 1) if name.startswith("gcra") else CounterLimit(1, 1)
                got = store._run(_ratewindow.rate_call(store._machine, "reset", op["key"], limit, now=op["now"]))
            else:
                kind: Literal["consume", "peek"] = "consume" if name.endswith("_consume") else "peek"
                call = _ratewindow.rate_call(
                    store._machine, kind, op["key"], limit_of(op), op.get("cost", 1), now=op["now"]
                )
                got = fields(store._run(call))
        except InvalidLimitError as e:
            got = {"error": "invalid_rate", "field": e.field}
        except InvalidArgumentError as e:
            assert e.field == "cost"
            got = {"error": "invalid_rate", "field": "cost"}
        assert got == op["expect"], f"{path.name} / {case['name']} / op #{i} {op}"


def test_redis_store_counts_gcra_and_the_counter_on_the_server_clock(client: Any) -> None:
    store = rs.sync_store(client, prefix=rs.unique_prefix("rates-store"))
    tokens = GcraLimit(100, 60_000)
    first = store.consume("llm:alice", tokens, cost=60)
    assert (first.allowed, first.limit, first.remaining) == (True, 100, 40)
    refused = store.consume("llm:alice", tokens, cost=50)
    assert not refused.allowed and refused.remaining == 40
    assert 5_000 < refused.retry_after_ms <= 6_000 and refused.blocked is None
    assert store.peek("llm:alice", tokens, cost=40).allowed
    store.reset("llm:alice", tokens)
    assert store.peek("llm:alice", tokens).remaining == 100
    per_second = CounterLimit(2, 1000)
    assert store.consume("c", per_second, cost=2).allowed
    assert not store.consume("c", per_second).allowed
    with pytest.raises(InvalidArgumentError) as caught:
        store.consume("c", per_second, cost=3)
    assert caught.value.field == "cost"
    with pytest.raises(UnsupportedError):
        store.consume_many([Entry("c", per_second), Entry("s", Limit(1, 1000))])
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
