"""Real HTTP servers on loopback for the middleware tests, and a real client (httpx, asyncio).

- :func:`serve_asgi`: uvicorn in a thread on a free port;
- :func:`serve_wsgi`: werkzeug's threaded server in a thread on a free port;
- :func:`burst`: ``n`` concurrent requests, each on its own connection, answered in full.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from werkzeug.serving import make_server


def _bound() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Serves ``app`` with uvicorn (one worker, asyncio, h11) until the block ends; yields its URL."""
    sock = _bound()
    # proxy_headers=False: uvicorn would otherwise put X-Forwarded-For's address (from a loopback peer)
    # in the scope's client itself; the tests check ratewindow's own Trust.
    config = uvicorn.Config(
        app, log_level="critical", access_log=False, lifespan="auto", backlog=512, proxy_headers=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    """Serves ``app`` with werkzeug's threaded server until the block ends; yields its URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def _burst(url: str, n: int, headers: dict[str, str] | None) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        start = asyncio.Event()

        async def one() -> httpx.Response:
            await start.wait()
            return await client.get(url, headers=headers)

        tasks = [asyncio.create_task(one()) for _ in range(n)]
        await asyncio.sleep(0)
        start.set()
        return await asyncio.gather(*tasks)


def burst(url: str, n: int, headers: dict[str, str] | None = None) -> list[httpx.Response]:
    """``n`` requests to ``url`` sent at once, each on its own connection."""
    return asyncio.run(_burst(url, n, headers))


def get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """One request."""
    return httpx.get(url, headers=headers, timeout=30)


def assert_seconds_left(seconds: str | int, start: float, window_s: int = 60, what: str = "seconds left") -> None:
    """Checks ``seconds`` (a ``Retry-After`` or a ``RateLimit`` field's ``t``) is what is left of a
    ``window_s`` window opened at or after ``start`` (``time.time()`` read before the window's first
    request): whole seconds rounded up, so ``window_s`` within a second of the window's first request and
    one less for every second begun since. A loaded machine may take more than a second over a burst or
    between two requests, so the floor comes from the time that passed, not from a constant."""
    elapsed = time.time() - start
    low = window_s - math.ceil(elapsed)
    assert str(seconds).isdigit() and low <= int(seconds) <= window_s, (
        f"{what}: {seconds}, expected {low}..{window_s} ({elapsed:.3f} s since the window opened)"
    )


def check_burst(responses: list[httpx.Response], name: str, uses: int, window_s: int, start: float) -> None:
    """Exactly ``uses`` answers 200 and the rest 429, every one with the fields of one limit of ``uses``
    per ``window_s`` seconds: the policy, the remaining uses counting down, ``Retry-After`` on 429s, each
    wait what is left of a window opened at or after ``start`` (``time.time()`` before the burst)."""
    allowed = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 429]
    assert (len(allowed), len(refused)) == (uses, len(responses) - uses), [r.status_code for r in responses]
    policy = f'"{name}";q={uses};w={window_s}'
    remaining = []
    for r in allowed:
        assert r.headers["ratelimit-policy"] == policy
        assert "retry-after" not in r.headers
        field, r_param, t_param = r.headers["ratelimit"].split(";")
        assert field == f'"{name}"' and t_param.startswith("t="), r.headers["ratelimit"]
        assert_seconds_left(t_param[2:], start, window_s, f"RateLimit {r.headers['ratelimit']}: t")
        remaining.append(int(r_param.removeprefix("r=")))
    assert sorted(remaining) == list(range(uses)), remaining
    for r in refused:
        assert r.headers["ratelimit-policy"] == policy
        assert_seconds_left(r.headers["retry-after"], start, window_s, "Retry-After")
        field, r_param, t_param = r.headers["ratelimit"].split(";")
        assert (field, r_param) == (f'"{name}"', "r=0") and t_param.startswith("t="), r.headers["ratelimit"]
        assert_seconds_left(t_param[2:], start, window_s, f"RateLimit {r.headers['ratelimit']}: t")
        assert r.text == "Too Many Attempts."
