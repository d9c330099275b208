"""PostgreSQL stores over the user's own psycopg 3 connection or pool, for sync and asyncio code.

Every call is **one statement**: the schema installs two functions (``{prefix}_consume`` and
``{prefix}_window``) that take each key's advisory lock in a fixed order, trim, check and record every
entry of the call, timed by the server's ``clock_timestamp()``. On an autocommit connection that is
one round trip and one transaction per call, however many entries.

Both stores run the same operations: each is a generator (see :mod:`ratewindow._sansio`) that yields
the core's statement and decodes the rows it is sent back. :class:`PostgresStore` answers them with a
blocking connection, :class:`AsyncPostgresStore` with an asyncio one. psycopg is imported only when a
store is made, so ``ratewindow`` does not need it installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from . import _ratewindow
from ._errors import StoreError
from ._limits import Entry, Limit
from ._sansio import Op, run_async, run_sync
from ._store import AsyncCooldownStore, CooldownStore, Verdict

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresStore", "AsyncPostgresStore"]

Request: TypeAlias = tuple[str, list[Any]]
"""A statement: its SQL (``$1`` placeholders) and its parameters."""
Rows: TypeAlias = list[tuple[Any, ...]]
"""The rows a statement returned (``[]`` for one that returns none)."""
Window: TypeAlias = tuple[int, int] | None
Planner = _ratewindow.PostgresPlanner



def _durable_inside(conn: Any, params: Any) -> Any:
    """The statement's parameters, planned durable when it runs inside a transaction of the caller's.

    The functions' last parameter says whether the transaction they run in may skip the WAL flush
    (``synchronous_commit = off``, local to the transaction). That suits a call that is its own
    transaction; inside the caller's, it would apply to the caller's commit, so it is turned off."""
    import psycopg

    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE and params and params[-1] is True:
        return [*params[:-1], False]
    return params

def _call_id() -> str:
    """A fresh random id for one call: it marks the call's rows, so a release removes exactly them."""
    return os.urandom(16).hex()


# --- the operations, written once -----------------------------------------------------------------


def _consume(p: Planner, key: str, limit: Limit) -> Op[Request, Rows, Verdict]:
    rows = yield p.consume(key, limit, _call_id())
    return Planner.decode_single(rows)


def _peek(p: Planner, key: str, limit: Limit) -> Op[Request, Rows, Verdict]:
    rows = yield p.peek(key, limit)
    return Planner.decode_single(rows)


def _consume_many(
    p: Planner, entries: Iterable[Entry], releaser: Callable[[list[str], str], Callable[[], object]]
) -> Op[Request, Rows, Verdict]:
    call_id = _call_id()
    sql, params, n, keys = p.consume_many(entries, call_id)
    rows = yield sql, params
    verdict = Planner.decode_batch(rows, n)
    if verdict.allowed:
        return Verdict(True, release=releaser(keys, call_id))
    return verdict


def _peek_many(p: Planner, entries: Iterable[Entry]) -> Op[Request, Rows, Verdict]:
    sql, params, n = p.peek_many(entries)
    rows = yield sql, params
    return Planner.decode_batch(rows, n)


def _release(p: Planner, keys: list[str], call_id: str) -> Op[Request, Rows, None]:
    yield p.release(keys, call_id)


def _window(request: Request) -> Op[Request, Rows, Window]:
    rows = yield request
    return Planner.decode_window(rows)


def _purge(p: Planner) -> Op[Request, Rows, tuple[int, int]]:
    rows = yield p.purge()
    return Planner.decode_purge(rows)


def _count(window: Window) -> int:
    return 0 if window is None else window[0]


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    return value


def _failed(error: BaseException) -> StoreError:
    store_error = StoreError(f"PostgreSQL failed the call: {error}")
    store_error.__cause__ = error
    return store_error


def _not_idle() -> StoreError:
    return StoreError("install_schema() needs a connection that is not inside a transaction")


# --- sync -----------------------------------------------------------------------------------------


def _sync_executor(target: object) -> tuple[Callable[[Request], Rows], Callable[[str], None]]:
    """``execute(request) -> rows`` and ``script(sql)`` over a psycopg ``Connection`` or
    ``ConnectionPool``; driver errors become :class:`StoreError` with the driver's error as cause."""
    import psycopg
    from psycopg.rows import tuple_row

    # A bare connection shared by threads: one BEGIN … COMMIT at a time (psycopg locks each statement,
    # not the transaction around it). A pool lends each call a connection of its own.
    lock: threading.Lock | contextlib.nullcontext[None] = (
        threading.Lock() if isinstance(target, psycopg.Connection) else contextlib.nullcontext()
    )

    def run(conn: psycopg.Connection[Any], request: Request) -> Rows:
        sql, params = request
        with psycopg.RawCursor(conn, row_factory=tuple_row) as cur:
            if conn.autocommit:
                cur.execute(sql, params)
                return cur.fetchall() if cur.description is not None else []
            # Not autocommit: BEGIN … COMMIT around the statement (a savepoint inside a transaction of
            # the caller's), so the advisory locks are released at once and an error rolls back.
            params = _durable_inside(conn, params)
            with lock, conn.transaction():
                cur.execute(sql, params)
                return cur.fetchall() if cur.description is not None else []

    def run_script(conn: psycopg.Connection[Any], sql: str) -> None:
        if conn.autocommit:
            conn.execute(sql.encode())
            return
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise _not_idle()
        conn.autocommit = True
        try:
            conn.execute(sql.encode())
        finally:
            conn.autocommit = False

    if isinstance(target, psycopg.Connection):
        conn = target

        def execute(request: Request) -> Rows:
            try:
                return run(conn, request)
            except psycopg.Error as error:
                raise _failed(error) from error

        def script(sql: str) -> None:
            try:
                run_script(conn, sql)
            except psycopg.Error as error:
                raise _failed(error) from error

        return execute, script

    pool = _sync_pool(target)

    def execute_pooled(request: Request) -> Rows:
        try:
            with pool.connection() as conn:
                return run(conn, request)
        except psycopg.Error as error:
            raise _failed(error) from error

    def script_pooled(sql: str) -> None:
        try:
            with pool.connection() as conn:
                run_script(conn, sql)
        except psycopg.Error as error:
            raise _failed(error) from error

    return execute_pooled, script_pooled


def _sync_pool(target: object) -> psycopg_pool.ConnectionPool[Any]:
    try:
        import psycopg_pool
    except ImportError:  # pragma: no cover - without psycopg_pool there are no pools to be given
        psycopg_pool = None  # type: ignore[assignment]
    if psycopg_pool is not None and isinstance(target, psycopg_pool.ConnectionPool):
        return target
    if _is_async_target(target):
        raise TypeError("an asyncio connection or pool goes to AsyncPostgresStore.using()")
    raise TypeError(
        f"PostgresStore.using() takes a psycopg Connection or a psycopg_pool ConnectionPool, "
        f"not {type(target).__name__}"
    )


def _is_async_target(target: object) -> bool:
    import psycopg

    if isinstance(target, psycopg.AsyncConnection):
        return True
    try:
        import psycopg_pool
    except ImportError:  # pragma: no cover
        return False
    return isinstance(target, psycopg_pool.AsyncConnectionPool)


class PostgresStore(CooldownStore):
    """Both algorithms on PostgreSQL, over your own psycopg 3 ``Connection`` or ``ConnectionPool``.

    Make one with :meth:`using`; run :meth:`install_schema` (or :meth:`schema` through your migrations)
    once per database. Every call is one statement in one transaction, timed by the server's clock,
    so every process and host that shares the database counts against the same log, exactly.

    - An **autocommit** connection (``psycopg.connect(..., autocommit=True)``, or a pool made with
      ``kwargs={"autocommit": True}``) gives one round trip per call. Otherwise each call runs in
      ``conn.transaction()``: ``BEGIN``, the statement, ``COMMIT`` (three round trips), or a savepoint
      when the connection is already inside a transaction of yours (the call then commits with it, and
      is planned durable so your commit keeps the server's ``synchronous_commit``).
    - One connection shared by threads serialises their calls (psycopg locks it); a pool runs them side
      by side.
    - Any driver error (lost connection, statement timeout, a missing table…) raises
      :class:`~ratewindow.StoreError` with the driver's error as ``__cause__``. The call is one
      transaction: an error before its commit rolls all of it back (a connection lost after the commit
      leaves it counted, whole; never half). A pool replaces a broken connection; a bare connection
      stays broken until you reconnect.
    """

    __slots__ = ("_planner", "_execute", "_script", "_releaser")

    def __init__(self, target: object, *, prefix: str = "ratewindow", durable: bool = False) -> None:
        """Prefer :meth:`using`. ``prefix`` names the tables and functions (``[a-z_][a-z0-9_]*``)."""
        self._planner = Planner(prefix, durable)
        self._execute, self._script = _sync_executor(target)
        self._releaser = functools.partial(_sync_release, self._planner, self._execute)

    @classmethod
    def using(
        cls,
        target: psycopg.Connection[Any] | psycopg_pool.ConnectionPool[Any],
        *,
        prefix: str = "ratewindow",
        durable: bool = False,
    ) -> PostgresStore:
        """A store over ``target``, a psycopg ``Connection`` or ``psycopg_pool.ConnectionPool`` (yours:
        the store never opens or closes a connection). Objects are named ``{prefix}_…``.

        ``durable`` plans every call to wait for its commit's flush: by default the functions
        commit their own transaction with ``synchronous_commit = off`` (a call does not wait for the WAL
        flush; a server crash may lose the last moments' calls); ``durable=True`` keeps the server's
        setting. Installing again switches an existing database."""
        return cls(target, prefix=prefix, durable=durable)

    @property
    def prefix(self) -> str:
        """The name prefix of the tables and functions."""
        return self._planner.prefix

    def schema(self) -> str:
        """The schema as SQL (one transaction; idempotent), for your migrations."""
        return self._planner.schema()

    def install_schema(self) -> None:
        """Runs :meth:`schema`: safe to run again, and from several processes at once."""
        self._script(self._planner.schema())

    # Sliding window (cooldowns).
    def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit``: allowed and recorded, or refused with the wait."""
        verdict: Verdict = run_sync(_consume(self._planner, key, limit), self._execute)
        return verdict

    def peek(self, key: str, limit: Limit) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        verdict: Verdict = run_sync(_peek(self._planner, key, limit), self._execute)
        return verdict

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry, all or nothing, in one statement. An allowed verdict's
        ``release()`` deletes exactly this call's rows (once)."""
        verdict: Verdict = run_sync(_consume_many(self._planner, entries, self._releaser), self._execute)
        return verdict

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing."""
        verdict: Verdict = run_sync(_peek_many(self._planner, entries), self._execute)
        return verdict

    # Fixed window (rate limiter), in milliseconds.
    def _window(self, request: Request) -> Window:
        window: Window = run_sync(_window(request), self._execute)
        return window

    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits to ``key``'s window (opened by the first hit, lasting ``decay_ms``)."""
        return _count(self._window(self._planner.hit(key, decay_ms, amount)))

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window; 0 when none runs."""
        return _count(self._window(self._planner.get_window(key)))

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a window that still runs."""
        max = _whole("max", max)
        window = self._window(self._planner.get_window(key))
        return window is not None and window[0] >= max

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        max = _whole("max", max)
        return _floor0(max - self.attempts(key))

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends, rounded up; 0 when none runs."""
        window = self._window(self._planner.get_window(key))
        return 0 if window is None else -(-window[1] // 1000)

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends; 0 when none runs."""
        window = self._window(self._planner.get_window(key))
        return 0 if window is None else window[1]

    def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window running."""
        self._window(self._planner.reset_attempts(key))

    def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        self._window(self._planner.clear(key))

    def purge(self) -> tuple[int, int]:
        """Deletes every call that has left its windows and every ended window, by the server's clock;
        returns ``(calls deleted, windows deleted)``. Never needed for correctness (rows also leave as
        their keys are used): schedule it, e.g. hourly, to drop keys that are never used again."""
        purged: tuple[int, int] = run_sync(_purge(self._planner), self._execute)
        return purged


def _sync_release(
    planner: Planner, execute: Callable[[Request], Rows], keys: list[str], call_id: str
) -> Callable[[], None]:
    return functools.partial(run_sync, _release(planner, keys, call_id), execute)


# --- asyncio --------------------------------------------------------------------------------------


def _async_executor(
    target: object,
) -> tuple[Callable[[Request], Awaitable[Rows]], Callable[[str], Awaitable[None]]]:
    """As :func:`_sync_executor`, over a psycopg ``AsyncConnection`` or ``AsyncConnectionPool``."""
    import psycopg
    from psycopg.rows import tuple_row

    lock: asyncio.Lock | contextlib.nullcontext[None] = (
        asyncio.Lock() if isinstance(target, psycopg.AsyncConnection) else contextlib.nullcontext()
    )

    async def run(conn: psycopg.AsyncConnection[Any], request: Request) -> Rows:
        sql, params = request
        async with psycopg.AsyncRawCursor(conn, row_factory=tuple_row) as cur:
            if conn.autocommit:
                await cur.execute(sql, params)
                return await cur.fetchall() if cur.description is not None else []
            params = _durable_inside(conn, params)
            async with lock, conn.transaction():
                await cur.execute(sql, params)
                return await cur.fetchall() if cur.description is not None else []

    async def run_script(conn: psycopg.AsyncConnection[Any], sql: str) -> None:
        if conn.autocommit:
            await conn.execute(sql.encode())
            return
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise _not_idle()
        await conn.set_autocommit(True)
        try:
            await conn.execute(sql.encode())
        finally:
            await conn.set_autocommit(False)

    if isinstance(target, psycopg.AsyncConnection):
        conn = target

        async def execute(request: Request) -> Rows:
            try:
                return await run(conn, request)
            except psycopg.Error as error:
                raise _failed(error) from error

        async def script(sql: str) -> None:
            try:
                await run_script(conn, sql)
            except psycopg.Error as error:
                raise _failed(error) from error

        return execute, script

    pool = _async_pool(target)

    async def execute_pooled(request: Request) -> Rows:
        try:
            async with pool.connection() as conn:
                return await run(conn, request)
        except psycopg.Error as error:
            raise _failed(error) from error

    async def script_pooled(sql: str) -> None:
        try:
            async with pool.connection() as conn:
                await run_script(conn, sql)
        except psycopg.Error as error:
            raise _failed(error) from error

    return execute_pooled, script_pooled


def _async_pool(target: object) -> psycopg_pool.AsyncConnectionPool[Any]:
    try:
        import psycopg_pool
    except ImportError:  # pragma: no cover
        psycopg_pool = None  # type: ignore[assignment]
    if psycopg_pool is not None and isinstance(target, psycopg_pool.AsyncConnectionPool):
        return target
    raise TypeError(
        f"AsyncPostgresStore.using() takes a psycopg AsyncConnection or a psycopg_pool "
        f"AsyncConnectionPool, not {type(target).__name__}"
    )


class AsyncPostgresStore(AsyncCooldownStore):
    """:class:`PostgresStore` for asyncio code, over your own psycopg ``AsyncConnection`` or
    ``AsyncConnectionPool``: the same statements and decoders, awaited.

    An allowed batch verdict's ``release()`` returns a coroutine: ``await verdict.release()``.
    """

    __slots__ = ("_planner", "_execute", "_script", "_releaser")

    def __init__(self, target: object, *, prefix: str = "ratewindow", durable: bool = False) -> None:
        """Prefer :meth:`using`."""
        self._planner = Planner(prefix, durable)
        self._execute, self._script = _async_executor(target)
        self._releaser = functools.partial(_async_release, self._planner, self._execute)

    @classmethod
    def using(
        cls,
        target: psycopg.AsyncConnection[Any] | psycopg_pool.AsyncConnectionPool[Any],
        *,
        prefix: str = "ratewindow",
        durable: bool = False,
    ) -> AsyncPostgresStore:
        """A store over ``target``, a psycopg ``AsyncConnection`` or ``AsyncConnectionPool`` (yours);
        ``prefix`` and ``durable`` as in :meth:`PostgresStore.using`."""
        return cls(target, prefix=prefix, durable=durable)

    @property
    def prefix(self) -> str:
        """The name prefix of the tables and functions."""
        return self._planner.prefix

    def schema(self) -> str:
        """The schema as SQL (one transaction; idempotent), for your migrations."""
        return self._planner.schema()

    async def install_schema(self) -> None:
        """Runs :meth:`schema`: safe to run again, and from several processes at once."""
        await self._script(self._planner.schema())

    async def consume(self, key: str, limit: Limit) -> Verdict:
        """See :meth:`PostgresStore.consume`."""
        verdict: Verdict = await run_async(_consume(self._planner, key, limit), self._execute)
        return verdict

    async def peek(self, key: str, limit: Limit) -> Verdict:
        """See :meth:`PostgresStore.peek`."""
        verdict: Verdict = await run_async(_peek(self._planner, key, limit), self._execute)
        return verdict

    async def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`PostgresStore.consume_many`; ``release()`` returns a coroutine."""
        op = _consume_many(self._planner, entries, self._releaser)
        verdict: Verdict = await run_async(op, self._execute)
        return verdict

    async def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """See :meth:`PostgresStore.peek_many`."""
        verdict: Verdict = await run_async(_peek_many(self._planner, entries), self._execute)
        return verdict

    async def _window(self, request: Request) -> Window:
        window: Window = await run_async(_window(request), self._execute)
        return window

    async def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """See :meth:`PostgresStore.hit`."""
        return _count(await self._window(self._planner.hit(key, decay_ms, amount)))

    async def attempts(self, key: str) -> int:
        """See :meth:`PostgresStore.attempts`."""
        return _count(await self._window(self._planner.get_window(key)))

    async def too_many_attempts(self, key: str, max: int) -> bool:
        """See :meth:`PostgresStore.too_many_attempts`."""
        max = _whole("max", max)
        window = await self._window(self._planner.get_window(key))
        return window is not None and window[0] >= max

    async def remaining(self, key: str, max: int) -> int:
        """See :meth:`PostgresStore.remaining`."""
        max = _whole("max", max)
        return _floor0(max - await self.attempts(key))

    async def available_in(self, key: str) -> int:
        """See :meth:`PostgresStore.available_in`."""
        window = await self._window(self._planner.get_window(key))
        return 0 if window is None else -(-window[1] // 1000)

    async def available_in_ms(self, key: str) -> int:
        """See :meth:`PostgresStore.available_in_ms`."""
        window = await self._window(self._planner.get_window(key))
        return 0 if window is None else window[1]

    async def reset_attempts(self, key: str) -> None:
        """See :meth:`PostgresStore.reset_attempts`."""
        await self._window(self._planner.reset_attempts(key))

    async def clear(self, key: str) -> None:
        """See :meth:`PostgresStore.clear`."""
        await self._window(self._planner.clear(key))

    async def purge(self) -> tuple[int, int]:
        """See :meth:`PostgresStore.purge`. For a periodic purge in an asyncio service::

            async def purge_hourly(store: AsyncPostgresStore) -> None:
                while True:
                    await store.purge()
                    await asyncio.sleep(3600)
        """
        purged: tuple[int, int] = await run_async(_purge(self._planner), self._execute)
        return purged


def _floor0(value: int) -> int:
    return value if value > 0 else 0


def _async_release(
    planner: Planner, execute: Callable[[Request], Awaitable[Rows]], keys: list[str], call_id: str
) -> Callable[[], Awaitable[None]]:
    return functools.partial(run_async, _release(planner, keys, call_id), execute)
