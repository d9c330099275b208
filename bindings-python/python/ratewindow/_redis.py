"""Redis and Redis Cluster stores over the user's own client (redis-py sync or asyncio, or any other).

ratewindow does no I/O of its own here: each call is a machine of the Rust core that asks for scripts
(by SHA1, in full after ``NOSCRIPT``, key by key on a cluster when the keys span slots) and decides
from the replies; the user's client runs them. :class:`RedisStore` drives the machines with a blocking
client, :class:`AsyncRedisStore` with an asyncio one (see :mod:`ratewindow._sansio`).

.. code-block:: python

    import redis
    from ratewindow import RedisStore

    r = redis.Redis()                                  # or redis.cluster.RedisCluster(...)
    store = RedisStore.from_client(r)
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypeAlias, TypeVar

from . import _ratewindow
from ._errors import StoreError
from ._lock import DEFAULT_RETRY_MS, AsyncLock, Lock
from ._redis_lock import LockPlans, planned_lock
from ._sansio import Failed, fail
from ._store import AsyncCallStore, CallStore

__all__ = ["RedisStore", "AsyncRedisStore", "GiveBackError", "GiveBackWarning", "DEFAULT_PREFIX"]

T = TypeVar("T")

DEFAULT_PREFIX = "ratewindow:"
"""Where keys live unless ``prefix`` says otherwise: ``ratewindow:log:<key>``, ``ratewindow:win:<key>``."""

Run: TypeAlias = Callable[[str, list[str], list[str]], Any]
"""``run(script, keys, args)``: runs a script (its source with ``EVAL``, or its SHA1 with ``EVALSHA``)."""

AsyncRun: TypeAlias = Callable[[str, list[str], list[str]], Awaitable[Any]]
"""``run(script, keys, args)``, awaitable."""

RunCommand: TypeAlias = Callable[[list[str]], Any]
"""``command(args)``: runs one plain command, ``args`` as is (its name, its one key, its arguments), e.g.
``lambda args: r.execute_command(*args)``."""

AsyncRunCommand: TypeAlias = Callable[[list[str]], Awaitable[Any]]
"""``command(args)``, awaitable."""


class GiveBackWarning(UserWarning):
    """The warning a failed give-back is reported as, unless the store has an ``on_give_back_error``."""


class GiveBackError(StoreError):
    """A Redis Cluster call counted its keys one by one, was then refused (or failed), and giving back
    what it had counted failed: those keys keep one use too many until the window passes.

    It is *reported*, not raised: the refusal stands as the call's verdict (or the original error is
    raised). The store hands it to ``on_give_back_error`` (default: a :class:`GiveBackWarning`).
    ``keys`` are the Redis keys not given back, ``call_id`` the call's member in them; ``__cause__`` is
    the client's error.
    """

    code = "give_back_failed"

    def __init__(self, message: str, keys: list[str], call_id: str) -> None:
        super().__init__(message)
        self.keys = keys
        self.call_id = call_id


def _warn(error: GiveBackError) -> None:
    warnings.warn(str(error), GiveBackWarning, stacklevel=2)


def _machine(
    store: RedisStore | AsyncRedisStore,
    evalsha: object,
    command: object,
    prefix: str,
    hash_tag: str | None,
    report: Callable[[GiveBackError], None] | None,
) -> _ratewindow.Machine:
    return _ratewindow.Machine.redis_store(
        prefix,
        hash_tag,
        evalsha is not None,
        release=store._release,
        report=report or _warn,
        commands=command is not None,
    )


def _no_command(args: list[str]) -> Any:
    raise StoreError(f"the store was made without a command runner, and was asked to run {args[0]}")


async def _no_command_async(args: list[str]) -> Any:
    return _no_command(args)


class _Keys:
    """What both Redis stores share beside the calls: how they are made and where their keys live."""

    __slots__ = ()
    _machine: _ratewindow.Machine

    @classmethod
    def using(
        cls,
        run: Callable[[str, list[str], list[str]], Any],
        *,
        evalsha: Callable[[str, list[str], list[str]], Any] | None = None,
        command: Callable[[list[str]], Any] | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> Self:
        """A store running its scripts with ``run(source, keys, args)`` (``EVAL``; awaitable for
        :class:`AsyncRedisStore`).

        With ``command(args)``, which runs one plain command (``args``: its name, its one key, its
        arguments), a lock's ``acquire`` is a plain ``SET key owner NX PX ttl`` (no script on the
        server), ``force_release`` a ``DEL`` and ``current_owner`` a ``GET``; ``release`` stays the
        compare-and-delete script. Without it every lock operation runs the lock script (the same
        behaviour). :meth:`from_client` gives it.

        With ``evalsha(sha1, keys, args)`` a script goes by SHA1 and in full only when the server
        answers ``NOSCRIPT`` (after a restart, failover or ``SCRIPT FLUSH``); any other error is raised
        as :class:`~ratewindow.StoreError` with the client's error as ``__cause__``. Keys start with
        ``prefix``. ``hash_tag`` (a separator such as ``":"``) makes the part of each key before it the
        key's Cluster hash tag, so ``click:alice`` and ``click`` share a slot and a batch of them is one
        step on a cluster; without it, a batch whose keys span slots is counted key by key, giving back
        what was counted on a refusal. ``on_give_back_error`` receives each :class:`GiveBackError`
        (default: a :class:`GiveBackWarning`).

        redis-py, :class:`redis.Redis` or :class:`redis.cluster.RedisCluster` (their asyncio twins for
        :class:`AsyncRedisStore`):

        .. code-block:: python

            store = RedisStore.using(
                lambda script, keys, args: r.eval(script, len(keys), *keys, *args),
                evalsha=lambda sha, keys, args: r.evalsha(sha, len(keys), *keys, *args),
                command=lambda args: r.execute_command(*args),
            )
        """
        return cls(  # type: ignore[call-arg]
            run,
            evalsha=evalsha,
            command=command,
            prefix=prefix,
            hash_tag=hash_tag,
            on_give_back_error=on_give_back_error,
        )

    @classmethod
    def from_client(
        cls,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> Self:
        """:meth:`using` with the one-liners for a client with redis-py's ``eval``/``evalsha``/
        ``execute_command`` (``redis.Redis``, ``redis.cluster.RedisCluster`` and their asyncio twins;
        a cluster routes a plain command by its key)."""
        return cls.using(
            lambda script, keys, args: client.eval(script, len(keys), *keys, *args),
            evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
            command=lambda args: client.execute_command(*args),
            prefix=prefix,
            hash_tag=hash_tag,
            on_give_back_error=on_give_back_error,
        )

    def redis_key(self, key: str) -> str:
        """The Redis key holding ``key``'s sliding log (``<prefix>log:<key>``, tagged with ``hash_tag``)."""
        return self._machine.log_key(key)

    def redis_window_key(self, key: str) -> str:
        """The Redis key holding ``key``'s fixed window."""
        return self._machine.window_key(key)


class RedisStore(_Keys, CallStore):
    """Both algorithms on Redis (5+, Valkey, KeyDB) or Redis Cluster, through your blocking client.

    Every call is one Lua script and one round trip, however many entries it has: trimmed, checked and
    recorded together on the server's clock (``TIME``), so hosts with skewed clocks agree. A refused
    batch records nothing. Keys expire with their window. Build it with :meth:`using`.

    Thread safety: the store holds no mutable state; it is as thread-safe as the client you give it
    (redis-py's ``Redis`` and ``RedisCluster`` are, with their connection pools).
    """

    __slots__ = ("_drive", "_lock_plans")

    def __init__(
        self,
        run: Run,
        *,
        evalsha: Run | None = None,
        command: RunCommand | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> None:
        self._machine = _machine(self, evalsha, command, prefix, hash_tag, on_give_back_error)
        by_sha1 = evalsha if evalsha is not None else run
        script = _ratewindow.Script
        plain = _ratewindow.RedisCommand
        # Asked for only when `command` was given.
        run_command: RunCommand = command if command is not None else _no_command

        def execute(step: _ratewindow.Script | _ratewindow.RedisCommand) -> Any:
            try:
                if type(step) is plain:
                    return run_command(step.args)
                if step.by_sha1:  # type: ignore[union-attr]
                    return by_sha1(step.sha1, step.keys, step.args)  # type: ignore[union-attr]
                return run(step.source, step.keys, step.args)  # type: ignore[union-attr]
            except Exception as error:  # noqa: BLE001 - the call decides what it means
                return Failed(error)

        def drive(call: _ratewindow.Call[T]) -> T:
            # _sansio.drive run by run_sync, written as one loop: a Redis call only ever asks for
            # scripts (and a lock for plain commands), and one consume is then one frame instead of a
            # generator and its driver.
            step = call.next()
            while True:
                kind = type(step)
                try:
                    if kind is script:
                        if step.by_sha1:  # type: ignore[union-attr]
                            answer = by_sha1(step.sha1, step.keys, step.args)  # type: ignore[union-attr]
                        else:
                            answer = run(step.source, step.keys, step.args)  # type: ignore[union-attr]
                    elif kind is plain:
                        answer = run_command(step.args)  # type: ignore[union-attr]
                    else:
                        return step  # type: ignore[return-value]
                except Exception as error:  # noqa: BLE001 - the call decides what it means
                    fail(call, error)
                else:
                    call.feed_reply(answer)
                step = call.next()

        self._execute = execute  # type: ignore[assignment]
        self._drive = drive
        # With `command`, a lock's acquire and release are planned once and sent as planned.
        self._lock_plans = (
            LockPlans(self._machine, command, by_sha1, run, execute, self._run) if command is not None else None
        )

    def _run(self, call: _ratewindow.Call[T]) -> T:
        return self._drive(call)

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = DEFAULT_RETRY_MS
    ) -> Lock:
        """See :meth:`CallStore.lock`. With ``command`` the lock's acquire and release are the commands
        the core planned for its key and TTL, sent as they are (see :mod:`ratewindow._redis_lock`)."""
        plans = self._lock_plans
        if plans is not None:
            lock: Lock | None = planned_lock(plans, key, ttl, owner, wait, retry_ms, False)
            if lock is not None:
                return lock
        return super().lock(key, ttl, owner, wait=wait, retry_ms=retry_ms)


class AsyncRedisStore(_Keys, AsyncCallStore):
    """:class:`RedisStore` for asyncio code, through an asyncio client (``redis.asyncio``): the same
    calls, driven by ``await``. Build it with :meth:`using` (``run`` and ``evalsha`` awaitable)."""

    __slots__ = ("_lock_plans",)

    def __init__(
        self,
        run: AsyncRun,
        *,
        evalsha: AsyncRun | None = None,
        command: AsyncRunCommand | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> None:
        self._machine = _machine(self, evalsha, command, prefix, hash_tag, on_give_back_error)
        by_sha1 = evalsha if evalsha is not None else run
        plain = _ratewindow.RedisCommand
        run_command: AsyncRunCommand = command if command is not None else _no_command_async

        async def execute(step: _ratewindow.Script | _ratewindow.RedisCommand) -> Any:
            try:
                if type(step) is plain:
                    return await run_command(step.args)
                if step.by_sha1:  # type: ignore[union-attr]
                    return await by_sha1(step.sha1, step.keys, step.args)  # type: ignore[union-attr]
                return await run(step.source, step.keys, step.args)  # type: ignore[union-attr]
            except Exception as error:  # noqa: BLE001 - the call decides what it means
                return Failed(error)

        self._execute = execute  # type: ignore[assignment]
        # With `command`, a lock's acquire and release are planned once and sent as planned.
        self._lock_plans = (
            LockPlans(self._machine, command, by_sha1, run, execute, self._run) if command is not None else None
        )

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = DEFAULT_RETRY_MS
    ) -> AsyncLock:
        """See :meth:`AsyncCallStore.lock`. With ``command`` the lock's acquire and release are the
        commands the core planned for its key and TTL, sent as they are (see
        :mod:`ratewindow._redis_lock`)."""
        plans = self._lock_plans
        if plans is not None:
            lock: AsyncLock | None = planned_lock(plans, key, ttl, owner, wait, retry_ms, True)
            if lock is not None:
                return lock
        return super().lock(key, ttl, owner, wait=wait, retry_ms=retry_ms)
