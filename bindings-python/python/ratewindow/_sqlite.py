"""A SQLite store over the standard library's ``sqlite3``: no server, exact across the processes that
share one database file.

A consume runs ``BEGIN IMMEDIATE`` (the file's write lock, taken before anything is read), trims and
reads the call's keys, lets the core decide, records the call and commits; any error rolls it back.
Two processes can therefore never both take the last use. Times are this host's clock: one file, one
host, one clock.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from . import _ratewindow
from ._errors import StoreError
from ._limits import Entry, Limit
from ._store import CooldownStore, Verdict

__all__ = ["SqliteStore"]

Request: TypeAlias = tuple[str, list[Any]]
Window: TypeAlias = tuple[int, int] | None
Planner = _ratewindow.SqlitePlanner

def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    return value


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


class SqliteStore(CooldownStore):
    """Both algorithms in a SQLite database, over your own ``sqlite3.Connection``.

    .. code-block:: python

        connection = sqlite3.connect("limits.db", isolation_level=None, check_same_thread=False)
        store = SqliteStore(connection)

    - The connection must leave transactions to the store: open it with ``isolation_level=None``
      (Python 3.12+: or ``autocommit=True``); otherwise ``ValueError``. The store runs
      ``PRAGMA busy_timeout = 5000`` on it (``busy_timeout_ms``), so a call waits up to 5 s for another
      process's write.
    - Share one store (not one connection under two stores) between threads, with the connection
      opened ``check_same_thread=False``: the store holds its lock for the few statements of each call. Processes each open their own connection to the
      same file; ``BEGIN IMMEDIATE`` makes them take turns. (WAL mode, ``PRAGMA journal_mode=WAL``, lets
      peeks read while another process writes.)
    - ``install_schema`` (default ``True``) creates the tables if they are missing.
    - ``clock`` returns whole Unix ms (default: this host's clock).
    - Any ``sqlite3`` error raises :class:`~ratewindow.StoreError` with it as ``__cause__``, after
      ``ROLLBACK``: nothing of the call is recorded.
    """

    __slots__ = ("_planner", "_connection", "_cursor", "_lock", "_clock")

    def __init__(
        self,
        connection: sqlite3.Connection,
        *,
        prefix: str = "ratewindow",
        install_schema: bool = True,
        clock: Callable[[], int] | None = None,
        busy_timeout_ms: int = 5000,
    ) -> None:
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(f"SqliteStore takes a sqlite3.Connection, not {type(connection).__name__}")
        _check_autocommit(connection)
        self._planner = Planner(prefix)
        self._connection = connection
        # A call is several statements that must not interleave with another thread's on this connection.
        self._lock = threading.Lock()
        self._clock: Callable[[], int] = clock if clock is not None else _now_ms
        with self._lock:
            try:
                self._cursor = connection.cursor()
                self._cursor.row_factory = None  # tuples, whatever the connection's row_factory
                self._cursor.execute(Planner.connection_setup(busy_timeout_ms))
                if install_schema:
                    self._cursor.executescript(self._planner.schema())
            except sqlite3.Error as error:
                raise _failed(error) from error

    @property
    def prefix(self) -> str:
        """The name prefix of the tables."""
        return self._planner.prefix

    def schema(self) -> str:
        """The schema as SQL (idempotent)."""
        return self._planner.schema()

    def install_schema(self) -> None:
        """Creates the tables and indexes if missing."""
        with self._lock:
            try:
                self._cursor.executescript(self._planner.schema())
            except sqlite3.Error as error:
                raise _failed(error) from error

    def now(self) -> int:
        """The store's clock, in Unix ms."""
        return self._clock()

    # The driver: every call runs under the connection's lock; an error after BEGIN rolls back.
    def _execute(self, request: Request) -> list[Any]:
        cursor = self._cursor
        cursor.execute(request[0], request[1])
        return cursor.fetchall()

    def _call(self, call: _ratewindow.SqliteCall | _ratewindow.SqliteWindowCall) -> Any:
        """Runs a call: its statements, ``decide`` on the last one's rows, the statements decided."""
        with self._lock:
            opened = False
            try:
                rows: list[Any] = []
                for request in call.statements():
                    rows = self._execute(request)
                    opened = opened or call.in_transaction
                decided = call.decide(rows)
                for request in decided[1]:
                    self._execute(request)
                return decided
            except BaseException as error:
                if opened and self._connection.in_transaction:
                    try:
                        self._cursor.execute(Planner.ROLLBACK)
                    except sqlite3.Error:
                        pass  # the connection is gone; so is the transaction
                if isinstance(error, sqlite3.Error):
                    raise _failed(error) from error
                raise

    def _statement(self, request: Request) -> int:
        with self._lock:
            try:
                self._cursor.execute(request[0], request[1])
                return self._cursor.rowcount
            except sqlite3.Error as error:
                raise _failed(error) from error

    # Sliding window (cooldowns).
    def consume(self, key: str, limit: Limit) -> Verdict:
        """Counts one call to ``key`` under ``limit``: allowed and recorded, or refused with the wait."""
        call = self._planner.begin_consume(key, limit, self._clock(), _call_id())
        verdict: Verdict = self._call(call)[0]
        return verdict

    def peek(self, key: str, limit: Limit) -> Verdict:
        """The verdict :meth:`consume` would give, recording nothing."""
        verdict: Verdict = self._call(self._planner.begin_peek(key, limit, self._clock()))[0]
        return verdict

    def consume_many(self, entries: Iterable[Entry]) -> Verdict:
        """Counts one call against every entry, all or nothing, in one transaction. An allowed
        verdict's ``release()`` deletes exactly this call's rows (once)."""
        call_id = _call_id()
        call = self._planner.begin_consume_many(entries, self._clock(), call_id)
        verdict: Verdict
        keys: list[str] | None
        verdict, _, keys = self._call(call)
        if keys is not None:
            return Verdict(True, release=functools.partial(self._release, keys, call_id))
        return verdict

    def peek_many(self, entries: Iterable[Entry]) -> Verdict:
        """The verdict :meth:`consume_many` would give, recording nothing."""
        verdict: Verdict = self._call(self._planner.begin_peek_many(entries, self._clock()))[0]
        return verdict

    def _release(self, keys: list[str], call_id: str) -> None:
        self._statement(self._planner.release(keys, call_id))

    # Fixed window (rate limiter), in milliseconds.
    def _window(self, call: _ratewindow.SqliteWindowCall) -> Window:
        window: Window = self._call(call)[0]
        return window

    def hit(self, key: str, decay_ms: int | float, amount: int = 1) -> int:
        """Adds ``amount`` hits to ``key``'s window (opened by the first hit, lasting ``decay_ms``)."""
        window = self._window(self._planner.begin_hit(key, decay_ms, amount, self._clock()))
        return 0 if window is None else window[0]

    def attempts(self, key: str) -> int:
        """Hits in ``key``'s current window; 0 when none runs."""
        window = self._window(self._planner.begin_get_window(key, self._clock()))
        return 0 if window is None else window[0]

    def too_many_attempts(self, key: str, max: int) -> bool:
        """Whether ``key`` has ``max`` or more hits in a window that still runs."""
        max = _whole("max", max)
        window = self._window(self._planner.begin_get_window(key, self._clock()))
        return window is not None and window[0] >= max

    def remaining(self, key: str, max: int) -> int:
        """``max`` minus the hits in ``key``'s window, floored at 0."""
        left = _whole("max", max) - self.attempts(key)
        return left if left > 0 else 0

    def available_in(self, key: str) -> int:
        """Whole seconds until ``key``'s window ends, rounded up; 0 when none runs."""
        window = self._window(self._planner.begin_get_window(key, self._clock()))
        return 0 if window is None else -(-window[1] // 1000)

    def available_in_ms(self, key: str) -> int:
        """Milliseconds until ``key``'s window ends; 0 when none runs."""
        window = self._window(self._planner.begin_get_window(key, self._clock()))
        return 0 if window is None else window[1]

    def reset_attempts(self, key: str) -> None:
        """Sets ``key``'s count to zero, keeping its window running."""
        self._window(self._planner.begin_reset_attempts(key, self._clock()))

    def clear(self, key: str) -> None:
        """Removes ``key``'s count and window."""
        self._statement(self._planner.clear(key))

    def purge(self) -> tuple[int, int]:
        """Deletes every call that has left its windows and every ended window, by the store's clock;
        returns ``(calls deleted, windows deleted)``. Never needed for correctness (rows also leave as
        their keys are used): schedule it to drop keys that are never used again, e.g. from cron, an
        APScheduler job, or a thread of your service with its own connection."""
        calls_sql, windows_sql = self._planner.purge(self._clock())
        return self._statement(calls_sql), self._statement(windows_sql)


def _call_id() -> str:
    return os.urandom(16).hex()


def _failed(error: BaseException) -> StoreError:
    store_error = StoreError(f"SQLite failed the call: {error}")
    store_error.__cause__ = error
    return store_error
