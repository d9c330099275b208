"""The failure guard's rules on in-process stores (a slow, failing or connecting store of our own over
the real MemoryStore): options, the policies and their verdicts, the late-answer rule, the fallback,
ready/close, the block cache, events and counters, and the conformance kit on a guarded store.

The same rules against real servers through the fault proxy: ``test_guard_servers.py``.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from ratewindow import (
    AsyncCooldownStore,
    AsyncGuard,
    AsyncMemoryStore,
    CooldownStore,
    CounterLimit,
    Entry,
    GcraLimit,
    Guard,
    GuardEvent,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    StoreError,
    UnsupportedError,
    Verdict,
)
from ratewindow.testing import run_checks

LIMIT = Limit(2, 10_000)


class Slow(CooldownStore):
    """A MemoryStore answering after ``delay`` seconds, or raising ``error``; counts its calls."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.delay = 0.0
        self.error: BaseException | None = None
        self.calls = 0

    def _wait(self) -> None:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.error is not None:
            raise self.error

    def consume(self, key: str, limit: Limit) -> Verdict:
        self._wait()
        return self.inner.consume(key, limit)

    def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        self._wait()
        return self.inner.consume_many(entries)

    def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        self._wait()
        return self.inner.peek_many(entries)


class AsyncSlow(AsyncCooldownStore):
    """:class:`Slow` for asyncio; ``release_delay`` slows its releases too."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.delay = 0.0
        self.release_delay = 0.0
        self.error: BaseException | None = None
        self.calls = 0
        self.releases_done = 0

    async def _wait(self) -> None:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error

    async def consume(self, key: str, limit: Limit) -> Verdict:
        return await self.consume_many([Entry(key, limit)])

    async def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        await self._wait()
        v = self.inner.consume_many(entries)
        if not v.allowed:
            return v

        async def release() -> None:
            await asyncio.sleep(self.release_delay)
            v.release()
            self.releases_done += 1

        return Verdict(True, limit=v.limit, remaining=v.remaining, release=release)

    async def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        await self._wait()
        return self.inner.peek_many(entries)


def used(store: MemoryStore, key: str, limit: Limit = LIMIT) -> int:
    """Uses counted on ``key``, read from the store itself."""
    return limit.uses - store.peek(key, limit).remaining


# --- options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, math.nan, math.inf, 2**31 + 1, 10**40])
def test_timeout_is_checked(bad: float) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        Guard(MemoryStore(), timeout_ms=bad)
    assert caught.value.field == "timeout_ms"
    assert caught.value.value is bad
    assert str(caught.value).startswith("invalid timeout_ms: ")


def test_options_are_checked() -> None:
    assert Guard(MemoryStore(), timeout_ms=2**31).timeout_ms == 2**31
    assert Guard(MemoryStore(), timeout_ms=1.0).timeout_ms == 1
    with pytest.raises(InvalidArgumentError) as caught:
        Guard(MemoryStore(), on_failure="sometimes")  # type: ignore[arg-type]
    assert caught.value.field == "on_failure"
    with pytest.raises(InvalidArgumentError) as caught:
        Guard(MemoryStore(), block_cache=0)
    assert caught.value.field == "block_cache"
    for wrong in ["100", None, True]:
        with pytest.raises(TypeError):
            Guard(MemoryStore(), timeout_ms=wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Guard(MemoryStore(), on_failure=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Guard(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Guard(MemoryStore(), on_event=3)  # type: ignore[arg-type]


# --- policies ----------------------------------------------------------------------------------------


def test_deny_and_allow_on_a_store_error() -> None:
    slow = Slow()
    slow.error = ConnectionError("down")
    events: list[GuardEvent] = []
    deny = Guard(slow, timeout_ms=250, on_event=events.append)
    v = deny.consume("k", LIMIT)
    assert (v.allowed, v.retry_after_ms, v.retry_timestamp, v.failed) == (False, 250, None, "store-error")
    assert v.cause is slow.error
    assert events == [GuardEvent("failure", "consume", (Entry("k", LIMIT),), failed="store-error", cause=slow.error)]
    batch = deny.consume_many([Entry("a", LIMIT), Entry("b", LIMIT)])
    assert (batch.allowed, batch.blocked, batch.failed) == (False, None, "store-error")
    allow = Guard(slow, timeout_ms=250, on_failure="allow")
    v = allow.consume("k", LIMIT)
    assert (v.allowed, v.failed, v.limit) == (True, "store-error", 0)
    assert deny.stats().store_errors == 2 and deny.stats().refused == 2
    assert allow.stats().allowed == 1
    # The store's own verdicts carry no failure.
    slow.error = None
    assert deny.consume("k", LIMIT).failed is None


def test_the_callers_mistakes_are_raised() -> None:
    slow = Slow()
    for mistake in [InvalidLimitError("bad", "uses", 0), InvalidArgumentError("bad", "key", "x"), TypeError("no")]:
        slow.error = mistake
        with pytest.raises(type(mistake)):
            Guard(slow, timeout_ms=100).consume("k", LIMIT)
    with pytest.raises(InvalidLimitError):
        Guard(MemoryStore(), block_cache=True).consume("k", Limit(0, 10))


def test_gcra_and_counter_limits_pass_through_without_the_block_cache() -> None:
    # As in Node's guard: without the cache the guard reads nothing of the limit, so a store that counts
    # GCRA and the counter (the memory stores) counts them guarded too, single and in a batch.
    limits: list[GcraLimit | CounterLimit] = [GcraLimit(2, 10_000), CounterLimit(2, 10_000)]
    for limit in limits:
        guarded = Guard(MemoryStore(), timeout_ms=1_000)
        assert guarded.consume("k", limit).allowed  # type: ignore[arg-type]
        assert guarded.consume_many([Entry("k", limit), Entry("j", LIMIT)]).allowed
        refused = guarded.consume("k", limit)  # type: ignore[arg-type]
        assert not refused.allowed and refused.retry_after_ms > 0
        assert asyncio.run(AsyncGuard(AsyncMemoryStore(), timeout_ms=1_000).consume("k", limit)).allowed  # type: ignore[arg-type]


def test_the_block_cache_refuses_gcra_and_counter_limits_as_unsupported() -> None:
    # The block cache remembers the sliding log's refusals only: with it, a GCRA or counter limit is the
    # typed UnsupportedError naming the algorithm (Node's guard does the same), before the store is asked.
    slow = Slow()
    cases: list[tuple[GcraLimit | CounterLimit, str]] = [(GcraLimit(5, 1_000), "gcra"), (CounterLimit(5, 1_000), "counter")]
    for limit, algorithm in cases:
        with pytest.raises(UnsupportedError) as raised:
            Guard(slow, timeout_ms=100, block_cache=True).consume("k", limit)  # type: ignore[arg-type]
        assert raised.value.algorithm == algorithm
        assert isinstance(raised.value, TypeError)
        with pytest.raises(UnsupportedError):
            Guard(slow, timeout_ms=100, block_cache=True).consume_many([Entry("k", LIMIT), Entry("j", limit)])
        with pytest.raises(UnsupportedError):
            asyncio.run(AsyncGuard(AsyncMemoryStore(), timeout_ms=100, block_cache=True).consume("k", limit))  # type: ignore[arg-type]
    assert slow.calls == 0


def test_sync_late_answer_is_released_under_deny_and_kept_under_allow() -> None:
    slow = Slow()
    slow.delay = 0.12
    events: list[GuardEvent] = []
    deny = Guard(slow, timeout_ms=50, on_event=events.append)
    v = deny.consume("late", LIMIT)
    assert (v.allowed, v.failed) == (False, "timeout")
    assert used(slow.inner, "late") == 0, "the late call was given back"
    assert deny.stats().late_releases == 1 and deny.stats().timeouts == 1
    assert [e.type for e in events] == ["failure", "late-release"] and events[1].error is None

    allow = Guard(slow, timeout_ms=50, on_failure="allow")
    v = allow.consume("late", LIMIT)
    assert (v.allowed, v.failed) == (True, "timeout")
    assert used(slow.inner, "late") == 1, "the call ran: its count stays"
    assert allow.stats().late_releases == 0


def test_sync_error_after_the_timeout_is_a_timeout() -> None:
    slow = Slow()
    slow.delay = 0.08
    slow.error = TimeoutError("socket timed out")
    v = Guard(slow, timeout_ms=50).consume("k", LIMIT)
    assert v.failed == "timeout" and v.cause is slow.error


def test_fallback_takes_over_and_the_main_store_comes_back() -> None:
    main, fallback = Slow(), MemoryStore()
    main.error = ConnectionError("down")
    g = Guard(main, timeout_ms=100, on_failure=fallback)
    first = g.consume("fb", LIMIT)
    assert (first.allowed, first.failed) == (True, "store-error")
    assert first.releasable is False  # MemoryStore's single consume gives no release
    batch = g.consume_many([Entry("fb", LIMIT)])
    assert (batch.allowed, batch.failed, batch.releasable) == (True, "store-error", True)
    third = g.consume("fb", LIMIT)
    assert (third.allowed, third.failed, third.blocked) == (False, "store-error", None)
    batch.release()
    assert used(fallback, "fb") == 1
    main.error = None
    back = g.consume("fb", LIMIT)
    assert (back.allowed, back.failed) == (True, None)
    assert used(main.inner, "fb") == 1
    s = g.stats()
    assert (s.fallback_calls, s.store_errors, s.allowed, s.refused) == (3, 3, 3, 1)


def test_a_failing_fallback_refuses() -> None:
    main, fallback = Slow(), Slow()
    main.error, fallback.error = ConnectionError("down"), ConnectionError("also down")
    events: list[GuardEvent] = []
    v = Guard(main, timeout_ms=100, on_failure=fallback, on_event=events.append).consume("k", LIMIT)
    assert (v.allowed, v.retry_after_ms, v.failed, v.cause) == (False, 100, "store-error", main.error)
    assert [e.type for e in events] == ["failure", "fallback-error"] and events[1].cause is fallback.error


# --- asyncio -----------------------------------------------------------------------------------------


def test_async_timeout_is_exact_and_the_late_answer_released() -> None:
    async def main() -> None:
        store = AsyncSlow()
        store.delay = 0.3
        g = AsyncGuard(store, timeout_ms=60)
        t = time.monotonic()
        v = await g.consume("k", LIMIT)
        took = time.monotonic() - t
        assert (v.allowed, v.failed, v.retry_after_ms) == (False, "timeout", 60)
        assert 0.055 <= took < 0.2, took
        assert used(store.inner, "k") == 0  # not answered yet
        await g.close()  # waits for the late answer and its release
        assert used(store.inner, "k") == 0 and store.releases_done == 1
        assert g.stats().late_releases == 1

    asyncio.run(main())


def test_async_close_waits_for_a_release_under_way() -> None:
    async def main() -> None:
        store = AsyncSlow()
        shut: list[int] = []
        store.delay, store.release_delay = 0.1, 0.2
        g = AsyncGuard(store, timeout_ms=30)
        v = await g.consume_many([Entry("a", LIMIT), Entry("b", LIMIT)])
        assert v.failed == "timeout"
        t = time.monotonic()
        await g.close(lambda: shut.append(store.releases_done))
        assert time.monotonic() - t >= 0.2
        assert shut == [1], "the shutdown hook ran after the release finished"
        assert used(store.inner, "a") == 0 and used(store.inner, "b") == 0
        after = await g.consume("a", LIMIT)
        assert (after.allowed, after.failed) == (False, "not-ready")
        await g.close()  # again: nothing more

    asyncio.run(main())


def test_async_release_through_the_guard_is_tracked() -> None:
    async def main() -> None:
        store = AsyncSlow()
        store.release_delay = 0.1
        g = AsyncGuard(store, timeout_ms=500, block_cache=True)
        v = await g.consume_many([Entry("r", LIMIT)])
        assert v.allowed and v.releasable
        pending = v.release()  # starts now; close() waits for it
        await g.close()
        assert store.releases_done == 1 and used(store.inner, "r") == 0
        await pending  # type: ignore[misc]

    asyncio.run(main())


def test_async_cancelled_caller_gives_the_call_back() -> None:
    async def main() -> None:
        store = AsyncSlow()
        store.delay = 0.1
        g = AsyncGuard(store, timeout_ms=1000)
        task = asyncio.ensure_future(g.consume("c", LIMIT))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await g.close()
        assert used(store.inner, "c") == 0 and g.stats().late_releases == 1

    asyncio.run(main())


def test_async_ready_holds_calls_then_the_policy() -> None:
    async def main() -> None:
        store = AsyncSlow()
        g = AsyncGuard(store, timeout_ms=80)

        async def connect(seconds: float) -> None:
            await asyncio.sleep(seconds)

        ready = asyncio.ensure_future(g.ready(lambda: connect(0.03)))
        await asyncio.sleep(0)
        v = await g.consume("r", LIMIT)  # waits ~30 ms, then goes to the store
        assert (v.allowed, v.failed) == (True, None)
        await ready
        ready = asyncio.ensure_future(g.ready(lambda: connect(0.3)))
        await asyncio.sleep(0)
        t = time.monotonic()
        v = await g.consume("r", LIMIT)
        assert (v.allowed, v.failed) == (False, "not-ready") and time.monotonic() - t < 0.2
        await ready

        async def broken() -> None:
            raise ConnectionError("no route")

        with pytest.raises(ConnectionError):
            await g.ready(broken)
        v = await g.consume("r", LIMIT)
        assert v.failed == "not-ready" and isinstance(v.cause, ConnectionError)
        await g.ready(lambda: connect(0))
        assert (await g.consume("r", LIMIT)).failed is None
        assert g.stats().not_ready == 2
        await g.close()

    asyncio.run(main())


def test_sync_ready_from_another_thread() -> None:
    g = Guard(MemoryStore(), timeout_ms=100)
    started = threading.Event()

    def connect() -> None:
        started.set()
        time.sleep(0.3)

    t = threading.Thread(target=g.ready, args=(connect,))
    t.start()
    started.wait()
    v = g.consume("s", LIMIT)
    assert (v.allowed, v.failed) == (False, "not-ready")
    t.join()
    assert g.consume("s", LIMIT).failed is None


def test_sync_with_runs_ready_and_close_hooks() -> None:
    calls: list[str] = []

    class Hooked(MemoryStore):
        def on_ready(self) -> None:
            calls.append("ready")

        def on_shutdown(self) -> None:
            calls.append("shutdown")

    with Guard(Hooked(), timeout_ms=100) as g:
        assert g.consume("h", LIMIT).allowed
    assert calls == ["ready", "shutdown"]
    assert g.consume("h", LIMIT).failed == "not-ready"
    g.close()
    assert calls == ["ready", "shutdown"], "the shutdown hook runs once"


# --- the block cache ---------------------------------------------------------------------------------


def test_block_cache_refuses_without_a_round_trip() -> None:
    slow = Slow()
    g = Guard(slow, timeout_ms=1000, block_cache=True)
    one = Limit(1, 500)
    assert g.consume("b", one).allowed
    refused = g.consume("b", one)
    assert not refused.allowed and slow.calls == 2
    hit = g.consume("b", one)
    assert not hit.allowed and slow.calls == 2, "answered from the cache"
    assert hit.retry_timestamp == refused.retry_timestamp
    assert 0 < hit.retry_after_ms <= refused.retry_after_ms
    batch = g.consume_many([Entry("other", one), Entry("b", one)])
    assert (batch.allowed, batch.blocked) == (False, 1) and slow.calls == 2
    assert g.peek("b", one).allowed is False and slow.calls == 2
    assert g.consume("b", Limit(2, 500)).allowed, "another limit is another entry"
    assert g.stats().cache_hits == 3 and g.cached_entries == 1
    time.sleep(refused.retry_after_ms / 1000 + 0.02)
    assert g.consume("b", one).allowed, "the wait is over"


def test_block_cache_forgets_a_release_through_the_guard() -> None:
    g = Guard(MemoryStore(), timeout_ms=1000, block_cache=True)
    one = Limit(1, 60_000)
    first = g.consume_many([Entry("x", one)])
    assert not g.consume_many([Entry("x", one)]).allowed
    assert g.cached_entries == 1
    first.release()
    assert g.cached_entries == 0
    assert g.consume_many([Entry("x", one)]).allowed


def test_block_cache_bound() -> None:
    g = Guard(MemoryStore(), timeout_ms=1000, block_cache=3)
    one = Limit(1, 60_000)
    for i in range(5):
        g.consume(f"k{i}", one)
        g.consume(f"k{i}", one)
    assert g.cached_entries == 3


# --- the conformance kit on guarded stores ----------------------------------------------------------


def test_kit_on_a_guarded_memory_store() -> None:
    failures = {n: e for n, e in run_checks(lambda: Guard(MemoryStore(), timeout_ms=2000, block_cache=True)).items() if e}
    assert failures == {}


def test_kit_on_a_guarded_async_memory_store() -> None:
    def make() -> Any:
        return AsyncGuard(AsyncMemoryStore(), timeout_ms=2000)

    failures = {n: e for n, e in run_checks(make).items() if e}
    assert failures == {}


def test_store_error_names() -> None:
    assert isinstance(Guard(Slow(), timeout_ms=10).stats().calls, int)
    assert StoreError("x").code == "store_error"


def test_async_guard_outlives_its_event_loop() -> None:
    """One AsyncGuard used from two event loops in turn (asyncio.run twice): the timeout holds in both."""
    store = AsyncSlow()
    store.delay = 0.2
    g = AsyncGuard(store, timeout_ms=50)

    async def once() -> None:
        v, t = None, time.monotonic()
        v = await g.consume("loop", LIMIT)
        assert v.failed == "timeout" and time.monotonic() - t < 0.15
        await asyncio.sleep(0.25)  # the late answer comes and is given back in this loop

    asyncio.run(once())
    asyncio.run(once())
    assert used(store.inner, "loop") == 0 and g.stats().late_releases == 2
