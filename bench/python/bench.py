"""ratewindow's MemoryStore against `limits` and `pyrate-limiter`, in-memory, one thread.

Workload: 10,000 keys hit round-robin, each limited to 5 uses per 10 s (a sliding window in all three),
so after its first 5 hits a key is mostly refused, as a limiter under load is. The libraries run
interleaved: every round times one batch of each, in a rotating order, on instances that keep their
state from round to round; the table gives the median round's ops/s and the ratio to `limits`.

- ratewindow: ``MemoryStore().consume(key, Limit(5, 10_000))`` (and ``consume_many`` of one entry).
- limits: ``MovingWindowRateLimiter(MemoryStorage()).hit(RateLimitItemPerSecond(5, 10), key)``.
- pyrate-limiter: ``Limiter(factory).try_acquire(key, blocking=False)`` where the factory gives each
  key its own ``InMemoryBucket([Rate(5, Duration.SECOND * 10)])`` (an ``InMemoryBucket`` alone counts
  every key together), without the background leak thread.

Run: ``.venv/bin/python bench/python/bench.py [--rounds N] [--ops N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from pyrate_limiter import BucketFactory, Duration, InMemoryBucket, Limiter, Rate, RateItem

from ratewindow import Entry, Limit, MemoryStore

KEYS = 10_000
USES, WINDOW_S = 5, 10


class PerKeyBuckets(BucketFactory):
    """One InMemoryBucket per key (pyrate-limiter's documented way to limit per key)."""

    def __init__(self) -> None:
        self.rates = [Rate(USES, Duration.SECOND * WINDOW_S)]
        self.buckets: dict[str, InMemoryBucket] = {}
        self.clock = InMemoryBucket(self.rates)

    def wrap_item(self, name: str, weight: int = 1) -> RateItem:
        now: int = self.clock.now()  # type: ignore[no-untyped-call]  # untyped in pyrate-limiter
        return RateItem(name, now, weight=weight)

    def get(self, item: RateItem) -> InMemoryBucket:
        bucket = self.buckets.get(item.name)
        if bucket is None:
            bucket = self.buckets[item.name] = InMemoryBucket(self.rates)
        return bucket


Runner = Callable[[list[str]], int]


def ratewindow_consume() -> Runner:
    store, limit = MemoryStore(), Limit(USES, WINDOW_S * 1000)
    consume = store.consume

    def run(keys: list[str]) -> int:
        return sum(consume(key, limit).allowed for key in keys)

    return run


def ratewindow_consume_many() -> Runner:
    store, limit = MemoryStore(), Limit(USES, WINDOW_S * 1000)
    consume_many = store.consume_many

    def run(keys: list[str]) -> int:
        return sum(consume_many([Entry(key, limit)]).allowed for key in keys)

    return run


def limits_moving_window() -> Runner:
    limiter, item = MovingWindowRateLimiter(MemoryStorage()), RateLimitItemPerSecond(USES, WINDOW_S)
    hit = limiter.hit

    def run(keys: list[str]) -> int:
        return sum(hit(item, key) for key in keys)

    return run


def pyrate_in_memory() -> Runner:
    limiter = Limiter(PerKeyBuckets())
    acquire = limiter.try_acquire

    def run(keys: list[str]) -> int:
        return sum(bool(acquire(key, blocking=False)) for key in keys)

    return run


CONTENDERS: dict[str, Callable[[], Runner]] = {
    "ratewindow MemoryStore.consume": ratewindow_consume,
    "ratewindow MemoryStore.consume_many (1 entry)": ratewindow_consume_many,
    "limits MovingWindowRateLimiter(MemoryStorage())": limits_moving_window,
    "pyrate-limiter InMemoryBucket per key": pyrate_in_memory,
}
BASELINE = "limits MovingWindowRateLimiter(MemoryStorage())"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per library (default 7)")
    parser.add_argument("--ops", type=int, default=50_000, help="ops per library per round (default 50000)")
    args = parser.parse_args()

    keys = [f"user:{i}" for i in range(KEYS)]
    batch = [keys[i % KEYS] for i in range(args.ops)]  # round-robin over the keys
    runners = {name: make() for name, make in CONTENDERS.items()}
    for run in runners.values():  # warm-up: every key seen once
        run(keys)

    rates: dict[str, list[float]] = {name: [] for name in runners}
    allowed: dict[str, int] = {name: 0 for name in runners}
    names = list(runners)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            allowed[name] += runners[name](batch)
            rates[name].append(args.ops / (time.perf_counter() - start))

    base = statistics.median(rates[BASELINE])
    print(f"{KEYS:,} keys round-robin, {USES} uses per {WINDOW_S} s, {args.rounds} interleaved rounds of {args.ops:,} ops")
    print(f"{'library':<50} {'ops/s (median)':>15} {'min':>12} {'max':>12} {'allowed':>9} {'vs limits':>10}")
    for name in names:
        median = statistics.median(rates[name])
        share = allowed[name] / (args.rounds * args.ops)
        print(
            f"{name:<50} {median:>15,.0f} {min(rates[name]):>12,.0f} {max(rates[name]):>12,.0f} "
            f"{share:>8.1%} {median / base:>9.2f}x"
        )


if __name__ == "__main__":
    main()
