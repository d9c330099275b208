"""ratewindow's RedisStore against `limits`' moving and fixed windows, a plain sliding-log script and bare EVALSHA.

The peers' workload: 10,000 keys round-robin, 5 uses a key, one thread, one redis-py client on the
local server (``REDIS_URL``, default ``redis://127.0.0.1:6379/0``), in two variants:

- ``refused`` (abuse traffic): every key is first filled with its 5 uses (untimed, through the
  contender itself), then the timed calls are all refusals. The window is an hour here so the fill
  outlasts the timed rounds even on a loaded machine (at load 14 the fills of all contenders took
  over 10 minutes, and 600 s let the first contender's keys empty again; the window's length costs
  nothing). The ``allowed`` column says which share of the timed calls was allowed: 0 % here.
- ``allowed``: fresh keys, 5 uses per 10 s, each key reached at most 5 times: every timed call is
  allowed and recorded.

Contenders, interleaved (every round times one batch of each, in a rotating order; the table gives
the median round and the median of per-round ratios):

- ratewindow: ``RedisStore.from_client(r).consume(key, Limit(5, window))`` (EVALSHA of the
  sliding-log script on the server's clock), and ``consume_many`` of 3 entries.
- limits: ``MovingWindowRateLimiter(RedisStorage(url)).hit(item, key)`` (a list per key, the
  client's clock).
- fixed windows, like for like: ratewindow's ``RedisStore.attempt(key, 5, window_ms)`` (``fixed.lua``:
  ``GET``, ``PTTL``, and ``INCR`` when below the limit; a refusal is not counted) against ``limits``'
  ``FixedWindowRateLimiter(RedisStorage(url)).hit(item, key)`` (``INCRBY`` + ``EXPIRE`` on the first
  hit; every call counted, refusals too).
- plain script: redis-py ``evalsha`` of a plain sliding-log script (``TIME``, ``ZREMRANGEBYSCORE``,
  ``ZCARD``, then ``ZADD`` + ``PEXPIRE`` or the oldest call's ``ZRANGE``), no library around it.
- bare: redis-py ``evalsha`` of a trivial script with the same key and arguments: the floor.
- GCRA (issue 17): ``RedisStore.consume(key, GcraLimit(5, window))`` (``gcra.lua``: ``TIME``, ``GET``,
  and ``PSETEX`` when allowed), against ``bare3``: redis-py ``evalsha`` of ``return 1`` with one key
  and the 3 arguments the GCRA call sends (the target is >= 0.9x of it).

The last line gives ratewindow's own cost per call without I/O (the client reply canned). Server time
per script call: ``bench/redis_commandstats.py``.

Run: ``.venv/bin/python bench/python/bench_redis.py [--rounds N] [--ops N] [--variant refused|allowed|both]
[--gcra-only]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import statistics
import time
from collections.abc import Callable

import redis
from limits import RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

from ratewindow import Entry, GcraLimit, Limit, RedisStore

KEYS = 10_000
USES = 5
WINDOW_S = {"refused": 3_600, "allowed": 10}
URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
TRIVIAL = "return {1, 0, -1, -1, 0}"
PLAIN = """local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, limit, window = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + window - now}
end
redis.call('ZADD', key, now, ARGV[3])
redis.call('PEXPIRE', key, window)
return {1, limit - count - 1}
"""

Runner = Callable[[list[str]], int]
Maker = Callable[[redis.Redis, str, int], Runner]


def bare_evalsha(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    sha = client.script_load(TRIVIAL)
    # The arguments of a one-entry consume (sliding.lua's short form: the limit, the call id).
    evalsha, limit = client.evalsha, f"{USES}:{window_s * 1000}"

    def run(keys: list[str]) -> int:
        return sum(evalsha(sha, 1, prefix + key, limit, "id")[0] for key in keys)

    return run


def bare_evalsha_3(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    sha = client.script_load("return 1")
    evalsha, window = client.evalsha, str(window_s * 1000)

    def run(keys: list[str]) -> int:
        return sum(evalsha(sha, 1, prefix + key, window, "2000", window) for key in keys)

    return run


def ratewindow_gcra(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    store, limit = RedisStore.from_client(client, prefix=prefix), GcraLimit(USES, window_s * 1000)
    consume = store.consume

    def run(keys: list[str]) -> int:
        return sum(consume(key, limit).allowed for key in keys)

    return run


def plain_script(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    sha = client.script_load(PLAIN)
    evalsha, window, ids = client.evalsha, str(window_s * 1000), itertools.count()
    base = secrets.token_hex(8)

    def run(keys: list[str]) -> int:
        return sum(evalsha(sha, 1, prefix + key, USES, window, f"{base}{next(ids):x}")[0] for key in keys)

    return run


def ratewindow_consume(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    store, limit = RedisStore.from_client(client, prefix=prefix), Limit(USES, window_s * 1000)
    consume = store.consume

    def run(keys: list[str]) -> int:
        return sum(consume(key, limit).allowed for key in keys)

    return run


def ratewindow_batch_of_3(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    store, limit = RedisStore.from_client(client, prefix=prefix), Limit(USES, window_s * 1000)
    everyone, per_route = Limit(1_000_000, window_s * 1000), Limit(100_000, window_s * 1000)
    consume_many = store.consume_many

    def run(keys: list[str]) -> int:
        return sum(
            consume_many([Entry(key, limit), Entry("route:" + key[-1], per_route), Entry("all", everyone)]).allowed
            for key in keys
        )

    return run


def ratewindow_fixed(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    store, window_ms = RedisStore.from_client(client, prefix=prefix), window_s * 1000
    attempt = store.attempt

    def run(keys: list[str]) -> int:
        return sum(attempt(key, USES, window_ms).allowed for key in keys)

    return run


def limits_fixed_window(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    limiter = FixedWindowRateLimiter(RedisStorage(URL, key_prefix=prefix + "limits"))
    item = RateLimitItemPerSecond(USES, window_s)
    hit = limiter.hit

    def run(keys: list[str]) -> int:
        return sum(hit(item, key) for key in keys)

    return run


def limits_moving_window(client: redis.Redis, prefix: str, window_s: int) -> Runner:
    limiter = MovingWindowRateLimiter(RedisStorage(URL, key_prefix=prefix + "limits"))
    item = RateLimitItemPerSecond(USES, window_s)
    hit = limiter.hit

    def run(keys: list[str]) -> int:
        return sum(hit(item, key) for key in keys)

    return run


OURS = "ratewindow RedisStore.consume"
OURS_FIXED = "ratewindow RedisStore.attempt (fixed window)"
LIMITS_FIXED = "limits FixedWindowRateLimiter(RedisStorage)"
LIMITS = "limits MovingWindowRateLimiter(RedisStorage)"
PLAIN_NAME = "plain sliding-log script (redis-py evalsha)"
BARE = "bare redis-py evalsha (trivial script)"
OURS_GCRA = "ratewindow RedisStore.consume (GCRA)"
BARE3 = "bare3: evalsha of return 1, GCRA's 3 arguments"
CONTENDERS: dict[str, Maker] = {
    OURS: ratewindow_consume,
    "ratewindow RedisStore.consume_many (3 entries)": ratewindow_batch_of_3,
    LIMITS: limits_moving_window,
    PLAIN_NAME: plain_script,
    BARE: bare_evalsha,
    OURS_FIXED: ratewindow_fixed,
    LIMITS_FIXED: limits_fixed_window,
    OURS_GCRA: ratewindow_gcra,
    BARE3: bare_evalsha_3,
}


def client_side_us(calls: int = 20_000) -> float:
    """ratewindow's own cost per consume, without I/O: the call machine and its driver (a canned reply)."""
    # allowed, as the script answers a call of one entry: USES - 1 left, refilling and resetting in a
    # window, the server time
    reply = [1, USES - 1, 10_000, 10_000, 1_700_000_000_000]
    store = RedisStore.using(lambda *_: reply, evalsha=lambda *_: reply)
    limit, keys = Limit(USES, 10_000), [f"user:{i % KEYS}" for i in range(calls)]
    start = time.perf_counter()
    for key in keys:
        store.consume(key, limit)
    return (time.perf_counter() - start) / calls * 1e6


def run_variant(client: redis.Redis, variant: str, rounds: int, ops: int, gcra_only: bool = False) -> None:
    window_s, run_id = WINDOW_S[variant], secrets.token_hex(4)
    keys = [f"user:{i}" for i in range(KEYS)]
    contenders = {k: v for k, v in CONTENDERS.items() if not gcra_only or k in (OURS_GCRA, BARE3)}
    runners = {
        name: make(client, f"rwbench:{run_id}:{n}:", window_s) for n, (name, make) in enumerate(contenders.items())
    }
    if variant == "refused":
        # Every key filled with its uses (the batch's shared keys too), through each contender itself.
        for run in runners.values():
            for _ in range(USES):
                run(keys)
        batches = [[keys[(r * ops + i) % KEYS] for i in range(ops)] for r in range(rounds)]
    else:
        # Each key reached at most USES times over the whole run: every timed call is allowed.
        if rounds * ops > USES * KEYS:
            raise SystemExit(f"allowed: rounds x ops must stay within {USES * KEYS:,}")
        batches = [[keys[(r * ops + i) % KEYS] for i in range(ops)] for r in range(rounds)]
        for run in runners.values():  # warm-up on keys of its own
            run([f"warm:{i}" for i in range(200)])

    rates: dict[str, list[float]] = {name: [] for name in runners}
    allowed: dict[str, int] = {name: 0 for name in runners}
    names = list(runners)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            allowed[name] += runners[name](batches[r])
            rates[name].append(ops / (time.perf_counter() - start))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

    load = os.getloadavg()
    if gcra_only:
        print(f"{variant}: GCRA {statistics.median(rates[OURS_GCRA]):,.0f} ops/s, bare3 {statistics.median(rates[BARE3]):,.0f};"
              f" GCRA / bare3 (target >= 0.9x): {ratio(OURS_GCRA, BARE3):.2f}x; {rounds} interleaved rounds of {ops:,} ops;"
              f" load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        return
    print(f"\n{variant}: {KEYS:,} keys round-robin, {USES} uses per {window_s} s, {rounds} interleaved rounds "
          f"of {ops:,} ops; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'contender':<48} {'ops/s (median)':>15} {'allowed':>8} {'vs limits':>10} {'vs plain':>9} {'vs bare':>8}"
          f" {'vs limits fixed':>16}")
    for name in names:
        share = allowed[name] / (rounds * ops)
        print(
            f"{name:<48} {statistics.median(rates[name]):>15,.0f} {share:>7.1%} "
            f"{ratio(name, LIMITS):>9.2f}x {ratio(name, PLAIN_NAME):>8.2f}x {ratio(name, BARE):>7.2f}x"
            f" {ratio(name, LIMITS_FIXED):>15.2f}x"
        )
    print(f"GCRA / bare3 (target >= 0.9x): {ratio(OURS_GCRA, BARE3):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per contender (default 15)")
    parser.add_argument("--ops", type=int, default=1_000, help="ops per contender per round (default 1000)")
    parser.add_argument("--variant", choices=["refused", "allowed", "both"], default="both")
    parser.add_argument("--gcra-only", action="store_true", help="only GCRA and bare3 (a quicker run)")
    args = parser.parse_args()

    client = redis.Redis.from_url(URL)
    for variant in ("refused", "allowed"):
        if args.variant in (variant, "both"):
            run_variant(client, variant, args.rounds, args.ops, args.gcra_only)
    print(f"\nratewindow's own cost per consume without I/O (plan, call id, decode): {client_side_us():.1f} us")


if __name__ == "__main__":
    main()
