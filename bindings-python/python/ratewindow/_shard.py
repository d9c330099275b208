"""The sharded store: shared counts for a multi-process app with no database.

Each worker process's :class:`ShardedStore` (or :class:`AsyncShardedStore`) asks the manager, which
counts every worker's calls in its own store, over a ``multiprocessing`` connection (a ``Pipe`` to the
parent, or a ``multiprocessing.connection.Listener`` on a Unix socket). The manager answers with
:func:`serve_shards` (a thread per connection). Every operation is one message and one answer; the
protocol (its JSON, ids and checks) is the engine's (``ratewindow_core::shard``), this module only
moves the text.

.. code-block:: python

    # manager
    parent, child = multiprocessing.Pipe()
    server = serve_shards(MemoryStore(), parent)
    multiprocessing.Process(target=worker, args=(child,)).start()

    # worker
    def worker(conn):
        store = ShardedStore(conn, timeout=2.0)
        verdict = store.consume("click:alice", Limit(3, 10_000))

A manager that does not answer within ``timeout`` seconds is a store failure (:class:`ShardError`, a
``StoreError``: ``Guard`` answers it with its policy). The counts live in the manager, so a worker that
restarts keeps them. Without a connection the store counts in this process, in a ``MemoryStore``.

``store.lock(key, ttl, owner=None)`` is the manager's store's lock: each step (``acquire``,
``release``, ``force_release``, ``current_owner``) is one message, and the manager runs it on
``its_store.lock(key, ttl, owner)``, so the lock is exclusive across every worker; outside sharding it
is the local store's lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from . import _ratewindow
from ._errors import InternalError, InvalidArgumentError, InvalidLimitError, StoreError, StoreReplyError
from ._limits import CounterLimit, Entry, GcraLimit, Limit
from ._lock import AsyncLock, Lock
from ._memory import AsyncMemoryStore, MemoryStore
from ._store import AsyncCooldownStore, AttemptResult, CooldownStore, HitResult, Verdict

__all__ = ["AsyncShardedStore", "ShardError", "ShardServer", "ShardedStore", "serve_shards", "serve_shards_async"]


class ShardError(StoreError):
    """A sharded call failed: ``kind`` is ``timeout`` (no answer within ``timeout``), ``closed`` (the
    connection closed), ``malformed`` or ``unknown`` (the manager could not read the request: another
    version), ``unsupported`` (its store has no such operation), ``store`` or ``reply`` (its store
    failed). A ``StoreError``, so a failure guard treats it as a store failure."""

    code = "store"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Conn(Protocol):
    def send_bytes(self, buf: bytes) -> None: ...
    def recv_bytes(self) -> bytes: ...
    def poll(self, timeout: float | None = ...) -> bool: ...
    def fileno(self) -> int: ...


_Failure = tuple[str, str, "str | None", bool]


def _error(f: _Failure, decay: bool = False) -> Exception:
    """The typed exception of a failure the engine read from an answer (or made: timeout, closed)."""
    kind, message, field, _store = f
    if kind == "invalid_limit":
        fld = "uses" if field == "uses" else "window_ms"
        return InvalidLimitError(message, fld, None, "decay_ms" if decay and fld == "window_ms" else fld)
    if kind == "invalid_argument":
        return InvalidArgumentError(message, field or "argument", None)
    if kind == "type":
        return TypeError(message)
    if kind == "internal":
        return InternalError(message)
    return ShardError(kind, message)


_Answer = tuple[int, str, Any]


def _value(answer: _Answer, release: Callable[[int], Callable[[], Any]] | None) -> Any:
    _id, kind, payload = answer
    if kind == "verdict":
        allowed, retry, ts, blocked, limit, remaining, refill, reset, token = payload
        return Verdict(
            allowed,
            retry,
            ts,
            blocked,
            release=release(token) if (release is not None and token is not None) else None,
            limit=limit,
            remaining=remaining,
            refill_after_ms=refill,
            reset_after_ms=reset,
        )
    return payload


class _Link:
    """One connection's requests, shared by every store on it: the engine's client (ids, what each
    expects), the lock that keeps one sync call on the connection at a time, and the asyncio calls
    under way (one event loop per connection)."""

    def __init__(self) -> None:
        self.client = _ratewindow.ShardClient()
        self.lock = threading.Lock()
        self.pending: dict[int, asyncio.Future[_Answer]] = {}
        self.reading: asyncio.AbstractEventLoop | None = None


_links: dict[int, tuple[object, _Link]] = {}
_links_lock = threading.Lock()


def _link(conn: object) -> _Link:
    with _links_lock:
        held = _links.get(id(conn))
        if held is None or held[0] is not conn:
            held = (conn, _Link())
            _links[id(conn)] = held
        return held[1]


class _ShardLockOps:
    """A sharded store's lock steps: each one message to the manager, which runs it on its store's
    lock."""

    __slots__ = ("_store",)

    def __init__(self, store: ShardedStore) -> None:
        self._store = store

    def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Any:
        return self._store._ask(self._store._link.client.lock(op, key, owner, ttl))[2]


class _AsyncShardLockOps:
    """:class:`_ShardLockOps` for :class:`AsyncShardedStore`."""

    __slots__ = ("_store",)

    def __init__(self, store: AsyncShardedStore) -> None:
        self._store = store

    async def run(self, op: str, key: str, owner: str | None, ttl: float | None) -> Any:
        return (await self._store._ask(self._store._link.client.lock(op, key, owner, ttl)))[2]


class ShardedStore(CooldownStore):
    """A cooldown store whose counts live in the manager: each call is one message and one answer over
    ``conn`` (a ``multiprocessing`` ``Connection``). Safe to share between threads (one call on the
    connection at a time). Without ``conn`` it counts in this process, in ``local`` (a new
    ``MemoryStore`` by default)."""

    def __init__(self, conn: _Conn | None = None, *, timeout: float = 5.0, local: MemoryStore | None = None) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (0 < timeout <= 2_147_483):
            raise InvalidArgumentError(f"invalid timeout: {timeout!r} (expected seconds above 0)", "timeout", timeout)
        self.timeout = float(timeout)
        self.sharded = conn is not None
        self._conn = conn
        self._local = (local or MemoryStore()) if conn is None else None
        self._link = _link(conn)
        
    def _ask(self, request: tuple[int, str], decay: bool = False) -> _Answer:
        conn = self._conn
        assert conn is not None
        rid, text = request
        ms = round(self.timeout * 1000)
        # One call on the connection at a time; waiting for the others counts against the timeout.
        if not self._link.lock.acquire(timeout=self.timeout):
            f = self._link.client.forget(rid, ms)
            raise _error(f) if f is not None else ShardError("timeout", "no answer")
        try:
            try:
                conn.send_bytes(text.encode())
            except (OSError, EOFError, ValueError) as e:
                f = self._link.client.forget(rid)
                raise ShardError("closed", f"could not send to the shard manager: {e}") from (
                    None if f is None else e
                )
            deadline = time.monotonic() + self.timeout
            while True:
                left = deadline - time.monotonic()
                try:
                    ready = left > 0 and conn.poll(left)
                    if not ready:
                        f = self._link.client.forget(rid, ms)
                        raise _error(f) if f is not None else ShardError("timeout", "no answer")
                    got = conn.recv_bytes().decode()
                except (OSError, EOFError) as e:
                    f = self._link.client.forget(rid)
                    raise (_error(f) if f is not None else ShardError("closed", str(e))) from e
                answer = self._link.client.answer(got)
                if answer is None or answer[0] != rid:
                    continue  # a late answer to a request that timed out
                if answer[1] == "error":
                    raise _error(answer[2], decay)
                return answer
        finally:
            self._link.lock.release()

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = 250
    ) -> Lock:
        """A lock on ``key`` held for ``ttl`` seconds once taken, owned by ``owner`` (default: a random
        token; pass another lock's ``owner`` to restore it, in any worker). Sharded, each step is one
        message and the manager runs it on its store's lock, so it is exclusive across every worker;
        outside sharding it is the local store's. As a context manager it waits ``wait`` seconds."""
        if self._local is not None:
            return self._local.lock(key, ttl, owner, wait=wait, retry_ms=retry_ms)
        return Lock(_ShardLockOps(self), key, ttl, owner, wait=wait, retry_ms=retry_ms)

    def _releaser(self, token: int) -> Callable[[], None]:
        def release() -> None:
            self._ask(self._link.client.release(token))

        return release

    def consume(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """Counts one call to ``key`` under ``limit`` (the sliding log's :class:`Limit`, a
        :class:`GcraLimit` or a :class:`CounterLimit`), costing ``cost``, in the manager."""
        if self._local is not None:
            return self._local.consume(key, limit, cost=cost)
        return _value(self._ask(self._link.client.limited("consume", key, limit, cost)), None)  # type: ignore[no-any-return]

    def peek(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        if self._local is not None:
            return self._local.peek(key, limit, cost=cost)
        return _value(self._ask(self._link.client.limited("peek", key, limit, cost)), None)  # type: ignore[no-any-return]

    def reset(self, key: str, limit: GcraLimit | CounterLimit) -> None:
        """Forgets ``key``'s GCRA bucket or counter in the manager."""
        if self._local is not None:
            self._local.reset(key, limit)
            return
        self._ask(self._link.client.limited("reset", key, limit))

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry at once; an allowed verdict's ``release()`` gives it back."""
        if self._local is not None:
            return self._local.consume_many(entries)
        return _value(self._ask(self._link.client.batch("consume_many", list(entries))), self._releaser)  # type: ignore[no-any-return]

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing."""
        if self._local is not None:
            return self._local.peek_many(entries)
        return _value(self._ask(self._link.client.batch("peek_many", list(entries))), None)  # type: ignore[no-any-return]

    def _fixed(self, op: str, key: str, *args: Any) -> Any:
        if self._local is not None:
            return getattr(self._local, op)(key, *args)
        decay = op in ("hit", "hit_window", "attempt")
        return _value(self._ask(self._link.client.fixed(op, key, *args), decay), None)

    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Fixed window: adds ``amount`` hits and returns the count."""
        return self._fixed("hit", key, decay_ms, amount)  # type: ignore[no-any-return]

    def hit_window(self, key: str, decay_ms: int | float, amount: int = 1) -> HitResult:
        """:meth:`hit`, with the milliseconds until the window ends."""
        return self._fixed("hit_window", key, decay_ms, amount)  # type: ignore[no-any-return]

    def attempt(self, key: str, max: int, decay_ms: int | float, *, cost: int = 1) -> AttemptResult:
        """Fixed window, atomically: one hit if ``key`` has fewer than ``max`` (``cost`` hits, counted
        only when the count plus ``cost`` is at most ``max``)."""
        if self._local is not None:
            return self._local.attempt(key, max, decay_ms, cost=cost)
        return self._fixed("attempt", key, max, decay_ms, cost)  # type: ignore[no-any-return]

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window."""
        return self._fixed("attempts", key)  # type: ignore[no-any-return]

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a running window."""
        return self._fixed("too_many_attempts", key, max)  # type: ignore[no-any-return]

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        return self._fixed("remaining", key, max)  # type: ignore[no-any-return]

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends."""
        return self._fixed("available_in", key)  # type: ignore[no-any-return]

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends."""
        return self._fixed("available_in_ms", key)  # type: ignore[no-any-return]

    def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window."""
        self._fixed("reset_attempts", key)

    def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        self._fixed("clear", key)


class AsyncShardedStore(AsyncCooldownStore):
    """:class:`ShardedStore` for asyncio: calls run concurrently on one connection (each answer is
    routed to its call by id); the connection is read when it is readable, never blocking the loop."""

    def __init__(self, conn: _Conn | None = None, *, timeout: float = 5.0, local: AsyncMemoryStore | None = None) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (0 < timeout <= 2_147_483):
            raise InvalidArgumentError(f"invalid timeout: {timeout!r} (expected seconds above 0)", "timeout", timeout)
        self.timeout = float(timeout)
        self.sharded = conn is not None
        self._conn = conn
        self._local = (local or AsyncMemoryStore()) if conn is None else None
        self._link = _link(conn)

    def _readable(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            while conn.poll(0):
                answer = self._link.client.answer(conn.recv_bytes().decode())
                if answer is None:
                    continue
                fut = self._link.pending.pop(answer[0], None)
                if fut is not None and not fut.done():
                    fut.set_result(answer)
        except (OSError, EOFError):
            for rid, f in self._link.client.close():
                fut = self._link.pending.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_exception(_error(f))
        if not self._link.pending:
            self._stop_reading()

    def _stop_reading(self) -> None:
        if self._link.reading is not None and self._conn is not None:
            self._link.reading.remove_reader(self._conn.fileno())
            self._link.reading = None

    async def _ask(self, request: tuple[int, str], decay: bool = False) -> _Answer:
        conn = self._conn
        assert conn is not None
        rid, text = request
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_Answer] = loop.create_future()
        self._link.pending[rid] = fut
        if self._link.reading is None:
            loop.add_reader(conn.fileno(), self._readable)
            self._link.reading = loop
        try:
            conn.send_bytes(text.encode())
        except (OSError, EOFError, ValueError) as e:
            self._link.pending.pop(rid, None)
            self._link.client.forget(rid)
            raise ShardError("closed", f"could not send to the shard manager: {e}") from e
        try:
            answer = await asyncio.wait_for(fut, self.timeout)
        except TimeoutError:
            self._link.pending.pop(rid, None)
            if not self._link.pending:
                self._stop_reading()
            f = self._link.client.forget(rid, round(self.timeout * 1000))
            raise (_error(f) if f is not None else ShardError("timeout", "no answer")) from None
        if answer[1] == "error":
            raise _error(answer[2], decay)
        return answer

    def lock(
        self, key: str, ttl: float, owner: str | None = None, *, wait: float = 0, retry_ms: float = 250
    ) -> AsyncLock:
        """:meth:`ShardedStore.lock` for asyncio: the manager's store's lock, each step one message."""
        if self._local is not None:
            return self._local.lock(key, ttl, owner, wait=wait, retry_ms=retry_ms)
        return AsyncLock(_AsyncShardLockOps(self), key, ttl, owner, wait=wait, retry_ms=retry_ms)

    def _releaser(self, token: int) -> Callable[[], Awaitable[None]]:
        async def release() -> None:
            await self._ask(self._link.client.release(token))

        return release

    async def consume(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """Counts one call to ``key`` under ``limit`` (any algorithm), costing ``cost``, in the manager."""
        if self._local is not None:
            return await self._local.consume(key, limit, cost=cost)
        return _value(await self._ask(self._link.client.limited("consume", key, limit, cost)), None)  # type: ignore[no-any-return]

    async def peek(self, key: str, limit: Limit | GcraLimit | CounterLimit, *, cost: int = 1) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        if self._local is not None:
            return await self._local.peek(key, limit, cost=cost)
        return _value(await self._ask(self._link.client.limited("peek", key, limit, cost)), None)  # type: ignore[no-any-return]

    async def reset(self, key: str, limit: GcraLimit | CounterLimit) -> None:
        """Forgets ``key``'s GCRA bucket or counter in the manager."""
        if self._local is not None:
            await self._local.reset(key, limit)
            return
        await self._ask(self._link.client.limited("reset", key, limit))

    async def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry at once; ``await verdict.release()`` gives it back."""
        if self._local is not None:
            return await self._local.consume_many(entries)
        return _value(await self._ask(self._link.client.batch("consume_many", list(entries))), self._releaser)  # type: ignore[no-any-return]

    async def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing."""
        if self._local is not None:
            return await self._local.peek_many(entries)
        return _value(await self._ask(self._link.client.batch("peek_many", list(entries))), None)  # type: ignore[no-any-return]

    async def _fixed(self, op: str, key: str, *args: Any) -> Any:
        if self._local is not None:
            return await getattr(self._local, op)(key, *args)
        decay = op in ("hit", "hit_window", "attempt")
        return _value(await self._ask(self._link.client.fixed(op, key, *args), decay), None)

    async def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Fixed window: adds ``amount`` hits and returns the count."""
        return await self._fixed("hit", key, decay_ms, amount)  # type: ignore[no-any-return]

    async def hit_window(self, key: str, decay_ms: int | float, amount: int = 1) -> HitResult:
        """:meth:`hit`, with the milliseconds until the window ends."""
        return await self._fixed("hit_window", key, decay_ms, amount)  # type: ignore[no-any-return]

    async def attempt(self, key: str, max: int, decay_ms: int | float, *, cost: int = 1) -> AttemptResult:
        """Fixed window, atomically: one hit if ``key`` has fewer than ``max`` (``cost`` hits, counted
        only when the count plus ``cost`` is at most ``max``)."""
        if self._local is not None:
            return await self._local.attempt(key, max, decay_ms, cost=cost)
        return await self._fixed("attempt", key, max, decay_ms, cost)  # type: ignore[no-any-return]

    async def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window."""
        return await self._fixed("attempts", key)  # type: ignore[no-any-return]

    async def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a running window."""
        return await self._fixed("too_many_attempts", key, max)  # type: ignore[no-any-return]

    async def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        return await self._fixed("remaining", key, max)  # type: ignore[no-any-return]

    async def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends."""
        return await self._fixed("available_in", key)  # type: ignore[no-any-return]

    async def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends."""
        return await self._fixed("available_in_ms", key)  # type: ignore[no-any-return]

    async def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window."""
        await self._fixed("reset_attempts", key)

    async def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        await self._fixed("clear", key)


def _failure_of(e: BaseException) -> tuple[str, str | None]:
    """How an exception the manager's store raised crosses to the shard."""
    if isinstance(e, ShardError):
        return e.kind, None
    if isinstance(e, InvalidLimitError):
        return "invalid_limit", e.field
    if isinstance(e, InvalidArgumentError):
        return "invalid_argument", e.field
    if isinstance(e, TypeError):
        return "type", None
    if isinstance(e, InternalError):
        return "internal", None
    if isinstance(e, StoreReplyError):
        return "reply", None
    return "store", None


_LOCK_STEPS = {"acquire": "acquire", "release": "release", "force_release": "force_release", "owner": "current_owner"}
"""The lock method of each lock step of the protocol."""


class ShardServer:
    """The manager's side, from :func:`serve_shards`: a daemon thread per connection answering from
    ``store``. ``close()`` stops taking requests."""

    def __init__(self, store: Any, on_error: Callable[[ShardError], None] | None = None) -> None:
        self.store = store
        self.answered = 0
        self._on_error = on_error
        self._closed = False
        self._holds: dict[int, tuple[Callable[[], Any], float]] = {}
        self._holds_lock = threading.Lock()
        self._next = 0
        self.threads: list[threading.Thread] = []

    @property
    def held(self) -> int:
        """Allowed batches whose ``release()`` the manager still holds."""
        return len(self._holds)

    def serve(self, conn: _Conn) -> threading.Thread:
        """Answers ``conn`` on a daemon thread until it closes."""
        t = threading.Thread(target=self._loop, args=(conn,), daemon=True, name="ratewindow-shard-server")
        t.start()
        self.threads.append(t)
        return t

    def close(self) -> None:
        """Stops answering (each thread ends at its connection's next message or close)."""
        self._closed = True

    def _loop(self, conn: _Conn) -> None:
        while not self._closed:
            try:
                text = conn.recv_bytes().decode(errors="replace")
            except (OSError, EOFError):
                return
            answer = self.handle(text)
            try:
                conn.send_bytes(answer.encode())
            except (OSError, EOFError, ValueError):
                return
            self.answered += 1

    def _hold(self, release: Callable[[], Any], hold_ms: int) -> int:
        now = time.monotonic()
        with self._holds_lock:
            for token, (_, until) in list(self._holds.items()):
                if until > now:
                    break
                del self._holds[token]
            self._next += 1
            self._holds[self._next] = (release, now + hold_ms / 1000)
            return self._next

    def _fail(self, rid: int, e: BaseException) -> str:
        kind, field = _failure_of(e)
        if self._on_error is not None and kind == "store":
            self._on_error(ShardError("store", str(e)))
        return _ratewindow.shard_answer_error(rid, kind, str(e), field)

    def handle(self, text: str) -> str:
        """The answer to one request's text (sync stores)."""
        rid, op, method, args, kwargs, hold_ms, refused = _ratewindow.shard_decode(text)
        if refused is not None:
            if self._on_error is not None:
                self._on_error(ShardError("malformed", f"refused a request: {refused}"))
            return refused
        try:
            value = self._run(op, method, args, kwargs)
        except Exception as e:  # noqa: BLE001 - every failure is answered, never raised in the manager
            return self._fail(rid, e)
        return self._encode(rid, op, value, hold_ms)

    async def handle_async(self, text: str) -> str:
        """The answer to one request's text (asyncio stores)."""
        rid, op, method, args, kwargs, hold_ms, refused = _ratewindow.shard_decode(text)
        if refused is not None:
            if self._on_error is not None:
                self._on_error(ShardError("malformed", f"refused a request: {refused}"))
            return refused
        try:
            value = self._run(op, method, args, kwargs)
            if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
                value = await value
        except Exception as e:  # noqa: BLE001
            return self._fail(rid, e)
        return self._encode(rid, op, value, hold_ms)

    def _run(self, op: str, method: str | None, args: Sequence[Any], kwargs: dict[str, Any] | None) -> Any:
        if method == "release":
            with self._holds_lock:
                held = self._holds.pop(args[0], None)
            return None if held is None else held[0]()
        f = getattr(self.store, method or "", None)
        if not callable(f):
            raise ShardError("unsupported", f"the manager's store has no {method}()")
        if method == "lock":
            # `(step, key, owner, ttl)`: the step on the store's lock, built as the worker built its own.
            step, key, owner, ttl = args
            lock = f(key, ttl, owner)
            return getattr(lock, _LOCK_STEPS[step])()
        # A call costing more than 1 passes `cost=`; a store of the user's own without it still serves
        # every call costing 1.
        return f(*args) if kwargs is None else f(*args, **kwargs)

    def _encode(self, rid: int, op: str, value: Any, hold_ms: int) -> str:
        token = None
        if op == "consumeMany" and getattr(value, "allowed", False) and getattr(value, "releasable", False):
            token = self._hold(value.release, hold_ms)
        return _ratewindow.shard_answer(rid, op, value, token)


def serve_shards(
    store: Any, *conns: _Conn, on_error: Callable[[ShardError], None] | None = None
) -> ShardServer:
    """Answers the workers on ``conns`` (``multiprocessing`` connections) from ``store`` (any ratewindow
    store, sync; for an asyncio store use :meth:`ShardServer.handle_async` in a task of your own), a
    daemon thread per connection. Serve more later with ``server.serve(conn)``. A request the manager
    cannot read is answered with a typed error; the manager keeps serving."""
    server = ShardServer(store, on_error)
    for conn in conns:
        server.serve(conn)
    return server




async def serve_shards_async(
    store: Any, *conns: _Conn, on_error: Callable[[ShardError], None] | None = None
) -> None:
    """Answers the workers on ``conns`` from an asyncio ``store`` (``AsyncMemoryStore``,
    ``AsyncRedisStore`` ...) in this event loop, each request in a task of its own (so a slow call does
    not hold the others), until every connection has closed or the task is cancelled."""
    server = ShardServer(store, on_error)
    loop = asyncio.get_running_loop()
    closed = 0
    done: asyncio.Future[None] = loop.create_future()
    tasks: set[asyncio.Task[None]] = set()

    async def answer(conn: _Conn, text: str) -> None:
        reply = await server.handle_async(text)
        try:
            conn.send_bytes(reply.encode())
            server.answered += 1
        except (OSError, EOFError, ValueError):
            pass

    def readable(conn: _Conn) -> None:
        nonlocal closed
        try:
            while conn.poll(0):
                text = conn.recv_bytes().decode(errors="replace")
                task = loop.create_task(answer(conn, text))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except (OSError, EOFError):
            loop.remove_reader(conn.fileno())
            closed += 1
            if closed == len(conns) and not done.done():
                done.set_result(None)

    for conn in conns:
        loop.add_reader(conn.fileno(), readable, conn)
    try:
        if conns:
            await done
    finally:
        for conn in conns:
            try:
                loop.remove_reader(conn.fileno())
            except (OSError, ValueError):
                pass
