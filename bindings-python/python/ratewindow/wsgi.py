"""WSGI middleware: guard any WSGI application (Flask, Django, Falcon, Bottle …) with a named
limiter. No framework is imported.

.. code-block:: python

    from ratewindow import Limit, RateLimiter
    from ratewindow.wsgi import RateLimitMiddleware

    limiter = RateLimiter()                      # a MemoryStore; or RateLimiter(RedisStore.using(…))
    limiter.for_("api", lambda request: Limit.per_minute(60).by(request.ip))
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter, "api")

Each request is counted by one ``consume_many`` on the limiter's (blocking) store, or ``store``. A
refusal is answered ``429 Too Many Requests`` with ``Retry-After`` and the IETF ``RateLimit-Policy`` /
``RateLimit`` fields (``legacy=True`` adds ``X-RateLimit-*``), or with the refusing limit's
``response(request, headers)`` — any WSGI application, e.g. a Werkzeug or Flask ``Response``. An
allowed response gets the same fields. A limit's ``after(response)`` receives an
:class:`HttpResponse` (``status``, ``headers``) when the application starts its response; when it
answers false the request's use is given back. A key too long (a huge user id or header) is answered
400; a store error and the other :class:`HttpError` s propagate to the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._http import TOO_MANY, Decision, HttpError, HttpRequest, HttpResponse, SyncGuard, Trust
from ._limiter import RateLimiter
from ._store import CooldownStore

__all__ = ["RateLimitMiddleware", "HttpError", "HttpRequest", "HttpResponse", "Trust"]

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REASONS = {400: "400 Bad Request", 429: "429 Too Many Requests"}


def _plain(start_response: StartResponse, status: int, body: str, headers: list[tuple[str, str]]) -> list[bytes]:
    data = body.encode()
    start_response(
        _REASONS.get(status, str(status)),
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data))), *headers],
    )
    return [data]


def refuse(
    decision: Decision, request: HttpRequest, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """Answers a refused request: the limit's ``response()`` (a WSGI application) or the 429."""
    custom = decision.custom_response(request)
    if custom is not None:
        answer: Iterable[bytes] = custom(environ, start_response)
        return answer
    return _plain(start_response, decision.status, TOO_MANY, decision.headers)


class RateLimitMiddleware:
    """Guards every request of ``app`` with the named limiter ``name`` of ``limiter`` (see the
    module). ``trust`` says which proxy headers :attr:`HttpRequest.ip` may believe (none by default);
    ``ietf`` and ``legacy`` which fields the responses carry."""

    def __init__(
        self,
        app: WSGIApp,
        limiter: RateLimiter,
        name: str,
        *,
        store: CooldownStore | None = None,
        ietf: bool = True,
        legacy: bool = False,
        trust: Trust | None = None,
    ) -> None:
        self.app = app
        self.guard = SyncGuard(limiter, name, store=store, ietf=ietf, legacy=legacy, trust=trust)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        guard = self.guard
        request = HttpRequest.from_wsgi(environ, guard.trust)
        try:
            decision = guard.enter(request)
        except HttpError as error:
            if error.status >= 500:
                raise
            return _plain(start_response, error.status, str(error), [])
        if not decision.allowed:
            return refuse(decision, request, environ, start_response)
        if not decision.headers:
            return self.app(environ, start_response)
        extra = decision.headers

        def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers = [*headers, *extra]
            if decision.has_after:
                code = int(status.split(" ", 1)[0])
                guard.finish(decision, HttpResponse(code, {name.lower(): value for name, value in headers}))
            return start_response(status, headers, exc_info) if exc_info is not None else start_response(status, headers)

        return self.app(environ, start_with_fields)
