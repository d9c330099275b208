"""The lock on Redis (redis-py) against the bare pattern on the same client, as ratios from one
interleaved run.

One operation is a pair: acquire a lock on a key of its own (1,000 keys round-robin, a fresh owner
token each time), then release it.

- ``ours``: ``store.lock(key, 10).acquire()`` then ``.release()`` on ``RedisStore.from_client`` (which
  gives ``command``: the acquire is a plain ``SET NX PX``, the release an EVALSHA of the lock script).
- ``bare``: ``SET key owner NX PX 10000``, then EVALSHA of ``if GET == owner then DEL`` (the seed's
  compare-and-delete release).

Variants: ``sync`` (``redis.Redis``, one thread) and ``async64`` (``redis.asyncio``, 64 pairs in
flight). Each round times every contender once, in a rotating order; the table gives the median
throughput and the median of the per-round ratios ours/bare (target >= 0.9x), and beside it the CPU
per pair of this process (``time.process_time``) and of the redis-server (``/proc/<pid>/stat`` when it
runs on this host), which a loaded machine moves far less than the throughput, and the server's own
time running the pair's commands (``INFO commandstats``, reset before each round: use a private
server, since ``CONFIG RESETSTAT`` clears its counters).

Fairness: both contenders share one client (sync) or one client and its pool of 64 connections
(asyncio), and make their owner token the same way (``uuid.uuid4().hex``); a warm-up round of each (not
recorded) comes first, and a full ``gc.collect()`` (not counted) before every round, so no contender
starts with the other's garbage. redis-py arms no timer per command, so nothing of one round runs in
another.

Run: ``.venv/bin/python bench/python/bench_lock.py [--rounds N] [--ops N]``. Report ``uptime``'s load
average with the numbers (it prints it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio

from ratewindow import AsyncRedisStore, RedisStore

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
KEYS = [f"benchlock:{i}" for i in range(1000)]
CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
# BENCH_CALLS=1: a third contender, ours with the lock's commands not planned (each operation a call
# of the machine: the path before the plan, and a store without `command`'s), for the difference.
CALLS = os.environ.get("BENCH_CALLS") == "1"


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

    fns: dict[str, Callable[[str], None]] = {"ours": ours, "bare": bare}
    if CALLS:
        unplanned = RedisStore.from_client(client, prefix="rwbench:")
        unplanned._lock_plans = None

        def calls(key: str) -> None:
            lock = unplanned.lock(key, 10)
            if not lock.acquire() or not lock.release():
                raise RuntimeError("calls")

        fns["calls"] = calls
    return fns


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

    fns: dict[str, Callable[[str], Awaitable[None]]] = {"ours": ours, "bare": bare}
    if CALLS:
        unplanned = AsyncRedisStore.from_client(client, prefix="rwbench:")
        unplanned._lock_plans = None

        async def calls(key: str) -> None:
            lock = unplanned.lock(key, 10)
            if not await lock.acquire() or not await lock.release():
                raise RuntimeError("calls")

        fns["calls"] = calls
    return fns


_SERVER_PID: int | None = None
_ADMIN: redis.Redis | None = None


def command_usec() -> float:
    """The server's time running commands since the last reset (us), by ``INFO commandstats``."""
    assert _ADMIN is not None
    stats = _ADMIN.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config")))


def server_cpu() -> float | None:
    """The redis-server's CPU time in seconds (utime + stime), when it runs on this host."""
    if _SERVER_PID is None:
        return None
    try:
        with open(f"/proc/{_SERVER_PID}/stat") as f:
            fields = f.read().split(") ")[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


class Cpu:
    """CPU seconds a contender used in its rounds: this process's and the server's."""

    def __init__(self) -> None:
        self.client: list[float] = []
        self.server: list[float] = []
        self.commands: list[float] = []

    def start(self) -> tuple[float, float | None]:
        gc.collect()
        if _ADMIN is not None:
            _ADMIN.config_resetstat()
        return time.process_time(), server_cpu()

    def stop(self, started: tuple[float, float | None], pairs: int) -> None:
        self.client.append((time.process_time() - started[0]) / pairs)
        if _ADMIN is not None:
            self.commands.append(command_usec() / 1e6 / pairs)
        end = server_cpu()
        if started[1] is not None and end is not None:
            self.server.append((end - started[1]) / pairs)


def report(name: str, times: dict[str, list[float]], ops: int, cpu: dict[str, Cpu]) -> None:
    ratios = [b / o for o, b in zip(times["ours"], times["bare"])]  # throughput ours / bare
    rate = {k: ops / statistics.median(v) for k, v in times.items()}
    print(
        f"{name:8} ours {rate['ours']:8.0f} pairs/s  bare {rate['bare']:8.0f} pairs/s  "
        f"ours/bare {statistics.median(ratios):.2f}x  (rounds {' '.join(f'{r:.2f}' for r in ratios)})"
    )
    us = {k: statistics.median(c.client) * 1e6 for k, c in cpu.items()}
    line = f"{'':8} CPU per pair: this process ours {us['ours']:.1f} us, bare {us['bare']:.1f} us"
    if "calls" in times:
        calls = [b / c for c, b in zip(times["calls"], times["bare"])]
        print(
            f"{'':8} calls (not planned) {rate['calls']:8.0f} pairs/s, calls/bare {statistics.median(calls):.2f}x, "
            f"CPU per pair {us['calls']:.1f} us"
        )
    if all(c.server for c in cpu.values()):
        srv = {k: statistics.median(c.server) * 1e6 for k, c in cpu.items()}
        line += f"; redis-server (pid {_SERVER_PID}) ours {srv['ours']:.1f} us, bare {srv['bare']:.1f} us"
    print(line)
    if all(c.commands for c in cpu.values()):
        cmd = {k: statistics.median(c.commands) * 1e6 for k, c in cpu.items()}
        print(f"{'':8} commandstats per pair: ours {cmd['ours']:.2f} us, bare {cmd['bare']:.2f} us")


def run_sync(rounds: int, ops: int) -> None:
    client = redis.Redis.from_url(URL)
    fns = sync_contenders(client)
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpu = {k: Cpu() for k in fns}
    for fn in fns.values():  # warm-up: a round of each, not recorded
        for i in range(ops):
            fn(KEYS[i % len(KEYS)])
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in order:
            fn = fns[name]
            started = cpu[name].start()
            t = time.perf_counter()
            for i in range(ops):
                fn(KEYS[i % len(KEYS)])
            times[name].append(time.perf_counter() - t)
            cpu[name].stop(started, ops)
    report("sync", times, ops, cpu)
    client.close()


async def run_async(rounds: int, ops: int, in_flight: int = 64) -> None:
    client = redis.asyncio.Redis.from_url(URL, max_connections=in_flight)
    cad = await client.script_load(CAD)
    fns = async_contenders(client, cad)
    per = len(KEYS) // in_flight

    pairs = (ops // in_flight) * in_flight

    async def batch(fn: Callable[[str], Awaitable[None]], cpu: Cpu | None = None) -> float:
        async def worker(w: int) -> None:
            for i in range(ops // in_flight):
                await fn(KEYS[w * per + i % per])

        started = cpu.start() if cpu else None
        t = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(in_flight)))
        elapsed = time.perf_counter() - t
        if cpu and started:
            cpu.stop(started, pairs)
        return elapsed

    times: dict[str, list[float]] = {k: [] for k in fns}
    cpu = {k: Cpu() for k in fns}
    for fn in fns.values():  # warm-up: a round of each, not recorded
        gc.collect()
        await batch(fn)
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in order:
            times[name].append(await batch(fns[name], cpu[name]))
    report("async64", times, pairs, cpu)
    await client.aclose()


def run_noio(rounds: int, ops: int) -> None:
    """Each contender's CPU per pair with a client that answers at once (no I/O), sync and asyncio,
    interleaved, medians of the rounds: the client side alone."""

    def fake_sync() -> Any:
        class C:
            def set(self, *a: Any, **k: Any) -> bool:
                return True

            def evalsha(self, *a: Any) -> int:
                return 1

            def eval(self, *a: Any) -> int:
                return 1

            def execute_command(self, *a: Any) -> bool:
                return True

            def script_load(self, s: str) -> str:
                return "0" * 40

        return C()

    def fake_async() -> Any:
        class C:
            async def set(self, *a: Any, **k: Any) -> bool:
                return True

            async def evalsha(self, *a: Any) -> int:
                return 1

            async def eval(self, *a: Any) -> int:
                return 1

            async def execute_command(self, *a: Any) -> bool:
                return True

        return C()

    sync_fns = sync_contenders(fake_sync())
    async_fns = async_contenders(fake_async(), "0" * 40)
    for label, fns, is_async in (("sync", sync_fns, False), ("asyncio", async_fns, True)):
        us: dict[str, list[float]] = {k: [] for k in fns}

        def one(fn: Any) -> None:
            if is_async:

                async def loop() -> None:
                    for i in range(ops):
                        await fn(KEYS[i % len(KEYS)])

                asyncio.run(loop())
            else:
                for i in range(ops):
                    fn(KEYS[i % len(KEYS)])

        for fn in fns.values():
            one(fn)
        for r in range(rounds):
            for name in list(fns) if r % 2 == 0 else list(reversed(fns)):
                gc.collect()
                t = time.process_time()
                one(fns[name])
                us[name].append((time.process_time() - t) / ops * 1e6)
        med = {k: statistics.median(v) for k, v in us.items()}
        extra = f", calls (not planned) {med['calls']:.2f} us" if "calls" in med else ""
        print(f"no I/O {label:8} client CPU per pair: ours {med['ours']:.2f} us, bare {med['bare']:.2f} us{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=8000)
    parser.add_argument("--noio-only", action="store_true", help="only the client CPU with no I/O")
    args = parser.parse_args()
    global _SERVER_PID, _ADMIN
    _ADMIN = redis.Redis.from_url(URL)
    _SERVER_PID = int(_ADMIN.info("server")["process_id"])
    print(f"lock bench: {args.rounds} rounds x {args.ops} pairs, load {os.getloadavg()}")
    if not args.noio_only:
        run_sync(args.rounds, args.ops)
        asyncio.run(run_async(args.rounds, args.ops))
    run_noio(args.rounds, args.ops)
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
