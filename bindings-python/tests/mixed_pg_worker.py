"""A worker process for the mixed-batch race on PostgreSQL: many concurrent asyncio batches (the user's
GCRA and counter, one global sliding log; the entries in alternating orders) on a pool of its own,
started at a wall-clock instant shared by every process."""

from __future__ import annotations

import asyncio
import time

import psycopg_pool
import sql_support as sql

from ratewindow import AsyncPostgresStore, CounterLimit, Entry, GcraLimit, Limit


async def _calls(prefix: str, worker: int, uses: int, calls: int, start_at: float) -> int:
    async with psycopg_pool.AsyncConnectionPool(
        sql.DSN, min_size=8, max_size=8, kwargs={"autocommit": True}, open=False
    ) as pool:
        await pool.wait()
        store = AsyncPostgresStore.using(pool, prefix=prefix)

        def batch(i: int) -> list[Entry]:
            user = f"api:user{worker}-{i % 4}"
            entries = [
                Entry(user, GcraLimit(1000, 60_000, 1000)),
                Entry(user, CounterLimit(1000, 3_600_000)),
                Entry("api", Limit(uses, 3_600_000)),
            ]
            return entries if i % 2 == 0 else entries[::-1]

        await asyncio.sleep(max(0.0, start_at - time.time()))
        verdicts = await asyncio.gather(*(store.consume_many(batch(i)) for i in range(calls)))
        return sum(v.allowed for v in verdicts)


def worker(prefix: str, index: int, uses: int, calls: int, start_at: float) -> int:
    """Runs ``calls`` concurrent batches and returns how many were allowed."""
    return asyncio.run(_calls(prefix, index, uses, calls, start_at))
