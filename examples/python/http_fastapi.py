"""Guard FastAPI routes with named limiters: a per-address limit on the whole API (ASGI middleware)
and a login limit keyed by email and address (a route dependency), 429 with Retry-After and the IETF
RateLimit fields.

Run: ``.venv/bin/python examples/python/http_fastapi.py`` serves the app on a free loopback port, sends
a few requests with httpx and prints the answers; ``--serve`` keeps it running on port 8000.
"""

from __future__ import annotations

import sys
import threading
import time

import httpx
import uvicorn
from fastapi import Depends, FastAPI
from pydantic import BaseModel

from ratewindow import AsyncRateLimiter, Limit
from ratewindow.asgi import HttpRequest, RateLimitMiddleware
from ratewindow.fastapi import RateLimitExceeded, rate_limit_exceeded_handler, throttle

limiter = AsyncRateLimiter()  # AsyncMemoryStore; AsyncRateLimiter(AsyncRedisStore.using(...)) to share


def api(request: HttpRequest) -> Limit | list[Limit]:
    if request.header("x-plan") == "enterprise":
        return Limit.none()  # skipped: not counted, no fields
    return Limit.per_minute(20).by(request.ip)


async def login_key(request: HttpRequest) -> Limit:
    body = await request.raw.json()  # request.raw: Starlette's Request (it keeps the body for the route)
    # email|ip: neither spreading guesses over addresses nor locking a victim out works.
    return Limit.per_minute(3).by(f"{body.get('email', '')}|{request.ip}")


limiter.for_("api", api)
limiter.for_("login", login_key)

app = FastAPI()
app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
app.add_middleware(RateLimitMiddleware, limiter=limiter, name="api")


@app.get("/hello")
async def hello() -> dict[str, str]:
    return {"hello": "world"}


class Credentials(BaseModel):
    email: str
    password: str


@app.post("/login", dependencies=[Depends(throttle(limiter, "login"))])
async def login(credentials: Credentials) -> dict[str, str]:
    return {"welcome": credentials.email}


def demo() -> None:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(4):
            answer = client.post("/login", json={"email": "ada@example.com", "password": "x"})
            print("POST /login", answer.status_code, answer.headers.get("retry-after", "-"),
                  answer.headers.get("ratelimit"))
        answer = client.get("/hello")
        print("GET /hello ", answer.status_code, answer.headers["ratelimit-policy"], answer.headers["ratelimit"])
        answer = client.get("/hello", headers={"x-plan": "enterprise"})
        print("GET /hello (enterprise)", answer.status_code, answer.headers.get("ratelimit", "no RateLimit field"))
    server.should_exit = True
    thread.join()


if __name__ == "__main__":
    if "--serve" in sys.argv:
        uvicorn.run(app, host="127.0.0.1", port=8000)
    else:
        demo()
