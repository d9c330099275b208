"""The store contracts: what the conformance kit checks and what ``RateLimiter`` runs on.

A store counts in **one step** (check and record together), by **one clock**, and lets **every key
expire**. Implement :meth:`CooldownStore.consume` alone and the defaults give the rest, as the seed's
``CooldownStore`` does; override ``consume_many`` and ``peek_many`` for all-or-nothing batches.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from . import _ratewindow
from ._limits import CounterLimit, Entry, GcraLimit, Limit, sliding_limit
from ._lock import AsyncLock, CallOps, Lock
from ._sansio import Command, Op, drive, run_async, run_call_async, run_sync

__all__ = [
    "CooldownStore",
    "AsyncCooldownStore",
    "FixedWindowStore",
    "AsyncFixedWindowStore",
    "Verdict",
    "HitResult",
    "AttemptResult",
]

Verdict = _ratewindow.Verdict
"""What a call gets back (re-exported from the native module)."""
HitResult = _ratewindow.HitResult
"""A fixed-window hit's count and the milliseconds until its window ends."""
AttemptResult = _ratewindow.AttemptResult
"""An ``attempt``'s answer: whether the hit was counted, the count, the ms until the window ends."""
T = TypeVar("T")

_ALLOWED = Verdict(True)


def _default_consume_many(entries: Sequence[Entry]) -> Op[Entry, Verdict, Verdict]:
    """The seed's default: ``consume`` each entry in order, stopping at the first refusal.

    A refusal counts against the entries before it, as one call to ``consume`` after another does.
    """
    for index, entry in enumerate(entries):
        verdict = yield entry
        if not verdict.allowed:
            return Verdict(False, verdict.retry_after_ms, verdict.retry_timestamp, index)
    return _ALLOWED


class CooldownStore(ABC):
    """A sliding-window store used from synchronous code. Subclass it and implement :meth:`consume`."""

    __slots__ = ()

    @abstractmethod
    def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit`` in one step: allowed and recorded, or refused."""

    def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        """Counts one call against every entry.

        The default calls :meth:`consume` for each entry in order and stops at the first refusal, so a
        refused batch has counted against the entries before it. Override it to check every entry and
        record only if all allow, in one step.
        """
        return run_sync(_default_consume_many(entries), lambda e: self.consume(e.key, sliding_limit(e.limit)))

    def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        """The verdict ``consume_many`` would give, recording nothing. The default allows every call."""
        return _ALLOWED

    def peek(self, key: str, limit: Limit) -> Verdict:
        """``peek_many`` of one entry."""
        return self.peek_many([Entry(key, limit)])


class AsyncCooldownStore(ABC):
    """A sliding-window store used from asyncio code: :class:`CooldownStore`'s contract, awaited.

    Keep the check and the record in one step: an ``await`` between them lets another task take the
    last use (the conformance kit catches it).
    """

    __slots__ = ()

    @abstractmethod
    async def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit`` in one step."""

    async def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        """As :meth:`CooldownStore.consume_many` (the same logic, driven asynchronously)."""

        async def consume(entry: Entry) -> Verdict:
            return await self.consume(entry.key, sliding_limit(entry.limit))

        return await run_async(_default_consume_many(entries), consume)

    async def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        """The verdict ``consume_many`` would give, recording nothing. The default allows every call."""
        return _ALLOWED

    async def peek(self, key: str, limit: Limit) -> Verdict:
        """``peek_many`` of one entry."""
        return await self.peek_many([Entry(key, limit)])


@runtime_checkable
class FixedWindowStore(Protocol):
    """The fixed-window operations a store gives :class:`~ratewindow.RateLimiter` (milliseconds)."""

    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits (negative gives back) and returns the count."""
        ...

    def attempt(self, key: str, max: int, decay_ms: int | float) -> AttemptResult:
        """Atomically: one hit if fewer than ``max`` are counted (opening a window of ``decay_ms``)."""
        ...

    def attempts(self, key: str) -> int:
        """Hits in the current window; 0 when none runs."""
        ...

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``max`` or more hits are counted in a window that still runs."""
        ...

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits, floored at 0."""
        ...

    def available_in(self, key: str) -> int:
        """Whole seconds until the window ends, rounded up; 0 when none runs."""
        ...

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until the window ends; 0 when none runs."""
        ...

    def reset_attempts(self, key: str) -> None:
        """Sets the count to zero, keeping the window."""
        ...

    def clear(self, key: str) -> None:
        """Removes the count and the window."""
        ...


@runtime_checkable
class AsyncFixedWindowStore(Protocol):
    """:class:`FixedWindowStore`, awaited."""

    async def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits (negative gives back) and returns the count."""
        ...

    async def attempt(self, key: str, max: int, decay_ms: int | float) -> AttemptResult:
        """Atomically: one hit if fewer than ``max`` are counted (opening a window of ``decay_ms``)."""
        ...

    async def attempts(self, key: str) -> int:
        """Hits in the current window; 0 when none runs."""
        ...

    async def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``max`` or more hits are counted in a window that still runs."""
        ...

    async def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits, floored at 0."""
        ...

    async def available_in(self, key: str) -> int:
        """Whole seconds until the window ends, rounded up; 0 when none runs."""
        ...

    async def available_in_ms(self, key: str) -> int:
        """Milliseconds until the window ends; 0 when none runs."""
        ...

    async def reset_attempts(self, key: str) -> None:
        """Sets the count to zero, keeping the window."""
        ...

    async def clear(self, key: str) -> None:
        """Removes the count and the window."""
        ...


Clock = Callable[[], int]
"""A clock: returns the current time in whole Unix milliseconds."""


class CallStore(CooldownStore):
    """Every operation of a store whose calls the core's machines make (Redis, PostgreSQL, SQLite),
    driven by a blocking ``_execute(command)``: a subclass gives the machine and the executor."""

    __slots__ = ("_machine", "_execute")
    _machine: _ratewindow.Machine
    _execute: Callable[[Command], Any]

    def _run(self, call: _ratewindow.Call[T]) -> T:
        return run_sync(drive(call), self._execute)

    def _release(self, token: _ratewindow.ReleaseToken) -> None:
        self._run(self._machine.release(token))

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = 250
    ) -> Lock:
        """A lock on ``key`` held for ``ttl`` seconds once taken, owned by ``owner`` (default: a random
        token; pass another lock's ``owner`` to restore it). As a context manager it waits ``wait``
        seconds (default 0: one try), trying every ``retry_ms``. See :mod:`ratewindow._lock`."""
        return Lock(CallOps(self._machine, self._run), key, ttl, owner, wait=wait, retry_ms=retry_ms)

    @property
    def prefix(self) -> str:
        """The key prefix (Redis) or the name prefix of the tables (SQL)."""
        return self._machine.prefix

    # Sliding window (cooldowns).
    def consume(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """Counts one call to ``key`` under ``limit`` in one step: allowed and recorded, or refused with
        the wait. An allowed verdict's ``release()`` gives a sliding-log call back. A
        :class:`GcraLimit` or :class:`CounterLimit` (with its ``cost``) is counted by its own script
        (Redis) or statement (PostgreSQL, SQLite); batches mixing them with the sliding log
        (``consume_many``) run on every store (on PostgreSQL as one statement). A :class:`Limit` with a
        ``cost`` above 1 is a weighted call on the sliding log (one round trip; a batch's
        ``release()`` gives back exactly its cost)."""
        if isinstance(limit, _ratewindow.Limit) and cost == 1:
            return self._run(self._machine.consume(key, limit))
        return self._run(_ratewindow.rate_call(self._machine, "consume", key, limit, cost))

    def peek(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        if isinstance(limit, _ratewindow.Limit) and cost == 1:
            return self._run(self._machine.peek(key, limit))
        return self._run(_ratewindow.rate_call(self._machine, "peek", key, limit, cost))

    def reset(self, key: str, limit: GcraLimit | CounterLimit) -> None:
        """Forgets ``key``'s GCRA bucket or counter (by ``limit``'s algorithm): its next call finds
        every use there."""
        self._run(_ratewindow.rate_call(self._machine, "reset", key, limit))

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry, all or nothing; a refusal names ``blocked``, the entry
        with the longest wait. An allowed verdict's ``release()`` gives exactly this call back (once)."""
        return self._run(self._machine.consume_many(entries))

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing."""
        return self._run(self._machine.peek_many(entries))

    # Fixed window (rate limiter), in milliseconds.
    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits to ``key``'s window (opened by the first hit, lasting ``decay_ms``)."""
        return self._run(self._machine.hit(key, decay_ms, amount))

    def hit_window(self, key: str, decay_ms: int | float, amount: int = 1) -> HitResult:
        """:meth:`hit`, answering the count and the ms until the window ends together."""
        return self._run(self._machine.hit_window(key, decay_ms, amount))

    def attempt(self, key: str, max: int, decay_ms: int | float, *, cost: int = 1) -> AttemptResult:
        """Atomically: one hit on ``key`` if it has fewer than ``max`` in its window, else nothing.

        With ``cost``, the attempt takes ``cost`` hits in the same one step (one script on Redis, one
        statement on PostgreSQL, one transaction on SQLite), counted only when the count plus ``cost``
        is at most ``max`` (else nothing). A ``cost`` that is not an ``int`` is a ``TypeError``; an
        ``int`` outside 1 to 4294967295 is :class:`~ratewindow.InvalidArgumentError` naming ``cost``."""
        return self._run(self._machine.attempt(key, max, decay_ms, cost))

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window; 0 when none runs."""
        return self._run(self._machine.attempts(key))

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a window that still runs."""
        return self._run(self._machine.too_many_attempts(key, max))

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        return self._run(self._machine.remaining(key, max))

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends, rounded up; 0 when none runs."""
        return self._run(self._machine.available_in(key))

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends; 0 when none runs."""
        return self._run(self._machine.available_in_ms(key))

    def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window running."""
        self._run(self._machine.reset_attempts(key))

    def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        self._run(self._machine.clear(key))


class AsyncCallStore(AsyncCooldownStore):
    """:class:`CallStore` for asyncio code: the same calls, driven by an awaitable ``_execute``. An
    allowed verdict's ``release()`` returns a coroutine."""

    __slots__ = ("_machine", "_execute")
    _machine: _ratewindow.Machine
    _execute: Callable[[Command], Awaitable[Any]]

    async def _run(self, call: _ratewindow.Call[T]) -> T:
        return await run_call_async(call, self._execute)

    def _release(self, token: _ratewindow.ReleaseToken) -> Awaitable[None]:
        return self._run(self._machine.release(token))

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = 250
    ) -> AsyncLock:
        """A lock on ``key`` held for ``ttl`` seconds once taken, owned by ``owner`` (default: a random
        token; pass another lock's ``owner`` to restore it). As a context manager it waits ``wait``
        seconds (default 0: one try), trying every ``retry_ms``. See :mod:`ratewindow._lock`."""
        return AsyncLock(CallOps(self._machine, self._run), key, ttl, owner, wait=wait, retry_ms=retry_ms)

    @property
    def prefix(self) -> str:
        """The key prefix (Redis) or the name prefix of the tables (SQL)."""
        return self._machine.prefix

    async def consume(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """See :meth:`CallStore.consume`."""
        if isinstance(limit, _ratewindow.Limit) and cost == 1:
            return await self._run(self._machine.consume(key, limit))
        return await self._run(_ratewindow.rate_call(self._machine, "consume", key, limit, cost))

    async def peek(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """See :meth:`CallStore.peek`."""
        if isinstance(limit, _ratewindow.Limit) and cost == 1:
            return await self._run(self._machine.peek(key, limit))
        return await self._run(_ratewindow.rate_call(self._machine, "peek", key, limit, cost))

    async def reset(self, key: str, limit: GcraLimit | CounterLimit) -> None:
        """See :meth:`CallStore.reset`."""
        await self._run(_ratewindow.rate_call(self._machine, "reset", key, limit))

    async def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`CallStore.consume_many`; ``release()`` returns a coroutine."""
        return await self._run(self._machine.consume_many(entries))

    async def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`CallStore.peek_many`."""
        return await self._run(self._machine.peek_many(entries))

    async def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """See :meth:`CallStore.hit`."""
        return await self._run(self._machine.hit(key, decay_ms, amount))

    async def hit_window(self, key: str, decay_ms: int | float, amount: int = 1) -> HitResult:
        """See :meth:`CallStore.hit_window`."""
        return await self._run(self._machine.hit_window(key, decay_ms, amount))

    async def attempt(self, key: str, max: int, decay_ms: int | float, *, cost: int = 1) -> AttemptResult:
        """See :meth:`CallStore.attempt`."""
        return await self._run(self._machine.attempt(key, max, decay_ms, cost))

    async def attempts(self, key: str) -> int:
        """See :meth:`CallStore.attempts`."""
        return await self._run(self._machine.attempts(key))

    async def too_many_attempts(self, key: str, max: int) -> bool:
        """See :meth:`CallStore.too_many_attempts`."""
        return await self._run(self._machine.too_many_attempts(key, max))

    async def remaining(self, key: str, max: int) -> int:
        """See :meth:`CallStore.remaining`."""
        return await self._run(self._machine.remaining(key, max))

    async def available_in(self, key: str) -> int:
        """See :meth:`CallStore.available_in`."""
        return await self._run(self._machine.available_in(key))

    async def available_in_ms(self, key: str) -> int:
        """See :meth:`CallStore.available_in_ms`."""
        return await self._run(self._machine.available_in_ms(key))

    async def reset_attempts(self, key: str) -> None:
        """See :meth:`CallStore.reset_attempts`."""
        await self._run(self._machine.reset_attempts(key))

    async def clear(self, key: str) -> None:
        """See :meth:`CallStore.clear`."""
        await self._run(self._machine.clear(key))
