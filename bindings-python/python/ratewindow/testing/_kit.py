"""The conformance kit: the behaviour ``MemoryStore`` defines, checked against any store.

Every check uses real time with short windows and keys of its own (a fresh random prefix), so it can
run against a database that outlives the test. Sync stores are driven directly, and from threads for
the concurrency checks; asyncio stores are awaited, with ``asyncio.gather`` for concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from .._limits import Entry, Limit
from .._store import AsyncCooldownStore, CooldownStore, Verdict

__all__ = ["check_store", "run_checks", "CHECKS", "StoreFactory"]

StoreFactory = Callable[[], Any]
"""Makes a fresh store (sync or asyncio; it may be a coroutine function). It may instead return an async
context manager that yields the store: entered and exited in the check's own event loop, e.g. to open
and close an asyncio connection pool there."""


class _Store:
    """One store seen through one interface: every call awaitable, concurrency by threads or tasks."""

    def __init__(self, store: Any, tolerance_ms: int) -> None:
        self.store = store
        self.tolerance_ms = tolerance_ms
        self.is_async = isinstance(store, AsyncCooldownStore) or inspect.iscoroutinefunction(store.consume)
        self.prefix = f"rwkit:{uuid.uuid4().hex[:12]}:"
        kind = type(store)
        self.default_consume_many = getattr(kind, "consume_many", None) in (
            CooldownStore.consume_many,
            AsyncCooldownStore.consume_many,
        )
        self.default_peek_many = getattr(kind, "peek_many", None) in (
            CooldownStore.peek_many,
            AsyncCooldownStore.peek_many,
        )
        self.fixed_window = all(
            callable(getattr(store, name, None))
            for name in ("hit", "attempts", "too_many_attempts", "remaining", "available_in", "reset_attempts", "clear")
        )

    def key(self, name: str) -> str:
        return self.prefix + name

    async def call(self, method: str, *args: Any) -> Any:
        result = getattr(self.store, method)(*args)
        if self.is_async:
            result = await result
        return result

    async def consume(self, key: str, limit: Limit) -> Verdict:
        return _verdict(await self.call("consume", key, limit), batch=False)

    async def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        return _verdict(await self.call("consume_many", list(entries)), batch=True)

    async def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        return _verdict(await self.call("peek_many", list(entries)), batch=True)

    async def release(self, verdict: Verdict) -> None:
        result = verdict.release()
        if inspect.isawaitable(result):
            await result

    async def together(self, method: str, calls: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Runs the calls at the same time: tasks for an asyncio store, threads behind a barrier else."""
        if self.is_async:
            return list(await asyncio.gather(*(self.call(method, *args) for args in calls)))
        barrier = threading.Barrier(len(calls))
        fn = getattr(self.store, method)

        def run(args: tuple[Any, ...]) -> Any:
            barrier.wait()
            return fn(*args)

        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            return list(pool.map(run, calls))


def _verdict(v: object, *, batch: bool) -> Verdict:
    assert isinstance(v, Verdict), f"a store must return ratewindow.Verdict, got {type(v).__name__}"
    if v.allowed:
        assert v.retry_after_ms == 0, f"an allowed verdict has retry_after_ms 0, got {v!r}"
        assert v.retry_timestamp is None, f"an allowed verdict has no retry_timestamp, got {v!r}"
        assert v.blocked is None, f"an allowed verdict blocks nothing, got {v!r}"
    else:
        assert v.retry_after_ms >= 1, f"a refusal waits at least 1 ms, got {v!r}"
        if batch:
            assert v.blocked is not None, f"a refused batch names the blocking entry, got {v!r}"
    return v


def _ms() -> float:
    return time.time() * 1000


class _TooSlow(Exception):
    """The machine stalled so long that a timing premise of a check no longer holds: run it again."""


def _within(start: float, budget_ms: float) -> None:
    """Raises :class:`_TooSlow` when more than ``budget_ms`` has passed since ``start``."""
    if _ms() - start > budget_ms:
        raise _TooSlow(f"took over {budget_ms} ms")


async def _sleep_until(t_ms: float) -> None:
    delay = (t_ms - _ms()) / 1000
    if delay > 0:
        await asyncio.sleep(delay)


# --- the checks -----------------------------------------------------------------------------------


async def check_allows_uses_within_window(s: _Store) -> None:
    """A key allows ``uses`` calls within the window, refuses the next, and allows again once the
    oldest call has left (the window slides)."""
    key, limit = s.key("uses"), Limit(3, 400)
    start = first_done = _ms()
    for i in range(3):
        assert (await s.consume(key, limit)).allowed, f"call {i + 1} of 3 must be allowed"
        if i == 0:
            first_done = _ms()  # the oldest call was recorded by now (a networked store may be slow)
    refused = await s.consume(key, limit)
    _within(start, 400 - 50)
    assert not refused.allowed, "the 4th call within the window must be refused"
    await _sleep_until(first_done + 400 + 60)
    assert (await s.consume(key, limit)).allowed, "once the oldest call has left, a call is allowed"


async def check_never_more_than_uses_in_any_window(s: _Store) -> None:
    """No window of ``window_ms`` ever holds more than ``uses`` allowed calls: a store counting in
    fixed buckets lets a burst through at a bucket's edge, a sliding log never does.

    Three keys start a third of a window apart, so whatever a bucketed store aligns its buckets to,
    at least two of them start well inside a bucket and meet its edge."""
    window, uses, starts = 300, 2, 3
    limit = Limit(uses, window)
    keys = [s.key(f"slide{j}") for j in range(starts)]
    allowed: list[list[tuple[float, float]]] = [[] for _ in keys]
    tried = [0 for _ in keys]
    begin = _ms()
    end = begin + (starts / 3 + 1.3) * window
    while _ms() < end:
        for j, key in enumerate(keys):
            if _ms() < begin + j * window / 3:
                continue
            before = _ms()
            verdict = await s.consume(key, limit)
            after = _ms()
            tried[j] += 1
            if verdict.allowed:
                allowed[j].append((before, after))
        await asyncio.sleep(0.004)
    for calls in allowed:
        for i in range(len(calls) - uses):
            first_start, last_end = calls[i][0], calls[i + uses][1]
            assert last_end - first_start >= window - s.tolerance_ms, (
                f"{uses + 1} calls were allowed within {last_end - first_start:.1f} ms, "
                f"inside one window of {window} ms"
            )
    for j, calls in enumerate(allowed):
        if tried[j] <= uses:
            raise _TooSlow(f"only {tried[j]} calls could be made to key {j}")  # the machine stalled
        assert len(calls) >= uses, "calls spaced over more than a window must be allowed"


async def check_retry_counts_from_oldest_call(s: _Store) -> None:
    """``retry_after_ms`` counts from the oldest call still in the window, and every refusal in one wait
    gives the same ``retry_timestamp`` (when the store gives one)."""
    key, window, tol = s.key("retry"), 600, s.tolerance_ms
    limit = Limit(2, window)
    t0 = _ms()
    assert (await s.consume(key, limit)).allowed
    t1 = _ms()
    await asyncio.sleep(0.15)
    assert (await s.consume(key, limit)).allowed
    timestamps = []
    for _ in range(2):
        before = _ms()
        refused = await s.consume(key, limit)
        after = _ms()
        _within(t0, window - 50)
        assert not refused.allowed, "a third call within the window must be refused"
        low, high = t0 + window - after, t1 + window - before
        assert math.floor(low) - tol <= refused.retry_after_ms <= math.ceil(high) + tol, (
            f"retry_after_ms {refused.retry_after_ms} must count from the oldest call "
            f"(expected {low:.0f} to {high:.0f})"
        )
        if refused.retry_timestamp is not None:
            assert math.floor(t0 + window) - tol <= refused.retry_timestamp <= math.ceil(t1 + window) + tol, (
                f"retry_timestamp {refused.retry_timestamp} must be the oldest call + window "
                f"(expected {t0 + window:.0f} to {t1 + window:.0f})"
            )
            timestamps.append(refused.retry_timestamp)
        await asyncio.sleep(0.05)
    assert len(set(timestamps)) <= 1, f"one wait gives one retry_timestamp, got {timestamps}"


async def check_keys_count_apart(s: _Store) -> None:
    """Each key counts on its own."""
    limit = Limit(1, 5_000)
    assert (await s.consume(s.key("a"), limit)).allowed
    assert not (await s.consume(s.key("a"), limit)).allowed
    assert (await s.consume(s.key("b"), limit)).allowed, "another key must count apart"


async def check_same_millisecond_calls_stay_distinct(s: _Store) -> None:
    """Calls in the same millisecond count apart: ``uses`` quick calls fill the limit."""
    key, uses = s.key("burst"), 25
    limit = Limit(uses, 10_000)
    for i in range(uses):
        assert (await s.consume(key, limit)).allowed, f"call {i + 1} of {uses} must be allowed"
    assert not (await s.consume(key, limit)).allowed, (
        f"after {uses} calls (many in the same millisecond) the next must be refused"
    )


async def check_concurrent_calls_at_limit(s: _Store) -> None:
    """Of several concurrent calls at the limit, exactly ``uses`` pass (one step: check and record)."""
    for uses, callers in ((1, 8), (3, 10)):
        key, limit = s.key(f"race{uses}"), Limit(uses, 10_000)
        verdicts = [_verdict(v, batch=False) for v in await s.together("consume", [(key, limit)] * callers)]
        passed = sum(v.allowed for v in verdicts)
        assert passed == uses, f"{callers} concurrent calls with {uses} uses: {passed} passed"


async def check_batch_counts_all_and_names_longest_wait(s: _Store) -> None:
    """A batch is counted against all its entries at once, and a refusal names the longest wait."""
    short, long_ = Entry(s.key("short"), Limit(1, 300)), Entry(s.key("long"), Limit(1, 900))
    start = _ms()
    assert (await s.consume_many([short, long_])).allowed
    refused = await s.consume_many([short, long_])
    short_again = await s.consume(short.key, cast(Limit, short.limit))
    _within(start, 300 - 50)
    assert not refused.allowed
    if s.default_consume_many:
        assert refused.blocked == 0, "the default consume_many stops at the first refusal"
    else:
        assert refused.blocked == 1, f"a refusal names the entry with the longest wait, got {refused!r}"
        assert refused.retry_after_ms > 300, f"and gives its wait, got {refused!r}"
    assert not short_again.allowed, "the batch counted against every entry"
    assert not (await s.consume(long_.key, cast(Limit, long_.limit))).allowed, "the batch counted against every entry"


async def check_refused_batch_records_nothing(s: _Store) -> None:
    """A refused batch records nothing (the default ``consume_many`` counts the entries before the one
    that refuses, as calls to ``consume`` one after another do)."""
    free, full = Entry(s.key("free"), Limit(1, 5_000)), Entry(s.key("full"), Limit(1, 5_000))
    assert (await s.consume(full.key, cast(Limit, full.limit))).allowed
    refused = await s.consume_many([free, full])
    assert not refused.allowed and refused.blocked == 1, f"the second entry refuses, got {refused!r}"
    after = await s.consume(free.key, cast(Limit, free.limit))
    if s.default_consume_many:
        assert not after.allowed, "the default consume_many counted the entry before the refusal"
    else:
        assert after.allowed, "a refused batch must record nothing"


async def check_concurrent_batches_at_limit(s: _Store) -> None:
    """Of several concurrent batches at the limit, exactly one passes."""
    entries = [Entry(s.key("ba"), Limit(1, 10_000)), Entry(s.key("bb"), Limit(1, 10_000))]
    verdicts = [_verdict(v, batch=True) for v in await s.together("consume_many", [(entries,)] * 8)]
    passed = sum(v.allowed for v in verdicts)
    assert passed == 1, f"8 concurrent batches at the limit: {passed} passed"


async def check_peek_records_nothing(s: _Store) -> None:
    """A peek records nothing, answers a refusal with the wait consume gives, and names a batch's
    longest wait (the default ``peek_many`` allows every call)."""
    one, two = Entry(s.key("p1"), Limit(1, 3_000)), Entry(s.key("p2"), Limit(1, 9_000))
    start = _ms()
    for _ in range(3):
        assert (await s.peek_many([one, two])).allowed, "a fresh key's peek is allowed"
    assert (await s.consume_many([one])).allowed, "peeks must record nothing"
    assert (await s.consume_many([two])).allowed, "peeks must record nothing"
    before = _ms()
    peeked = await s.peek_many([one, two])
    consumed = await s.consume_many([two])
    between = _ms() - before
    _within(start, 3_000 - 50)
    if s.default_peek_many:
        assert peeked.allowed, "the default peek_many allows every call"
        return
    assert not peeked.allowed and peeked.blocked == 1, f"a peek names the longest wait, got {peeked!r}"
    assert not consumed.allowed
    if peeked.retry_timestamp is not None:
        assert peeked.retry_timestamp == consumed.retry_timestamp, (
            f"peek and consume give one wait: {peeked!r} vs {consumed!r}"
        )
    # The peek ran first: its wait is the consume's plus at most the time between the two calls.
    gap = peeked.retry_after_ms - consumed.retry_after_ms
    assert -s.tolerance_ms <= gap <= between + s.tolerance_ms, (
        f"peek and consume give one wait, {between} ms apart: {peeked!r} vs {consumed!r}"
    )


async def check_release_gives_back_exactly_the_call(s: _Store) -> None:
    """An allowed batch verdict's ``release()`` gives back exactly its own call, once (when the store
    gives release)."""
    entry = Entry(s.key("rel"), Limit(2, 10_000))
    first = await s.consume_many([entry])
    second = await s.consume_many([entry])
    assert first.allowed and second.allowed
    if not second.releasable:
        return  # a store without release keeps such a call counted
    await s.release(second)
    await s.release(second)
    assert not second.releasable
    assert (await s.consume_many([entry])).allowed, "a released call gives its use back"
    assert not (await s.consume_many([entry])).allowed, "releasing twice gives back one call, not two"
    refused = await s.consume_many([entry])
    assert not refused.releasable, "a refusal has nothing to release"


async def check_fixed_window(s: _Store) -> None:
    """Fixed window: opened by the first hit, not moved by later ones, counting from zero once ended."""
    if not s.fixed_window:
        return
    key, decay = s.key("fw"), 1_000
    start = _ms()
    assert await s.call("hit", key, decay) == 1
    opened = _ms()  # the window opened between start and now
    assert await s.call("hit", key, decay, 2) == 3
    assert await s.call("attempts", key) == 3
    assert await s.call("too_many_attempts", key, 3) is True
    assert await s.call("too_many_attempts", key, 4) is False
    assert await s.call("remaining", key, 5) == 2
    assert await s.call("remaining", key, 2) == 0
    assert await s.call("available_in", key) == 1
    _within(start, decay - 200)
    await asyncio.sleep(0.1)
    assert await s.call("hit", key, decay) == 4, "a hit inside the window does not move it"
    if hasattr(s.store, "available_in_ms"):
        left = await s.call("available_in_ms", key)
        assert 0 < left <= decay - 100 + s.tolerance_ms, f"the window ends where the first hit opened it: {left}"
    await s.call("reset_attempts", key)
    assert await s.call("attempts", key) == 0
    assert await s.call("hit", key, decay, -1) == -1, "a negative amount gives hits back"
    _within(start, decay - 100)
    await _sleep_until(opened + decay + 60)
    assert await s.call("attempts", key) == 0, "an ended window counts from zero"
    assert await s.call("too_many_attempts", key, 1) is False
    assert await s.call("hit", key, decay) == 1
    await s.call("clear", key)
    assert await s.call("attempts", key) == 0
    assert await s.call("available_in", key) == 0


async def check_lock(s: _Store) -> None:
    """Locks (when the store has ``lock``): one holder, released only by its owner (or restored from
    its token), exactly one of 8 concurrent acquirers, free when its TTL ends on the store's clock."""
    if not callable(getattr(s.store, "lock", None)):
        return

    async def call(lock: Any, method: str) -> Any:
        result = getattr(lock, method)()
        return await result if inspect.isawaitable(result) else result

    key = s.key("lock")
    a, b = s.store.lock(key, 5), s.store.lock(key, 5)
    assert a.owner != b.owner, "each lock has an owner token of its own"
    assert await call(a, "current_owner") is None
    assert await call(a, "acquire") is True
    assert await call(b, "acquire") is False, "a held lock is refused to another owner"
    assert await call(a, "acquire") is False, "a lock is not re-entrant"
    assert await call(b, "release") is False, "a release by another owner changes nothing"
    assert await call(a, "current_owner") == a.owner
    assert await call(s.store.lock(key, 5, a.owner), "release") is True, "restored from its token"
    assert await call(a, "current_owner") is None
    racers = [s.store.lock(key, 5) for _ in range(8)]
    if s.is_async:
        won = list(await asyncio.gather(*(call(r, "acquire") for r in racers)))
    else:
        barrier = threading.Barrier(len(racers))

        def take(lock: Any) -> bool:
            barrier.wait()
            return bool(lock.acquire())

        with ThreadPoolExecutor(max_workers=len(racers)) as pool:
            won = list(pool.map(take, racers))
    assert won.count(True) == 1, f"exactly one of 8 acquirers: {won}"
    assert await call(a, "force_release") is True
    short = s.store.lock(key, 0.3)
    assert await call(short, "acquire") is True
    taken = _ms()
    await _sleep_until(taken + 500)
    assert await call(a, "current_owner") is None, "the lock frees itself when its TTL ends"
    assert await call(b, "acquire") is True
    await call(b, "release")


CHECKS: dict[str, Callable[[_Store], Awaitable[None]]] = {
    "allows_uses_within_window": check_allows_uses_within_window,
    "never_more_than_uses_in_any_window": check_never_more_than_uses_in_any_window,
    "retry_counts_from_oldest_call": check_retry_counts_from_oldest_call,
    "keys_count_apart": check_keys_count_apart,
    "same_millisecond_calls_stay_distinct": check_same_millisecond_calls_stay_distinct,
    "concurrent_calls_at_limit": check_concurrent_calls_at_limit,
    "batch_counts_all_and_names_longest_wait": check_batch_counts_all_and_names_longest_wait,
    "refused_batch_records_nothing": check_refused_batch_records_nothing,
    "concurrent_batches_at_limit": check_concurrent_batches_at_limit,
    "peek_records_nothing": check_peek_records_nothing,
    "release_gives_back_exactly_the_call": check_release_gives_back_exactly_the_call,
    "fixed_window": check_fixed_window,
    "lock": check_lock,
}
"""Every check, by name."""


_ATTEMPTS = 3


def _run_one(factory: StoreFactory, name: str, tolerance_ms: int) -> None:
    """Runs one check on a fresh store; a run the machine stalled through is run again (3 at most)."""

    async def main() -> None:
        store = factory()
        if inspect.isawaitable(store):
            store = await store
        if isinstance(store, contextlib.AbstractAsyncContextManager):
            # A store whose client belongs to this check's event loop (an asyncio pool): opened and
            # closed inside it.
            async with store as opened:
                await CHECKS[name](_Store(opened, tolerance_ms))
            return
        await CHECKS[name](_Store(store, tolerance_ms))

    for attempt in range(_ATTEMPTS):
        try:
            asyncio.run(main())
            return
        except _TooSlow:
            if attempt == _ATTEMPTS - 1:
                raise


def run_checks(
    factory: StoreFactory, *, only: Sequence[str] | None = None, tolerance_ms: int = 5
) -> dict[str, BaseException | None]:
    """Runs the checks (all, or ``only`` those named) side by side, each on a fresh store from
    ``factory``; returns each check's error, ``None`` for a pass."""
    names = list(only) if only is not None else list(CHECKS)
    results: dict[str, BaseException | None] = {}

    def attempt(name: str) -> None:
        try:
            _run_one(factory, name, tolerance_ms)
            results[name] = None
        except Exception as error:  # noqa: BLE001 - every failure is the result
            results[name] = error

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        list(pool.map(attempt, names))
    return {name: results[name] for name in names}


def check_store(factory: StoreFactory, *, tolerance_ms: int = 5) -> type:
    """A pytest-collectable class with one test per check, each on a fresh store from ``factory``.

    .. code-block:: python

        from ratewindow.testing import check_store
        TestMyStore = check_store(lambda: MyStore(client))

    ``tolerance_ms`` widens the timing bounds for a store timed by another host's clock.
    """
    attributes: dict[str, Any] = {}
    for name in CHECKS:

        def test(self: object, _name: str = name) -> None:
            _run_one(factory, _name, tolerance_ms)

        test.__name__ = f"test_{name}"
        test.__doc__ = CHECKS[name].__doc__
        attributes[test.__name__] = test
    return type("StoreChecks", (), attributes)
