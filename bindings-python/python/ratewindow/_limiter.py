"""``RateLimiter``: the second seed's fixed-window API (seconds), on any fixed-window store."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar, overload

from ._errors import _DECAY_RANGE, InvalidArgumentError, InvalidLimitError, _invalid_limit
from ._limits import Limit, Number, _seconds_to_ms
from ._memory import AsyncMemoryStore, MemoryStore
from ._store import AsyncFixedWindowStore, FixedWindowStore

__all__ = ["RateLimiter", "AsyncRateLimiter"]

T = TypeVar("T")
Limits = Limit | Sequence[Limit]
F = TypeVar("F")


_I64 = (-(2**63), 2**63 - 1)


def _whole(name: str, value: object) -> int:
    """``value``, the argument ``name`` (``max_attempts``, ``amount``), as a 64-bit ``int``: a
    ``TypeError`` for another type (``bool`` included), :class:`InvalidArgumentError` out of range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not _I64[0] <= value <= _I64[1]:
        raise InvalidArgumentError(
            f"invalid {name}: {value!r} (expected a whole number from {_I64[0]} to {_I64[1]})", name, value
        )
    return value


def _decay_ms(decay_seconds: Number) -> Number:
    return _seconds_to_ms(decay_seconds, "decay_seconds")


def _decay_refused(error: InvalidLimitError, decay_seconds: Number) -> InvalidLimitError:
    """The store's refusal of a decay in milliseconds, named as the caller gave it: ``decay_seconds``."""
    if error.field != "window_ms":
        return error
    return _invalid_limit("window_ms", "decay_seconds", decay_seconds, _DECAY_RANGE)


def _normalise(limits: Limits) -> list[Limit]:
    """A named limiter's result as a list, a key shared by several limits replaced by each one's
    ``fallback_key()`` so two limits without ``by()`` never share a counter."""
    found = [limits] if isinstance(limits, Limit) else list(limits)
    for limit in found:
        if not isinstance(limit, Limit):
            raise TypeError(f"a named limiter must return Limit objects, not {type(limit).__name__}")
    keys = [limit.key for limit in found]
    return [limit.by(limit.fallback_key()) if keys.count(limit.key) > 1 else limit for limit in found]


class _Registry(Generic[F]):
    """Named limiters: shared by the sync and the asyncio limiter. Registration is thread-safe."""

    def __init__(self) -> None:
        self._named: dict[str, F] = {}
        self._lock = threading.Lock()

    def for_(self, name: str, callback: F) -> _Registry[F]:
        """Registers ``callback`` as the named limiter ``name``; returns the limiter for chaining."""
        with self._lock:
            self._named[name] = callback
        return self

    register = for_

    def _callback(self, name: str) -> F | None:
        with self._lock:
            return self._named.get(name)


class RateLimiter(_Registry[Callable[..., Limits]]):
    """Fixed-window rate limiting with the seed's API, decay in seconds.

    A window opens at a key's first hit and lasts ``decay_seconds``; hits inside it do not move it.
    ``RateLimiter()`` counts in a new :class:`MemoryStore`; pass any :class:`FixedWindowStore`.
    Safe to share across threads.

    Numbers are checked with the names used here: ``max_attempts`` and ``amount`` must be ``int`` s of
    64 bits (:class:`InvalidArgumentError` otherwise), ``decay_seconds`` a whole number of milliseconds
    from 1 to 4320000000000000 once multiplied by 1000 (:class:`InvalidLimitError` with ``argument``
    ``"decay_seconds"``); a value of another type is a ``TypeError``.
    """

    def __init__(self, store: FixedWindowStore | None = None) -> None:
        super().__init__()
        self.store: FixedWindowStore = store if store is not None else MemoryStore()

    def limiter(self, name: str) -> Callable[..., list[Limit]] | None:
        """The named limiter ``name`` as a function returning its limits; ``None`` if unregistered."""
        callback = self._callback(name)
        if callback is None:
            return None
        found = callback

        def resolve(*args: Any, **kwargs: Any) -> list[Limit]:
            return _normalise(found(*args, **kwargs))

        return resolve

    def attempt(self, key: str, max_attempts: int, callback: Callable[[], T], decay_seconds: Number = 60) -> T | bool:
        """Runs ``callback`` and counts a hit unless ``key`` is limited; ``False`` when limited.

        Returns the callback's value, or ``True`` if it returned ``None``.
        """
        try:  # one atomic step: a hit is counted only below the maximum, so `max_attempts` callbacks run
            counted = self.store.attempt(key, _whole("max_attempts", max_attempts), _decay_ms(decay_seconds))
        except InvalidLimitError as error:
            raise _decay_refused(error, decay_seconds) from None
        if not counted.allowed:
            return False
        result = callback()
        return True if result is None else result

    def too_many_attempts(self, key: str, max_attempts: int) -> bool:
        """Whether ``key`` has ``max_attempts`` or more hits in a window that still runs."""
        return self.store.too_many_attempts(key, _whole("max_attempts", max_attempts))

    def hit(self, key: str, decay_seconds: Number = 60) -> int:
        """One hit; returns the count."""
        return self.increment(key, decay_seconds, 1)

    def increment(self, key: str, decay_seconds: Number = 60, amount: int = 1) -> int:
        """``amount`` hits (negative gives hits back); returns the count."""
        ms = _decay_ms(decay_seconds)
        try:
            return self.store.hit(key, ms, _whole("amount", amount))
        except InvalidLimitError as error:
            raise _decay_refused(error, decay_seconds) from None

    def decrement(self, key: str, decay_seconds: Number = 60, amount: int = 1) -> int:
        """Gives ``amount`` hits back; returns the count."""
        return self.increment(key, decay_seconds, -_whole("amount", amount))

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window; 0 when none runs."""
        return self.store.attempts(key)

    def reset_attempts(self, key: str) -> None:
        """Clears the counter, not the window."""
        self.store.reset_attempts(key)

    def remaining(self, key: str, max_attempts: int) -> int:
        """``max_attempts`` minus the hits, floored at 0."""
        return self.store.remaining(key, _whole("max_attempts", max_attempts))

    retries_left = remaining

    def clear(self, key: str) -> None:
        """Clears the counter and the window."""
        self.store.clear(key)

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends, rounded up; 0 when none runs."""
        return self.store.available_in(key)


class AsyncRateLimiter(_Registry[Callable[..., Limits | Awaitable[Limits]]]):
    """:class:`RateLimiter` for asyncio code, on any :class:`AsyncFixedWindowStore`.

    Named limiters and ``attempt`` callbacks may be plain functions or coroutine functions.
    """

    def __init__(self, store: AsyncFixedWindowStore | None = None) -> None:
        super().__init__()
        self.store: AsyncFixedWindowStore = store if store is not None else AsyncMemoryStore()

    def limiter(self, name: str) -> Callable[..., Awaitable[list[Limit]]] | None:
        """The named limiter ``name`` as a coroutine function returning its limits; ``None`` if
        unregistered."""
        callback = self._callback(name)
        if callback is None:
            return None
        found = callback

        async def resolve(*args: Any, **kwargs: Any) -> list[Limit]:
            limits = found(*args, **kwargs)
            if inspect.isawaitable(limits):
                limits = await limits
            assert not inspect.isawaitable(limits)
            return _normalise(limits)

        return resolve

    @overload
    async def attempt(
        self, key: str, max_attempts: int, callback: Callable[[], Awaitable[T]], decay_seconds: Number = 60
    ) -> T | bool: ...

    @overload
    async def attempt(
        self, key: str, max_attempts: int, callback: Callable[[], T], decay_seconds: Number = 60
    ) -> T | bool: ...

    async def attempt(
        self, key: str, max_attempts: int, callback: Callable[[], Any], decay_seconds: Number = 60
    ) -> Any:
        """See :meth:`RateLimiter.attempt`; an awaitable result is awaited."""
        try:  # one atomic step: a hit is counted only below the maximum, so `max_attempts` callbacks run
            counted = await self.store.attempt(key, _whole("max_attempts", max_attempts), _decay_ms(decay_seconds))
        except InvalidLimitError as error:
            raise _decay_refused(error, decay_seconds) from None
        if not counted.allowed:
            return False
        result = callback()
        if inspect.isawaitable(result):
            result = await result
        return True if result is None else result

    async def too_many_attempts(self, key: str, max_attempts: int) -> bool:
        """See :meth:`RateLimiter.too_many_attempts`."""
        return await self.store.too_many_attempts(key, _whole("max_attempts", max_attempts))

    async def hit(self, key: str, decay_seconds: Number = 60) -> int:
        """See :meth:`RateLimiter.hit`."""
        return await self.increment(key, decay_seconds, 1)

    async def increment(self, key: str, decay_seconds: Number = 60, amount: int = 1) -> int:
        """See :meth:`RateLimiter.increment`."""
        ms = _decay_ms(decay_seconds)
        try:
            return await self.store.hit(key, ms, _whole("amount", amount))
        except InvalidLimitError as error:
            raise _decay_refused(error, decay_seconds) from None

    async def decrement(self, key: str, decay_seconds: Number = 60, amount: int = 1) -> int:
        """See :meth:`RateLimiter.decrement`."""
        return await self.increment(key, decay_seconds, -_whole("amount", amount))

    async def attempts(self, key: str) -> int:
        """See :meth:`RateLimiter.attempts`."""
        return await self.store.attempts(key)

    async def reset_attempts(self, key: str) -> None:
        """See :meth:`RateLimiter.reset_attempts`."""
        await self.store.reset_attempts(key)

    async def remaining(self, key: str, max_attempts: int) -> int:
        """See :meth:`RateLimiter.remaining`."""
        return await self.store.remaining(key, _whole("max_attempts", max_attempts))

    retries_left = remaining

    async def clear(self, key: str) -> None:
        """See :meth:`RateLimiter.clear`."""
        await self.store.clear(key)

    async def available_in(self, key: str) -> int:
        """See :meth:`RateLimiter.available_in`."""
        return await self.store.available_in(key)
