"""Flask: a decorator guarding a view with a named limiter (``pip install "ratewindow[flask]"``).

.. code-block:: python

    from flask import Flask
    from ratewindow import Limit, RateLimiter
    from ratewindow.flask import throttle

    app = Flask(__name__)
    limiter = RateLimiter()                      # a MemoryStore; or RateLimiter(RedisStore.using(…))
    limiter.for_("login", lambda request: Limit.per_minute(5).by(request.ip))

    @app.post("/login")
    @throttle(limiter, "login")
    def login(): ...

The named limiter's callback gets an :class:`~ratewindow.asgi.HttpRequest` whose ``raw`` is
``flask.request``. Each request is counted by one ``consume_many`` on the limiter's store (or
``store``). A refusal is answered ``429`` with ``Retry-After`` and the IETF ``RateLimit-Policy`` /
``RateLimit`` fields (``legacy=True`` adds ``X-RateLimit-*``), or with the refusing limit's
``response(request, headers)`` (anything a view may return). The view's response gets the same fields;
a limit's ``after(response)`` receives Flask's response object, and when it answers false the
request's use is given back. A key too long is answered 400; a store error and the other
:class:`HttpError` s go to Flask's error handling. To guard a whole application, use
:class:`ratewindow.wsgi.RateLimitMiddleware` on ``app.wsgi_app``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import flask

from ._http import TOO_MANY, HttpError, HttpRequest, SyncGuard, Trust
from ._limiter import RateLimiter
from ._store import CooldownStore

__all__ = ["throttle", "HttpError", "HttpRequest", "Trust"]

F = TypeVar("F", bound=Callable[..., Any])


def _plain(status: int, body: str, headers: list[tuple[str, str]]) -> flask.Response:
    return flask.Response(body, status=status, headers=headers, mimetype="text/plain")


def throttle(
    limiter: RateLimiter,
    name: str,
    *,
    store: CooldownStore | None = None,
    ietf: bool = True,
    legacy: bool = False,
    trust: Trust | None = None,
) -> Callable[[F], F]:
    """A decorator guarding a (synchronous) view with the named limiter ``name`` of ``limiter`` (see
    the module). ``trust`` says which proxy headers ``request.ip`` may believe (none by default)."""
    guard = SyncGuard(limiter, name, store=store, ietf=ietf, legacy=legacy, trust=trust)

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            current = flask.request
            request = HttpRequest.from_wsgi(current.environ, guard.trust, raw=current)
            try:
                decision = guard.enter(request)
            except HttpError as error:
                if error.status >= 500:
                    raise
                return _plain(error.status, str(error), [])
            if not decision.allowed:
                custom = decision.custom_response(request)
                if custom is not None:
                    answer = flask.make_response(custom)
                    return answer
                return _plain(decision.status, TOO_MANY, decision.headers)
            response = flask.make_response(view(*args, **kwargs))
            response.headers.extend(decision.headers)
            guard.finish(decision, response)
            return response

        return cast(F, guarded)

    return decorate
