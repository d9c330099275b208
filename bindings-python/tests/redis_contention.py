"""A worker process for the exactly-once test: many concurrent asyncio calls at one key, started at a
wall-clock instant shared by every process."""

from __future__ import annotations

import asyncio
import time
from typing import cast

import redis_servers as rs

from ratewindow import Entry, Limit


async def _calls(prefix: str, keys: list[str], uses: int, calls: int, cluster: bool, hash_tag: str | None,
                 start_at: float) -> int:
    client = rs.async_cluster_client() if cluster else rs.async_client()
    try:
        await rs.warm_async(client)
        store = rs.async_store(client, prefix=prefix, hash_tag=hash_tag)
        entries = [Entry(key, Limit(uses, 60_000)) for key in keys]
        await asyncio.sleep(max(0.0, start_at - time.time()))
        if len(entries) == 1:
            verdicts = await asyncio.gather(*(store.consume(keys[0], cast(Limit, entries[0].limit)) for _ in range(calls)))
        else:
            verdicts = await asyncio.gather(*(store.consume_many(entries) for _ in range(calls)))
        return sum(v.allowed for v in verdicts)
    finally:
        await client.aclose()


def worker(prefix: str, keys: list[str], uses: int, calls: int, cluster: bool, hash_tag: str | None,
           start_at: float) -> int:
    """Runs ``calls`` concurrent calls and returns how many were allowed."""
    return asyncio.run(_calls(prefix, keys, uses, calls, cluster, hash_tag, start_at))
