"""One store logic, two drivers: the pattern every store that does I/O follows.

A store operation is written once, as a generator that *yields* each request it needs answered and
*receives* the reply, then *returns* its result. It never does I/O and never awaits:

.. code-block:: python

    def _consume_many_op(entries) -> Op[Entry, Verdict, Verdict]:
        for entry in entries:
            verdict = yield entry          # "count this entry, tell me the verdict"
            ...
        return result

:func:`run_sync` drives it with a blocking function (a sync client), :func:`run_async` with an
awaitable one (an asyncio client). The Rust core already works this way for networked stores
(``plan_*`` builds a script or statements, ``decode_*`` turns the reply into a verdict); the Redis and
SQL stores of later issues yield the core's plans and send back their clients' replies, so
``RedisStore`` and ``AsyncRedisStore`` share every line but the driver. The default ``consume_many`` of
:class:`~ratewindow.CooldownStore` and :class:`~ratewindow.AsyncCooldownStore` is the first user.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TypeAlias, TypeVar

__all__ = ["Op", "run_sync", "run_async"]

Req = TypeVar("Req")
Rep = TypeVar("Rep")
Out = TypeVar("Out")

Op: TypeAlias = Generator[Req, Rep, Out]
"""An operation: yields requests, is sent their replies, returns its result."""


def run_sync(op: Generator[Req, Rep, Out], execute: Callable[[Req], Rep]) -> Out:
    """Runs ``op``, answering each request with ``execute(request)``."""
    try:
        request = next(op)
        while True:
            request = op.send(execute(request))
    except StopIteration as done:
        result: Out = done.value
        return result


async def run_async(op: Generator[Req, Rep, Out], execute: Callable[[Req], Awaitable[Rep]]) -> Out:
    """Runs ``op``, answering each request with ``await execute(request)``."""
    try:
        request = next(op)
        while True:
            request = op.send(await execute(request))
    except StopIteration as done:
        result: Out = done.value
        return result
