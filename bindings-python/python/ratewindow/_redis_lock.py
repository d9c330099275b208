"""A Redis lock's commands planned once (a Redis store with ``command``), as ``ts/redis-lock.ts`` does
for Node.

The core plans a key's acquire (``SET key owner NX PX ttl``) and release (the lock script's keys and
arguments) in one crossing (``lock_commands``), with the owner's places; the store keeps the plans of
its last keys and TTLs, so a new lock on one of them is those lists with its owner put in and no
crossing. Each acquire and release sends the plan's lists with its owner put in (copies: a client never
gets the plan's own) and hands the reply to the core's ``lock_answer``, which reads ``True`` / ``None`` / ``b'OK'``
/ 1 / 0. Anything else — the client's failure, a ``NOSCRIPT``, a reply of another shape — starts the
operation as an ordinary call (``lock_call``) fed what came, so the call machine decides it (the
source after ``NOSCRIPT``, the typed error otherwise) exactly as without a plan.

Against a call an operation (``lock_call``, ``next``, the command, ``feed_reply``, ``next``, and the
generator that drives them) this is the client's command and one small crossing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from . import _ratewindow
from ._lock import AsyncLock, CallOps, Lock, new_token
from ._sansio import Failed, drive

__all__ = ["LockPlans", "PlannedLock", "AsyncPlannedLock"]

_answer = _ratewindow.lock_answer

# (acquire, acquire_owner, release_keys, release_args, release_owner, by_sha1, script): see lock_commands.
_Plan = tuple[list[str], int, list[str], list[str], int, bool, str]


class LockPlans:
    """A Redis store's lock plans by TTL and key (a few thousand at most: dropped when full), and what
    its planned locks send with."""

    __slots__ = ("_machine", "_plans", "command", "script", "execute", "ops")

    def __init__(
        self,
        machine: _ratewindow.Machine,
        command: Callable[[list[str]], Any],
        by_sha1: Callable[[str, list[str], list[str]], Any],
        run: Callable[[str, list[str], list[str]], Any],
        execute: Callable[[Any], Any],
        run_call: Callable[[Any], Any],
    ) -> None:
        self._machine = machine
        self._plans: dict[float, dict[str, _Plan]] = {}
        self.command = command
        """Sends the acquire's plain command."""
        # Which runner the release's script goes by is the plan's (`by_sha1`): fixed per store.
        self.script = (by_sha1, run)
        """The release's script runners: by SHA1, in full."""
        self.execute = execute
        """The store's executor of a call's commands (a reply, or ``Failed``)."""
        self.ops = CallOps(machine, run_call)
        """The other lock operations (force release, owner): calls, driven by the store."""

    def plan(self, key: str, owner: str, ttl: float, given: bool) -> _Plan | None:
        """The plan of ``key`` and ``ttl``, its owner and TTL checked as ``check_lock`` checks them
        (``InvalidArgumentError`` naming the field), or ``None``: every operation is a call."""
        # Only an int or float TTL is kept: a bool or another number type is always checked.
        keep = type(ttl) is int or type(ttl) is float
        by_key = self._plans.get(ttl) if keep else None
        plan = by_key.get(key) if by_key is not None else None
        if plan is None:
            plan = _ratewindow.lock_commands(self._machine, key, owner, ttl)
            if plan is None or not keep:
                return plan
            if by_key is None:
                if len(self._plans) >= 16:
                    self._plans.clear()
                by_key = self._plans[ttl] = {}
            elif len(by_key) >= 4096:
                by_key.clear()
            by_key[key] = plan
        elif given:
            _ratewindow.check_lock(ttl, owner)
        # A generated owner is a token of the shape the plan was checked with: valid.
        return plan


def _after_first(plans: LockPlans, op: str, lock: Lock | AsyncLock) -> Any:
    """The operation as a call whose first command the plan already sent: the generator driving it,
    to be sent that command's reply (or ``Failed``) next."""
    ttl = lock.ttl if op == "acquire" else None
    steps = drive(_ratewindow.lock_call(plans._machine, op, lock.key, lock.owner, ttl))
    next(steps)
    return steps


class PlannedLock(Lock):
    """A :class:`~ratewindow.Lock` on a Redis store with plain commands: each acquire and release sends
    the commands the core planned (see the module)."""

    __slots__ = ("_plans", "_plan")

    def __init__(self, plans: LockPlans, plan: _Plan, key: str, ttl: float, owner: str, wait: float, retry_ms: float) -> None:
        self._setup(plans.ops, key, ttl, owner, wait, retry_ms)
        self._plans = plans
        self._plan = plan

    def acquire(self) -> bool:
        """Tries once: whether this lock now holds the key."""
        plan = self._plan
        args = plan[0].copy()  # the plan's lists are never handed to a client
        args[plan[1]] = self.owner
        try:
            reply = self._plans.command(args)
        except Exception as error:  # noqa: BLE001 - the call decides what it means
            return self._finish("acquire", Failed(error))
        a = _answer(True, reply)
        return a == 1 if a >= 0 else self._finish("acquire", reply)

    def release(self) -> bool:
        """Frees the lock if this owner holds it (compare and delete, one step): whether it did."""
        plan = self._plan
        args = plan[3].copy()
        args[plan[4]] = self.owner
        try:
            reply = self._plans.script[0 if plan[5] else 1](plan[6], plan[2].copy(), args)
        except Exception as error:  # noqa: BLE001 - the call decides what it means
            return self._finish("release", Failed(error))
        a = _answer(False, reply)
        return a == 1 if a >= 0 else self._finish("release", reply)

    def _finish(self, op: str, first: Any) -> bool:
        execute = self._plans.execute
        steps = _after_first(self._plans, op, self)
        try:
            request = steps.send(first)
            while True:
                request = steps.send(execute(request))
        except StopIteration as done:
            return bool(done.value)


class AsyncPlannedLock(AsyncLock):
    """:class:`PlannedLock` for asyncio stores."""

    __slots__ = ("_plans", "_plan")

    def __init__(self, plans: LockPlans, plan: _Plan, key: str, ttl: float, owner: str, wait: float, retry_ms: float) -> None:
        self._setup(plans.ops, key, ttl, owner, wait, retry_ms)
        self._plans = plans
        self._plan = plan

    async def acquire(self) -> bool:
        """Tries once: whether this lock now holds the key."""
        plan = self._plan
        args = plan[0].copy()  # the plan's lists are never handed to a client
        args[plan[1]] = self.owner
        try:
            reply = await self._plans.command(args)
        except Exception as error:  # noqa: BLE001 - the call decides what it means
            return await self._finish("acquire", Failed(error))
        a = _answer(True, reply)
        return a == 1 if a >= 0 else await self._finish("acquire", reply)

    async def release(self) -> bool:
        """Frees the lock if this owner holds it: whether it did."""
        plan = self._plan
        args = plan[3].copy()
        args[plan[4]] = self.owner
        try:
            reply = await self._plans.script[0 if plan[5] else 1](plan[6], plan[2].copy(), args)
        except Exception as error:  # noqa: BLE001 - the call decides what it means
            return await self._finish("release", Failed(error))
        a = _answer(False, reply)
        return a == 1 if a >= 0 else await self._finish("release", reply)

    async def _finish(self, op: str, first: Any) -> bool:
        execute: Callable[[Any], Awaitable[Any]] = self._plans.execute
        steps = _after_first(self._plans, op, self)
        try:
            request = steps.send(first)
            while True:
                request = steps.send(await execute(request))
        except StopIteration as done:
            return bool(done.value)


def planned_lock(
    plans: LockPlans, key: str, ttl: float, owner: str | None, wait: float, retry_ms: float, asynchronous: bool
) -> Any:
    """``store.lock(...)`` on a Redis store with plain commands: a planned lock, or ``None`` when the core
    plans none (every operation is then a call)."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    token = owner if owner is not None else new_token()
    plan = plans.plan(key, token, ttl, owner is not None)
    if plan is None:
        return None
    cls = AsyncPlannedLock if asynchronous else PlannedLock
    return cls(plans, plan, key, ttl, token, wait, retry_ms)
