"""ratewindow.wsgi and ratewindow.flask: Flask apps served by werkzeug's threaded server on loopback,
asked by httpx, on the memory store and on Redis (redis-py, blocking)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import flask
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from http_servers import assert_seconds_left, burst, check_burst, get, serve_wsgi
from redis_servers import REDIS_URL, sync_store, unique_prefix

from ratewindow import AsyncRateLimiter, Limit, MemoryStore, RateLimiter
from ratewindow.flask import throttle
from ratewindow.wsgi import HttpRequest, HttpResponse, RateLimitMiddleware, Trust


def decorated_app(limiter: RateLimiter, name: str = "api", **options: Any) -> flask.Flask:
    app = flask.Flask("decorated")

    @app.get("/")
    @throttle(limiter, name, **options)
    def hello() -> str:
        return "hello"

    @app.get("/login")
    @throttle(limiter, name, **options)
    def login() -> tuple[str, int]:
        ok = flask.request.args.get("ok") == "1"
        return ("welcome", 200) if ok else ("wrong password", 401)

    return app


def middleware_app(limiter: RateLimiter, name: str = "api", **options: Any) -> flask.Flask:
    app = flask.Flask("wrapped")

    @app.get("/")
    def hello() -> str:
        return "hello"

    @app.get("/login")
    def login() -> tuple[str, int]:
        ok = flask.request.args.get("ok") == "1"
        return ("welcome", 200) if ok else ("wrong password", 401)

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter, name, **options)  # type: ignore[method-assign]
    return app


APPS: dict[str, Callable[..., flask.Flask]] = {"flask-decorator": decorated_app, "wsgi-middleware": middleware_app}


@contextlib.contextmanager
def memory() -> Iterator[RateLimiter]:
    yield RateLimiter(MemoryStore())


@contextlib.contextmanager
def on_redis() -> Iterator[RateLimiter]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        yield RateLimiter(sync_store(client, prefix=unique_prefix("http-wsgi")))
    finally:
        client.close()


STORES: dict[str, Callable[[], contextlib.AbstractContextManager[RateLimiter]]] = {"memory": memory, "redis": on_redis}


@pytest.mark.parametrize("store", list(STORES))
@pytest.mark.parametrize("kind", list(APPS))
def test_100_concurrent_requests_against_a_limit_of_10(store: str, kind: str) -> None:
    with STORES[store]() as limiter:
        limiter.for_("api", lambda request: Limit.per_minute(10).by(request.ip))
        with serve_wsgi(APPS[kind](limiter)) as url:
            start = time.time()
            check_burst(burst(url + "/", 100), "api", 10, 60, start)


@pytest.mark.parametrize("kind", list(APPS))
def test_forwarded_headers_are_believed_only_as_configured(kind: str) -> None:
    seen: list[str] = []

    def by_ip(request: HttpRequest) -> Limit:
        seen.append(request.ip)
        return Limit.per_minute(1).by(request.ip)

    limiter = RateLimiter()
    limiter.for_("api", by_ip)
    with serve_wsgi(APPS[kind](limiter, trust=Trust(hops=1))) as url:
        codes = [
            get(url + "/", {"x-forwarded-for": "203.0.113.9"}).status_code,
            get(url + "/", {"x-forwarded-for": "::ffff:203.0.113.9"}).status_code,  # the same client
            get(url + "/", {"x-forwarded-for": "bogus"}).status_code,  # malformed: the peer
            get(url + "/", {"x-forwarded-for": "unknown"}).status_code,  # the peer again
        ]
    assert codes == [200, 429, 200, 429]
    assert seen == ["203.0.113.9", "203.0.113.9", "127.0.0.1", "127.0.0.1"]


@pytest.mark.parametrize("kind", list(APPS))
def test_a_huge_key_is_answered_400(kind: str) -> None:
    limiter = RateLimiter()
    limiter.for_("api", lambda request: Limit.per_minute(1).by(request.header("x-user") or request.ip))
    with serve_wsgi(APPS[kind](limiter)) as url:
        huge = get(url + "/", {"x-user": "u" * 5000})
        assert huge.status_code == 400
        assert "longer than the 1024 allowed" in huge.text
        assert [get(url + "/", {"x-user": "bob"}).status_code for _ in range(2)] == [200, 429]


def test_flask_response_and_after_see_flasks_own_objects() -> None:
    def slow_down(request: HttpRequest, headers: dict[str, str]) -> flask.Response:
        assert request.raw is not None and request.raw.path == "/login"
        return flask.Response("slow down", 429, headers={**headers, "x-custom": "1"})

    def failed(response: flask.Response) -> bool:
        return response.status_code >= 400

    limiter = RateLimiter()
    limiter.for_("login", lambda request: Limit.per_minute(2).by(request.ip).after(failed).response(slow_down))
    with serve_wsgi(decorated_app(limiter, "login")) as url:
        start = time.time()
        oks = [get(url + "/login?ok=1").status_code for _ in range(4)]
        fails = [get(url + "/login") for _ in range(3)]
    assert oks == [200] * 4
    assert [r.status_code for r in fails] == [401, 401, 429]
    assert (fails[2].text, fails[2].headers["x-custom"]) == ("slow down", "1")
    assert_seconds_left(fails[2].headers["retry-after"], start, 60, "Retry-After")


def test_wsgi_after_sees_the_status() -> None:
    statuses: list[int] = []

    def failed(response: HttpResponse) -> bool:
        statuses.append(response.status)
        return response.status >= 400

    limiter = RateLimiter()
    limiter.for_("login", lambda request: Limit.per_minute(1).after(failed))
    with serve_wsgi(middleware_app(limiter, "login", legacy=True)) as url:
        codes = [get(url + "/login?ok=1").status_code, get(url + "/login").status_code, get(url + "/").status_code]
    assert codes == [200, 401, 429]
    assert statuses == [200, 401]


def test_unlimited_is_skipped() -> None:
    limiter = RateLimiter()
    limiter.for_("api", lambda request: Limit.none())
    with serve_wsgi(decorated_app(limiter)) as url:
        answers = burst(url + "/", 20)
    assert {a.status_code for a in answers} == {200}
    assert all("ratelimit" not in a.headers for a in answers)


@pytest.mark.parametrize("kind", list(APPS))
def test_a_store_failure_reaches_the_error_handling(kind: str) -> None:
    closed = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))  # nothing listens
    limiter = RateLimiter(sync_store(closed))
    limiter.for_("api", lambda request: Limit.per_minute(10))
    with serve_wsgi(APPS[kind](limiter)) as url:
        answer = get(url + "/")
    assert answer.status_code == 500
    assert "ratelimit" not in answer.headers


def test_the_sync_integrations_refuse_an_asyncio_limiter_or_store() -> None:
    with pytest.raises(TypeError, match="RateLimiter"):
        throttle(AsyncRateLimiter(), "api")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CooldownStore"):
        RateLimitMiddleware(lambda e, s: [], RateLimiter(), "api", store=object())  # type: ignore[arg-type]
