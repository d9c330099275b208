"""The failure guard: a store that is slow, down or still connecting never hangs or crashes a caller.

:class:`Guard` wraps a :class:`~ratewindow.CooldownStore` (ours or your own), :class:`AsyncGuard` an
:class:`~ratewindow.AsyncCooldownStore`; each is a store of the same kind. A call waits for the store
at most ``timeout_ms``; then, or when the store raises, a policy answers it (``'deny'``, ``'allow'`` or
a fallback store), and the verdict says why: ``verdict.failed`` is ``'timeout'``, ``'store-error'`` or
``'not-ready'`` and ``verdict.cause`` the error behind it. A consume whose answer comes after the guard
refused it is given back (its verdict's ``release()``), so nobody loses a use for a call that never ran;
under ``'allow'`` the late count stays, as the call ran.

.. code-block:: python

    import redis
    from ratewindow import Guard, Limit, RedisStore

    r = redis.Redis(socket_timeout=0.25)          # the client gives up near timeout_ms too
    store = Guard(RedisStore.from_client(r), timeout_ms=250, on_failure="deny", block_cache=True)
    verdict = store.consume(f"click:{user}", Limit(3, 10_000))
    if verdict.failed:
        log.warning("cooldown store %s: %r", verdict.failed, verdict.cause)

Every decision (the policy's verdict, which errors are failures, what a late answer gets, the block
cache, the counters) is the engine's (``ratewindow_core::guard``); this module waits and runs the stores.

**Timeouts, asyncio.** :class:`AsyncGuard` is exact: the store's call runs as a task raced against a
timer; at ``timeout_ms`` the caller gets the policy's verdict (``failed='timeout'``) and the task runs
on. Its late answer, if it recorded a call the guard refused, is released.

**Timeouts, synchronous code.** A blocking client cannot be interrupted from the outside (a worker
thread per call would cost more than the call), so :class:`Guard` runs the store in the caller's
thread and the call returns when the client does. Give the client a timeout near ``timeout_ms`` —
redis-py ``socket_timeout`` (and ``socket_connect_timeout``), psycopg ``connect_timeout`` and
``options="-c statement_timeout=…"``, a pool's ``timeout`` — and the guard gives the verdict the
asyncio guard would: an answer that took ``timeout_ms`` or longer meets the policy as a ``'timeout'``
(under ``'deny'`` its call, if recorded, is given back before the guard returns), an error raised after
``timeout_ms`` is a ``'timeout'``, one raised sooner a ``'store-error'``. So the count on the server
always equals what the verdicts said; only the wait is the client's.

**Lifecycle.** :meth:`Guard.ready` runs the store's connect step (``connect``, default the store's
``on_ready()`` if it has one); calls that come meanwhile wait for it up to ``timeout_ms``, then meet the
policy (``failed='not-ready'``). :meth:`Guard.close` makes new calls meet the policy, waits for the calls,
late answers and releases under way, then runs ``shutdown`` (default the store's ``on_shutdown()`` if
it has one), so the store closes after its last write. ``with`` / ``async with`` run both.

**Block cache** (``block_cache=True``, or a bound such as ``block_cache=10_000``): a refusal is
remembered per key and limit until its wait ends, and calls before then are refused without a round
trip. Exact for the sliding window, except that a release made in another process is not seen here (a
release through this guard forgets the entries at once). At most 100,000 entries by default, evicting
the one that expires soonest.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Union, cast

from . import _ratewindow
from ._errors import StoreError
from ._limits import Entry, Limit
from ._store import AsyncCallStore, AsyncCooldownStore, CallStore, CooldownStore, Verdict

__all__ = ["Guard", "AsyncGuard", "GuardEvent", "GuardStats", "GuardFailure", "GuardOperation"]

GuardFailure = Union[Literal["timeout"], Literal["store-error"], Literal["not-ready"]]  # noqa: UP007 - a Union at runtime too (stubtest)
"""Why the guard, not the store, answered a call (``Verdict.failed``)."""

GuardOperation = Union[Literal["consume"], Literal["consume_many"], Literal["peek"], Literal["peek_many"]]  # noqa: UP007
"""Which operation of the store a call ran."""

_ALLOWED = Verdict(True)


@dataclass(frozen=True, slots=True)
class GuardEvent:
    """What ``on_event`` receives: one event per failure, fallback failure and late release.

    - ``type='failure'``: the store timed out, raised or was not ready; the policy answered.
      ``failed`` and ``cause`` say why.
    - ``type='fallback-error'``: the fallback store raised too (``cause``); the call was refused as
      under ``'deny'``.
    - ``type='late-release'``: a consume the guard had refused was recorded by a late answer and given
      back (``error`` is ``None``), or could not be (``error``: what the release raised, or that the
      verdict had no release).
    """

    type: Literal["failure", "fallback-error", "late-release"]
    operation: GuardOperation
    entries: tuple[Entry, ...]
    failed: GuardFailure | None = None
    cause: BaseException | None = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class GuardStats:
    """A guard's counters, each since the guard was made."""

    calls: int
    """Calls begun (consumes and peeks)."""
    allowed: int
    """Calls answered allowed (by the store, ``'allow'`` or the fallback)."""
    refused: int
    """Calls answered refused (by the store, ``'deny'``, the fallback or the block cache)."""
    timeouts: int
    """Calls the store did not answer within ``timeout_ms``."""
    store_errors: int
    """Calls whose store raised."""
    not_ready: int
    """Calls that came before the store was ready and waited ``timeout_ms`` (or after ``close()``)."""
    late_releases: int
    """Late answers given back."""
    late_releases_failed: int
    """Late answers that could not be given back (the release raised, or the verdict had none)."""
    fallback_calls: int
    """Calls answered by the fallback store."""
    cache_hits: int
    """Calls refused by the block cache without a round trip."""


def _max_keys(block_cache: bool | int) -> int | None:
    if block_cache is True:
        return int(_ratewindow.GuardCore.DEFAULT_MAX_KEYS)
    if block_cache is False or block_cache is None:
        return None
    return block_cache


def _overrides(store: object, name: str, base: type) -> bool:
    """Whether ``store`` has its own ``name`` (not the contract's default)."""
    own = getattr(type(store), name, None)
    return own is not None and own is not getattr(base, name)


class _Common:
    """What both guards share: the engine's state, the options, the events."""

    __slots__ = ("_core", "_fallback", "_on_event", "_store", "_own_batch", "_own_peek", "_direct", "_closed", "_gated")

    def _setup(
        self,
        store: Any,
        base: type,
        timeout_ms: int | float,
        on_failure: Any,
        block_cache: bool | int,
        on_event: Callable[[GuardEvent], object] | None,
    ) -> None:
        if not callable(getattr(store, "consume", None)):
            raise TypeError(f"store must be a cooldown store (with consume), not {type(store).__name__}")
        if isinstance(on_failure, str):
            policy: object | None = on_failure
            self._fallback = None
        elif callable(getattr(on_failure, "consume", None)):
            policy = None
            self._fallback = on_failure
        else:
            raise TypeError(f"on_failure must be 'deny', 'allow' or a cooldown store, not {on_failure!r}")
        if on_event is not None and not callable(on_event):
            raise TypeError("on_event must be callable")
        self._core = _ratewindow.GuardCore(timeout_ms, policy, _max_keys(block_cache))
        self._store = store
        self._on_event = on_event
        self._own_batch = _overrides(store, "consume_many", base)
        self._own_peek = _overrides(store, "peek_many", base)
        # A consume goes through the store's own batch when it has one, so its verdict carries the
        # release a late answer needs; ratewindow's networked stores give one on consume already.
        self._direct = isinstance(store, (CallStore, AsyncCallStore)) or not self._own_batch
        self._closed = False
        self._gated = False  # closed, connecting, or the last connect failed: calls check first

    @property
    def store(self) -> Any:
        """The store guarded."""
        return self._store

    @property
    def timeout_ms(self) -> int:
        """How long a call waits for the store, in ms."""
        return int(self._core.timeout_ms)

    @property
    def cached_entries(self) -> int:
        """Entries the block cache holds (0 without a cache)."""
        return int(self._core.cached())

    def stats(self) -> GuardStats:
        """The counters."""
        return GuardStats(*self._core.stats())

    def _emit(self, event: GuardEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # noqa: BLE001 - the hook's failure is not the call's
            pass

    def _failed_event(self, op: GuardOperation, entries: Sequence[Entry], failed: GuardFailure, cause: BaseException) -> None:
        if self._on_event is not None:
            self._emit(GuardEvent("failure", op, tuple(entries), failed=failed, cause=cause))

    def _late_event(self, op: GuardOperation, entries: Sequence[Entry], error: BaseException | None) -> None:
        if self._on_event is not None:
            self._emit(GuardEvent("late-release", op, tuple(entries), error=error))


def _timeout(ms: int) -> StoreError:
    return StoreError(f"the store did not answer within {ms} ms")


_NO_RELEASE = "the store's verdict has no release(): the late call stays counted"


class _Counted:
    """A consume that failed after its command may have run (its reply lost after the script ran, a
    statement that committed): to the late-answer rule, an answer that counted. ratewindow's stores
    give such an error ``release()``, the call given back by its id (idempotent)."""

    __slots__ = ("release",)
    allowed = True
    releasable = True

    def __init__(self, release: Callable[[], object]) -> None:
        self.release = release


def _counted(op: GuardOperation, error: BaseException) -> _Counted | None:
    """A consume's failure that may have counted: the ``release()`` its error carries, as a late answer."""
    if op not in ("consume", "consume_many"):
        return None
    release = getattr(error, "release", None)
    return _Counted(release) if callable(release) else None


class Guard(_Common, CooldownStore):
    """A :class:`~ratewindow.CooldownStore` guarded against its failures (synchronous code).

    ``Guard(store, timeout_ms=1000, on_failure='deny', block_cache=False, on_event=None)``:

    - ``timeout_ms``: how long a call may take (and wait for :meth:`ready`), a whole number of ms from
      1 to 2**31. See the module's notes: a blocking client is not interrupted; an answer that comes
      later meets the policy, its call given back under ``'deny'``.
    - ``on_failure``: ``'deny'`` (refused, ``retry_after_ms`` = ``timeout_ms``), ``'allow'``, or a
      fallback :class:`~ratewindow.CooldownStore` (e.g. ``MemoryStore()``) that counts while the main
      one fails (refused as under ``'deny'`` if it raises too).
    - ``block_cache``: ``True`` (100,000 entries), a bound, or ``False``.
    - ``on_event``: called with a :class:`GuardEvent` per failure and late release; what it raises is
      ignored.

    Bad options raise :class:`~ratewindow.InvalidArgumentError` naming ``timeout_ms``, ``on_failure``
    or ``block_cache`` (``TypeError`` for a value of the wrong type). Errors that are the caller's own
    mistake (an invalid limit or key) are raised, not answered by the policy. Thread-safe.
    """

    __slots__ = ("_inflight", "_shut_lock", "_ready", "_ready_error", "_shut", "__weakref__")

    def __init__(
        self,
        store: CooldownStore,
        *,
        timeout_ms: int | float = 1000,
        on_failure: Literal["deny", "allow"] | CooldownStore = "deny",
        block_cache: bool | int = False,
        on_event: Callable[[GuardEvent], object] | None = None,
    ) -> None:
        self._setup(store, CooldownStore, timeout_ms, on_failure, block_cache, on_event)
        # One item per call or release under way (deque's append and pop are atomic: no lock per call).
        self._inflight: deque[None] = deque()
        self._shut_lock = threading.Lock()
        self._ready = threading.Event()
        self._ready.set()
        self._ready_error: BaseException | None = None
        self._shut = False

    # --- the operations ---------------------------------------------------------------------------

    def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit`` through the store, or the policy answers."""
        if not self._direct:
            return self._many("consume", [Entry(key, limit)], single=True)
        core = self._core
        started = core.begin(key, limit)
        if type(started) is not int:
            return started  # type: ignore[return-value]  # the block cache's refusal
        if self._gated:
            early = self._gate("consume", (Entry(key, limit),))
            if early is not None:
                return early
        inflight = self._inflight
        inflight.append(None)
        try:
            try:
                v = self._store.consume(key, limit)
            except Exception as error:
                failed = core.failure_of(error, started)
                if failed is None:
                    raise
                return self._failed_call("consume", (Entry(key, limit),), True, failed, error)
            out = core.answered(v, key, limit, started, self._tracked(v, key, limit) if v.releasable else None)
            if out is None:
                return self._late_now("consume", (Entry(key, limit),), True, v)
            return out
        finally:
            inflight.pop()

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry through the store (a store with the default
        ``consume_many`` keeps it: each entry a guarded consume)."""
        if not self._own_batch:
            return CooldownStore.consume_many(self, entries if isinstance(entries, Sequence) else list(entries))
        return self._many("consume_many", entries)

    def peek(self, key: str, limit: Limit) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        if not self._own_peek:
            return _ALLOWED
        return self._many("peek", [Entry(key, limit)], single=True)

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing (a store with the default
        ``peek_many`` keeps it: every call allowed)."""
        if not self._own_peek:
            return _ALLOWED
        return self._many("peek_many", entries)

    def _many(self, op: GuardOperation, given: Iterable[Entry], single: bool = False) -> Verdict:
        entries = given if isinstance(given, list) else list(given)
        core = self._core
        started = core.begin(entries[0].key, cast(Limit, entries[0].limit)) if single else core.begin_many(entries)
        if type(started) is not int:
            return started  # type: ignore[return-value]  # the block cache's refusal
        if self._gated:
            early = self._gate(op, entries)
            if early is not None:
                return early
        inflight = self._inflight
        inflight.append(None)
        try:
            try:
                v = self._store.consume_many(entries) if op == "consume" else _invoke(self._store, op, entries)
            except Exception as error:
                failed = core.failure_of(error, started)
                if failed is None:
                    raise
                return self._failed_call(op, entries, single, failed, error)
            if single:
                key, limit = entries[0].key, cast(Limit, entries[0].limit)
                release = self._tracked(v, key, limit) if op == "consume" and v.releasable else None
                out = core.answered(v, key, limit, started, release)
            else:
                release = self._tracked_many(v, entries) if op == "consume_many" and v.releasable else None
                out = core.answered_many(v, entries, started, release)
            if out is None:
                return self._late_now(op, entries, single, v)
            return out
        finally:
            inflight.pop()

    # --- failures, late answers -------------------------------------------------------------------

    def _failure(
        self, op: GuardOperation, entries: Sequence[Entry], single: bool, failed: GuardFailure, cause: BaseException
    ) -> Verdict:
        self._failed_event(op, entries, failed, cause)
        v = self._core.failed(failed, cause)
        if v is not None:
            return v
        fallback = self._fallback
        try:
            fv = _invoke(fallback, op, list(entries))
        except Exception as error:
            self._emit(GuardEvent("fallback-error", op, tuple(entries), cause=error))
            return self._core.fallback_failed(failed, cause)
        release = fv.release if op in ("consume", "consume_many") and fv.releasable else None
        return self._core.fallback_answered(fv, failed, cause, single, release)

    def _failed_call(
        self, op: GuardOperation, entries: Sequence[Entry], single: bool, failed: GuardFailure, error: BaseException
    ) -> Verdict:
        """The store raised: the policy answers; a consume that may have counted is given back if the
        guard refused it (the late-answer rule)."""
        answer = self._failure(op, entries, single, failed, error)
        counted = _counted(op, error)
        if counted is not None:
            self._late(op, entries, answer.allowed, counted)
        return answer

    def _late_now(self, op: GuardOperation, entries: Sequence[Entry], single: bool, late: Verdict) -> Verdict:
        """The store answered, but after ``timeout_ms``: the policy answers, the late call is given back
        if the guard refused it."""
        answer = self._failure(op, entries, single, "timeout", _timeout(self.timeout_ms))
        if op in ("consume", "consume_many"):
            self._late(op, entries, answer.allowed, late)
        return answer

    def _late(self, op: GuardOperation, entries: Sequence[Entry], answered_allowed: bool, late: Verdict | _Counted) -> None:
        core = self._core
        if core.late(answered_allowed, late.allowed) != "release":
            return
        if not late.releasable:
            core.late_released(False)
            self._late_event(op, entries, StoreError(_NO_RELEASE))
            return
        try:
            late.release()
        except Exception as error:
            core.late_released(False)
            self._late_event(op, entries, error)
            return
        core.late_released(True)
        self._late_event(op, entries, None)

    def _tracked(self, v: Verdict, key: str, limit: Limit) -> Callable[[], object]:
        def release() -> object:
            self._core.forget(key, limit)
            self._inflight.append(None)
            try:
                return v.release()
            finally:
                self._inflight.pop()

        return release

    def _tracked_many(self, v: Verdict, entries: list[Entry]) -> Callable[[], object]:
        def release() -> object:
            self._core.forget_many(entries)
            self._inflight.append(None)
            try:
                return v.release()
            finally:
                self._inflight.pop()

        return release

    # --- lifecycle --------------------------------------------------------------------------------

    def _gate(self, op: GuardOperation, entries: Sequence[Entry]) -> Verdict | None:
        """A call while closed, connecting, or after a failed connect: the policy, or ``None`` to go on."""
        single = op in ("consume", "peek")
        if self._closed:
            return self._failure(op, entries, single, "not-ready", StoreError("the guard is closed"))
        if not self._ready.wait(self.timeout_ms / 1000):
            cause = StoreError(f"the store was not ready within {self.timeout_ms} ms")
            return self._failure(op, entries, single, "not-ready", cause)
        if self._ready_error is not None:
            return self._failure(op, entries, single, "not-ready", self._ready_error)
        return None

    def ready(self, connect: Callable[[], object] | None = None) -> None:
        """Connects the store: runs ``connect`` (default: the store's ``on_ready()``, if it has one).
        Calls from other threads meanwhile wait for it up to ``timeout_ms``, then meet the policy
        (``failed='not-ready'``). If it raises, calls meet the policy at once until ``ready()``
        succeeds, and the error propagates here."""
        step = connect if connect is not None else getattr(self._store, "on_ready", None)
        if step is None:
            return
        self._ready.clear()
        self._gated = True
        try:
            step()
        except BaseException as error:
            self._ready_error = error
            raise
        else:
            self._ready_error = None
            self._gated = self._closed
        finally:
            self._ready.set()

    def close(self, shutdown: Callable[[], object] | None = None) -> None:
        """Closes the guard: new calls meet the policy (``failed='not-ready'``); waits for the calls,
        late answers and releases under way; then runs ``shutdown`` (default: the store's
        ``on_shutdown()``, if it has one), once, so the store closes after its last write."""
        self._closed = True
        self._gated = True
        while self._inflight:
            time.sleep(0.001)
        with self._shut_lock:
            if self._shut:
                return
            self._shut = True
        step = shutdown if shutdown is not None else getattr(self._store, "on_shutdown", None)
        if step is not None:
            step()

    def __enter__(self) -> Guard:
        self.ready()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncGuard(_Common, AsyncCooldownStore):
    """An :class:`~ratewindow.AsyncCooldownStore` guarded against its failures (asyncio).

    The options are :class:`Guard`'s (``on_failure`` may be an asyncio or a synchronous store). The
    timeout is exact: at ``timeout_ms`` the caller gets the policy's verdict while the store's call runs
    on as a task; its late answer is given back if the guard refused the call. A caller cancelled while
    waiting is treated the same way: its call did not run, so a recorded answer is given back.
    """

    __slots__ = ("_busy", "_drained", "_ready_wait", "_ready_error", "_closing", "_deadlines", "_timer", "_timer_loop", "__weakref__")

    def __init__(
        self,
        store: AsyncCooldownStore,
        *,
        timeout_ms: int | float = 1000,
        on_failure: Literal["deny", "allow"] | AsyncCooldownStore | CooldownStore = "deny",
        block_cache: bool | int = False,
        on_event: Callable[[GuardEvent], object] | None = None,
    ) -> None:
        self._setup(store, AsyncCooldownStore, timeout_ms, on_failure, block_cache, on_event)
        self._busy = 0
        self._drained: list[asyncio.Future[None]] = []
        self._ready_wait: asyncio.Future[None] | None = None
        self._ready_error: BaseException | None = None
        self._closing: asyncio.Future[None] | None = None
        # Calls waiting for their deadline, in deadline order (one timeout for all: arrival order), and
        # the one timer armed for the first of them: no timer per call.
        self._deadlines: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # a guard may outlive its loop

    async def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit`` through the store within ``timeout_ms``, or the
        policy answers."""
        if not self._direct:
            return await self._many("consume", [Entry(key, limit)], single=True)
        core = self._core
        started = core.begin(key, limit)
        if type(started) is not int:
            return started  # type: ignore[return-value]  # the block cache's refusal
        entries = None
        if self._gated:
            entries = [Entry(key, limit)]
            early = await self._gate("consume", entries)
            if early is not None:
                return early
        try:
            aw = self._store.consume(key, limit)
        except Exception as error:
            return await self._thrown("consume", [Entry(key, limit)], True, error, started)
        outcome = await self._race("consume", entries, aw)
        if isinstance(outcome, _Late):
            return await self._timed_out("consume", entries or [Entry(key, limit)], True, outcome)
        if isinstance(outcome, BaseException):
            return await self._thrown("consume", [Entry(key, limit)], True, outcome, started)
        release = self._tracked(outcome, lambda: core.forget(key, limit)) if outcome.releasable else None
        out = core.answered(outcome, key, limit, started, release)
        if out is None:
            return await self._late_in_hand("consume", entries or [Entry(key, limit)], True, outcome)
        return out

    async def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry through the store within ``timeout_ms`` (a store with the
        default ``consume_many`` keeps it: each entry a guarded consume)."""
        listed = entries if isinstance(entries, list) else list(entries)
        if not self._own_batch:
            return await AsyncCooldownStore.consume_many(self, listed)
        return await self._many("consume_many", listed)

    async def peek(self, key: str, limit: Limit) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        if not self._own_peek:
            return _ALLOWED
        return await self._many("peek", [Entry(key, limit)], single=True)

    async def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing (a store with the default
        ``peek_many`` keeps it: every call allowed)."""
        if not self._own_peek:
            return _ALLOWED
        return await self._many("peek_many", entries if isinstance(entries, list) else list(entries))

    async def _many(self, op: GuardOperation, entries: list[Entry], single: bool = False) -> Verdict:
        core = self._core
        started = core.begin(entries[0].key, cast(Limit, entries[0].limit)) if single else core.begin_many(entries)
        if type(started) is not int:
            return started  # type: ignore[return-value]  # the block cache's refusal
        if self._gated:
            early = await self._gate(op, entries)
            if early is not None:
                return early
        try:
            aw = self._store.consume_many(entries) if op == "consume" else _invoke(self._store, op, entries)
        except Exception as error:
            return await self._thrown(op, entries, single, error, started)
        outcome = await self._race(op, entries, aw)
        if isinstance(outcome, _Late):
            return await self._timed_out(op, entries, single, outcome)
        if isinstance(outcome, BaseException):
            return await self._thrown(op, entries, single, outcome, started)
        if single:
            key, limit = entries[0].key, cast(Limit, entries[0].limit)
            release = None
            if op == "consume" and outcome.releasable:
                release = self._tracked(outcome, lambda: core.forget(key, limit))
            out = core.answered(outcome, key, limit, started, release)
        else:
            release = None
            if op == "consume_many" and outcome.releasable:
                release = self._tracked(outcome, lambda: core.forget_many(entries))
            out = core.answered_many(outcome, entries, started, release)
        if out is None:
            return await self._late_in_hand(op, entries, single, outcome)
        return out

    # --- the race ---------------------------------------------------------------------------------

    async def _race(self, op: GuardOperation, entries: list[Entry] | None, aw: Awaitable[Verdict]) -> Verdict | BaseException | _Late:
        """Runs the store's call as a task against the deadline: its verdict, its error, or a
        :class:`_Late` holding the task still running."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(aw)
        self._busy += 1
        waiter: asyncio.Future[None] = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        self._deadlines.append((loop.time() + self._core.timeout_ms / 1000, waiter))
        if self._timer is None or self._timer_loop is not loop:
            self._arm(loop)
        task.add_done_callback(wake)
        try:
            await waiter
        except asyncio.CancelledError:
            # The caller gave up: its call did not run; a recorded late answer is given back.
            listed = entries if entries is not None else []
            if task.done():
                self._late_async(op, listed, False, task)
            else:
                task.add_done_callback(lambda t: self._late_async(op, listed, False, t))
            raise
        if not task.done():
            return _Late(task)
        self._leave()
        if task.cancelled():
            return StoreError("the store's call was cancelled")
        error = task.exception()
        if error is not None:
            return error
        return task.result()

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Arms the timer for the first call still waiting (answered ones are dropped first)."""
        deadlines = self._deadlines
        while deadlines and (deadlines[0][1].done() or deadlines[0][1].get_loop() is not loop):
            deadlines.popleft()  # answered, or left behind by an event loop that has ended
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadlines[0][0], self._expire, loop) if deadlines else None
        self._timer_loop = loop

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer: wakes every call whose deadline has passed (as timed out), then re-arms."""
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            waiter = deadlines.popleft()[1]
            if not waiter.done() and waiter.get_loop() is loop:
                waiter.set_result(None)
        self._timer = None
        self._arm(loop)

    async def _timed_out(self, op: GuardOperation, entries: list[Entry], single: bool, late: _Late) -> Verdict:
        answer = await self._failure(op, entries, single, "timeout", _timeout(self.timeout_ms))
        if op in ("consume", "consume_many"):
            allowed = answer.allowed
            late.task.add_done_callback(lambda t: self._late_async(op, entries, allowed, t))
        else:
            late.task.add_done_callback(lambda _: self._leave())
        return answer

    async def _late_in_hand(self, op: GuardOperation, entries: list[Entry], single: bool, late: Verdict) -> Verdict:
        """The answer came in hand but at or after ``timeout_ms`` (the timer had not fired yet): the
        policy answers, and the late-answer rule applies at once."""
        answer = await self._failure(op, entries, single, "timeout", _timeout(self.timeout_ms))
        if op in ("consume", "consume_many"):
            self._busy += 1
            self._late_verdict(op, entries, answer.allowed, late)
        return answer

    def _late_async(self, op: GuardOperation, entries: list[Entry], answered_allowed: bool, task: asyncio.Future[Verdict]) -> None:
        """A store's call finished after the guard answered it (a done callback): the late-answer rule
        (a failure that may have counted is a late answer that counted)."""
        if task.cancelled():
            self._leave()
            return
        error = task.exception()
        if error is not None:
            counted = _counted(op, error)
            if counted is None:
                self._leave()  # a late failure that recorded nothing
            else:
                self._late_verdict(op, entries, answered_allowed, counted)
            return
        self._late_verdict(op, entries, answered_allowed, task.result())

    def _late_verdict(self, op: GuardOperation, entries: list[Entry], answered_allowed: bool, late: Verdict | _Counted) -> None:
        """The late-answer rule on ``late`` (one ``_busy`` held, let go when done)."""
        core = self._core
        if core.late(answered_allowed, late.allowed) != "release":
            self._leave()
            return
        if not late.releasable:
            self._late_done(op, entries, StoreError(_NO_RELEASE))
            return
        try:
            r = late.release()
        except Exception as error:
            self._late_done(op, entries, error)
            return
        if not inspect.isawaitable(r):
            self._late_done(op, entries, None)
            return

        async def finish() -> None:
            try:
                await r
            except Exception as error:
                self._late_done(op, entries, error)
            else:
                self._late_done(op, entries, None)

        _keep(asyncio.ensure_future(finish()))

    def _late_done(self, op: GuardOperation, entries: list[Entry], error: BaseException | None) -> None:
        self._core.late_released(error is None)
        self._late_event(op, entries, error)
        self._leave()

    async def _thrown(
        self, op: GuardOperation, entries: list[Entry], single: bool, error: BaseException, started: int
    ) -> Verdict:
        failed = self._core.failure_of(error, started)
        if failed is None:
            raise error
        answer = await self._failure(op, entries, single, failed, error)
        counted = _counted(op, error)
        if counted is not None:
            # A consume that may have counted: given back if the guard refused it.
            self._busy += 1
            self._late_verdict(op, entries, answer.allowed, counted)
        return answer

    async def _failure(
        self, op: GuardOperation, entries: list[Entry], single: bool, failed: GuardFailure, cause: BaseException
    ) -> Verdict:
        self._failed_event(op, entries, failed, cause)
        v = self._core.failed(failed, cause)
        if v is not None:
            return v
        try:
            fv = _invoke(self._fallback, op, entries)
            if inspect.isawaitable(fv):
                fv = await fv
        except Exception as error:
            self._emit(GuardEvent("fallback-error", op, tuple(entries), cause=error))
            return self._core.fallback_failed(failed, cause)
        release = fv.release if op in ("consume", "consume_many") and fv.releasable else None
        return self._core.fallback_answered(fv, failed, cause, single, release)

    def _tracked(self, v: Verdict, forget: Callable[[], None]) -> Callable[[], object]:
        """``v``'s release, forgetting the block cache's entries and tracked by :meth:`close`: it starts
        at once and returns a task (awaitable) for an asyncio store."""

        def release() -> object:
            forget()
            self._busy += 1
            try:
                r = v.release()
            except BaseException:
                self._leave()
                raise
            if not inspect.isawaitable(r):
                self._leave()
                return r
            task = asyncio.ensure_future(r)
            task.add_done_callback(lambda _: self._leave())
            return task

        return release

    # --- lifecycle --------------------------------------------------------------------------------

    async def _gate(self, op: GuardOperation, entries: list[Entry]) -> Verdict | None:
        single = op in ("consume", "peek")
        if self._closed:
            return await self._failure(op, entries, single, "not-ready", StoreError("the guard is closed"))
        wait = self._ready_wait
        if wait is not None:
            try:
                await asyncio.wait_for(asyncio.shield(wait), self._core.timeout_ms / 1000)
            except TimeoutError:
                cause = StoreError(f"the store was not ready within {self.timeout_ms} ms")
                return await self._failure(op, entries, single, "not-ready", cause)
            if self._closed:
                return await self._failure(op, entries, single, "not-ready", StoreError("the guard is closed"))
        if self._ready_error is not None:
            return await self._failure(op, entries, single, "not-ready", self._ready_error)
        return None

    def _leave(self) -> None:
        self._busy -= 1
        if self._busy == 0:
            drained, self._drained = self._drained, []
            for f in drained:
                if not f.done():
                    f.set_result(None)

    async def ready(self, connect: Callable[[], object] | None = None) -> None:
        """Connects the store: runs ``connect`` (default: the store's ``on_ready()``, if it has one;
        awaited when it returns an awaitable). Calls meanwhile wait for it up to ``timeout_ms``, then
        meet the policy (``failed='not-ready'``). If it raises, calls meet the policy at once until
        ``ready()`` succeeds, and the error propagates here."""
        step = connect if connect is not None else getattr(self._store, "on_ready", None)
        if step is None:
            return
        if self._ready_wait is not None:
            await asyncio.shield(self._ready_wait)
            if self._ready_error is not None:
                raise self._ready_error
            return
        wait: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready_wait = wait
        self._gated = True
        try:
            r = step()
            if inspect.isawaitable(r):
                await r
        except BaseException as error:
            self._ready_error = error
            raise
        else:
            self._ready_error = None
            self._gated = self._closed
        finally:
            self._ready_wait = None
            wait.set_result(None)

    async def close(self, shutdown: Callable[[], object] | None = None) -> None:
        """Closes the guard: new calls meet the policy (``failed='not-ready'``); waits for the calls,
        late answers and releases under way; then runs ``shutdown`` (default: the store's
        ``on_shutdown()``, if it has one; awaited when it returns an awaitable), once."""
        if self._closing is not None:
            await asyncio.shield(self._closing)
            return
        self._closed = True
        self._gated = True
        closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = closing
        try:
            while self._busy:
                drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._drained.append(drained)
                await drained
            step = shutdown if shutdown is not None else getattr(self._store, "on_shutdown", None)
            if step is not None:
                r = step()
                if inspect.isawaitable(r):
                    await r
        except BaseException as error:
            closing.set_exception(error)
            closing.exception()  # retrieved: a second close() raises it, no "never retrieved" warning
            raise
        else:
            closing.set_result(None)

    async def __aenter__(self) -> AsyncGuard:
        await self.ready()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class _Late:
    """The store's call outlived the deadline; ``task`` still runs."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Future[Verdict]) -> None:
        self.task = task


def _invoke(store: Any, op: GuardOperation, entries: list[Entry]) -> Any:
    """Runs ``op`` on a store: its verdict (a sync store) or the awaitable of it (an asyncio one)."""
    if op == "consume_many":
        return store.consume_many(entries)
    if op == "peek_many":
        return store.peek_many(entries)
    if op == "peek":
        return store.peek(entries[0].key, entries[0].limit)
    return store.consume(entries[0].key, entries[0].limit)


_BACKGROUND: set[asyncio.Future[None]] = set()


def _keep(task: asyncio.Future[None]) -> None:
    """Holds a background task until it finishes (the loop keeps only weak references)."""
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
