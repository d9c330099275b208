"""MemoryStore and AsyncMemoryStore on a manual clock: verdicts, release, expiry, threads."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from ratewindow import AsyncMemoryStore, CooldownStore, Entry, Limit, MemoryStore, Verdict
from ratewindow.testing import ManualClock


def test_sliding_window_on_manual_clock() -> None:
    clock = ManualClock(1_000)
    store = MemoryStore(clock)
    limit = Limit(2, 1_000)
    assert store.consume("a", limit) == Verdict(True, limit=2, remaining=1, refill_after_ms=1_000, reset_after_ms=1_000)
    clock.advance(100)
    assert store.consume("a", limit).allowed
    clock.advance(100)
    refused = store.consume("a", limit)
    assert refused == Verdict(False, 800, 2_000, limit=2, refill_after_ms=800, reset_after_ms=900)
    assert store.peek("a", limit) == refused
    clock.set(2_000)
    assert store.consume("a", limit).allowed
    assert isinstance(store, CooldownStore)


def test_batch_release_is_idempotent() -> None:
    clock = ManualClock(0)
    store = MemoryStore(clock)
    entries = [Entry("u", Limit(1, 1_000)), Entry("g", Limit(5, 1_000))]
    verdict = store.consume_many(entries)
    assert verdict.allowed and verdict.releasable and verdict.blocked is None
    refused = store.consume_many(entries)
    assert refused == Verdict(False, 1_000, 1_000, 0, limit=1, refill_after_ms=1_000, reset_after_ms=1_000)
    assert not refused.releasable
    assert refused.release() is None
    verdict.release()
    verdict.release()
    assert not verdict.releasable
    assert store.consume_many(entries).allowed
    assert store.peek_many(entries).blocked == 0 and store.peek_many(entries).retry_after_ms == 1_000


def test_clock_is_the_host_clock_by_default() -> None:
    store = MemoryStore()
    before = time.time_ns() // 1_000_000
    now = store.now()
    assert before <= now <= time.time_ns() // 1_000_000


def test_bad_clock_and_bad_arguments() -> None:
    with pytest.raises(ValueError):
        MemoryStore(lambda: -1).now()
    with pytest.raises(ValueError):
        MemoryStore(lambda: "soon").now()  # type: ignore[arg-type,return-value]

    def broken() -> int:
        raise KeyError("clock")

    with pytest.raises(KeyError):
        MemoryStore(broken).consume("a", Limit(1, 1))
    store = MemoryStore(ManualClock(0))
    with pytest.raises(TypeError):
        store.consume("a", (1, 1000))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.consume_many([("a", 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        store.consume_many([object()])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        store.consume_many([(1, Limit(1, 1))])  # type: ignore[list-item]
    assert store.consume_many([("pair", Limit(1, 1))]).allowed  # type: ignore[list-item]
    with pytest.raises(TypeError):
        store.hit("a", 1000, True)
    with pytest.raises(ValueError):
        MemoryStore(shards=0)


def test_fixed_window_on_manual_clock() -> None:
    clock = ManualClock(0)
    store = MemoryStore(clock)
    assert store.hit("k", 60_000) == 1
    assert store.hit("k", 60_000, 4) == 5
    clock.set(59_001)
    assert store.available_in("k") == 1 and store.available_in_ms("k") == 999
    assert store.too_many_attempts("k", 5) and store.remaining("k", 7) == 2
    store.reset_attempts("k")
    assert store.attempts("k") == 0 and store.available_in_ms("k") == 999
    clock.set(60_000)
    assert store.attempts("k") == 0 and store.hit("k", 1_000) == 1
    store.clear("k")
    assert store.available_in("k") == 0


def test_keys_expire_without_a_thread() -> None:
    threads = threading.active_count()
    clock = ManualClock(0)
    store = MemoryStore(clock)
    for i in range(1_000):
        store.consume(f"k{i}", Limit(1, 10))
        store.hit(f"w{i}", 10)
    assert len(store) == 2_000
    assert threading.active_count() == threads
    clock.set(10)
    store.purge()
    assert len(store) == 0
    for i in range(5_000):
        store.consume(f"x{i}", Limit(1, 10))
        clock.advance(1)
    assert len(store) < 500, "the incremental sweep removes expired keys as the store is used"


def test_threads_share_one_store() -> None:
    store = MemoryStore()
    limit = Limit(1_000, 60_000)
    allowed = []
    lock = threading.Lock()

    def work() -> None:
        mine = sum(store.consume("shared", limit).allowed for _ in range(300))
        with lock:
            allowed.append(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 1_000


def test_release_outlives_the_store_object() -> None:
    clock = ManualClock(0)
    verdict = MemoryStore(clock).consume_many([Entry("a", Limit(1, 10))])
    gc.collect()
    verdict.release()  # the verdict keeps the store's state alive; giving back is harmless


def test_python_release_callable() -> None:
    calls = []
    verdict = Verdict(True, release=lambda: calls.append(1))
    assert verdict.releasable
    verdict.release()
    verdict.release()
    assert calls == [1]
    assert repr(Verdict(False, 5, 10, 1)) == (
        "Verdict(allowed=False, retry_after_ms=5, retry_timestamp=10, blocked=1, limit=0, remaining=0,"
        " refill_after_ms=0, reset_after_ms=0)"
    )
    assert Verdict(True, limit=3) != Verdict(True, limit=4)
    assert hash(Verdict(False, 5, 10, 1)) == hash(Verdict(False, 5, 10, 1))
    assert Verdict(True) != Verdict(False, 1, 2)
    assert Verdict(True) != "Verdict"


def test_async_facade_shares_the_store() -> None:
    clock = ManualClock(0)
    sync = MemoryStore(clock)
    store = AsyncMemoryStore(sync)

    async def main() -> None:
        limit = Limit(1, 1_000)
        assert (await store.consume("a", limit)).allowed
        assert not sync.consume("a", limit).allowed
        assert not (await store.peek("a", limit)).allowed
        verdict = await store.consume_many([Entry("b", limit)])
        verdict.release()
        assert (await store.peek_many([Entry("b", limit)])).allowed
        assert await store.hit("w", 1_000) == 1
        assert await store.attempts("w") == 1
        results = await asyncio.gather(*(store.consume("race", limit) for _ in range(10)))
        assert sum(v.allowed for v in results) == 1

    asyncio.run(main())
    assert AsyncMemoryStore(clock=clock).now() == 0


def test_entry_is_an_immutable_value() -> None:
    limit = Limit(1, 1_000)
    entry = Entry("k", limit)
    assert (entry.key, entry.limit) == ("k", limit)
    assert entry == Entry("k", Limit(1, 1_000)) and hash(entry) == hash(Entry("k", Limit(1, 1_000)))
    assert entry != Entry("j", limit) and entry != ("k", limit)
    assert repr(entry) == "Entry(key='k', limit=Limit(uses=1, window_ms=1000))"
    with pytest.raises(AttributeError):
        entry.key = "j"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Entry(1, limit)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Entry("k", (1, 1_000))  # type: ignore[arg-type]


def test_a_cycle_through_the_clock_is_collected() -> None:
    """The native store and verdicts report the clock they hold to the GC (``__traverse__``), so a
    clock that refers back to its store does not leak."""
    freed: list[bool] = []

    class Clock:
        def __init__(self) -> None:
            self.held: list[object] = []

        def __call__(self) -> int:
            return 0

        def __del__(self) -> None:
            freed.append(True)

    clock = Clock()
    store = MemoryStore(clock)
    verdict = store.consume_many([Entry("a", Limit(1, 10))])
    clock.held += [store, verdict, Verdict(True, release=clock.__call__)]
    del clock, store, verdict
    gc.collect()
    assert freed == [True]


def test_verdict_matches_positionally() -> None:
    match Verdict(False, 5, 10, 1):
        case Verdict(False, wait, at, blocked):
            assert (wait, at, blocked) == (5, 10, 1)
        case _:
            raise AssertionError("no match")
