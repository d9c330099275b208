"""RateLimiter and AsyncRateLimiter: the second seed's API in snake_case."""

from __future__ import annotations

import asyncio

import pytest

from ratewindow import AsyncMemoryStore, AsyncRateLimiter, InvalidLimitError, Limit, MemoryStore, RateLimiter
from ratewindow.testing import ManualClock


def test_hits_and_window() -> None:
    clock = ManualClock(0)
    limiter = RateLimiter(MemoryStore(clock))
    assert limiter.hit("login", 60) == 1
    assert limiter.increment("login", 60, 3) == 4
    assert limiter.decrement("login", 60) == 3
    assert limiter.attempts("login") == 3
    assert limiter.too_many_attempts("login", 3) and not limiter.too_many_attempts("login", 4)
    assert limiter.remaining("login", 5) == 2 == limiter.retries_left("login", 5)
    clock.set(30_500)
    assert limiter.available_in("login") == 30
    limiter.reset_attempts("login")
    assert limiter.attempts("login") == 0 and limiter.available_in("login") == 30
    limiter.clear("login")
    assert limiter.available_in("login") == 0
    assert limiter.hit("x", 0.5) == 1 and limiter.store.available_in_ms("x") == 500
    with pytest.raises(InvalidLimitError):
        limiter.hit("x", 0)
    with pytest.raises(TypeError):
        limiter.hit("x", True)


def test_attempt() -> None:
    limiter = RateLimiter(MemoryStore(ManualClock(0)))
    ran = []
    assert limiter.attempt("job", 2, lambda: ran.append(1)) is True
    assert limiter.attempt("job", 2, lambda: "done") == "done"
    assert limiter.attempt("job", 2, lambda: ran.append(1)) is False
    assert ran == [1]


def test_named_limiters_and_fallback_keys() -> None:
    limiter = RateLimiter()
    assert limiter.for_("login", lambda email: Limit.per_minute(5).by(email)) is limiter
    limiter.register("api", lambda: [Limit.per_minute(60), Limit.per_day(10_000)])
    login = limiter.limiter("login")
    assert login is not None and login("a@b") == [Limit.per_minute(5, 1).by("a@b")]
    api = limiter.limiter("api")
    assert api is not None
    keys = [limit.key for limit in api()]
    assert keys == ["attempts:60:decay:60", "attempts:10000:decay:86400"]
    assert limiter.limiter("missing") is None


def test_default_store_is_memory() -> None:
    assert isinstance(RateLimiter().store, MemoryStore)
    assert isinstance(AsyncRateLimiter().store, AsyncMemoryStore)


def test_async_limiter() -> None:
    clock = ManualClock(0)
    limiter = AsyncRateLimiter(AsyncMemoryStore(clock=clock))

    async def work() -> str:
        return "ran"

    async def limits(user: str) -> Limit:
        return Limit.per_minute(3).by(user)

    async def main() -> None:
        assert await limiter.attempt("k", 1, work) == "ran"
        assert await limiter.attempt("k", 1, work) is False
        assert await limiter.hit("h") == 1
        assert await limiter.increment("h", 60, 2) == 3
        assert await limiter.decrement("h") == 2
        assert await limiter.attempts("h") == 2
        assert await limiter.remaining("h", 5) == 3
        assert await limiter.too_many_attempts("h", 2)
        assert await limiter.available_in("h") == 60
        await limiter.reset_attempts("h")
        await limiter.clear("h")
        limiter.for_("user", limits)
        resolve = limiter.limiter("user")
        assert resolve is not None and await resolve("u1") == [Limit.per_minute(3).by("u1")]

    asyncio.run(main())
