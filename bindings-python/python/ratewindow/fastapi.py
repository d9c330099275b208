"""FastAPI: a dependency guarding routes with a named limiter (``pip install "ratewindow[fastapi]"``).

.. code-block:: python

    from fastapi import Depends, FastAPI
    from ratewindow import AsyncRateLimiter, Limit
    from ratewindow.fastapi import RateLimitExceeded, rate_limit_exceeded_handler, throttle

    limiter = AsyncRateLimiter()                 # an AsyncMemoryStore; or AsyncRateLimiter(AsyncRedisStore…)
    limiter.for_("login", lambda request: Limit.per_minute(5).by(request.ip))
    app = FastAPI()
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)  # optional: see below

    @app.post("/login", dependencies=[Depends(throttle(limiter, "login"))])
    async def login(): ...

The named limiter's callback gets an :class:`~ratewindow.asgi.HttpRequest` whose ``raw`` is the
Starlette ``Request``. Each request is counted by one ``consume_many`` on the limiter's store (or
``store``; a blocking store other than ``MemoryStore`` runs in a thread). A refusal raises
:class:`RateLimitExceeded`, an ``HTTPException`` with status 429 and the fields (``Retry-After``, the
IETF ``RateLimit-Policy`` / ``RateLimit``, ``X-RateLimit-*`` with ``legacy=True``): FastAPI answers it
as JSON; with :func:`rate_limit_exceeded_handler` installed the answer is ``Too Many Attempts.`` as
text, or the refusing limit's ``response(request, headers)``. An allowed response gets the same fields
(when the route returns data, FastAPI merges them; a route returning a ``Response`` itself does not
get them). A dependency never sees the response, so a limit with ``after()`` is refused with a
``TypeError``: guard such routes with :class:`ratewindow.asgi.RateLimitMiddleware`. A key too long is
an ``HTTPException`` 400; a store error and the other :class:`HttpError` s reach FastAPI's error
handling.
"""

# No `from __future__ import annotations`: FastAPI reads the dependency's annotations at run time.
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException, Request, Response
from starlette.responses import PlainTextResponse

from ._http import TOO_MANY, AsyncGuard, Decision, HttpError, HttpRequest, Trust
from ._limiter import AsyncRateLimiter, RateLimiter
from ._store import AsyncCooldownStore, CooldownStore

__all__ = ["throttle", "RateLimitExceeded", "rate_limit_exceeded_handler", "HttpError", "HttpRequest", "Trust"]


class RateLimitExceeded(HTTPException):
    """A refused request: status 429, ``headers`` the rate-limit fields, ``response`` the refusing
    limit's own ``response()`` answer (``None`` without one), ``decision`` the whole outcome."""

    def __init__(self, decision: Decision, response: Any) -> None:
        super().__init__(decision.status, TOO_MANY, dict(decision.headers))
        self.decision = decision
        self.response = response


async def rate_limit_exceeded_handler(request: Request, exc: Exception) -> Response:
    """The exception handler answering :class:`RateLimitExceeded`: the limit's ``response()`` or a
    plain-text 429 with the fields."""
    if not isinstance(exc, RateLimitExceeded):
        raise exc
    if exc.response is not None:
        answer: Response = exc.response
        return answer
    return PlainTextResponse(TOO_MANY, exc.status_code, headers=exc.headers)


def throttle(
    limiter: AsyncRateLimiter | RateLimiter,
    name: str,
    *,
    store: AsyncCooldownStore | CooldownStore | None = None,
    ietf: bool = True,
    legacy: bool = False,
    trust: Trust | None = None,
) -> Callable[[Request, Response], Awaitable[None]]:
    """A dependency (``Depends(throttle(limiter, "login"))``) guarding a route or a router with the
    named limiter ``name`` of ``limiter`` (see the module). ``trust`` says which proxy headers
    ``request.ip`` may believe (none by default)."""
    guard = AsyncGuard(limiter, name, store=store, ietf=ietf, legacy=legacy, trust=trust)

    async def rate_limit(request: Request, response: Response) -> None:
        view = HttpRequest.from_asgi(request.scope, guard.trust, raw=request)
        try:
            decision = await guard.enter(view, after=False)
        except HttpError as error:
            if error.status >= 500:
                raise
            raise HTTPException(error.status, str(error)) from None
        if not decision.allowed:
            raise RateLimitExceeded(decision, decision.custom_response(view))
        for field, value in decision.headers:
            response.headers.append(field, value)

    return rate_limit
