"""Weighted calls on the real three-master Redis Cluster (``scripts/redis-cluster.sh``, 7101-7103),
without a hash tag: a weighted consume, a ``consume_many`` whose entries have their own costs on keys
of different slots (the core's key-by-key fallback, giving back what was counted on a refusal), the
release of exactly a batch's costs, and the fixed window's ``attempt(..., cost=n)``; exact under
concurrency (threads on the blocking client, tasks on the asyncio one)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis_servers as rs

from ratewindow import AsyncRedisStore, Entry, Limit, RedisStore


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    client = rs.cluster_client(connections=8)
    yield client
    client.close()


def apart(client: Any, store: RedisStore | AsyncRedisStore) -> tuple[str, str]:
    """Two keys whose Redis keys sit on different slots."""
    for i in range(100):
        a, b = f"a{i}", f"b{i}"
        if client.keyslot(store.redis_key(a)) != client.keyslot(store.redis_key(b)):
            return a, b
    raise AssertionError("no two keys on different slots")


LA, LB = Limit(10, 60_000), Limit(12, 30_000)


def batch(a: str, b: str) -> list[Entry]:
    # a has room for 5 batches, b (counted second) for 4: later batches are refused at b and give
    # back what they counted on a.
    return [Entry(a, LA, 2), Entry(b, LB, 3)]


@pytest.mark.parametrize("evalsha", [True, False])
def test_weighted_consume_and_batches_across_slots_are_exact_under_threads(cluster: Any, evalsha: bool) -> None:
    store = rs.sync_store(cluster, evalsha=evalsha, prefix=rs.unique_prefix("wcluster"))
    limit = Limit(20, 60_000)
    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda _: store.consume("k", limit, cost=3), range(40)))
    assert sum(v.allowed for v in verdicts) == 6, "floor(20 / 3) calls costing 3"
    assert store.peek("k", limit).remaining == 2

    a, b = apart(cluster, store)
    with ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(lambda _: store.consume_many(batch(a, b)), range(24)))
    allowed = [v for v in batches if v.allowed]
    assert len(allowed) == 4
    assert all(v.blocked in (0, 1) and 0 < v.retry_after_ms <= 60_000 for v in batches if not v.allowed)
    assert store.peek(a, LA).remaining == 2, "a holds exactly 4 batches of 2: the refusals gave back"
    assert store.peek(b, LB).remaining == 0
    refused = store.peek_many(batch(a, b))
    assert (refused.allowed, refused.blocked) == (False, 1)

    allowed[0].release()
    allowed[0].release()
    assert (store.peek(a, LA).remaining, store.peek(b, LB).remaining) == (4, 3), "one batch's costs, once"
    assert store.consume_many(batch(a, b)).allowed
    assert not store.consume_many(batch(a, b)).allowed
    assert store.peek(a, LA).remaining == 2, "the refused batch gave back its 2 on a"

    first = store.consume_many([Entry(a + "x", Limit(5, 60_000), 5), Entry(b + "x", Limit(5, 60_000), 1)])
    assert first.allowed
    v = store.consume_many([Entry(a + "x", Limit(5, 60_000), 1), Entry(b + "x", Limit(5, 60_000), 4)])
    assert (v.allowed, v.blocked) == (False, 0)
    assert store.peek(b + "x", Limit(5, 60_000)).remaining == 4, "refused at its first key: nothing counted"


@pytest.mark.parametrize("evalsha", [True, False])
def test_attempt_with_a_cost_is_exact_under_threads(cluster: Any, evalsha: bool) -> None:
    store = rs.sync_store(cluster, evalsha=evalsha, prefix=rs.unique_prefix("wcluster-attempt"))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: store.attempt("w", 20, 60_000, cost=3), range(30)))
    assert sum(r.allowed for r in answers) == 6
    assert store.attempts("w") == 18
    assert not store.attempt("w", 20, 60_000, cost=3).allowed
    assert store.attempt("w", 20, 60_000, cost=2).count == 20
    assert all(0 < r.reset_after_ms <= 60_000 for r in answers)


def test_async_weighted_calls_across_slots_are_exact_under_tasks() -> None:
    async def main() -> None:
        client = rs.async_cluster_client()
        try:
            await rs.warm_async(client)
            store = rs.async_store(client, prefix=rs.unique_prefix("wcluster-async"))
            limit = Limit(20, 60_000)
            verdicts = await asyncio.gather(*(store.consume("k", limit, cost=3) for _ in range(40)))
            assert sum(v.allowed for v in verdicts) == 6

            a, b = apart(client, store)
            batches = await asyncio.gather(*(store.consume_many(batch(a, b)) for _ in range(24)))
            allowed = [v for v in batches if v.allowed]
            assert len(allowed) == 4
            assert (await store.peek(a, LA)).remaining == 2
            assert (await store.peek(b, LB)).remaining == 0
            await allowed[0].release()  # type: ignore[misc]
            assert ((await store.peek(a, LA)).remaining, (await store.peek(b, LB)).remaining) == (4, 3)

            answers = await asyncio.gather(*(store.attempt("w", 20, 60_000, cost=3) for _ in range(30)))
            assert sum(r.allowed for r in answers) == 6
            assert await store.attempts("w") == 18
        finally:
            await client.aclose()

    asyncio.run(main())
