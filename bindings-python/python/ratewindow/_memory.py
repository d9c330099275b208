"""The in-memory store, for synchronous and asyncio code."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from . import _ratewindow
from ._limits import CounterLimit, Entry, GcraLimit, Limit
from ._lock import AsyncLock, AsyncMemoryOps, Lock, MemoryOps
from ._store import AsyncCooldownStore, AttemptResult, CooldownStore, HitResult, Verdict

__all__ = ["MemoryStore", "AsyncMemoryStore"]


class MemoryStore(CooldownStore):
    """Both algorithms over many keys in this process, counted by the Rust core.

    ``clock`` is a callable returning whole Unix milliseconds; by default the host clock is read (the
    same reading as ``time.time_ns() // 1_000_000``, taken in Rust). Keys expire as the store is used:
    no thread or timer is started, so nothing keeps the interpreter alive.

    Thread safety: the store is immutable from Python; its state is in the core behind per-shard
    mutexes, so one instance can be shared by any number of threads and every operation is one atomic
    step. That holds on free-threaded Python too (the native module declares ``Py_MOD_GIL_NOT_USED``;
    note that abi3 wheels load only on GIL builds, so a free-threaded interpreter needs a wheel built
    for it). An injected ``clock`` is called without any store lock held, so it may be any callable.
    """

    __slots__ = ("_native", "_locks")

    def __init__(self, clock: Callable[[], int] | None = None, *, shards: int = 16) -> None:
        self._native = _ratewindow.MemoryStore(clock, shards=shards)
        self._locks = MemoryOps(self.now)

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = 250
    ) -> Lock:
        """A lock on ``key`` held for ``ttl`` seconds once taken, owned by ``owner`` (default: a random
        token; pass another lock's ``owner`` to restore it). As a context manager it waits ``wait``
        seconds (default 0: one try), trying every ``retry_ms``. See :mod:`ratewindow._lock`."""
        return Lock(self._locks, key, ttl, owner, wait=wait, retry_ms=retry_ms)

    def now(self) -> int:
        """The store's clock, in Unix ms."""
        return self._native.now()

    # Cooldowns: the sliding log, GCRA and the sliding-window counter.
    def consume(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """Counts one call to ``key`` under ``limit``: allowed and recorded, or refused with the wait.

        ``limit`` is a :class:`Limit` (the sliding log), a :class:`GcraLimit` or a
        :class:`CounterLimit`; ``cost`` (GCRA and the counter) is the uses the call takes, an ``int``
        from 1 to the limit's burst or uses (:class:`~ratewindow.InvalidArgumentError` naming ``cost``
        otherwise). Keys of different algorithms are different keys.
        """
        return self._native.consume(key, limit, cost)

    def peek(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """The verdict :meth:`consume` would give, recording and creating nothing."""
        return self._native.peek(key, limit, cost)

    def reset(self, key: str, limit: GcraLimit | CounterLimit) -> None:
        """Forgets ``key``'s GCRA bucket or counter (by ``limit``'s algorithm): its next call finds every
        use there. A :class:`Limit` is a ``TypeError`` (a sliding-log call is given back by ``release()``)."""
        self._native.reset(key, limit)

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry at once, recorded against all only if none refuses.

        A refusal names ``blocked``, the entry with the longest wait. An allowed verdict's
        ``release()`` gives exactly this call back (once; a call that left its window is left alone).
        Entries may mix algorithms, each with its cost: ``Entry("u:alice", GcraLimit(10, 1000), 3)``
        beside ``Entry("all", Limit(1000, 60_000))``; entries naming one GCRA or counter key count one
        after another, and ``release()`` then gives back the sliding-log calls only.
        """
        return self._native.consume_many(entries)

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing."""
        return self._native.peek_many(entries)

    # Fixed window (rate limiter), in milliseconds.
    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits to ``key``'s window (opened by the first hit, lasting ``decay_ms``)."""
        return self._native.hit(key, decay_ms, amount)

    def hit_window(self, key: str, decay_ms: int | float, amount: int = 1) -> HitResult:
        """:meth:`hit`, answering the count and the ms until the window ends together."""
        return self._native.hit_window(key, decay_ms, amount)

    def attempt(self, key: str, max: int, decay_ms: int | float, *, cost: int = 1) -> AttemptResult:
        """Atomically: one hit on ``key`` if it has fewer than ``max`` in its window, else nothing.

        With ``cost``, the attempt takes ``cost`` hits, counted only when the count plus ``cost`` is at
        most ``max`` (else nothing). A ``cost`` that is not an ``int`` is a ``TypeError``; an ``int``
        outside 1 to 4294967295 is :class:`~ratewindow.InvalidArgumentError` naming ``cost``."""
        return self._native.attempt(key, max, decay_ms, cost)

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window; 0 when none runs."""
        return self._native.attempts(key)

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a window that still runs."""
        return self._native.too_many_attempts(key, max)

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        return self._native.remaining(key, max)

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends, rounded up; 0 when none runs."""
        return self._native.available_in(key)

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends; 0 when none runs."""
        return self._native.available_in_ms(key)

    def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window running."""
        self._native.reset_attempts(key)

    def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        self._native.clear(key)

    def purge(self) -> None:
        """Removes every expired key now (never needed for correctness)."""
        self._native.purge()

    def __len__(self) -> int:
        return len(self._native)


class AsyncMemoryStore(AsyncCooldownStore):
    """:class:`MemoryStore` for asyncio code: the same store, its methods awaitable.

    Every operation is one synchronous step inside the coroutine (no ``await`` between check and
    record), so concurrent tasks never both take the last use. ``AsyncMemoryStore(store)`` shares an
    existing :class:`MemoryStore` with synchronous callers.
    """

    __slots__ = ("sync",)

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        clock: Callable[[], int] | None = None,
        shards: int = 16,
    ) -> None:
        self.sync: MemoryStore = store if store is not None else MemoryStore(clock, shards=shards)
        """The synchronous store underneath."""

    def now(self) -> int:
        """The store's clock, in Unix ms."""
        return self.sync.now()

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = 250
    ) -> AsyncLock:
        """A lock on ``key`` held for ``ttl`` seconds once taken, owned by ``owner`` (default: a random
        token; pass another lock's ``owner`` to restore it). As a context manager it waits ``wait``
        seconds (default 0: one try), trying every ``retry_ms``. See :mod:`ratewindow._lock`."""
        return AsyncLock(AsyncMemoryOps(self.sync._locks), key, ttl, owner, wait=wait, retry_ms=retry_ms)

    async def consume(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """See :meth:`MemoryStore.consume`."""
        return self.sync.consume(key, limit, cost=cost)

    async def peek(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """See :meth:`MemoryStore.peek`."""
        return self.sync.peek(key, limit, cost=cost)

    async def reset(self, key: str, limit: GcraLimit | CounterLimit) -> None:
        """See :meth:`MemoryStore.reset`."""
        self.sync.reset(key, limit)

    async def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`MemoryStore.consume_many`."""
        return self.sync.consume_many(entries)

    async def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`MemoryStore.peek_many`."""
        return self.sync.peek_many(entries)

    async def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """See :meth:`MemoryStore.hit`."""
        return self.sync.hit(key, decay_ms, amount)

    async def hit_window(self, key: str, decay_ms: int | float, amount: int = 1) -> HitResult:
        """See :meth:`MemoryStore.hit_window`."""
        return self.sync.hit_window(key, decay_ms, amount)

    async def attempt(self, key: str, max: int, decay_ms: int | float, *, cost: int = 1) -> AttemptResult:
        """See :meth:`MemoryStore.attempt`."""
        return self.sync.attempt(key, max, decay_ms, cost=cost)

    async def attempts(self, key: str) -> int:
        """See :meth:`MemoryStore.attempts`."""
        return self.sync.attempts(key)

    async def too_many_attempts(self, key: str, max: int) -> bool:
        """See :meth:`MemoryStore.too_many_attempts`."""
        return self.sync.too_many_attempts(key, max)

    async def remaining(self, key: str, max: int) -> int:
        """See :meth:`MemoryStore.remaining`."""
        return self.sync.remaining(key, max)

    async def available_in(self, key: str) -> int:
        """See :meth:`MemoryStore.available_in`."""
        return self.sync.available_in(key)

    async def available_in_ms(self, key: str) -> int:
        """See :meth:`MemoryStore.available_in_ms`."""
        return self.sync.available_in_ms(key)

    async def reset_attempts(self, key: str) -> None:
        """See :meth:`MemoryStore.reset_attempts`."""
        self.sync.reset_attempts(key)

    async def clear(self, key: str) -> None:
        """See :meth:`MemoryStore.clear`."""
        self.sync.clear(key)
