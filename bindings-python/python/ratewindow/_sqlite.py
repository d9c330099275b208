"""A SQLite store over the standard library's ``sqlite3``: no server, exact across the processes that
share one database file.

A consume runs ``BEGIN IMMEDIATE`` (the file's write lock, taken before anything is read), trims and
reads the call's keys, lets the core decide, records the call and commits; any error rolls it back —
every step is the core's call machine, this module runs its statements. Two processes can therefore
never both take the last use. Times are this host's clock: one file, one host, one clock.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from . import _ratewindow
from ._errors import StoreError
from ._sansio import Failed, drive, run_sync
from ._store import CallStore

__all__ = ["SqliteStore"]

Query: TypeAlias = Callable[[str, list[Any]], Any]
"""``query(sql, params) -> rows``: runs one statement (``?`` placeholders)."""
T = TypeVar("T")


def _check_autocommit(connection: sqlite3.Connection) -> None:
    """The store runs its own ``BEGIN IMMEDIATE`` / ``COMMIT``: the sqlite3 module must not open
    transactions of its own around them."""
    autocommit = getattr(connection, "autocommit", None)  # Python 3.12+
    if autocommit is True:
        return
    if autocommit is False:
        raise ValueError(
            "SqliteStore needs a connection that does not open transactions implicitly: "
            "connect with autocommit=True (or isolation_level=None), not autocommit=False"
        )
    if connection.isolation_level is not None:
        raise ValueError(
            "SqliteStore needs a connection that does not open transactions implicitly: "
            "sqlite3.connect(path, isolation_level=None) (or autocommit=True on Python 3.12+)"
        )


class SqliteStore(CallStore):
    """Both algorithms in a SQLite database, over your own ``sqlite3.Connection``.

    .. code-block:: python

        connection = sqlite3.connect("limits.db", isolation_level=None, check_same_thread=False)
        store = SqliteStore(connection)

    - The connection must leave transactions to the store: open it with ``isolation_level=None``
      (Python 3.12+: or ``autocommit=True``); otherwise ``ValueError``. The store runs
      ``PRAGMA busy_timeout = 5000`` on it (``busy_timeout_ms``), so a call waits up to 5 s for another
      process's write.
    - Share one store (not one connection under two stores) between threads, with the connection
      opened ``check_same_thread=False``: the store holds its lock for the few statements of each call.
      Processes each open their own connection to the same file; ``BEGIN IMMEDIATE`` makes them take
      turns. (WAL mode, ``PRAGMA journal_mode=WAL``, lets peeks read while another process writes.)
    - ``install_schema`` (default ``True``) creates the tables if they are missing.
    - ``clock`` returns whole Unix ms (default: this host's clock).
    - Any ``sqlite3`` error raises :class:`~ratewindow.StoreError` with it as ``__cause__``, after
      ``ROLLBACK``: nothing of the call is recorded.

    Instead of a connection, ``connection`` may be a function ``query(sql, params) -> rows`` of your
    own (no setup or schema is run on it).
    """

    __slots__ = ("_connection", "_query", "_lock", "_outer")
    _query: Query

    def __init__(
        self,
        connection: sqlite3.Connection | Query,
        *,
        prefix: str = "ratewindow",
        install_schema: bool = True,
        clock: Callable[[], int] | None = None,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self._machine = _ratewindow.Machine.sqlite_store(prefix, clock, release=self._release)
        # A call is several statements that must not interleave with another thread's on this connection.
        self._lock = threading.Lock()
        self._outer = False
        if isinstance(connection, sqlite3.Connection):
            _check_autocommit(connection)
            self._connection: sqlite3.Connection | None = connection
            try:
                cursor = connection.cursor()
                cursor.row_factory = None  # tuples, whatever the connection's row_factory
                cursor.execute(_ratewindow.Machine.sqlite_connection_setup(busy_timeout_ms))
            except sqlite3.Error as error:
                raise _failed(error) from error

            def query(sql: str, params: list[Any]) -> Any:
                return cursor.execute(sql, params).fetchall()

            self._query = query
            if install_schema:
                self.install_schema()
        elif callable(connection):
            self._connection, self._query = None, connection
        else:
            raise TypeError(f"SqliteStore takes a sqlite3.Connection, not {type(connection).__name__}")

        def execute(command: _ratewindow.Sql) -> Any:
            try:
                rows: Any = []
                for sql, params in command.statements:
                    if self._outer and sql == "ROLLBACK":
                        continue  # the transaction is the caller's (the call's BEGIN failed in it): not ours to end
                    rows = self._query(sql, params)
                return rows
            except Exception as error:  # noqa: BLE001 - the call decides what it means (a ROLLBACK)
                return Failed(error)

        self._execute = execute  # type: ignore[assignment]

    def _run(self, call: _ratewindow.Call[T]) -> T:
        with self._lock:
            self._outer = self._connection is not None and self._connection.in_transaction
            try:
                return run_sync(drive(call), self._execute)
            except BaseException as error:
                # Interrupted mid-call (KeyboardInterrupt: the executor feeds every Exception to the
                # machine, which rolls back itself): the machine never heard; end its transaction.
                interrupted = not isinstance(error, Exception) and not self._outer
                if interrupted and self._connection is not None and self._connection.in_transaction:
                    self._connection.rollback()
                raise

    def schema(self) -> str:
        """The schema as SQL (idempotent)."""
        return self._machine.schema()

    def install_schema(self) -> None:
        """Creates the tables and indexes if missing."""
        if self._connection is None:
            raise StoreError("a store over a query function cannot install its schema: run schema() yourself")
        with self._lock:
            try:
                self._connection.executescript(self._machine.schema())
            except sqlite3.Error as error:
                raise _failed(error) from error

    def now(self) -> int:
        """The store's clock, in Unix ms."""
        return self._machine.now()

    def purge(self) -> tuple[int, int]:
        """Deletes every call that has left its windows, every ended window, every lock whose TTL
        ended and every GCRA bucket full again or counter whose counts weigh nothing, by the store's clock; returns ``(calls deleted, windows deleted)``. Never needed for correctness (rows also leave as
        their keys are used): schedule it to drop keys that are never used again, e.g. from cron, an
        APScheduler job, or a thread of your service with its own connection."""
        if self._connection is None:
            raise StoreError("purge() needs a sqlite3.Connection")
        with self._lock:
            try:
                # calls, windows, then expired locks, full GCRA buckets and spent counters (not counted)
                calls, windows, *_ = [self._connection.execute(sql, params).rowcount for sql, params in self._machine.purge()]
            except sqlite3.Error as error:
                raise _failed(error) from error
        return calls, windows


def _failed(error: BaseException) -> StoreError:
    store_error = StoreError(f"SQLite failed the call: {error}")
    store_error.__cause__ = error
    return store_error
