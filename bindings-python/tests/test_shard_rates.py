"""GCRA, the sliding-window counter and costs through the sharded store, with real processes: spawned
workers are the shards, this process is their manager (``serve_shards``) counting in a MemoryStore on
a fixed clock, so every verdict a shard gets can be compared field by field with the same calls on a
MemoryStore of this process (the reference). Exactly-once across 4 processes for GCRA and the counter
with costs; bad costs and limits typed on the shard; ``reset`` and ``attempt(..., cost=n)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from test_shard import fresh, run_workers

from ratewindow import (
    CounterLimit,
    Entry,
    GcraLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    ShardedStore,
    Verdict,
)

NOW = 1_700_000_000_000


def fields(v: Verdict) -> tuple[Any, ...]:
    return (
        v.allowed,
        v.retry_after_ms,
        v.retry_timestamp,
        v.blocked,
        v.limit,
        v.remaining,
        v.refill_after_ms,
        v.reset_after_ms,
    )


def script(store: Any, key: str) -> list[Any]:
    """The calls both sides run: every algorithm, with costs, batches mixing them, release, reset."""
    gcra, burst = GcraLimit(10, 60_000), GcraLimit(10, 60_000, burst=4)
    counter, log = CounterLimit(6, 1_000), Limit(5, 10_000)
    out: list[Any] = []
    for cost in (1, 3, 5, 2):
        out.append(fields(store.consume(f"{key}:g", gcra, cost=cost)))
    out.append(fields(store.peek(f"{key}:g", gcra, cost=1)))
    out.append(fields(store.consume(f"{key}:b", burst, cost=4)))
    out.append(fields(store.consume(f"{key}:b", burst)))
    store.reset(f"{key}:b", burst)
    out.append(fields(store.peek(f"{key}:b", burst, cost=4)))
    for cost in (2, 3, 2):
        out.append(fields(store.consume(f"{key}:c", counter, cost=cost)))
    out.append(fields(store.consume(f"{key}:l", log, cost=4)))
    out.append(fields(store.peek(f"{key}:l", log, cost=2)))
    batch = [Entry(f"{key}:m1", gcra, 3), Entry(f"{key}:m2", log, 2), Entry(f"{key}:m3", counter, 4)]
    first = store.consume_many(batch)
    out.append((fields(first), first.releasable))
    out.append(fields(store.consume_many(batch)))
    out.append(fields(store.peek_many(batch)))
    first.release()
    out.append(fields(store.peek_many(batch)))
    out.append(fields(store.peek(f"{key}:m2", log)))
    a = store.attempt(f"{key}:a", 5, 60_000, cost=3)
    out.append((a.allowed, a.count, a.reset_after_ms))
    a = store.attempt(f"{key}:a", 5, 60_000, cost=3)
    out.append((a.allowed, a.count, a.reset_after_ms, store.attempts(f"{key}:a")))
    return out


def errors(store: Any, key: str) -> list[Any]:
    """Bad costs and limits: typed on the shard as on a store of this process, nothing counted."""
    out: list[Any] = []
    calls: list[Callable[[], object]] = [
        lambda: store.consume(key, GcraLimit(10, 60_000, burst=4), cost=5),
        lambda: store.consume(key, CounterLimit(3, 1_000), cost=0),
        lambda: store.consume(key, Limit(3, 1_000), cost=4),
        lambda: store.consume_many([Entry(key, Limit(3, 1_000)), Entry(key, GcraLimit(2, 100), 3)]),
        lambda: store.attempt(key, 5, 60_000, cost=0),
        lambda: store.consume(key, GcraLimit(10, 60_000), cost=1.5),
    ]
    for call in calls:
        try:
            call()
            out.append(None)
        except (InvalidArgumentError, InvalidLimitError) as e:
            out.append((type(e).__name__, e.field, e.value))
        except TypeError as e:
            out.append(("TypeError", str(e)))
    out.append(fields(store.peek(key, GcraLimit(10, 60_000, burst=4))))
    return out


def _script(conn: Any, key: str, out: Any) -> None:
    store = ShardedStore(conn, timeout=10)
    out.send((script(store, key), errors(store, key + ":e")))


def _gcra(conn: Any, key: str, calls: int, out: Any) -> None:
    store = ShardedStore(conn, timeout=20)
    limit = GcraLimit(1, 60_000, burst=40)
    out.send(sum(store.consume(key, limit, cost=2).allowed for _ in range(calls)))


def _counter(conn: Any, key: str, calls: int, out: Any) -> None:
    store = ShardedStore(conn, timeout=20)
    limit = CounterLimit(30, 60_000)
    out.send(sum(store.consume(key, limit, cost=3).allowed for _ in range(calls)))


def _attempt(conn: Any, key: str, calls: int, out: Any) -> None:
    store = ShardedStore(conn, timeout=20)
    out.send(sum(store.attempt(key, 40, 60_000, cost=3).allowed for _ in range(calls)))


def test_a_shard_gets_the_memory_stores_verdicts_for_every_algorithm_and_cost() -> None:
    key = fresh("rates")
    [(got, got_errors)] = run_workers(_script, [(key,)], MemoryStore(lambda: NOW))
    reference = MemoryStore(lambda: NOW)
    assert got == script(reference, key)
    assert got_errors == errors(reference, key + ":e")
    assert got_errors[0] == ("InvalidArgumentError", "cost", 5)
    assert got_errors[3][:2] == ("InvalidArgumentError", "entries[1].cost")
    assert got_errors[4] == ("InvalidArgumentError", "cost", 0)
    assert got_errors[5][0] == "TypeError"


def test_gcra_with_a_cost_is_exact_across_4_processes() -> None:
    store = MemoryStore(lambda: NOW)
    key = fresh("gcra")
    assert sum(run_workers(_gcra, [(key, 16)] * 4, store)) == 20, "a burst of 40 taken 2 at a time"
    assert not store.consume(key, GcraLimit(1, 60_000, burst=40), cost=1).allowed


def test_the_counter_with_a_cost_is_exact_across_4_processes() -> None:
    store = MemoryStore(lambda: NOW)
    key = fresh("counter")
    assert sum(run_workers(_counter, [(key, 16)] * 4, store)) == 10, "30 uses taken 3 at a time"


def test_attempt_with_a_cost_is_exact_across_4_processes() -> None:
    store = MemoryStore(lambda: NOW)
    key = fresh("attempt")
    assert sum(run_workers(_attempt, [(key, 16)] * 4, store)) == 13, "floor(40 / 3)"
    assert store.attempts(key) == 39
