"""GCRA and the sliding-window counter: every case of tests/vectors/gcra/*.json and
tests/vectors/counter/*.json on the sync and asyncio memory stores (manual clock, every field compared,
None included), and the API around them: limits, typed errors naming the field, mixed batches, and
PostgresStore checking a batch that mixes algorithms before it sends anything."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from ratewindow import (
    AnyLimit,
    AsyncMemoryStore,
    CounterLimit,
    Entry,
    GcraLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    Verdict,
)

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"
FILES = sorted([*(VECTORS / "gcra").glob("*.json"), *(VECTORS / "counter").glob("*.json")])
CASES = [(path, case) for path in FILES for case in json.loads(path.read_text())["cases"]]


def gcra(limit: dict[str, int]) -> GcraLimit:
    return GcraLimit(limit["uses"], limit["window_ms"], limit.get("burst"))


def counter(limit: dict[str, int]) -> CounterLimit:
    return CounterLimit(limit["uses"], limit["window_ms"])


def sliding(limit: dict[str, int]) -> Limit:
    return Limit(limit["uses"], limit["window_ms"])


def entries(op: dict[str, Any]) -> list[Entry]:
    make: dict[str, Callable[[dict[str, int]], AnyLimit]] = {"gcra": gcra, "counter": counter, "sliding": sliding}
    return [Entry(e["key"], make[e["algorithm"]](e["limit"]), e.get("cost", 1)) for e in op["entries"]]


def verdict(v: Verdict, batch: bool) -> dict[str, Any]:
    out = {
        "allowed": v.allowed,
        "limit": v.limit,
        "refill_after_ms": v.refill_after_ms,
        "remaining": v.remaining,
        "reset_after_ms": v.reset_after_ms,
        "retry_after_ms": v.retry_after_ms,
        "retry_timestamp": v.retry_timestamp,
    }
    if batch:
        out["blocked"] = v.blocked
    return out


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t


async def run_op(store: AsyncMemoryStore, op: dict[str, Any], ids: dict[str, Verdict]) -> Any:
    """One op on the asyncio store (the sync store runs under it: ``AsyncMemoryStore(store)``)."""
    name, key, cost = op["op"], op.get("key", ""), op.get("cost", 1)
    if name == "gcra_consume":
        return verdict(await store.consume(key, gcra(op["limit"]), cost=cost), False)
    if name == "gcra_peek":
        return verdict(await store.peek(key, gcra(op["limit"]), cost=cost), False)
    if name == "gcra_reset":
        return await store.reset(key, GcraLimit(1, 1))
    if name == "counter_consume":
        return verdict(await store.consume(key, counter(op["limit"]), cost=cost), False)
    if name == "counter_peek":
        return verdict(await store.peek(key, counter(op["limit"]), cost=cost), False)
    if name == "counter_reset":
        return await store.reset(key, CounterLimit(1, 1))
    if name == "consume_mixed":
        v = await store.consume_many(entries(op))
        if "id" in op:
            ids[op["id"]] = v
        return verdict(v, True)
    if name == "peek_mixed":
        return verdict(await store.peek_many(entries(op)), True)
    if name == "release":
        if op["id"] in ids:
            ids[op["id"]].release()
        return None
    if name == "gcra_limit":
        g = gcra(op["limit"])
        assert (g.uses, g.window_ms, g.burst) == (
            op["limit"]["uses"],
            op["limit"]["window_ms"],
            op["limit"].get("burst", op["limit"]["uses"]),
        )
        return {"ok": True}
    if name == "counter_limit":
        counter(op["limit"])
        return {"ok": True}
    raise AssertionError(f"unknown vector op {name!r}: teach this runner")


def error_of(e: Exception) -> dict[str, str]:
    if isinstance(e, InvalidLimitError):
        assert e.code == "invalid_limit"
        return {"error": "invalid_rate", "field": e.field}
    if isinstance(e, InvalidArgumentError) and e.field.split(".")[-1] == "cost":
        return {"error": "invalid_rate", "field": "cost"}
    raise e


def test_vectors_exist() -> None:
    assert len(CASES) >= 10, f"only {len(CASES)} cases in {VECTORS}/gcra and counter"


@pytest.mark.parametrize(("path", "case"), CASES, ids=[f"{p.parent.name}/{p.stem}:{c['name']}" for p, c in CASES])
@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_vector(path: Path, case: dict[str, Any], flavour: str) -> None:
    clock = Clock()
    sync = MemoryStore(clock)
    store = AsyncMemoryStore(sync)

    async def run() -> None:
        ids: dict[str, Verdict] = {}
        for i, op in enumerate(case["ops"]):
            clock.t = op["now"]
            try:
                if flavour == "asyncio":
                    got = await run_op(store, op, ids)
                else:
                    got = await run_op(_SyncAsAsync(sync), op, ids)  # type: ignore[arg-type]
            except (InvalidLimitError, InvalidArgumentError) as e:
                got = error_of(e)
            assert got == op["expect"], f"{path.name} / {case['name']} / op #{i} {op}"

    asyncio.run(run())


class _SyncAsAsync:
    """The sync store's own methods, called directly (so the sync path is what runs)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


def test_limits_are_values_checked_by_the_core() -> None:
    g = GcraLimit(10, 1000)
    assert (g.uses, g.window_ms, g.burst, g.algorithm) == (10, 1000, 10, "gcra")
    assert g == GcraLimit(10, 1000.0, 10) and hash(g) == hash(GcraLimit(10, 1000, 10))
    assert g != GcraLimit(10, 1000, 5) and repr(g) == "GcraLimit(uses=10, window_ms=1000, burst=10)"
    c = CounterLimit(5, 60_000)
    assert (c.uses, c.window_ms, c.algorithm) == (5, 60_000, "counter") and c == CounterLimit(5, 60_000)
    makers: list[tuple[str, Callable[[], object]]] = [
        ("uses", lambda: GcraLimit(0, 1000)),
        ("window_ms", lambda: GcraLimit(1, 1.5)),
        ("burst", lambda: GcraLimit(10, 1000, 0)),
        ("burst", lambda: GcraLimit(10, 1000, -1)),
        ("burst", lambda: GcraLimit(10, 1000, 2.5)),
        ("burst", lambda: GcraLimit(1_000_000_000, 86_400_000)),
        ("uses", lambda: CounterLimit(1_000_000_000, 86_400_000)),
    ]
    for field, make in makers:
        with pytest.raises(InvalidLimitError) as caught:
            make()
        assert caught.value.field == field and str(caught.value).startswith(f"invalid {field}:")
    with pytest.raises(TypeError):
        GcraLimit(10, 1000, "3")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        GcraLimit(10, 1000, True)


def test_costs_are_typed_errors_that_record_nothing() -> None:
    store = MemoryStore(lambda: 0)
    for cost in [0, 3, -1, 2**70]:
        with pytest.raises(InvalidArgumentError) as caught:
            store.consume("k", GcraLimit(2, 1000), cost=cost)
        assert caught.value.field == "cost" and caught.value.value == cost
    for bad in [1.0, "1", True]:
        with pytest.raises(TypeError):
            store.consume("k", CounterLimit(2, 1000), cost=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError) as caught:
        store.consume("k", Limit(5, 1000), cost=6)
    assert caught.value.field == "cost"
    with pytest.raises(InvalidArgumentError) as caught:
        store.peek_many([Entry("a", GcraLimit(2, 1000)), Entry("b", CounterLimit(5, 1000), 6)])
    assert caught.value.field == "entries[1].cost" and caught.value.value == 6
    with pytest.raises(TypeError):
        store.reset("k", Limit(1, 1000))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Entry("k", object())  # type: ignore[arg-type]
    assert len(store) == 0


def test_a_weighted_gcra_and_a_mixed_batch() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    tokens = GcraLimit(100, 60_000)  # 100 a minute, one back every 600 ms
    assert store.consume("llm:alice", tokens, cost=60).remaining == 40
    refused = store.consume("llm:alice", tokens, cost=50)
    assert (refused.allowed, refused.retry_after_ms, refused.remaining) == (False, 6_000, 40)
    store.reset("llm:alice", tokens)
    assert store.peek("llm:alice", tokens).remaining == 100

    per_user, everyone = GcraLimit(2, 1000), Limit(1, 10_000)
    first = store.consume_many([Entry("u:a", per_user), Entry("all", everyone)])
    assert first.allowed
    refused = store._native.consume_many([("u:b", per_user, 2), ("all", everyone)])
    assert (refused.allowed, refused.blocked, refused.retry_after_ms) == (False, 1, 10_000)
    assert store.peek("u:b", per_user).remaining == 2
    first.release()
    assert store.consume_many([Entry("u:b", per_user, 2), Entry("all", everyone)]).allowed
    assert store.peek("u:a", per_user).remaining == 2, "the release gave the GCRA use back too"
    weighted = store.consume("w", Limit(5, 1000), cost=3)
    assert (weighted.allowed, weighted.remaining) == (True, 2)
    assert not store.peek("w", Limit(5, 1000), cost=3).allowed
    assert Entry("k", per_user, 2) == Entry("k", GcraLimit(2, 1000), 2) != Entry("k", per_user)
    assert repr(Entry("k", per_user, 2)) == "Entry(key='k', limit=GcraLimit(uses=2, window_ms=1000, burst=2), cost=2)"


def test_postgres_checks_a_mixed_batch_before_sending_and_sqlite_counts_them() -> None:
    # PostgresStore and RedisStore count them on a real server (test_mixed_stores.py).
    import sqlite3

    from ratewindow import PostgresStore, SqliteStore

    def never(*_: object) -> object:
        raise AssertionError("nothing may be sent")

    limits: list[GcraLimit | CounterLimit] = [GcraLimit(1, 1000), CounterLimit(1, 1000)]
    pg = PostgresStore.using(never)
    for limit in limits:
        # A cost above the limit's burst or uses: the typed error naming the entry, nothing sent.
        with pytest.raises(InvalidArgumentError) as caught:
            pg.consume_many([Entry("s", Limit(1, 1000)), Entry("k", limit, 2)])
        assert caught.value.field == "entries[1].cost"
        with pytest.raises(InvalidArgumentError):
            pg.peek_many([Entry("k", limit, 2), Entry("s", Limit(1, 1000))])
    # SqliteStore counts a mixed batch (test_mixed_stores.py).
    store = SqliteStore(sqlite3.connect(":memory:", isolation_level=None))
    for limit in limits:
        assert store.peek_many([Entry("k", limit), Entry("s", Limit(1, 1000))]).allowed
        assert store.consume_many([Entry("k", limit)]).allowed
        assert not store.consume("k", limit).allowed
    assert store.consume("k", Limit(1, 1000)).allowed
