"""The store contracts: what the conformance kit checks and what ``RateLimiter`` runs on.

A store counts in **one step** (check and record together), by **one clock**, and lets **every key
expire**. Implement :meth:`CooldownStore.consume` alone and the defaults give the rest, as the seed's
``CooldownStore`` does; override ``consume_many`` and ``peek_many`` for all-or-nothing batches.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from . import _ratewindow
from ._limits import Entry, Limit
from ._sansio import Op, run_async, run_sync

__all__ = [
    "CooldownStore",
    "AsyncCooldownStore",
    "FixedWindowStore",
    "AsyncFixedWindowStore",
    "Verdict",
]

Verdict = _ratewindow.Verdict
"""What a call gets back (re-exported from the native module)."""

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
        return run_sync(_default_consume_many(entries), lambda e: self.consume(e.key, e.limit))

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
            return await self.consume(entry.key, entry.limit)

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
