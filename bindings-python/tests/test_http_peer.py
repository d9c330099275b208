"""Peers that are not IP addresses, as uvicorn gives them: its ``--proxy-headers`` rewrite of the
client from a garbage ``X-Forwarded-For`` (the client is that text, not a 500), and a Unix socket
(``--uds``: no peer address; a trusted hop's forwarded address is the client, none believed is
``no_peer``, 500). The core decides (``tests/vectors/http/http.json``, ``client_address``)."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from http_servers import assert_seconds_left
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewindow import Limit, MemoryStore, RateLimiter
from ratewindow.asgi import HttpRequest, RateLimitMiddleware, Trust


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


def app_seeing(seen: list[str], **options: Any) -> Starlette:
    """One request a minute per client address; ``seen`` gets each request's address."""
    limiter = RateLimiter(MemoryStore())

    def per_ip(request: HttpRequest) -> Limit:
        seen.append(request.ip)
        return Limit.per_minute(1).by(request.ip)

    limiter.for_("api", per_ip)
    return Starlette(
        routes=[Route("/", hello)],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter, name="api", **options)],
    )


@contextmanager
def serve(app: Any, **config: Any) -> Iterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", access_log=False, **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)


def uds_get(path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """One GET on its own connection over the Unix socket ``path`` (uvicorn closes a connection whose
    request raised, as a 500 from an unhandled error does)."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=path)) as c:
        return c.get("http://app/", headers=headers)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_uvicorn_proxy_headers_garbage_is_the_client_as_its_text() -> None:
    seen: list[str] = []
    port = free_port()
    # uvicorn's default: proxy headers believed from 127.0.0.1, copied into the scope unchecked.
    with serve(app_seeing(seen), host="127.0.0.1", port=port, proxy_headers=True), httpx.Client() as c:
        url = f"http://127.0.0.1:{port}/"
        got = [
            c.get(url, headers={"X-Forwarded-For": "not-an-ip"}).status_code,
            c.get(url, headers={"X-Forwarded-For": "not-an-ip"}).status_code,
            c.get(url, headers={"X-Forwarded-For": "other-garbage"}).status_code,
            c.get(url, headers={"X-Forwarded-For": "203.0.113.7"}).status_code,
        ]
    assert got == [200, 429, 200, 200]
    assert seen == ["not-an-ip", "not-an-ip", "other-garbage", "203.0.113.7"]


def test_unix_socket_behind_a_trusted_hop() -> None:
    seen: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "app.sock")
        app = app_seeing(seen, trust=Trust(hops=1))
        with serve(app, uds=path, proxy_headers=False):
            start = time.time()
            xff = [
                uds_get(path, {"X-Forwarded-For": "203.0.113.7"}),
                uds_get(path, {"X-Forwarded-For": "198.51.100.2"}),
                uds_get(path, {"X-Forwarded-For": "10.0.0.1, 203.0.113.7"}),
            ]
            assert [r.status_code for r in xff] == [200, 200, 429]
            assert_seconds_left(xff[2].headers["retry-after"], start, 60, "Retry-After")
            assert seen == ["203.0.113.7", "198.51.100.2", "203.0.113.7"]
            # No forwarded address believed: refused as no_peer, not one client for every request.
            assert uds_get(path, {"X-Forwarded-For": "garbage"}).status_code == 500
            assert uds_get(path).status_code == 500


def test_unix_socket_without_trust_is_no_peer() -> None:
    seen: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "app.sock")
        with serve(app_seeing(seen), uds=path, proxy_headers=False):
            statuses = [uds_get(path).status_code for _ in range(3)]
    assert statuses == [500, 500, 500]
