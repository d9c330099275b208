"""Redis and Redis Cluster stores over the user's own client (redis-py sync or asyncio, or any other).

ratewindow does no I/O of its own here: the Rust core plans each call (a Lua script, its SHA1, keys and
arguments) and decodes the reply; the user's client runs it. Every operation below is written once, as
a sans-I/O generator (see :mod:`ratewindow._sansio`): :class:`RedisStore` drives it with a blocking
client, :class:`AsyncRedisStore` with an asyncio one.

.. code-block:: python

    import redis
    from ratewindow import RedisStore

    r = redis.Redis()                                  # or redis.cluster.RedisCluster(...)
    store = RedisStore.using(
        lambda script, keys, args: r.eval(script, len(keys), *keys, *args),
        evalsha=lambda sha, keys, args: r.evalsha(sha, len(keys), *keys, *args),
    )
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeAlias

from . import _ratewindow
from ._errors import StoreError
from ._limits import Entry, Limit
from ._sansio import Op, run_async, run_sync
from ._store import AsyncCooldownStore, CooldownStore, Verdict

__all__ = ["RedisStore", "AsyncRedisStore", "GiveBackError", "DEFAULT_PREFIX"]

DEFAULT_PREFIX = "ratewindow:"
"""Where keys live unless ``prefix`` says otherwise: ``ratewindow:log:<key>``, ``ratewindow:win:<key>``."""

Plan: TypeAlias = tuple[str, str, list[str], list[str]]
"""``(sha1, source, keys, args)``: a script to run."""

Run: TypeAlias = Callable[[str, list[str], list[str]], Any]
"""``run(script_source, keys, args)``: runs a script with ``EVAL``; returns the client's reply."""

AsyncRun: TypeAlias = Callable[[str, list[str], list[str]], Awaitable[Any]]
"""``run(script_source_or_sha1, keys, args)``, awaitable."""

_log = logging.getLogger("ratewindow")
_decode_single = _ratewindow.redis_decode_single
_decode_batch = _ratewindow.redis_decode_batch
_decode_release = _ratewindow.redis_decode_release
_decode_window = _ratewindow.redis_decode_window
_ALLOWED = Verdict(True)


class GiveBackError(StoreError):
    """A Redis Cluster call counted its keys one by one, was then refused (or failed), and giving back
    what it had counted failed: those keys keep one use too many until the window passes.

    It is *reported*, not raised: the refusal stands as the call's verdict (or the original error is
    raised). The store hands it to ``on_give_back_error`` (default: logged as a warning on the
    ``ratewindow`` logger). ``keys`` are the Redis keys not given back, ``call_id`` the call's member in
    them; ``__cause__`` is the client's error.
    """

    code = "give_back_failed"

    def __init__(self, message: str, keys: list[str], call_id: str) -> None:
        super().__init__(message)
        self.keys = keys
        self.call_id = call_id


def _log_give_back_error(error: GiveBackError) -> None:
    _log.warning("%s", error, exc_info=error)


class _Failed:
    """What the driver sends into an operation when the client raised: the operation decides."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _is_noscript(error: BaseException) -> bool:
    """redis-py's ``NoScriptError``, or any client's ``NOSCRIPT`` reply."""
    return type(error).__name__ == "NoScriptError" or str(error).startswith("NOSCRIPT")


def _is_crossslot(error: BaseException) -> bool:
    """The server's ``CROSSSLOT`` (redis-py's ``ClusterCrossSlotError``) or redis-py's cluster client
    refusing before sending ("all keys must map to the same key slot")."""
    if type(error).__name__ == "ClusterCrossSlotError":
        return True
    message = str(error)
    return "CROSSSLOT" in message or "same key slot" in message or "hash to the same slot" in message


def _store_error(failed: _Failed) -> StoreError:
    error = StoreError(f"the Redis client failed: {type(failed.error).__name__}: {failed.error}")
    error.__cause__ = failed.error
    return error


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    return value


Released: TypeAlias = list[list[str]]
"""What an allowed call gives back: its Redis keys, in groups that each share a Cluster slot."""

ConsumeOp: TypeAlias = Op[Plan, Any, tuple[Verdict, Released | None, str]]


class _Engine:
    """Every operation of both stores, as generators yielding plans and receiving replies."""

    __slots__ = ("planner", "report")

    def __init__(
        self, prefix: str, hash_tag: str | None, on_give_back_error: Callable[[GiveBackError], None] | None
    ) -> None:
        self.planner = _ratewindow.RedisPlanner(prefix, hash_tag)
        self.report = on_give_back_error if on_give_back_error is not None else _log_give_back_error

    # Sliding window.
    def consume(self, key: str, limit: Limit) -> Op[Plan, Any, Verdict]:
        reply = yield self.planner.consume(key, limit, secrets.token_hex(16))
        if type(reply) is _Failed:
            raise _store_error(reply)
        return _decode_single(reply)

    def peek(self, key: str, limit: Limit) -> Op[Plan, Any, Verdict]:
        reply = yield self.planner.peek(key, limit)
        if type(reply) is _Failed:
            raise _store_error(reply)
        return _decode_single(reply)

    def consume_many(self, entries: Sequence[Entry], call_id: str, counted: Released | None = None) -> ConsumeOp:
        """``call_id`` is the call's fresh random id. ``counted`` (if given) holds, while the call runs,
        the keys a cluster call may have counted so far: what a cancelled call must give back."""
        plan = self.planner.consume_many(entries, call_id)
        reply = yield plan
        if type(reply) is _Failed:
            if not _is_crossslot(reply.error):
                raise _store_error(reply)
            return (yield from self._consume_apart(entries, call_id, [] if counted is None else counted))
        verdict = _decode_batch(reply, len(entries))
        return verdict, ([plan[2]] if verdict.allowed else None), call_id

    def _consume_apart(self, entries: Sequence[Entry], call_id: str, counted: Released) -> ConsumeOp:
        """The call's keys span Cluster slots: count each key with a script of its own, in order; on a
        refusal or an error give back what was counted. ``counted`` lists every key whose script was
        sent (it may have run, even if its answer never came)."""
        groups = _by_key(entries)
        for n, indices in enumerate(groups):
            plan = self.planner.consume_many([entries[i] for i in indices], call_id)
            counted.append(plan[2])
            reply = yield plan
            try:
                if type(reply) is _Failed:
                    raise _store_error(reply)
                verdict = _decode_batch(reply, len(indices))
            except StoreError as error:
                # The script may have run (a timeout): its give-back removes nothing if it did not.
                yield from self._give_back(counted, call_id, error)
                raise
            if not verdict.allowed:
                counted.pop()  # a refusal records nothing
                assert verdict.blocked is not None
                longest = (verdict.retry_after_ms, verdict.retry_timestamp, indices[verdict.blocked])
                # Name the longest wait of the whole call, as one script would: peek the keys not counted.
                for rest in groups[n + 1 :]:
                    peeked = yield self.planner.peek_many([entries[i] for i in rest])
                    if type(peeked) is _Failed:
                        break  # the refusal stands; its wait is a lower bound
                    other = _decode_batch(peeked, len(rest))
                    if not other.allowed and other.retry_after_ms > longest[0]:
                        assert other.blocked is not None
                        longest = (other.retry_after_ms, other.retry_timestamp, rest[other.blocked])
                yield from self._give_back(counted, call_id, None)
                return Verdict(False, longest[0], longest[1], longest[2]), None, call_id
        return _ALLOWED, list(counted), call_id

    def give_back_cancelled(self, counted: Released, call_id: str) -> Op[Plan, Any, None]:
        """What a cancelled cluster call counted, given back (failures reported)."""
        yield from self._give_back(counted, call_id, None)

    def _give_back(self, counted: Released, call_id: str, raising: StoreError | None) -> Op[Plan, Any, None]:
        """Releases what a refused or failed cluster call counted; a failure is reported, never raised."""
        for keys in list(counted):
            reply = yield self.planner.release(keys, call_id)
            try:
                if type(reply) is _Failed:
                    raise _store_error(reply)
                _decode_release(reply)
            except StoreError as error:
                failed = GiveBackError(
                    f"could not give back call {call_id} on {keys}: {error}", keys, call_id
                )
                failed.__cause__ = error.__cause__ or error
                if raising is not None:
                    raising.add_note(f"ratewindow: {failed}")
                self.report(failed)

    def release(self, released: Released, call_id: str) -> Op[Plan, Any, int]:
        """Gives an allowed call back on every key; raises the first failure after trying them all."""
        removed, first_error = 0, None
        pending = list(released)
        while pending:
            keys = pending.pop(0)
            reply = yield self.planner.release(keys, call_id)
            if type(reply) is _Failed:
                if len(keys) > 1 and _is_crossslot(reply.error):
                    pending[:0] = [[key] for key in keys]
                    continue
                first_error = first_error or _store_error(reply)
                continue
            removed += _decode_release(reply)
        if first_error is not None:
            raise first_error
        return removed

    def peek_many(self, entries: Sequence[Entry]) -> Op[Plan, Any, Verdict]:
        reply = yield self.planner.peek_many(entries)
        if type(reply) is not _Failed:
            return _decode_batch(reply, len(entries))
        if not _is_crossslot(reply.error):
            raise _store_error(reply)
        longest: Verdict = _ALLOWED
        for indices in _by_key(entries):
            reply = yield self.planner.peek_many([entries[i] for i in indices])
            if type(reply) is _Failed:
                raise _store_error(reply)
            verdict = _decode_batch(reply, len(indices))
            if not verdict.allowed and verdict.retry_after_ms > longest.retry_after_ms:
                assert verdict.blocked is not None
                longest = Verdict(False, verdict.retry_after_ms, verdict.retry_timestamp, indices[verdict.blocked])
        return longest

    # Fixed window.
    def window(self, plan: Plan) -> Op[Plan, Any, tuple[int, int] | None]:
        reply = yield plan
        if type(reply) is _Failed:
            raise _store_error(reply)
        return _decode_window(reply)

    def hit(self, key: str, decay_ms: int | float, amount: int) -> Op[Plan, Any, int]:
        window = yield from self.window(self.planner.hit(key, decay_ms, amount))
        return window[0] if window is not None else 0

    def attempts(self, key: str) -> Op[Plan, Any, int]:
        window = yield from self.window(self.planner.get_window(key))
        return window[0] if window is not None else 0

    def too_many_attempts(self, key: str, max: int) -> Op[Plan, Any, bool]:
        max = _whole("max", max)
        window = yield from self.window(self.planner.get_window(key))
        return window is not None and window[0] >= max

    def remaining(self, key: str, max: int) -> Op[Plan, Any, int]:
        max = _whole("max", max)
        count = yield from self.attempts(key)
        return 0 if count >= max else max - count

    def available_in_ms(self, key: str) -> Op[Plan, Any, int]:
        window = yield from self.window(self.planner.get_window(key))
        return window[1] if window is not None else 0

    def available_in(self, key: str) -> Op[Plan, Any, int]:
        ms = yield from self.available_in_ms(key)
        return -(-ms // 1000)

    def reset_attempts(self, key: str) -> Op[Plan, Any, None]:
        yield from self.window(self.planner.reset_attempts(key))

    def clear(self, key: str) -> Op[Plan, Any, None]:
        yield from self.window(self.planner.clear(key))



def _by_key(entries: Sequence[Entry]) -> list[list[int]]:
    """The entries' indices grouped by key, in order of each key's first entry."""
    groups: dict[str, list[int]] = {}
    for index, entry in enumerate(entries):
        groups.setdefault(entry.key, []).append(index)
    return list(groups.values())


def _entries(entries: Iterable[Entry]) -> Sequence[Entry]:
    return entries if isinstance(entries, (list, tuple)) else list(entries)


def _sync_execute(run: Run, evalsha: Run | None) -> Callable[[Plan], Any]:
    """Runs a plan with the user's blocking client: by SHA1, the source only on ``NOSCRIPT``."""
    if evalsha is None:

        def execute(plan: Plan) -> Any:
            try:
                return run(plan[1], plan[2], plan[3])
            except Exception as error:  # noqa: BLE001 - the operation decides; none is swallowed
                return _Failed(error)

        return execute

    def execute_sha(plan: Plan) -> Any:
        try:
            try:
                return evalsha(plan[0], plan[2], plan[3])
            except Exception as error:
                if not _is_noscript(error):
                    raise
            return run(plan[1], plan[2], plan[3])
        except Exception as error:  # noqa: BLE001 - the operation decides; none is swallowed
            return _Failed(error)

    return execute_sha


def _async_execute(run: AsyncRun, evalsha: AsyncRun | None) -> Callable[[Plan], Awaitable[Any]]:
    """:func:`_sync_execute` for an asyncio client."""
    if evalsha is None:

        async def execute(plan: Plan) -> Any:
            try:
                return await run(plan[1], plan[2], plan[3])
            except Exception as error:  # noqa: BLE001
                return _Failed(error)

        return execute

    async def execute_sha(plan: Plan) -> Any:
        try:
            try:
                return await evalsha(plan[0], plan[2], plan[3])
            except Exception as error:
                if not _is_noscript(error):
                    raise
            return await run(plan[1], plan[2], plan[3])
        except Exception as error:  # noqa: BLE001
            return _Failed(error)

    return execute_sha


class RedisStore(CooldownStore):
    """Both algorithms on Redis (5+, Valkey, KeyDB) or Redis Cluster, through your blocking client.

    Every call is one Lua script and one round trip, however many entries it has: trimmed, checked and
    recorded together on the server's clock (``TIME``), so hosts with skewed clocks agree. A refused
    batch records nothing. Keys expire with their window. Build it with :meth:`using`.

    Thread safety: the store holds no mutable state; it is as thread-safe as the client you give it
    (redis-py's ``Redis`` and ``RedisCluster`` are, with their connection pools).
    """

    __slots__ = ("_engine", "_execute")

    def __init__(
        self,
        run: Run,
        *,
        evalsha: Run | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> None:
        self._engine = _Engine(prefix, hash_tag, on_give_back_error)
        self._execute = _sync_execute(run, evalsha)

    @classmethod
    def using(
        cls,
        run: Run,
        *,
        evalsha: Run | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> RedisStore:
        """A store running its scripts with ``run(source, keys, args)`` (``EVAL``).

        With ``evalsha(sha1, keys, args)`` a script goes by SHA1 and in full only when the server
        answers ``NOSCRIPT`` (after a restart, failover or ``SCRIPT FLUSH``); any other error is raised
        as :class:`~ratewindow.StoreError` with the client's error as ``__cause__``, and nothing is
        resent. Keys start with ``prefix``. ``hash_tag`` (a separator such as ``":"``) makes the part of
        each key before it the key's Cluster hash tag, so ``click:alice`` and ``click`` share a slot and
        a batch of them is one step on a cluster. ``on_give_back_error`` receives each
        :class:`GiveBackError` (default: logged as a warning).

        redis-py, :class:`redis.Redis` or :class:`redis.cluster.RedisCluster`:

        .. code-block:: python

            store = RedisStore.using(
                lambda script, keys, args: r.eval(script, len(keys), *keys, *args),
                evalsha=lambda sha, keys, args: r.evalsha(sha, len(keys), *keys, *args),
            )
        """
        return cls(run, evalsha=evalsha, prefix=prefix, hash_tag=hash_tag, on_give_back_error=on_give_back_error)

    @classmethod
    def from_client(
        cls,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> RedisStore:
        """:meth:`using` with the one-liners for a client with redis-py's ``eval``/``evalsha``
        (``redis.Redis``, ``redis.cluster.RedisCluster``)."""
        return cls(
            lambda script, keys, args: client.eval(script, len(keys), *keys, *args),
            evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
            prefix=prefix,
            hash_tag=hash_tag,
            on_give_back_error=on_give_back_error,
        )

    @property
    def prefix(self) -> str:
        """The key prefix."""
        return self._engine.planner.prefix

    def redis_key(self, key: str) -> str:
        """The Redis key holding ``key``'s sliding log (``<prefix>log:<key>``, tagged with ``hash_tag``)."""
        return self._engine.planner.log_key(key)

    def redis_window_key(self, key: str) -> str:
        """The Redis key holding ``key``'s fixed window."""
        return self._engine.planner.window_key(key)

    # Sliding window (cooldowns).
    def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit`` in one script: allowed and recorded, or refused."""
        return run_sync(self._engine.consume(key, limit), self._execute)

    def peek(self, key: str, limit: Limit) -> Verdict:
        """The verdict :meth:`consume` would give; writes nothing (no key, no expiry changed)."""
        return run_sync(self._engine.peek(key, limit), self._execute)

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry, all or nothing, in one script; a refusal names
        ``blocked``, the entry with the longest wait. An allowed verdict's ``release()`` gives exactly
        this call back.

        On a cluster without ``hash_tag``, keys in different slots are counted one script each, in
        order; a refusal or an error gives back what was counted (see :class:`GiveBackError`).
        """
        entries = _entries(entries)
        op = self._engine.consume_many(entries, secrets.token_hex(16))
        verdict, released, call_id = run_sync(op, self._execute)
        if released is None:
            return verdict
        engine, execute = self._engine, self._execute
        return Verdict(True, release=lambda: _release_sync(engine, execute, released, call_id))

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, writing nothing."""
        return run_sync(self._engine.peek_many(_entries(entries)), self._execute)

    # Fixed window (rate limiter), in milliseconds, on the server's clock.
    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits to ``key``'s window (opened by the first hit, lasting ``decay_ms``)."""
        return run_sync(self._engine.hit(key, decay_ms, amount), self._execute)

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window; 0 when none runs."""
        return run_sync(self._engine.attempts(key), self._execute)

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a window that still runs."""
        return run_sync(self._engine.too_many_attempts(key, max), self._execute)

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        return run_sync(self._engine.remaining(key, max), self._execute)

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends, rounded up; 0 when none runs."""
        return run_sync(self._engine.available_in(key), self._execute)

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends; 0 when none runs."""
        return run_sync(self._engine.available_in_ms(key), self._execute)

    def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window running."""
        run_sync(self._engine.reset_attempts(key), self._execute)

    def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        run_sync(self._engine.clear(key), self._execute)


def _release_sync(engine: _Engine, execute: Callable[[Plan], Any], released: Released, call_id: str) -> None:
    run_sync(engine.release(released, call_id), execute)


_BACKGROUND: set[asyncio.Task[None]] = set()


def _in_background(work: Coroutine[Any, Any, None]) -> None:
    """Runs ``work`` on the running loop, holding the task until it is done."""
    task = asyncio.get_running_loop().create_task(work)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def _release_async(
    engine: _Engine, execute: Callable[[Plan], Awaitable[Any]], released: Released, call_id: str
) -> None:
    await run_async(engine.release(released, call_id), execute)


class AsyncRedisStore(AsyncCooldownStore):
    """:class:`RedisStore` for asyncio code, through an asyncio client (``redis.asyncio``): the same
    operations, the same plans, driven by ``await``. Build it with :meth:`using`."""

    __slots__ = ("_engine", "_execute")

    def __init__(
        self,
        run: AsyncRun,
        *,
        evalsha: AsyncRun | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> None:
        self._engine = _Engine(prefix, hash_tag, on_give_back_error)
        self._execute = _async_execute(run, evalsha)

    @classmethod
    def using(
        cls,
        run: AsyncRun,
        *,
        evalsha: AsyncRun | None = None,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> AsyncRedisStore:
        """See :meth:`RedisStore.using`; ``run`` and ``evalsha`` return awaitables.

        redis-py asyncio, :class:`redis.asyncio.Redis` or :class:`redis.asyncio.cluster.RedisCluster`:

        .. code-block:: python

            store = AsyncRedisStore.using(
                lambda script, keys, args: r.eval(script, len(keys), *keys, *args),
                evalsha=lambda sha, keys, args: r.evalsha(sha, len(keys), *keys, *args),
            )
        """
        return cls(run, evalsha=evalsha, prefix=prefix, hash_tag=hash_tag, on_give_back_error=on_give_back_error)

    @classmethod
    def from_client(
        cls,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        hash_tag: str | None = None,
        on_give_back_error: Callable[[GiveBackError], None] | None = None,
    ) -> AsyncRedisStore:
        """:meth:`using` with the one-liners for an asyncio client with redis-py's ``eval``/``evalsha``."""
        return cls(
            lambda script, keys, args: client.eval(script, len(keys), *keys, *args),
            evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
            prefix=prefix,
            hash_tag=hash_tag,
            on_give_back_error=on_give_back_error,
        )

    @property
    def prefix(self) -> str:
        """The key prefix."""
        return self._engine.planner.prefix

    def redis_key(self, key: str) -> str:
        """See :meth:`RedisStore.redis_key`."""
        return self._engine.planner.log_key(key)

    def redis_window_key(self, key: str) -> str:
        """See :meth:`RedisStore.redis_window_key`."""
        return self._engine.planner.window_key(key)

    async def consume(self, key: str, limit: Limit) -> Verdict:
        """See :meth:`RedisStore.consume`."""
        return await run_async(self._engine.consume(key, limit), self._execute)

    async def peek(self, key: str, limit: Limit) -> Verdict:
        """See :meth:`RedisStore.peek`."""
        return await run_async(self._engine.peek(key, limit), self._execute)

    async def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`RedisStore.consume_many`; ``release()`` returns an awaitable."""
        entries, call_id = _entries(entries), secrets.token_hex(16)
        counted: Released = []
        try:
            verdict, released, _ = await run_async(
                self._engine.consume_many(entries, call_id, counted), self._execute
            )
        except asyncio.CancelledError:
            if counted:  # cancelled while counting key by key: give back in the background
                _in_background(run_async(self._engine.give_back_cancelled(counted, call_id), self._execute))
            raise
        if released is None:
            return verdict
        engine, execute = self._engine, self._execute
        return Verdict(True, release=lambda: _release_async(engine, execute, released, call_id))

    async def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`RedisStore.peek_many`."""
        return await run_async(self._engine.peek_many(_entries(entries)), self._execute)

    async def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """See :meth:`RedisStore.hit`."""
        return await run_async(self._engine.hit(key, decay_ms, amount), self._execute)

    async def attempts(self, key: str) -> int:
        """See :meth:`RedisStore.attempts`."""
        return await run_async(self._engine.attempts(key), self._execute)

    async def too_many_attempts(self, key: str, max: int) -> bool:
        """See :meth:`RedisStore.too_many_attempts`."""
        return await run_async(self._engine.too_many_attempts(key, max), self._execute)

    async def remaining(self, key: str, max: int) -> int:
        """See :meth:`RedisStore.remaining`."""
        return await run_async(self._engine.remaining(key, max), self._execute)

    async def available_in(self, key: str) -> int:
        """See :meth:`RedisStore.available_in`."""
        return await run_async(self._engine.available_in(key), self._execute)

    async def available_in_ms(self, key: str) -> int:
        """See :meth:`RedisStore.available_in_ms`."""
        return await run_async(self._engine.available_in_ms(key), self._execute)

    async def reset_attempts(self, key: str) -> None:
        """See :meth:`RedisStore.reset_attempts`."""
        await run_async(self._engine.reset_attempts(key), self._execute)

    async def clear(self, key: str) -> None:
        """See :meth:`RedisStore.clear`."""
        await run_async(self._engine.clear(key), self._execute)
