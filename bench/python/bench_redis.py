"""ratewindow's RedisStore against bare redis-py EVALSHA and `limits`' moving-window Redis storage.

Workload: 10,000 keys hit round-robin, each limited to 5 uses per 10 s, one thread, one redis-py client
on the local server (``REDIS_URL``, default ``redis://127.0.0.1:6379/0``). The contenders run
interleaved: every round times one batch of each, in a rotating order; the table gives the median
round's ops/s and the ratios.

- ratewindow: ``RedisStore.from_client(r).consume(key, Limit(5, 10_000))`` (EVALSHA of the sliding-log
  script: trim, count, record, PEXPIRE, on the server's clock), and ``consume_many`` of 3 entries.
- bare EVALSHA: ``r.evalsha(sha, 1, key, "c", id, "1", "5", "10000")`` of a trivial script
  (``return {1, 0, -1, -1, 0}``): the round trip with the same key and arguments and no work — the
  floor any Redis store pays through redis-py. Target: ratewindow at least 0.9x of it.
- bare EVALSHA of ratewindow's own sliding-log script with the same arguments, no ratewindow code: the
  difference to ``RedisStore.consume`` is the Python layer alone (plan, call id, decode, driver).
- limits: ``MovingWindowRateLimiter(RedisStorage(url)).hit(RateLimitItemPerSecond(5, 10), key)``.

The last line gives ratewindow's own cost per call without I/O (the client reply canned), which is
what separates it from the bare round trip besides the script's work on the server.

Run: ``.venv/bin/python bench/python/bench_redis.py [--rounds N] [--ops N]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from collections.abc import Callable

import redis
from limits import RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter

from ratewindow import Entry, Limit, RedisStore, _ratewindow

KEYS = 10_000
USES, WINDOW_S = 5, 10
URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
TRIVIAL = "return {1, 0, -1, -1, 0}"

Runner = Callable[[list[str]], int]


def bare_evalsha(client: redis.Redis, prefix: str) -> Runner:
    sha = client.script_load(TRIVIAL)
    evalsha = client.evalsha

    def run(keys: list[str]) -> int:
        allowed = 0
        for key in keys:
            reply = evalsha(sha, 1, prefix + key, "c", secrets.token_hex(16), "1", str(USES), str(WINDOW_S * 1000))
            allowed += reply[0]
        return allowed

    return run


def bare_evalsha_sliding(client: redis.Redis, prefix: str) -> Runner:
    """redis-py EVALSHA of ratewindow's own sliding-log script, no ratewindow code around it."""
    (_, sha, source), = [script for script in _ratewindow.redis_scripts() if script[0] == "sliding"]
    client.script_load(source)
    evalsha = client.evalsha

    def run(keys: list[str]) -> int:
        allowed = 0
        for key in keys:
            reply = evalsha(
                sha, 1, prefix + "log:" + key, "c", secrets.token_hex(16), "1", str(USES), str(WINDOW_S * 1000)
            )
            allowed += reply[0]
        return allowed

    return run


def ratewindow_consume(client: redis.Redis, prefix: str) -> Runner:
    store, limit = RedisStore.from_client(client, prefix=prefix), Limit(USES, WINDOW_S * 1000)
    consume = store.consume

    def run(keys: list[str]) -> int:
        return sum(consume(key, limit).allowed for key in keys)

    return run


def ratewindow_batch_of_3(client: redis.Redis, prefix: str) -> Runner:
    store, limit = RedisStore.from_client(client, prefix=prefix), Limit(USES, WINDOW_S * 1000)
    everyone, per_route = Limit(1_000_000, WINDOW_S * 1000), Limit(100_000, WINDOW_S * 1000)
    consume_many = store.consume_many

    def run(keys: list[str]) -> int:
        return sum(
            consume_many([Entry(key, limit), Entry("route:" + key[-1], per_route), Entry("all", everyone)]).allowed
            for key in keys
        )

    return run


def limits_moving_window(client: redis.Redis, prefix: str) -> Runner:
    limiter = MovingWindowRateLimiter(RedisStorage(URL, key_prefix=prefix + "limits"))
    item = RateLimitItemPerSecond(USES, WINDOW_S)
    hit = limiter.hit

    def run(keys: list[str]) -> int:
        return sum(hit(item, key) for key in keys)

    return run


CONTENDERS: dict[str, Callable[[redis.Redis, str], Runner]] = {
    "bare redis-py evalsha (trivial script)": bare_evalsha,
    "bare redis-py evalsha (ratewindow's script)": bare_evalsha_sliding,
    "ratewindow RedisStore.consume": ratewindow_consume,
    "ratewindow RedisStore.consume_many (3 entries)": ratewindow_batch_of_3,
    "limits MovingWindowRateLimiter(RedisStorage)": limits_moving_window,
}
BARE = "bare redis-py evalsha (trivial script)"
LIMITS = "limits MovingWindowRateLimiter(RedisStorage)"


def client_side_us(calls: int = 20_000) -> float:
    """ratewindow's own cost per consume, without I/O: the call machine and its driver (a canned reply)."""
    # allowed; server time; the tightest entry (0) with USES - 1 left, refilling and resetting in a window
    reply = [1, 0, -1, -1, 1_700_000_000_000, 0, USES - 1, WINDOW_S * 1000, WINDOW_S * 1000]
    store = RedisStore.using(lambda *_: reply, evalsha=lambda *_: reply)
    limit, keys = Limit(USES, WINDOW_S * 1000), [f"user:{i % KEYS}" for i in range(calls)]
    start = time.perf_counter()
    for key in keys:
        store.consume(key, limit)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25, help="timed rounds per contender (default 25)")
    parser.add_argument("--ops", type=int, default=1_000, help="ops per contender per round (default 1000)")
    args = parser.parse_args()

    client = redis.Redis.from_url(URL)
    run_id = secrets.token_hex(4)
    keys = [f"user:{i}" for i in range(KEYS)]
    # Round r takes the next `ops` keys of the round-robin, so 10,000 keys cycle across the rounds.
    batches = [[keys[(r * args.ops + i) % KEYS] for i in range(args.ops)] for r in range(args.rounds)]
    runners = {name: make(client, f"rwbench:{run_id}:{n}:") for n, (name, make) in enumerate(CONTENDERS.items())}
    for run in runners.values():  # warm-up: scripts loaded, connections open
        run(keys[:500])

    rates: dict[str, list[float]] = {name: [] for name in runners}
    allowed: dict[str, int] = {name: 0 for name in runners}
    names = list(runners)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            allowed[name] += runners[name](batches[r])
            rates[name].append(args.ops / (time.perf_counter() - start))

    bare, peer = statistics.median(rates[BARE]), statistics.median(rates[LIMITS])
    print(f"{KEYS:,} keys round-robin, {USES} uses per {WINDOW_S} s, {args.rounds} interleaved rounds of {args.ops:,} ops")
    print(f"{'contender':<48} {'ops/s (median)':>15} {'min':>10} {'max':>10} {'allowed':>8} {'vs bare':>8} {'vs limits':>10}")
    for name in names:
        median = statistics.median(rates[name])
        share = allowed[name] / (args.rounds * args.ops)
        print(
            f"{name:<48} {median:>15,.0f} {min(rates[name]):>10,.0f} {max(rates[name]):>10,.0f} "
            f"{share:>7.1%} {median / bare:>7.2f}x {median / peer:>9.2f}x"
        )
    print(f"ratewindow's own cost per consume without I/O (plan, call id, decode): {client_side_us():.1f} us; "
          f"a round trip here: {1e6 / bare:.0f} us")


if __name__ == "__main__":
    main()
