"""ratewindow.asgi and ratewindow.fastapi: Starlette and FastAPI apps served by uvicorn on loopback,
asked by httpx, on the memory store and on Redis (redis-py asyncio, and blocking in a thread)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from fastapi import Depends, FastAPI
from http_servers import assert_seconds_left, burst, check_burst, get, serve_asgi
from redis_servers import REDIS_URL, async_store, sync_store, unique_prefix
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewindow import AsyncRateLimiter, Limit, MemoryStore, RateLimiter
from ratewindow.asgi import HttpError, HttpRequest, HttpResponse, RateLimitMiddleware, Trust
from ratewindow.fastapi import RateLimitExceeded, rate_limit_exceeded_handler, throttle

Limiter = AsyncRateLimiter | RateLimiter


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


async def login(request: Request) -> Response:
    ok = request.query_params.get("ok") == "1"
    return PlainTextResponse("welcome" if ok else "wrong password", 200 if ok else 401)


def starlette_app(limiter: Limiter, name: str = "api", **options: Any) -> Starlette:
    return Starlette(
        routes=[Route("/", hello), Route("/login", login)],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter, name=name, **options)],
    )


def fastapi_app(limiter: Limiter, name: str = "api", *, handler: bool = True, **options: Any) -> FastAPI:
    app = FastAPI()
    if handler:
        app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)

    @app.get("/", dependencies=[Depends(throttle(limiter, name, **options))])
    async def root() -> dict[str, str]:
        return {"hello": "world"}

    return app


# The stores: built inside the server's event loop (an asyncio client belongs to its loop).
@contextlib.contextmanager
def memory_async() -> Iterator[Limiter]:
    yield AsyncRateLimiter()


@contextlib.contextmanager
def memory_sync() -> Iterator[Limiter]:
    yield RateLimiter(MemoryStore())  # a MemoryStore never blocks: called inline


@contextlib.contextmanager
def redis_async() -> Iterator[Limiter]:
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    yield AsyncRateLimiter(async_store(client, prefix=unique_prefix("http-asgi")))


@contextlib.contextmanager
def redis_blocking() -> Iterator[Limiter]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        yield RateLimiter(sync_store(client, prefix=unique_prefix("http-asgi")))  # run in a thread
    finally:
        client.close()


STORES: dict[str, Callable[[], contextlib.AbstractContextManager[Limiter]]] = {
    "memory-async": memory_async,
    "memory-sync": memory_sync,
    "redis-async": redis_async,
    "redis-blocking": redis_blocking,
}


def closing(app: Starlette | FastAPI, limiter: Limiter) -> Starlette | FastAPI:
    """Closes an asyncio Redis client in the server's own loop when it stops."""
    store = limiter.store
    run = getattr(store, "_execute", None)
    if not isinstance(limiter, AsyncRateLimiter) or run is None:
        return app
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[None]:
        async with inner(a):
            yield
        for cell in run.__closure__ or ():  # the redis.asyncio client the store's lambdas hold
            for held in getattr(cell.cell_contents, "__closure__", None) or ():
                if isinstance(held.cell_contents, redis.asyncio.Redis):
                    await held.cell_contents.aclose()
                    return

    app.router.lifespan_context = lifespan
    return app


@pytest.mark.parametrize(
    ("framework", "store"),
    [("starlette", store) for store in STORES] + [("fastapi", "memory-async"), ("fastapi", "redis-async")],
)
def test_100_concurrent_requests_against_a_limit_of_10(store: str, framework: str) -> None:
    with STORES[store]() as limiter:
        limiter.for_("api", lambda request: Limit.per_minute(10).by(request.ip))
        app = starlette_app(limiter) if framework == "starlette" else fastapi_app(limiter)
        with serve_asgi(closing(app, limiter)) as url:
            start = time.time()
            check_burst(burst(url + "/", 100), "api", 10, 60, start)


def test_legacy_fields_and_several_limits_in_one_call() -> None:
    limiter = AsyncRateLimiter()
    limiter.for_("api", lambda request: [Limit.per_minute(3).by(request.ip), Limit.per_hour(100)])
    with serve_asgi(starlette_app(limiter, legacy=True)) as url:
        start = time.time()
        answers = [get(url + "/") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    first, refused = answers[0], answers[3]
    assert first.headers["ratelimit-policy"] == '"api.0";q=3;w=60, "api.1";q=100;w=3600'
    assert first.headers["ratelimit"] == '"api.0";r=2;t=60'
    assert first.headers["x-ratelimit-limit"] == "3"
    assert first.headers["x-ratelimit-remaining"] == "2"
    # The window's end in Unix seconds: the first request's time (after `start`, before now) plus 60,
    # rounded either way; the server's shutdown above may take seconds on a loaded machine.
    assert start + 59 <= int(first.headers["x-ratelimit-reset"]) <= time.time() + 61
    assert refused.headers["ratelimit"].startswith('"api.0";r=0;t='), refused.headers["ratelimit"]
    assert_seconds_left(refused.headers["ratelimit"].rsplit("=", 1)[1], start, 60, "RateLimit t")
    # All or nothing: the refused request was not counted against the hourly limit either.
    hourly = limiter.store.sync.peek("throttle:api:", Limit.per_hour(100))  # type: ignore[attr-defined]
    assert hourly.remaining == 97


def test_forwarded_headers_are_believed_only_as_configured() -> None:
    seen: list[str] = []

    def by_ip(request: HttpRequest) -> Limit:
        seen.append(request.ip)
        return Limit.per_minute(1).by(request.ip)

    trusting, untrusting = AsyncRateLimiter(), AsyncRateLimiter()
    trusting.for_("api", by_ip)
    untrusting.for_("api", by_ip)
    with serve_asgi(starlette_app(trusting, trust=Trust(hops=1))) as url:
        codes = [
            get(url + "/", {"x-forwarded-for": "203.0.113.9"}).status_code,
            get(url + "/", {"x-forwarded-for": "198.51.100.1, 203.0.113.9"}).status_code,  # the same client
            get(url + "/", {"x-forwarded-for": "2001:DB8::0:1"}).status_code,
            get(url + "/", {"x-forwarded-for": "not-an-address"}).status_code,  # malformed: the peer
            get(url + "/", {"x-forwarded-for": "1.2.3.4.5, , ]["}).status_code,  # the peer again
            get(url + "/", {"x-forwarded-for": "9" * 5000}).status_code,  # huge and malformed: the peer
        ]
    assert codes == [200, 429, 200, 200, 429, 429]
    assert seen == ["203.0.113.9", "203.0.113.9", "2001:db8::1", "127.0.0.1", "127.0.0.1", "127.0.0.1"]
    seen.clear()
    with serve_asgi(starlette_app(untrusting)) as url:
        codes = [get(url + "/", {"x-forwarded-for": f"203.0.113.{i}"}).status_code for i in range(2)]
    assert codes == [200, 429]  # not trusted: every request is the peer's
    assert seen == ["127.0.0.1", "127.0.0.1"]
    seen.clear()
    forwarded = AsyncRateLimiter()
    forwarded.for_("api", by_ip)
    with serve_asgi(starlette_app(forwarded, trust=Trust(proxies=["127.0.0.1"], header="forwarded"))) as url:
        get(url + "/", {"forwarded": 'for="[2001:db8::7]:4711";proto=https'})
        get(url + "/", {"forwarded": "for=_hidden"})
    assert seen == ["2001:db8::7", "127.0.0.1"]


def test_a_huge_key_is_answered_400_and_counted_nowhere() -> None:
    limiter = AsyncRateLimiter()
    limiter.for_("api", lambda request: Limit.per_minute(1).by(request.header("x-user") or request.ip))
    with serve_asgi(starlette_app(limiter)) as url:
        huge = get(url + "/", {"x-user": "u" * 5000})
        assert huge.status_code == 400
        assert "longer than the 1024 allowed" in huge.text
        assert get(url + "/", {"x-user": "alice"}).status_code == 200
        assert get(url + "/", {"x-user": "alice"}).status_code == 429
    app = fastapi_app(limiter)
    with serve_asgi(app) as url:
        assert get(url + "/", {"x-user": "u" * 5000}).status_code == 400


def test_response_and_after() -> None:
    def slow_down(request: HttpRequest, headers: dict[str, str]) -> Response:
        return PlainTextResponse(f"slow down, {request.ip}", 429, headers={**headers, "x-custom": "1"})

    def failed(response: HttpResponse) -> bool:
        return response.status >= 400

    limiter = AsyncRateLimiter()
    limiter.for_("login", lambda request: Limit.per_minute(2).by(request.ip).after(failed).response(slow_down))
    with serve_asgi(starlette_app(limiter, "login")) as url:
        start = time.time()
        oks = [get(url + "/login?ok=1") for _ in range(5)]  # successes cost nothing
        fails = [get(url + "/login") for _ in range(3)]
    assert [r.status_code for r in oks] == [200] * 5
    assert [r.status_code for r in fails] == [401, 401, 429]
    assert fails[2].text == "slow down, 127.0.0.1"
    assert fails[2].headers["x-custom"] == "1"
    assert_seconds_left(fails[2].headers["retry-after"], start, 60, "Retry-After")


def test_after_is_refused_by_the_dependency_before_anything_is_counted() -> None:
    limiter = AsyncRateLimiter()
    limiter.for_("api", lambda request: Limit.per_minute(1).after(lambda response: True))
    with pytest.raises(TypeError, match="after"):
        import asyncio

        from ratewindow._http import AsyncGuard

        asyncio.run(AsyncGuard(limiter, "api").enter(HttpRequest("GET", "/", "127.0.0.1", dict, None), after=False))
    assert len(limiter.store.sync) == 0  # type: ignore[attr-defined]


def test_unlimited_is_skipped() -> None:
    limiter = AsyncRateLimiter()
    limiter.for_("free", lambda request: Limit.none())
    limiter.for_("mixed", lambda request: [Limit.none(), Limit.per_minute(1)])
    with serve_asgi(starlette_app(limiter, "free")) as url:
        answers = burst(url + "/", 30)
    assert {a.status_code for a in answers} == {200}
    assert all("ratelimit" not in a.headers and "ratelimit-policy" not in a.headers for a in answers)
    assert len(limiter.store.sync) == 0  # type: ignore[attr-defined]  # nothing was counted
    with serve_asgi(starlette_app(limiter, "mixed")) as url:
        assert [get(url + "/").status_code for _ in range(2)] == [200, 429]


def test_fastapi_without_the_handler_answers_json() -> None:
    limiter = AsyncRateLimiter()
    limiter.for_("api", lambda request: Limit.per_minute(1))
    with serve_asgi(fastapi_app(limiter, handler=False)) as url:
        start = time.time()
        first, refused = get(url + "/"), get(url + "/")
    assert first.json() == {"hello": "world"}
    assert first.headers["ratelimit"] == '"api";r=0;t=60'
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Too Many Attempts."}
    assert_seconds_left(refused.headers["retry-after"], start, 60, "Retry-After")


def test_a_store_failure_reaches_the_error_handling() -> None:
    closed = redis.asyncio.Redis(host="127.0.0.1", port=1, retry=AsyncRetry(NoBackoff(), 0))  # nothing listens
    limiter = AsyncRateLimiter(async_store(closed))
    limiter.for_("api", lambda request: Limit.per_minute(10))
    for app in (starlette_app(limiter), fastapi_app(limiter)):
        with serve_asgi(app) as url:
            answer = get(url + "/")
        assert answer.status_code == 500
        assert "ratelimit" not in answer.headers


def test_configuration_errors_are_typed() -> None:
    limiter = AsyncRateLimiter()
    with pytest.raises(HttpError) as bad_name:
        RateLimitMiddleware(hello, limiter, "a:b")  # type: ignore[arg-type]
    assert bad_name.value.kind == "invalid_name"
    with pytest.raises(HttpError) as bad_proxy:
        Trust(proxies=["10.0.0.0/99"])
    assert (bad_proxy.value.kind, bad_proxy.value.status) == ("invalid_proxy", 500)
    with pytest.raises(HttpError):
        Trust(ipv6_prefix=0)
    with pytest.raises(TypeError):
        RateLimitMiddleware(hello, object(), "api")  # type: ignore[arg-type]
