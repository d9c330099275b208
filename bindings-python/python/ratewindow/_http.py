"""What every HTTP integration shares (ASGI, FastAPI, WSGI, Flask): framework plumbing only.

A guarded request goes: the named limiter's callback (with an :class:`HttpRequest`) → the core's
``HttpPlan`` (store keys ``throttle:{name}:{key}``, ``Unlimited`` skipped, one batch) → **one**
``consume_many`` on the store → the core's response fields (``Retry-After``, the IETF ``RateLimit-Policy``
/ ``RateLimit`` fields, the legacy ``X-RateLimit-*`` on request). Keys, header values and client
addresses are all decided by ``ratewindow_core::http``; this module only moves them between the
framework and the store.

A store error is not caught: it reaches the framework's own error handling.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from . import _ratewindow
from ._errors import RateWindowError
from ._limiter import AsyncRateLimiter, RateLimiter
from ._limits import Limit
from ._memory import AsyncMemoryStore, MemoryStore
from ._store import AsyncCooldownStore, CooldownStore, Verdict

__all__ = ["HttpError", "HttpRequest", "HttpResponse", "Trust", "Decision", "SyncGuard", "AsyncGuard", "TOO_MANY"]

TOO_MANY: Final = "Too Many Attempts."
"""The default refusal's body (text/plain), as the seed's ``throttle`` answers."""

class HttpError(RateWindowError, ValueError):
    """A request the middleware cannot key, or a configuration it cannot hold (raised by the core).

    ``kind`` is the core's stable name: ``invalid_name`` (a limiter name that is empty, too long or
    holds ``:``), ``key_too_long`` (a store key over 1024 bytes: a huge user id or header),
    ``no_peer`` (the request has no peer address, as on a Unix socket, and no trusted proxy forwarded
    one), ``invalid_proxy``, ``invalid_prefix``.
    ``status`` is what the middleware answers: 400 for ``key_too_long`` (the request carried it; the
    middleware answers it itself), 500 for the rest (raised to the framework's error handling).
    """

    code = "http"

    def __init__(self, message: str, kind: str, status: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


Trust = _ratewindow.Trust
"""Which proxy headers to believe for :attr:`HttpRequest.ip`: ``Trust()`` (the peer address only, the
default), ``Trust(hops=1)`` (one proxy in front), ``Trust(proxies=["10.0.0.1", "10.1.0.0/16"])``."""

_NO_TRUST: Final = _ratewindow.Trust()


class HttpRequest:
    """The request a named limiter's callback receives, the same for every framework.

    ``ip`` is the client address decided by the core: the peer address, or the ``X-Forwarded-For`` /
    ``Forwarded`` address only when the integration was given a :class:`Trust` that covers the peer
    (a malformed header is never believed). ``raw`` is the framework's own object: a Starlette
    ``Request`` (FastAPI), ``flask.request``, the ASGI scope or the WSGI environ.
    """

    __slots__ = ("method", "path", "peer", "raw", "_headers", "_read_headers", "_trust", "_ip")

    def __init__(
        self,
        method: str,
        path: str,
        peer: str | None,
        headers: Callable[[], Mapping[str, str]],
        raw: Any,
        trust: _ratewindow.Trust = _NO_TRUST,
    ) -> None:
        self.method = method
        self.path = path
        self.peer = peer
        self.raw = raw
        self._read_headers = headers
        self._headers: Mapping[str, str] | None = None
        self._trust = trust
        self._ip: str | None = None

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's headers, names in lower case; repeated lines joined with ``", "``."""
        if self._headers is None:
            self._headers = self._read_headers()
        return self._headers

    def header(self, name: str) -> str | None:
        """One header (any case), ``None`` when absent."""
        return self.headers.get(name.lower())

    @property
    def ip(self) -> str:
        """The client address (see the class). A peer that is not an IP address (a server's rewrite
        of it from a forwarded header, garbage included) is the client as its text; with no peer at
        all (a Unix socket) a trusted hop's forwarded address is the client, else :class:`HttpError`
        (``no_peer``)."""
        if self._ip is None:
            which = self._trust.header  # the one header the trust reads, None for the peer alone
            value = None if which is None else self.headers.get(which)
            if which == "forwarded":
                self._ip = self._trust.client_address(self.peer, None, value)
            else:
                self._ip = self._trust.client_address(self.peer, value, None)
        return self._ip

    @classmethod
    def from_asgi(cls, scope: Mapping[str, Any], trust: _ratewindow.Trust = _NO_TRUST, raw: Any = None) -> HttpRequest:
        """A view of an ASGI HTTP scope (``raw`` defaults to the scope itself)."""
        client = scope.get("client")
        pairs: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())

        def headers() -> Mapping[str, str]:
            found: dict[str, str] = {}
            for name, value in pairs:
                key, text = name.decode("latin-1").lower(), value.decode("latin-1")
                found[key] = f"{found[key]}, {text}" if key in found else text
            return found

        return cls(
            scope.get("method", "GET"),
            scope.get("path", "/"),
            client[0] if client else None,
            headers,
            scope if raw is None else raw,
            trust,
        )

    @classmethod
    def from_wsgi(cls, environ: Mapping[str, Any], trust: _ratewindow.Trust = _NO_TRUST, raw: Any = None) -> HttpRequest:
        """A view of a WSGI environ (``raw`` defaults to the environ itself)."""

        def headers() -> Mapping[str, str]:
            found = {
                name[5:].replace("_", "-").lower(): value
                for name, value in environ.items()
                if name.startswith("HTTP_") and isinstance(value, str)
            }
            for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                if environ.get(name):
                    found[name.replace("_", "-").lower()] = environ[name]
            return found

        return cls(
            environ.get("REQUEST_METHOD", "GET"),
            environ.get("PATH_INFO", "/") or "/",
            environ.get("REMOTE_ADDR") or None,
            headers,
            environ if raw is None else raw,
            trust,
        )

    def __repr__(self) -> str:
        return f"HttpRequest(method={self.method!r}, path={self.path!r}, peer={self.peer!r})"


class HttpResponse:
    """What an ``after()`` callback gets in the ASGI and WSGI middleware: the response's status and
    headers (names in lower case). Flask's decorator passes Flask's own response instead."""

    __slots__ = ("status", "headers")

    def __init__(self, status: int, headers: Mapping[str, str]) -> None:
        self.status = status
        self.headers = headers

    def __repr__(self) -> str:
        return f"HttpResponse(status={self.status})"


class Decision:
    """A guarded request's outcome: ``allowed`` or not, the response fields to send (``headers``, name
    and value pairs, in the order the core gives them), and on a refusal the limit that refused."""

    __slots__ = ("allowed", "headers", "verdict", "limit", "_plan", "_afters")

    def __init__(
        self,
        allowed: bool,
        headers: list[tuple[str, str]],
        verdict: Verdict | None,
        limit: Limit | None,
        plan: _ratewindow.HttpPlan | None,
        afters: list[tuple[int, Callable[[Any], Any]]],
    ) -> None:
        self.allowed = allowed
        self.headers = headers
        self.verdict = verdict
        self.limit = limit
        self._plan = plan
        self._afters = afters

    @property
    def status(self) -> int:
        """200 (carry on) or 429."""
        return 200 if self.allowed else 429

    @property
    def has_after(self) -> bool:
        """Whether a limit's ``after()`` must see the response."""
        return bool(self._afters)

    def custom_response(self, request: HttpRequest) -> Any:
        """The refusing limit's ``response(request, headers)`` answer, ``None`` without one."""
        if self.allowed or self.limit is None or self.limit.response_callback is None:
            return None
        return self.limit.response_callback(request, dict(self.headers))

    def _recount(self, response: Any) -> list[int] | None:
        """Entries to count again once the call is given back; ``None`` when the call stands.

        Every entry was counted before the handler ran (one all-or-nothing call), so a use is reserved
        while it runs; an ``after()`` that says no gives the call back and counts the others again.
        """
        afters, self._afters = self._afters, []  # once, however often the framework calls back
        refused = {index for index, callback in afters if not callback(response)}
        if not refused:
            return None
        assert self._plan is not None
        return [index for index in range(len(self._plan.entries)) if index not in refused]

    def finish_sync(self, response: Any, store: CooldownStore) -> None:
        """Runs the ``after()`` callbacks with ``response`` (sync store)."""
        again = self._recount(response)
        if again is None or self.verdict is None:
            return
        self.verdict.release()
        if again:
            assert self._plan is not None
            store.consume_many([self._plan.entries[i] for i in again])

    async def finish_async(self, response: Any, store: AsyncCooldownStore | CooldownStore) -> None:
        """Runs the ``after()`` callbacks with ``response`` (asyncio or non-blocking store)."""
        again = self._recount(response)
        if again is None or self.verdict is None:
            return
        if isinstance(store, AsyncCooldownStore) or _non_blocking(store):
            given = self.verdict.release()
            if inspect.isawaitable(given):
                await given
        else:  # a blocking store's release does I/O: off the event loop
            await asyncio.to_thread(self.verdict.release)
        if again:
            assert self._plan is not None
            await _consume_async(store, [self._plan.entries[i] for i in again])


_PASS: Final = Decision(True, [], None, None, None, [])


def _decide(
    plan: _ratewindow.HttpPlan, limits: Sequence[Limit], verdict: Verdict, ietf: bool, legacy: bool
) -> Decision:
    headers = plan.headers(verdict, ietf, legacy)
    if not verdict.allowed:
        blocked = verdict.blocked if verdict.blocked is not None else 0
        return Decision(False, headers, verdict, limits[plan.source(blocked)], plan, [])
    if all(limit.after_callback is None for limit in limits):
        return Decision(True, headers, verdict, None, plan, [])
    afters = [
        (index, callback)
        for index, callback in ((i, limits[plan.source(i)].after_callback) for i in range(len(plan.entries)))
        if callback is not None
    ]
    return Decision(True, headers, verdict, None, plan, afters)


def _callback(limiter: RateLimiter | AsyncRateLimiter, name: str) -> Callable[[HttpRequest], Any]:
    found: Callable[[HttpRequest], Any] | None = limiter._callback(name)
    if found is None:
        raise LookupError(f"no named limiter {name!r} is registered")
    return found


def _as_list(limits: object) -> list[Limit]:
    """A named limiter's answer as a list (one limit or several). The keys stay as given: the core
    rewrites those that two limits share (``RequestEntries`` in ``ratewindow_core::http``)."""
    found = [limits] if isinstance(limits, Limit) else list(limits)  # type: ignore[call-overload]
    for limit in found:
        if not isinstance(limit, Limit):
            raise TypeError(f"a named limiter must return Limit objects, not {type(limit).__name__}")
    return found


def _non_blocking(store: object) -> bool:
    """A sync store whose calls never wait on I/O: called inline from asyncio code."""
    return isinstance(store, MemoryStore)


async def _consume_async(store: AsyncCooldownStore | CooldownStore, entries: list[_ratewindow.Entry]) -> Verdict:
    if isinstance(store, AsyncCooldownStore):
        return await store.consume_many(entries)
    if _non_blocking(store):
        return store.consume_many(entries)
    return await asyncio.to_thread(store.consume_many, entries)


class _Guard:
    __slots__ = ("name", "ietf", "legacy", "trust")

    def __init__(self, name: str, ietf: bool, legacy: bool, trust: _ratewindow.Trust | None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        _ratewindow.HttpPlan(name, [])  # the core refuses a bad name now, not at the first request
        self.name = name
        self.ietf = ietf
        self.legacy = legacy
        self.trust = trust if trust is not None else _NO_TRUST


class SyncGuard(_Guard):
    """A named limiter of a :class:`~ratewindow.RateLimiter` guarding requests, with a blocking store
    (``store``, or the limiter's own when it is a :class:`~ratewindow.CooldownStore`)."""

    __slots__ = ("limiter", "store")

    def __init__(
        self,
        limiter: RateLimiter,
        name: str,
        *,
        store: CooldownStore | None = None,
        ietf: bool = True,
        legacy: bool = False,
        trust: _ratewindow.Trust | None = None,
    ) -> None:
        super().__init__(name, ietf, legacy, trust)
        if not isinstance(limiter, RateLimiter):
            raise TypeError(f"limiter must be a RateLimiter, not {type(limiter).__name__}")
        chosen = store if store is not None else limiter.store
        if not isinstance(chosen, CooldownStore):
            raise TypeError(f"the store must be a (blocking) CooldownStore, not {type(chosen).__name__}")
        self.limiter = limiter
        self.store: CooldownStore = chosen

    def enter(self, request: HttpRequest) -> Decision:
        """Resolves the named limiter for ``request`` and counts it: one ``consume_many``."""
        limits = _as_list(_callback(self.limiter, self.name)(request))
        plan = _ratewindow.HttpPlan(self.name, limits)
        if not plan.entries:
            return _PASS
        verdict = self.store.consume_many(plan.entries)
        return _decide(plan, limits, verdict, self.ietf, self.legacy)

    def finish(self, decision: Decision, response: Any) -> None:
        """Runs the allowed decision's ``after()`` callbacks with ``response``."""
        if decision.has_after:
            decision.finish_sync(response, self.store)


class AsyncGuard(_Guard):
    """A named limiter guarding requests in asyncio code: an :class:`~ratewindow.AsyncRateLimiter` (or a
    :class:`~ratewindow.RateLimiter`), an asyncio store, or a blocking one run in a thread (a
    :class:`~ratewindow.MemoryStore` never blocks and is called inline)."""

    __slots__ = ("limiter", "store")

    def __init__(
        self,
        limiter: AsyncRateLimiter | RateLimiter,
        name: str,
        *,
        store: AsyncCooldownStore | CooldownStore | None = None,
        ietf: bool = True,
        legacy: bool = False,
        trust: _ratewindow.Trust | None = None,
    ) -> None:
        super().__init__(name, ietf, legacy, trust)
        if not isinstance(limiter, (AsyncRateLimiter, RateLimiter)):
            raise TypeError(f"limiter must be an AsyncRateLimiter or a RateLimiter, not {type(limiter).__name__}")
        chosen = store if store is not None else limiter.store
        if isinstance(chosen, AsyncMemoryStore):
            chosen = chosen.sync  # the same native store, with no coroutine around each call
        if not isinstance(chosen, (AsyncCooldownStore, CooldownStore)):
            raise TypeError(f"the store must be a CooldownStore or an AsyncCooldownStore, not {type(chosen).__name__}")
        self.limiter = limiter
        self.store: AsyncCooldownStore | CooldownStore = chosen

    async def enter(self, request: HttpRequest, *, after: bool = True) -> Decision:
        """Resolves the named limiter for ``request`` and counts it: one ``consume_many``. With
        ``after=False`` (an integration that never sees the response) a limit with ``after()`` is a
        ``TypeError``, raised before anything is counted."""
        found = _callback(self.limiter, self.name)(request)
        limits = _as_list(await found if inspect.isawaitable(found) else found)
        if not after and any(limit.after_callback is not None for limit in limits):
            raise TypeError(f"limiter {self.name!r}: after() needs ratewindow.asgi.RateLimitMiddleware")
        plan = _ratewindow.HttpPlan(self.name, limits)
        if not plan.entries:
            return _PASS
        verdict = await _consume_async(self.store, plan.entries)
        return _decide(plan, limits, verdict, self.ietf, self.legacy)

    async def finish(self, decision: Decision, response: Any) -> None:
        """Runs the allowed decision's ``after()`` callbacks with ``response``."""
        if decision.has_after:
            await decision.finish_async(response, self.store)
