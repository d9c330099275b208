"""A worker process for the mixed-batch race on Redis: many concurrent asyncio batches (the user's
GCRA and counter, one global sliding log), started at a wall-clock instant shared by every process."""

from __future__ import annotations

import asyncio
import time

import redis_servers as rs

from ratewindow import CounterLimit, Entry, GcraLimit, Limit


async def _calls(prefix: str, worker: int, uses: int, calls: int, cluster: bool, start_at: float) -> int:
    client = rs.async_cluster_client() if cluster else rs.async_client()
    try:
        await rs.warm_async(client)
        store = rs.async_store(client, prefix=prefix, hash_tag=":" if cluster else None)

        def batch(i: int) -> list[Entry]:
            user = f"api:user{worker}-{i % 4}"
            return [
                Entry(user, GcraLimit(1000, 60_000, 1000)),
                Entry(user, CounterLimit(1000, 3_600_000)),
                Entry("api", Limit(uses, 3_600_000)),
            ]

        await asyncio.sleep(max(0.0, start_at - time.time()))
        verdicts = await asyncio.gather(*(store.consume_many(batch(i)) for i in range(calls)))
        return sum(v.allowed for v in verdicts)
    finally:
        await client.aclose()


def worker(prefix: str, index: int, uses: int, calls: int, cluster: bool, start_at: float) -> int:
    """Runs ``calls`` concurrent batches and returns how many were allowed."""
    return asyncio.run(_calls(prefix, index, uses, calls, cluster, start_at))
