"""One store logic, two drivers: the pattern every store that does I/O follows.

A store operation is written once, as a generator that *yields* each request it needs answered and
*receives* the reply, then *returns* its result. It never does I/O and never awaits.
:func:`run_sync` drives it with a blocking function (a sync client), :func:`run_async` with an
awaitable one (an asyncio client).

The networked stores (Redis, PostgreSQL, SQLite) have one such operation, :func:`drive`: it runs a
call machine of the Rust core (``Machine.consume(...)`` and the rest start one) to its outcome, yielding
each command the machine asks for (a :class:`Script`, a :class:`RedisCommand` or a :class:`Sql`) and feeding back what the
client answered, or how it failed. Everything that decides — the ``NOSCRIPT`` resend, the Redis Cluster
fallback, SQLite's rollback, which error is which — is the machine's; ``RedisStore`` and
``AsyncRedisStore`` share every line but the driver. The default ``consume_many`` of
:class:`~ratewindow.CooldownStore` and :class:`~ratewindow.AsyncCooldownStore` is the other user.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeAlias, TypeVar

from ._ratewindow import Call, RedisCommand, Script, Sql

__all__ = ["Op", "Failed", "Command", "fail", "drive", "run_sync", "run_async", "run_call_async"]

Req = TypeVar("Req")
Rep = TypeVar("Rep")
Out = TypeVar("Out")

Op: TypeAlias = Generator[Req, Rep, Out]
"""An operation: yields requests, is sent their replies, returns its result."""

Command: TypeAlias = Script | RedisCommand | Sql
"""What a call machine asks the client to run."""


class Failed:
    """What an executor answers when the client raised: the call decides what the failure means."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def fail(call: Call[Any], error: BaseException) -> None:
    """Feeds ``call`` the client's failure, as the message the machine reads and the cause it keeps."""
    # redis-py's NoScriptError says only "No matching script": the class name makes it NOSCRIPT.
    call.fail(f"{type(error).__name__}: {error}", error)


def drive(call: Call[Out]) -> Op[Command, Any, Out]:
    """Runs ``call``: yields each command and feeds back the answer (a reply, rows or :class:`Failed`);
    returns the outcome, or raises the call's typed error."""
    step = call.next()
    while isinstance(step, (Script, RedisCommand, Sql)):
        answer = yield step
        if type(answer) is Failed:
            fail(call, answer.error)
        elif type(step) is not Sql:
            call.feed_reply(answer)
        else:
            call.feed_rows(answer)
        step = call.next()
    return step


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


_BACKGROUND: set[asyncio.Task[None]] = set()


async def run_call_async(call: Call[Out], execute: Callable[[Command], Awaitable[Any]]) -> Out:
    """:func:`run_async` of :func:`drive`: a call whose caller is cancelled mid-command hears that its
    command failed and ends in the background (a Redis Cluster call gives back what it counted)."""
    op = drive(call)
    answer: Any = None
    try:
        while True:
            command = op.send(answer)
            try:
                answer = await execute(command)
            except asyncio.CancelledError as cancelled:
                task = asyncio.get_running_loop().create_task(_finish(op, Failed(cancelled), execute))
                _BACKGROUND.add(task)
                task.add_done_callback(_BACKGROUND.discard)
                raise
    except StopIteration as done:
        result: Out = done.value
        return result


async def _finish(op: Op[Command, Any, Any], answer: Any, execute: Callable[[Command], Awaitable[Any]]) -> None:
    try:
        while True:
            answer = await execute(op.send(answer))
    except StopIteration:
        pass
    except Exception:  # noqa: BLE001 - the call's own error: its caller is gone
        pass
