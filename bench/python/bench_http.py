"""HTTP middleware: FastAPI + ratewindow against FastAPI + slowapi, Flask + ratewindow against Flask +
flask-limiter, requests per second through a real server and a real load generator.

The same app on both sides of a pair: one route answering a small JSON body (FastAPI) or text (Flask),
guarded by one limit per client address that never refuses (1,000,000 per minute), every limiter on its
in-process memory store and with its default response fields (ratewindow sends the IETF
``RateLimit-Policy`` / ``RateLimit`` fields; slowapi and flask-limiter send none by default).

- FastAPI: uvicorn (one worker, asyncio loop, h11), the route guarded by
  ``Depends(ratewindow.fastapi.throttle(limiter, "api"))`` — or the app by ``ratewindow.asgi``'s
  ``RateLimitMiddleware`` — vs slowapi's ``@limiter.limit(...)``;
- Flask: werkzeug's threaded server, ``@ratewindow.flask.throttle(limiter, "api")`` vs flask-limiter's
  ``@limiter.limit(...)``;
- "none": the same app unguarded, the ceiling.

Each server is its own process; the load generator is ``wrk`` (Debian package ``wrk``: one thread,
``--connections`` connections, ``--seconds`` per run). The contenders run interleaved: every round runs
each once, in a rotating order; the table gives each one's median requests/s and the median of the
per-round ratios. Beside the wall-clock rate, each run divides the requests served by the CPU time the
server process used meanwhile (``/proc``): on a machine shared with other work the wall-clock rate
swings with the load, the cost per request much less. Any answer other than 200 fails the run.

Run: ``.venv/bin/python bench/python/bench_http.py [--rounds N] [--seconds S] [--connections C]``
(``--only fastapi`` or ``--only flask`` for one pair). ``--check`` only starts every server and checks
one answer of each (no wrk needed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from fastapi import Request  # at module level: FastAPI resolves the routes' string annotations here

RATE = "1000000/minute"
# Each group: ratewindow's contenders, then the peer, then the unguarded app.
PAIRS = {
    "fastapi": ("fastapi-ratewindow", "fastapi-ratewindow-asgi", "fastapi-slowapi", "fastapi-none"),
    "flask": ("flask-ratewindow", "flask-limiter", "flask-none"),
}


# --- the apps (built in the server process) ---------------------------------------------------------


def fastapi_app(kind: str) -> Any:
    from fastapi import Depends, FastAPI

    app = FastAPI()
    if kind == "fastapi-ratewindow":
        from ratewindow import AsyncRateLimiter, Limit
        from ratewindow.fastapi import RateLimitExceeded, rate_limit_exceeded_handler, throttle

        limiter = AsyncRateLimiter()
        limiter.for_("api", lambda request: Limit.per_minute(1_000_000).by(request.ip))
        app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)

        @app.get("/", dependencies=[Depends(throttle(limiter, "api"))])
        async def guarded() -> dict[str, str]:
            return {"hello": "world"}

    elif kind == "fastapi-slowapi":
        from slowapi import Limiter, _rate_limit_exceeded_handler
        from slowapi.errors import RateLimitExceeded as SlowapiExceeded
        from slowapi.util import get_remote_address

        slow = Limiter(key_func=get_remote_address)
        app.state.limiter = slow
        app.add_exception_handler(SlowapiExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

        @app.get("/")
        @slow.limit(RATE)
        async def limited(request: Request) -> dict[str, str]:
            return {"hello": "world"}

    else:

        @app.get("/")
        async def open_() -> dict[str, str]:
            return {"hello": "world"}

        if kind == "fastapi-ratewindow-asgi":  # the same route, guarded by the ASGI middleware instead
            from ratewindow import AsyncRateLimiter, Limit
            from ratewindow.asgi import RateLimitMiddleware

            limiter = AsyncRateLimiter()
            limiter.for_("api", lambda request: Limit.per_minute(1_000_000).by(request.ip))
            app.add_middleware(RateLimitMiddleware, limiter=limiter, name="api")

    return app


def flask_app(kind: str) -> Any:
    import flask

    app = flask.Flask("bench")
    guard: Callable[[Any], Any] = lambda view: view  # noqa: E731
    if kind == "flask-ratewindow":
        from ratewindow import Limit, RateLimiter
        from ratewindow.flask import throttle

        limiter = RateLimiter()
        limiter.for_("api", lambda request: Limit.per_minute(1_000_000).by(request.ip))
        guard = throttle(limiter, "api")
    elif kind == "flask-limiter":
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        guard = Limiter(get_remote_address, app=app, storage_uri="memory://").limit(RATE)

    @app.get("/")
    @guard
    def hello() -> str:
        return "hello"

    return app


def serve(kind: str, port: int) -> None:
    if kind.startswith("fastapi"):
        import uvicorn

        uvicorn.run(fastapi_app(kind), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    else:
        from werkzeug.serving import WSGIRequestHandler, run_simple

        WSGIRequestHandler.protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn
        WSGIRequestHandler.log_request = lambda *a, **k: None  # type: ignore[method-assign]
        run_simple("127.0.0.1", port, flask_app(kind), threaded=True)


# --- the harness --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --port-base P: the servers listen on P, P+1, ... (a machine shared with other benches gives each its
# own ports); by default on free ports the system picks.
PORT_BASE = 0
_next_port = 0


def next_port() -> int:
    global _next_port
    if not PORT_BASE:
        return free_port()
    _next_port += 1
    return PORT_BASE + _next_port - 1


class Server:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.port = next_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=2) as answer:
                    if answer.status != 200:
                        raise RuntimeError(f"{kind}: status {answer.status}")
                    if kind.endswith("ratewindow") and "RateLimit" not in answer.headers:
                        raise RuntimeError(f"{kind}: no RateLimit field")
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{kind} did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(url: str, seconds: int, connections: int) -> tuple[float, int]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if "Non-2xx" in out or (errors is not None and any(int(n) for n in errors.groups())):
        raise RuntimeError(f"wrk saw errors against {url}:\n{out}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if found is None or total is None:
        raise RuntimeError(f"no Requests/sec in wrk's output:\n{out}")
    return float(found.group(1)), int(total.group(1))


def measure(server: Server, seconds: int, connections: int) -> tuple[float, float]:
    """One wrk run against ``server``: requests per second, and requests per second of the server's
    own CPU time (the figure a busy machine disturbs least)."""
    before = cpu_seconds(server.process.pid)
    rate, total = wrk(server.url, seconds, connections)
    used = cpu_seconds(server.process.pid) - before
    return rate, total / used if used > 0 else float("nan")


def run_pair(kinds: tuple[str, ...], rounds: int, seconds: int, connections: int) -> None:
    servers = [Server(kind) for kind in kinds]
    try:
        for server in servers:  # warm-up
            wrk(server.url, 1, connections)
        rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        per_cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
        for r in range(rounds):
            order = servers[r % len(servers) :] + servers[: r % len(servers)]
            for server in order:
                rate, cpu_rate = measure(server, seconds, connections)
                rates[server.kind].append(rate)
                per_cpu[server.kind].append(cpu_rate)
        *ours, peer, none = kinds
        print(f"\n{' and '.join(ours)} vs {peer} ({rounds} rounds of {seconds} s, {connections} connections)")
        print("| contender | requests/s (median) | requests per CPU-second of the server (median) |")
        print("|---|---:|---:|")
        for kind in kinds:
            print(f"| {kind} | {statistics.median(rates[kind]):,.0f} | {statistics.median(per_cpu[kind]):,.0f} |")
        for label, table in (("requests/s", rates), ("per CPU-second", per_cpu)):
            for one in ours:
                ratios = [a / b for a, b in zip(table[one], table[peer])]
                ceiling = [a / b for a, b in zip(table[one], table[none])]
                print(f"{label}: {one} / {peer} {statistics.median(ratios):.2f}x (rounds: "
                      + ", ".join(f"{x:.2f}" for x in ratios) + f"); / unguarded {statistics.median(ceiling):.2f}x")
    finally:
        for server in servers:
            server.stop()


def check() -> None:
    """Starts every server and checks one answer of each: the smoke run of the test command."""
    for kinds in PAIRS.values():
        for kind in kinds:
            Server(kind).stop()
    print("bench_http: every server answered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--only", choices=sorted(PAIRS))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--port-base", type=int, default=0, help="servers on this port and the next ones")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    global PORT_BASE
    PORT_BASE = args.port_base
    if args.check:
        check()
        return
    if shutil.which("wrk") is None:
        sys.exit("bench_http: wrk is needed (apt-get install wrk)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, kinds in PAIRS.items():
        if args.only in (None, name):
            run_pair(kinds, args.rounds, args.seconds, args.connections)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
