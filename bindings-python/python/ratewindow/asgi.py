"""ASGI middleware: guard any ASGI application (Starlette, FastAPI, Quart, Litestar …) with a named
limiter. No framework is imported.

.. code-block:: python

    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from ratewindow import AsyncRateLimiter, Limit
    from ratewindow.asgi import RateLimitMiddleware

    limiter = AsyncRateLimiter()                 # an AsyncMemoryStore; or AsyncRateLimiter(AsyncRedisStore…)
    limiter.for_("api", lambda request: Limit.per_minute(60).by(request.ip))
    app = Starlette(routes=..., middleware=[Middleware(RateLimitMiddleware, limiter=limiter, name="api")])

Each request is counted by one ``consume_many`` on the limiter's store (or ``store``). A refusal is
answered ``429 Too Many Requests`` with ``Retry-After`` and the IETF ``RateLimit-Policy`` /
``RateLimit`` fields (``legacy=True`` adds ``X-RateLimit-*``), or with the refusing limit's
``response(request, headers)`` — any ASGI application, e.g. a Starlette ``Response``. An allowed
response gets the same fields. A limit's ``after(response)`` receives an :class:`HttpResponse`
(``status``, ``headers``) when the response starts; when it answers false the request's use is given
back. A key too long (a huge user id or header) is answered 400; a store error and the other
:class:`HttpError` s reach the server's error handling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ._http import TOO_MANY, AsyncGuard, Decision, HttpError, HttpRequest, HttpResponse, Trust
from ._limiter import AsyncRateLimiter, RateLimiter
from ._store import AsyncCooldownStore, CooldownStore

__all__ = ["RateLimitMiddleware", "HttpError", "HttpRequest", "HttpResponse", "Trust"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _encode(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


async def _plain(send: Send, status: int, body: str, headers: list[tuple[bytes, bytes]]) -> None:
    data = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def refuse(decision: Decision, request: HttpRequest, scope: Scope, receive: Receive, send: Send) -> None:
    """Answers a refused request: the limit's ``response()`` (an ASGI application) or the 429."""
    custom = decision.custom_response(request)
    if custom is not None:
        await custom(scope, receive, send)
        return
    await _plain(send, decision.status, TOO_MANY, _encode(decision.headers))


class RateLimitMiddleware:
    """Guards every HTTP request of ``app`` with the named limiter ``name`` of ``limiter`` (see the
    module). ``trust`` says which proxy headers :attr:`HttpRequest.ip` may believe (none by default);
    ``ietf`` and ``legacy`` which fields the responses carry. Other scope types (websocket,
    lifespan) pass through."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: AsyncRateLimiter | RateLimiter,
        name: str,
        *,
        store: AsyncCooldownStore | CooldownStore | None = None,
        ietf: bool = True,
        legacy: bool = False,
        trust: Trust | None = None,
    ) -> None:
        self.app = app
        self.guard = AsyncGuard(limiter, name, store=store, ietf=ietf, legacy=legacy, trust=trust)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        guard = self.guard
        request = HttpRequest.from_asgi(scope, guard.trust)
        try:
            decision = await guard.enter(request)
        except HttpError as error:
            if error.status >= 500:
                raise
            await _plain(send, error.status, str(error), [])
            return
        if not decision.allowed:
            await refuse(decision, request, scope, receive, send)
            return
        if not decision.headers:
            await self.app(scope, receive, send)
            return
        extra = _encode(decision.headers)

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *extra]
                if decision.has_after:
                    seen = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in message["headers"]}
                    await guard.finish(decision, HttpResponse(message["status"], seen))
            await send(message)

        await self.app(scope, receive, send_with_fields)
