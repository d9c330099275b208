"""Benchmark: the sharded store's IPC cost in Python. This process is the manager (serve_shards over a
MemoryStore, a thread per connection); a spawned worker is the shard. Contenders, interleaved in a
rotating order each round:

- memory:        MemoryStore.consume in the manager (what every sharded call runs there)
- sharded:       ShardedStore.consume in the worker, one call at a time (a full round trip each)
- async-64:      AsyncShardedStore.consume in the worker, 64 calls in flight

10,000 keys round-robin, a limit never reached. Each figure is the median of the rounds; the IPC cost
is sharded minus memory, per call.

    python bench/python/bench_sharded.py              (~15 s)
    BENCH_QUICK=1 python bench/python/bench_sharded.py
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ratewindow import AsyncShardedStore, Limit, MemoryStore, ShardedStore, serve_shards

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS = 2 if QUICK else 7
SECONDS = 0.1 if QUICK else 0.5
KEYS = [f"bench:{i}" for i in range(10_000)]
LIMIT = Limit(1_000_000, 600_000)


def timed(batch: int, call: Any) -> float:
    """Calls until SECONDS have passed: ns per call."""
    calls = 0
    start = time.perf_counter_ns()
    end = start + int(SECONDS * 1e9)
    now = start
    while now < end:
        call(calls)
        calls += batch
        now = time.perf_counter_ns()
    return (now - start) / calls


def worker(conn: Any, control: Any) -> None:
    store = ShardedStore(conn, timeout=10)
    astore = AsyncShardedStore(conn, timeout=10)
    loop = asyncio.new_event_loop()

    async def many(i: int) -> None:
        await asyncio.gather(*(astore.consume(KEYS[(i + j) % 10_000], LIMIT) for j in range(64)))

    while True:
        what = control.recv()
        if what == "stop":
            return
        if what == "sharded":
            control.send(timed(1, lambda i: store.consume(KEYS[i % 10_000], LIMIT)))
        else:
            control.send(timed(64, lambda i: loop.run_until_complete(many(i))))


def main() -> None:
    ctx = mp.get_context("spawn")
    store = MemoryStore()
    parent, child = ctx.Pipe()
    control, control_child = ctx.Pipe()
    p = ctx.Process(target=worker, args=(child, control_child))
    p.start()
    serve_shards(store, parent)

    def memory() -> float:
        return timed(1, lambda i: store.consume(KEYS[i % 10_000], LIMIT))

    def remote(name: str) -> float:
        control.send(name)
        return float(control.recv())

    contenders: dict[str, Callable[[], float]] = {"memory": memory, "sharded": lambda: remote("sharded"), "async-64": lambda: remote("async-64")}
    names = list(contenders)
    results: dict[str, list[float]] = {n: [] for n in names}
    load = [os.getloadavg()[0]]
    for r in range(ROUNDS):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            results[name].append(contenders[name]())
    load.append(os.getloadavg()[0])
    control.send("stop")
    p.join(10)
    m = {n: statistics.median(v) for n, v in results.items()}
    print(f"sharded store, {ROUNDS} rounds of {SECONDS} s, load {load[0]:.1f} -> {load[1]:.1f} (Python {sys.version.split()[0]})")
    for n in names:
        print(f"  {n:<9} {m[n] / 1000:8.2f} us/call  {1e9 / m[n]:10,.0f} calls/s")
    print(f"  IPC cost per call (sharded - memory): {(m['sharded'] - m['memory']) / 1000:.2f} us; sharded / memory = {m['sharded'] / m['memory']:.0f}x")
    print(f"  with 64 in flight (asyncio): {m['async-64'] / 1000:.2f} us/call, {m['async-64'] / m['memory']:.0f}x memory")


if __name__ == "__main__":
    main()
