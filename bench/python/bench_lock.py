"""The lock on Redis (redis-py) against the bare pattern on the same client, as ratios from one
interleaved run.

One operation is a pair: acquire a lock on a key of its own (1,000 keys round-robin, a fresh owner
token each time), then release it.

- ``ours``: ``store.lock(key, 10).acquire()`` then ``.release()`` (EVALSHA of the lock script, twice).
- ``bare``: ``SET key owner NX PX 10000``, then EVALSHA of ``if GET == owner then DEL`` (the seed's
  compare-and-delete release).

Variants: ``sync`` (``redis.Redis``, one thread) and ``async64`` (``redis.asyncio``, 64 pairs in
flight). Each round times every contender once, in a rotating order; the table gives the median
throughput and the median of the per-round ratios ours/bare (target >= 0.9x).

Run: ``.venv/bin/python bench/python/bench_lock.py [--rounds N] [--ops N]``. Report ``uptime``'s load
average with the numbers (it prints it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio

from ratewindow import AsyncRedisStore, RedisStore

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
KEYS = [f"benchlock:{i}" for i in range(1000)]
CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def sync_contenders(client: redis.Redis) -> dict[str, Callable[[str], None]]:
    store = RedisStore.from_client(client, prefix="rwbench:")
    cad = client.script_load(CAD)

    def ours(key: str) -> None:
        lock = store.lock(key, 10)
        if not lock.acquire() or not lock.release():
            raise RuntimeError("ours")

    def bare(key: str) -> None:
        owner = uuid.uuid4().hex
        if not client.set("rwbare:" + key, owner, px=10_000, nx=True):
            raise RuntimeError("bare acquire")
        if client.evalsha(cad, 1, "rwbare:" + key, owner) != 1:
            raise RuntimeError("bare release")

    return {"ours": ours, "bare": bare}


def async_contenders(client: redis.asyncio.Redis, cad: str) -> dict[str, Callable[[str], Awaitable[None]]]:
    store = AsyncRedisStore.from_client(client, prefix="rwbench:")

    async def ours(key: str) -> None:
        lock = store.lock(key, 10)
        if not await lock.acquire() or not await lock.release():
            raise RuntimeError("ours")

    async def bare(key: str) -> None:
        owner = uuid.uuid4().hex
        if not await client.set("rwbare:" + key, owner, px=10_000, nx=True):
            raise RuntimeError("bare acquire")
        if await client.evalsha(cad, 1, "rwbare:" + key, owner) != 1:
            raise RuntimeError("bare release")

    return {"ours": ours, "bare": bare}


def report(name: str, times: dict[str, list[float]], ops: int) -> None:
    ratios = [b / o for o, b in zip(times["ours"], times["bare"])]  # throughput ours / bare
    rate = {k: ops / statistics.median(v) for k, v in times.items()}
    print(
        f"{name:8} ours {rate['ours']:8.0f} pairs/s  bare {rate['bare']:8.0f} pairs/s  "
        f"ours/bare {statistics.median(ratios):.2f}x  (rounds {' '.join(f'{r:.2f}' for r in ratios)})"
    )


def run_sync(rounds: int, ops: int) -> None:
    client = redis.Redis.from_url(URL)
    fns = sync_contenders(client)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for k in KEYS[:100]:
            fn(k)
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in order:
            fn = fns[name]
            t = time.perf_counter()
            for i in range(ops):
                fn(KEYS[i % len(KEYS)])
            times[name].append(time.perf_counter() - t)
    report("sync", times, ops)
    client.close()


async def run_async(rounds: int, ops: int, in_flight: int = 64) -> None:
    client = redis.asyncio.Redis.from_url(URL, max_connections=in_flight)
    cad = await client.script_load(CAD)
    fns = async_contenders(client, cad)
    per = len(KEYS) // in_flight

    async def batch(fn: Callable[[str], Awaitable[None]]) -> float:
        async def worker(w: int) -> None:
            for i in range(ops // in_flight):
                await fn(KEYS[w * per + i % per])

        t = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(in_flight)))
        return time.perf_counter() - t

    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        await batch(fn)
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in order:
            times[name].append(await batch(fns[name]))
    report("async64", times, (ops // in_flight) * in_flight)
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=3000)
    args = parser.parse_args()
    print(f"lock bench: {args.rounds} rounds x {args.ops} pairs, load {os.getloadavg()}")
    run_sync(args.rounds, args.ops)
    asyncio.run(run_async(args.rounds, args.ops))
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
