"""What the failure guard costs (``ratewindow.Guard`` / ``AsyncGuard``), as ratios from one interleaved run.

Variants (each round times one batch of every contender of the variant, in a rotating order; the table
gives the median round and the median of per-round ratios, guarded over bare):

- ``sync``: ``RedisStore.from_client(r).consume(key, limit)`` bare vs through ``Guard(store,
  timeout_ms=1000)``; allowed calls: 10,000 keys round-robin at 5 uses per 60 s, each contender on
  keys of its own, each key reached at most 5 times (rounds x ops <= 50,000), one thread.
- ``async64``: ``AsyncRedisStore`` on ``redis.asyncio`` vs ``AsyncGuard``, 64 calls in flight
  (``asyncio.gather`` of 64), allowed calls as above.
- ``refused``: the peers' abuse workload, 10,000 keys at 5 uses per 600 s, filled first (untimed), then
  timed refusals: the bare store (one EVALSHA each) vs ``Guard(store, block_cache=True)`` (after its
  first refusal of a key, no round trip).
- ``memory``: the guard's own cost without I/O, ``MemoryStore`` bare vs guarded.

Run: ``.venv/bin/python bench/python/bench_guard.py [--rounds N] [--ops N] [--variant NAME ...]``.
Report ``uptime``'s load average with the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio

from ratewindow import AsyncGuard, AsyncRedisStore, Guard, Limit, MemoryStore, RedisStore

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
KEYS = 10_000
OPEN = Limit(5, 60_000)
ABUSE = Limit(5, 600_000)

Timed = Callable[[int, int], float]
"""``run(start, ops)``: seconds to make ``ops`` calls starting at key index ``start``."""


def sync_runner(store: object, limit: Limit) -> Timed:
    consume = store.consume  # type: ignore[attr-defined]

    def run(start: int, ops: int) -> float:
        keys = [f"k{(start + i) % KEYS}" for i in range(ops)]
        t = time.perf_counter()
        for k in keys:
            consume(k, limit)
        return time.perf_counter() - t

    return run


def async_runner(loop: asyncio.AbstractEventLoop, store: object, limit: Limit, in_flight: int) -> Timed:
    consume: Callable[[str, Limit], Awaitable[object]] = store.consume  # type: ignore[attr-defined]

    async def batch(keys: list[str]) -> None:
        for i in range(0, len(keys), in_flight):
            await asyncio.gather(*(consume(k, limit) for k in keys[i : i + in_flight]))

    def run(start: int, ops: int) -> float:
        keys = [f"k{(start + i) % KEYS}" for i in range(ops)]
        t = time.perf_counter()
        loop.run_until_complete(batch(keys))
        return time.perf_counter() - t

    return run


def interleave(name: str, contenders: dict[str, Timed], rounds: int, ops: int) -> None:
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            times[n].append(contenders[n](r * ops, ops))
    base = names[0]
    print(f"\n{name} ({rounds} rounds x {ops} calls)")
    for n in names:
        med = statistics.median(times[n])
        ratios = [b / t for b, t in zip(times[base], times[n])]
        print(f"  {n:<28} {ops / med:>10,.0f} calls/s   {1e6 * med / ops:7.2f} us/call   "
              f"speed vs {base}: {statistics.median(ratios):.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=5000)  # rounds x ops <= 50,000 keeps every call allowed
    parser.add_argument("--variant", nargs="*", default=["sync", "async64", "refused", "memory"])
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    prefix = f"rwbench:guard:{secrets.token_hex(4)}:"
    r = redis.Redis.from_url(URL)
    try:
        if "sync" in args.variant:
            interleave("sync, Redis, allowed", {
                "RedisStore": sync_runner(RedisStore.from_client(r, prefix=prefix + "s1:"), OPEN),
                "Guard(RedisStore)": sync_runner(
                    Guard(RedisStore.from_client(r, prefix=prefix + "s2:"), timeout_ms=1000), OPEN
                ),
            }, args.rounds, args.ops)
        if "async64" in args.variant:
            loop = asyncio.new_event_loop()
            ar = redis.asyncio.Redis.from_url(URL, max_connections=64)
            a1 = AsyncRedisStore.from_client(ar, prefix=prefix + "a1:")
            a2 = AsyncRedisStore.from_client(ar, prefix=prefix + "a2:")
            interleave("asyncio, Redis, 64 in flight, allowed", {
                "AsyncRedisStore": async_runner(loop, a1, OPEN, 64),
                "AsyncGuard(AsyncRedisStore)": async_runner(loop, AsyncGuard(a2, timeout_ms=1000), OPEN, 64),
            }, args.rounds, args.ops)
            loop.run_until_complete(ar.aclose())
            loop.close()
        if "refused" in args.variant:
            store = RedisStore.from_client(r, prefix=prefix + "r:")
            fill = sync_runner(store, ABUSE)
            for _ in range(ABUSE.uses):
                fill(0, KEYS)
            guarded = Guard(store, timeout_ms=1000, block_cache=True)
            sync_runner(guarded, ABUSE)(0, KEYS)  # its first refusal of each key
            interleave("sync, Redis, refused (10,000 keys, filled)", {
                "RedisStore": sync_runner(store, ABUSE),
                "Guard(RedisStore, block_cache)": sync_runner(guarded, ABUSE),
            }, args.rounds, args.ops)
        if "memory" in args.variant:
            many = Limit(1_000_000_000, 60_000)
            interleave("no I/O: MemoryStore, allowed", {
                "MemoryStore": sync_runner(MemoryStore(), many),
                "Guard(MemoryStore)": sync_runner(Guard(MemoryStore(), timeout_ms=1000), many),
            }, args.rounds, args.ops)
    finally:
        for pattern in (prefix + "*",):
            keys = list(r.scan_iter(match=pattern, count=1000))
            for i in range(0, len(keys), 1000):
                r.delete(*keys[i : i + 1000])
        r.close()
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
