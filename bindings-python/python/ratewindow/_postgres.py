"""PostgreSQL stores over the user's own psycopg 3 connection or pool (or any driver), for sync and
asyncio code.

Every call is **one statement**, timed by the server's ``clock_timestamp()``. The log is a row per key:
a one-entry call reads the key's row and answers a refusal from it (no lock, no write), and a call it
lets through is written back by compare-and-set in the installed ``{prefix}_put1``; a batch runs
``{prefix}_sliding``, which locks its keys' rows in key order. On an autocommit connection that is one
round trip and one transaction per call, however many entries.

Both stores drive the core's call machines (see :mod:`ratewindow._sansio`): :class:`PostgresStore`
with a blocking connection, :class:`AsyncPostgresStore` with an asyncio one. psycopg is imported only
when a store is made, so ``ratewindow`` does not need it installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from . import _ratewindow
from ._errors import StoreError
from ._sansio import Failed
from ._store import AsyncCallStore, CallStore

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresStore", "AsyncPostgresStore"]

Rows: TypeAlias = list[tuple[Any, ...]]
"""The rows a statement returned (``[]`` for one that returns none)."""
Query: TypeAlias = Callable[[str, list[Any]], Any]
"""``query(sql, params) -> rows``: runs one statement (``$1`` placeholders) with your own driver."""
AsyncQuery: TypeAlias = Callable[[str, list[Any]], Awaitable[Any]]
"""``query(sql, params)``, awaitable."""


def _durable_inside(conn: Any, params: Any) -> Any:
    """The statement's parameters, planned durable when it runs inside a transaction of the caller's.

    The functions' last parameter says whether the transaction they run in may skip the WAL flush
    (``synchronous_commit = off``, local to the transaction). That suits a call that is its own
    transaction; inside the caller's, it would apply to the caller's commit, so it is turned off."""
    import psycopg

    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE and params and params[-1] is True:
        return [*params[:-1], False]
    return params


def _failed(error: BaseException) -> StoreError:
    store_error = StoreError(f"PostgreSQL failed the call: {error}")
    store_error.__cause__ = error
    return store_error


def _not_idle() -> StoreError:
    return StoreError("install_schema() needs a connection that is not inside a transaction")


def _has_rows(cur: Any) -> bool:
    """Whether the statement just run returned rows (a result set, maybe empty). Read from the
    libpq result's status: ``cur.description`` would build a column object per column every call."""
    import psycopg

    result = cur.pgresult
    return result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK


def _sync_query(query: Query) -> Callable[[_ratewindow.Sql], Any]:
    def execute(command: _ratewindow.Sql) -> Any:
        try:
            rows: Any = []
            for sql, params in command.statements:
                rows = query(sql, params)
            return rows
        except Exception as error:  # noqa: BLE001 - the call decides what it means
            return Failed(error)

    return execute


def _async_query(query: AsyncQuery) -> Callable[[_ratewindow.Sql], Awaitable[Any]]:
    async def execute(command: _ratewindow.Sql) -> Any:
        try:
            rows: Any = []
            for sql, params in command.statements:
                rows = await query(sql, params)
            return rows
        except Exception as error:  # noqa: BLE001 - the call decides what it means
            return Failed(error)

    return execute


# --- sync -----------------------------------------------------------------------------------------


def _sync_executor(target: object) -> tuple[Query, Callable[[str], None]]:
    """``query(sql, params) -> rows`` and ``script(sql)`` over a psycopg ``Connection`` or
    ``ConnectionPool``, or a ``query`` function of your own (which cannot run a script)."""
    import psycopg
    from psycopg.rows import tuple_row

    if _is_query(target):
        return cast(Query, target), _no_script
    # A bare connection shared by threads: one BEGIN … COMMIT at a time (psycopg locks each statement,
    # not the transaction around it). A pool lends each call a connection of its own.
    lock: threading.Lock | contextlib.nullcontext[None] = (
        threading.Lock() if isinstance(target, psycopg.Connection) else contextlib.nullcontext()
    )

    def run(conn: psycopg.Connection[Any], sql: str, params: list[Any]) -> Rows:
        with psycopg.RawCursor(conn, row_factory=tuple_row) as cur:
            if conn.autocommit:
                cur.execute(sql, params)
                return cur.fetchall() if _has_rows(cur) else []
            # Not autocommit: BEGIN … COMMIT around the statement (a savepoint inside a transaction of
            # the caller's), so the row locks are released at once and an error rolls back.
            params = _durable_inside(conn, params)
            with lock, conn.transaction():
                cur.execute(sql, params)
                return cur.fetchall() if _has_rows(cur) else []

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

        def execute(sql: str, params: list[Any]) -> Rows:
            return run(conn, sql, params)

        def script(sql: str) -> None:
            try:
                run_script(conn, sql)
            except psycopg.Error as error:
                raise _failed(error) from error

        return execute, script

    pool = _sync_pool(target)

    def execute_pooled(sql: str, params: list[Any]) -> Rows:
        with pool.connection() as conn:
            return run(conn, sql, params)

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


def _is_query(target: object) -> bool:
    """A function of the user's own (a connection or a pool is not callable)."""
    return hasattr(target, "__call__")  # not callable(): its narrowing of `object` trips stubtest


def _no_script(sql: str) -> None:
    raise StoreError("a store over a query function cannot install its schema: run schema() yourself")


class PostgresStore(CallStore):
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

    __slots__ = ("_script", "_query")

    def __init__(self, target: object, *, prefix: str = "ratewindow", durable: bool = False) -> None:
        """Prefer :meth:`using`. ``prefix`` names the tables and functions (``[a-z_][a-z0-9_]*``)."""
        self._machine = _ratewindow.Machine.postgres_store(prefix, durable, release=self._release)
        self._query, self._script = _sync_executor(target)
        self._execute = _sync_query(self._query)  # type: ignore[assignment]

    @classmethod
    def using(
        cls,
        target: psycopg.Connection[Any] | psycopg_pool.ConnectionPool[Any] | Query,
        *,
        prefix: str = "ratewindow",
        durable: bool = False,
    ) -> PostgresStore:
        """A store over ``target``, a psycopg ``Connection`` or ``psycopg_pool.ConnectionPool`` (yours:
        the store never opens or closes a connection), or a function ``query(sql, params) -> rows`` of
        your own driver (``$1`` placeholders; rows as tuples). Objects are named ``{prefix}_…``.

        ``durable`` plans every call to wait for its commit's flush: by default the functions
        commit their own transaction with ``synchronous_commit = off`` (a call does not wait for the WAL
        flush; a server crash may lose the last moments' calls); ``durable=True`` keeps the server's
        setting. Installing again switches an existing database."""
        return cls(target, prefix=prefix, durable=durable)

    def schema(self) -> str:
        """The schema as SQL (one transaction; idempotent), for your migrations."""
        return self._machine.schema()

    def install_schema(self) -> None:
        """Runs :meth:`schema`: safe to run again, and from several processes at once."""
        self._script(self._machine.schema())

    def purge(self) -> tuple[int, int]:
        """Deletes every call that has left its windows, every ended window, every lock whose TTL
        ended and every GCRA bucket full again or counter whose counts weigh nothing, by the server's clock; returns ``(calls deleted, windows deleted)``. Never needed for correctness (rows also leave as
        their keys are used): schedule it, e.g. hourly, to drop keys that are never used again."""
        ((sql, params),) = self._machine.purge()
        try:
            rows = self._query(sql, params)
        except Exception as error:
            raise _failed(error) from error
        return _ratewindow.Machine.decode_purge(rows)


# --- asyncio --------------------------------------------------------------------------------------


def _async_executor(target: object) -> tuple[AsyncQuery, Callable[[str], Awaitable[None]]]:
    """As :func:`_sync_executor`, over a psycopg ``AsyncConnection`` or ``AsyncConnectionPool``."""
    import psycopg
    from psycopg.rows import tuple_row

    if _is_query(target):

        async def no_script(sql: str) -> None:
            _no_script(sql)

        return cast(AsyncQuery, target), no_script

    lock: asyncio.Lock | contextlib.nullcontext[None] = (
        asyncio.Lock() if isinstance(target, psycopg.AsyncConnection) else contextlib.nullcontext()
    )

    async def run(conn: psycopg.AsyncConnection[Any], sql: str, params: list[Any]) -> Rows:
        async with psycopg.AsyncRawCursor(conn, row_factory=tuple_row) as cur:
            if conn.autocommit:
                await cur.execute(sql, params)
                return await cur.fetchall() if _has_rows(cur) else []
            params = _durable_inside(conn, params)
            async with lock, conn.transaction():
                await cur.execute(sql, params)
                return await cur.fetchall() if _has_rows(cur) else []

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

        async def execute(sql: str, params: list[Any]) -> Rows:
            return await run(conn, sql, params)

        async def script(sql: str) -> None:
            try:
                await run_script(conn, sql)
            except psycopg.Error as error:
                raise _failed(error) from error

        return execute, script

    pool = _async_pool(target)

    async def execute_pooled(sql: str, params: list[Any]) -> Rows:
        async with pool.connection() as conn:
            return await run(conn, sql, params)

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


class AsyncPostgresStore(AsyncCallStore):
    """:class:`PostgresStore` for asyncio code, over your own psycopg ``AsyncConnection`` or
    ``AsyncConnectionPool`` (or an awaitable ``query(sql, params)``): the same calls, awaited.

    An allowed batch verdict's ``release()`` returns a coroutine: ``await verdict.release()``.
    """

    __slots__ = ("_script", "_query")

    def __init__(self, target: object, *, prefix: str = "ratewindow", durable: bool = False) -> None:
        """Prefer :meth:`using`."""
        self._machine = _ratewindow.Machine.postgres_store(prefix, durable, release=self._release)
        self._query, self._script = _async_executor(target)
        self._execute = _async_query(self._query)  # type: ignore[assignment]

    @classmethod
    def using(
        cls,
        target: psycopg.AsyncConnection[Any] | psycopg_pool.AsyncConnectionPool[Any] | AsyncQuery,
        *,
        prefix: str = "ratewindow",
        durable: bool = False,
    ) -> AsyncPostgresStore:
        """A store over ``target``, a psycopg ``AsyncConnection`` or ``AsyncConnectionPool`` (yours), or
        an awaitable ``query(sql, params) -> rows``; ``prefix`` and ``durable`` as in
        :meth:`PostgresStore.using`."""
        return cls(target, prefix=prefix, durable=durable)

    def schema(self) -> str:
        """The schema as SQL (one transaction; idempotent), for your migrations."""
        return self._machine.schema()

    async def install_schema(self) -> None:
        """Runs :meth:`schema`: safe to run again, and from several processes at once."""
        await self._script(self._machine.schema())

    async def purge(self) -> tuple[int, int]:
        """See :meth:`PostgresStore.purge`. For a periodic purge in an asyncio service::

            async def purge_hourly(store: AsyncPostgresStore) -> None:
                while True:
                    await store.purge()
                    await asyncio.sleep(3600)
        """
        ((sql, params),) = self._machine.purge()
        try:
            rows = await self._query(sql, params)
        except Exception as error:
            raise _failed(error) from error
        return _ratewindow.Machine.decode_purge(rows)


