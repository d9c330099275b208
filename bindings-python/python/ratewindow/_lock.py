"""The lock: mutual exclusion by key, with an owner token and a required TTL, on every store.

Every operation is one atomic step decided by the Rust core (``ratewindow_core::lock``): ``acquire``
takes the lock if nobody holds it, ``release`` frees it only for its owner (compare and delete),
``force_release`` frees it whoever holds it, ``current_owner`` says who holds it. ``block``'s schedule
(when to try again, when to give up) is the core's too; this module only sleeps.

.. code-block:: python

    lock = store.lock("rebuild-feed", 30)           # TTL 30 s; owner: a random token
    if lock.acquire():
        try:
            rebuild_feed()
        finally:
            lock.release()

    with store.lock("rebuild-feed", 30, wait=5):    # waits up to 5 s, else LockTimeoutError
        rebuild_feed()

    # Another process frees it with the owner token:
    other_store.lock("rebuild-feed", 30, owner=lock.owner).release()

Differences from the seed's ``Lock`` (``@mahiframework/cache``): a TTL that is not a positive number
of seconds is refused (``InvalidArgumentError`` naming ``ttl``) rather than floored at one second, and
it is kept to the millisecond; :meth:`Lock.acquire` tries once and answers whether it took the lock,
:meth:`Lock.block` waits (the seed's one waiting ``acquire``); :meth:`Lock.force_release` exists; the
context manager waits ``wait`` seconds (default 0: one try), not for ever.
"""

from __future__ import annotations

import asyncio
import time
from os import urandom as _urandom
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Protocol

from . import _ratewindow
from ._errors import RateWindowError

__all__ = ["Lock", "AsyncLock", "LockTimeoutError"]

DEFAULT_RETRY_MS = 250
"""Milliseconds between two tries of :meth:`Lock.block` (the seed's ``retryEvery``)."""


class LockTimeoutError(RateWindowError):
    """:meth:`Lock.block` (or a ``with`` block) waited its ``seconds`` without getting the lock."""

    code = "lock_timeout"

    def __init__(self, key: str, seconds: float) -> None:
        super().__init__(f'Timed out waiting to acquire lock "{key}" (waited {seconds} s).')
        self.key = key
        self.seconds = seconds


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Ops(Protocol):
    def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Any: ...


class _AsyncOps(Protocol):
    def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Awaitable[Any]: ...


class MemoryOps:
    """A memory store's locks, timed by its clock."""

    __slots__ = ("_locks", "_now")

    def __init__(self, now: Callable[[], int]) -> None:
        self._locks = _ratewindow.MemoryLocks()
        self._now = now

    def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Any:
        return self._locks.run(op, key, self._now(), owner, ttl)


class AsyncMemoryOps:
    """:class:`MemoryOps` awaitable (one synchronous step inside the coroutine)."""

    __slots__ = ("_ops",)

    def __init__(self, ops: MemoryOps) -> None:
        self._ops = ops

    async def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Any:
        return self._ops.run(op, key, owner, ttl)


class CallOps:
    """A networked store's locks: each operation a call of its machine, driven by ``run_call``."""

    __slots__ = ("_machine", "_run")

    def __init__(self, machine: _ratewindow.Machine, run_call: Callable[[Any], Any]) -> None:
        self._machine = machine
        self._run = run_call

    def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Any:
        return self._run(_ratewindow.lock_call(self._machine, op, key, owner, ttl))


def new_token() -> str:
    """A random owner token: 128 random bits as 32 hex digits (``uuid.uuid4().hex``'s shape but for
    its fixed version digits, without the ``UUID`` object a lock made per operation would pay for)."""
    return _urandom(16).hex()


# The defaults (one try, every 250 ms) as the core checks them, once: a lock made with them skips
# the check (`_check_wait`).
_ratewindow.LockWait(0, DEFAULT_RETRY_MS, 0)


def _check_wait(wait: float, retry_ms: float) -> None:
    """Checks ``wait`` and ``retry_ms`` (as ``block`` will), so a bad wait is refused where the lock is
    made."""
    if type(wait) is int and wait == 0 and type(retry_ms) is int and retry_ms == DEFAULT_RETRY_MS:
        return
    _ratewindow.LockWait(wait, retry_ms, 0)


class _Base:
    __slots__ = ("key", "owner", "ttl", "_wait", "_retry_ms", "_ops")
    _ops: Any

    def __init__(self, ops: Any, key: str, ttl: float, owner: str | None, wait: float, retry_ms: float) -> None:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        token = owner if owner is not None else new_token()
        _ratewindow.check_lock(ttl, token)
        self._setup(ops, key, ttl, token, wait, retry_ms)

    def _setup(self, ops: Any, key: str, ttl: float, token: str, wait: float, retry_ms: float) -> None:
        """The lock of ``token``, its key, TTL and owner already checked."""
        _check_wait(wait, retry_ms)
        self._ops = ops
        self.key = key
        """The lock's key."""
        self.owner: str = token
        """This lock's owner token: keep it to release the lock from another process."""
        self.ttl = ttl
        """How long a taken lock is held unless released, in seconds."""
        self._wait = wait
        self._retry_ms = retry_ms

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, ttl={self.ttl!r}, owner={self.owner!r})"


class Lock(_Base):
    """One lock on a synchronous store: build it with ``store.lock(key, ttl, owner=None)``.

    Not re-entrant: acquiring a lock you hold answers ``False``. As a context manager it waits up to
    ``wait`` seconds (default 0: one try; ``math.inf``: no limit) and releases on exit.
    """

    __slots__ = ()
    _ops: _Ops

    def __init__(
        self,
        ops: _Ops,
        key: str,
        ttl: float,
        owner: str | None = None,
        *,
        wait: float = 0,
        retry_ms: float = DEFAULT_RETRY_MS,
    ) -> None:
        super().__init__(ops, key, ttl, owner, wait, retry_ms)

    def acquire(self) -> bool:
        """Tries once: whether this lock now holds the key."""
        return bool(self._ops.run("acquire", self.key, self.owner, self.ttl))

    def block(self, seconds: float, retry_ms: float = DEFAULT_RETRY_MS) -> None:
        """Waits for the lock: tries at once, then every ``retry_ms`` ms (the last try when ``seconds``
        end); raises :class:`LockTimeoutError` if it never got it."""
        wait = _ratewindow.LockWait(seconds, retry_ms, _now_ms())
        while not self.acquire():
            pause = wait.after_refusal(_now_ms())
            if pause is None:
                raise LockTimeoutError(self.key, seconds)
            time.sleep(pause / 1000)

    def release(self) -> bool:
        """Frees the lock if this owner holds it (compare and delete, one step): whether it did."""
        return bool(self._ops.run("release", self.key, self.owner, None))

    def force_release(self) -> bool:
        """Frees the lock whoever holds it: whether a held lock was freed."""
        return bool(self._ops.run("force_release", self.key, None, None))

    def current_owner(self) -> str | None:
        """Who holds the key now: an owner token, or ``None``."""
        owner: str | None = self._ops.run("owner", self.key, None, None)
        return owner

    def is_owned(self) -> bool:
        """Whether this lock's owner holds the key now."""
        return self.current_owner() == self.owner

    def __enter__(self) -> Lock:
        self.block(self._wait, self._retry_ms)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class AsyncLock(_Base):
    """:class:`Lock` for asyncio stores: the same operations, awaitable; ``async with`` waits and
    releases."""

    __slots__ = ()
    _ops: _AsyncOps

    def __init__(
        self,
        ops: _AsyncOps,
        key: str,
        ttl: float,
        owner: str | None = None,
        *,
        wait: float = 0,
        retry_ms: float = DEFAULT_RETRY_MS,
    ) -> None:
        super().__init__(ops, key, ttl, owner, wait, retry_ms)

    async def acquire(self) -> bool:
        """Tries once: whether this lock now holds the key."""
        return bool(await self._ops.run("acquire", self.key, self.owner, self.ttl))

    async def block(self, seconds: float, retry_ms: float = DEFAULT_RETRY_MS) -> None:
        """:meth:`Lock.block`, sleeping with ``asyncio.sleep``."""
        wait = _ratewindow.LockWait(seconds, retry_ms, _now_ms())
        while not await self.acquire():
            pause = wait.after_refusal(_now_ms())
            if pause is None:
                raise LockTimeoutError(self.key, seconds)
            await asyncio.sleep(pause / 1000)

    async def release(self) -> bool:
        """Frees the lock if this owner holds it: whether it did."""
        return bool(await self._ops.run("release", self.key, self.owner, None))

    async def force_release(self) -> bool:
        """Frees the lock whoever holds it: whether a held lock was freed."""
        return bool(await self._ops.run("force_release", self.key, None, None))

    async def current_owner(self) -> str | None:
        """Who holds the key now: an owner token, or ``None``."""
        owner: str | None = await self._ops.run("owner", self.key, None, None)
        return owner

    async def is_owned(self) -> bool:
        """Whether this lock's owner holds the key now."""
        return (await self.current_owner()) == self.owner

    async def __aenter__(self) -> AsyncLock:
        await self.block(self._wait, self._retry_ms)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()
