"""SqliteStore on real database files in a temporary directory: the kit, every conformance vector (with
an injected clock), RateLimiter, the connection's transaction mode, errors rolled back with nothing
half-recorded, and purge."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sql_support as sq

from ratewindow import (
    Entry,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    RateLimiter,
    SqliteStore,
    StoreError,
    StoreReplyError,
    Verdict,
)
from ratewindow.testing import ManualClock, check_store, load_vector_file
from ratewindow.testing._vectors import VectorMismatch, _apply, _same

_opened: list[sqlite3.Connection] = []
_dirs: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def close_connections(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    _dirs.append(tmp_path_factory.mktemp("sqlite-kit"))
    yield
    for conn in _opened:
        conn.close()


def _kit_store() -> SqliteStore:
    conn = sq.sqlite_connect(_dirs[0] / "kit.db")
    _opened.append(conn)
    return SqliteStore(conn)


TestKit = check_store(_kit_store)


VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"
# The memory store's horizon (expiry judged by the latest time it has seen) is its rule alone; SQLite
# trims by each call's own time (as the core's SQLite test skips it too).
MEMORY_ONLY = {"expiry.json"}
CASES = [
    (path, case)
    for path in sorted(VECTORS.glob("*.json"))
    if path.name not in MEMORY_ONLY
    for case in load_vector_file(path)
    if "the horizon" not in case["name"]  # the memory store's horizon again
]


@pytest.mark.parametrize(("path", "case"), CASES, ids=[f"{p.stem}:{c['name']}" for p, c in CASES])
def test_vector(path: Path, case: dict[str, Any]) -> None:
    clock = ManualClock(0)
    with sqlite3.connect(":memory:", isolation_level=None) as conn:
        store = SqliteStore(conn, clock=clock)
        consumed: dict[Any, Verdict] = {}
        for index, op in enumerate(case["ops"]):
            clock.set(op["now"])
            try:
                got = _apply(store, op, consumed)  # type: ignore[arg-type]
            except InvalidLimitError as error:
                got = {"error": "invalid_limit", "field": error.field}
            except InvalidArgumentError as error:
                got = {"error": "invalid_argument", "field": error.field}
            if not _same(got, op.get("expect")):
                raise VectorMismatch(f"op {index} ({op['op']}): expected {op.get('expect')!r}, got {got!r}")
    conn.close()


def test_rate_limiter_runs_on_sqlite_store(tmp_path: Path) -> None:
    clock = ManualClock(1_000_000)
    limiter = RateLimiter(SqliteStore(sq.sqlite_connect(tmp_path / "rl.db"), clock=clock))
    assert limiter.hit("login", 60) == 1
    assert limiter.hit("login", 60) == 2
    assert limiter.too_many_attempts("login", 2)
    assert limiter.remaining("login", 5) == 3
    clock.advance(59_001)
    assert limiter.available_in("login") == 1
    clock.advance(999)
    assert limiter.attempts("login") == 0


def test_the_connection_must_leave_transactions_to_the_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="isolation_level=None"):
        SqliteStore(sqlite3.connect(tmp_path / "x.db"))
    with pytest.raises(TypeError):
        SqliteStore(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix"):
        SqliteStore(sq.sqlite_connect(tmp_path / "x.db"), prefix="no-dashes")


def test_busy_timeout_is_set(tmp_path: Path) -> None:
    conn = sq.sqlite_connect(tmp_path / "b.db")
    conn.execute("PRAGMA busy_timeout = 0")
    SqliteStore(conn)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)


def _rows(conn: sqlite3.Connection, key: str) -> int:
    row = conn.execute("SELECT count(*) FROM ratewindow_calls WHERE key = ?", (key,)).fetchone()
    assert isinstance(row[0], int)
    return row[0]


def test_a_statement_error_mid_batch_rolls_back_and_records_nothing(tmp_path: Path) -> None:
    conn = sq.sqlite_connect(tmp_path / "e.db")
    store = SqliteStore(conn)
    conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON ratewindow_calls WHEN NEW.key = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'poisoned key'); END"
    )
    with pytest.raises(StoreError) as caught:
        store.consume_many([Entry("first", Limit(5, 60_000)), Entry("poison", Limit(5, 60_000))])
    assert caught.value.code == "store_error"
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert not conn.in_transaction, "rolled back"
    assert _rows(conn, "first") == 0, "nothing half-recorded"
    assert store.consume("first", Limit(1, 60_000)).allowed


def test_a_locked_database_is_a_typed_error_and_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    store_conn = sq.sqlite_connect(path)
    store = SqliteStore(store_conn, busy_timeout_ms=50)  # wait 50 ms, not 5 s, for the other writer
    assert store_conn.execute("PRAGMA busy_timeout").fetchone() == (50,)
    other = sq.sqlite_connect(path)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError) as caught:
            store.consume_many([Entry("k", Limit(1, 60_000))])
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        assert "locked" in str(caught.value.__cause__)
    finally:
        other.execute("ROLLBACK")
    assert not store_conn.in_transaction
    assert _rows(store_conn, "k") == 0
    assert store.consume_many([Entry("k", Limit(1, 60_000))]).allowed


def test_a_transaction_of_the_callers_is_left_alone(tmp_path: Path) -> None:
    conn = sq.sqlite_connect(tmp_path / "t.db")
    store = SqliteStore(conn)
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE mine (x)")
    with pytest.raises(StoreError):
        store.consume("k", Limit(1, 1000))
    assert conn.in_transaction, "the caller's transaction was not rolled back"
    assert store.peek("k", Limit(1, 1000)).allowed, "a peek needs no transaction of its own"
    conn.execute("COMMIT")
    assert store.consume("k", Limit(1, 1000)).allowed


def test_rows_of_the_wrong_shape_are_a_store_reply_error(tmp_path: Path) -> None:
    conn = sq.sqlite_connect(tmp_path / "r.db")
    store = SqliteStore(conn)
    conn.execute("INSERT INTO ratewindow_calls (key, at, id, expires_at) VALUES ('k', 'not a time', 'x', 0)")
    with pytest.raises(StoreReplyError) as caught:
        store.consume_many([Entry("k", Limit(5, 60_000))])
    assert "not a time" in caught.value.got
    assert not conn.in_transaction


def test_threads_sharing_one_store_take_exactly_the_limit(tmp_path: Path) -> None:
    store = SqliteStore(sq.sqlite_connect(tmp_path / "th.db"))
    barrier = threading.Barrier(16)
    results: list[bool] = []

    def run() -> None:
        barrier.wait()
        for _ in range(4):
            results.append(store.consume("k", Limit(10, 60_000)).allowed)

    threads = [threading.Thread(target=run) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 10


def test_purge_removes_exactly_the_calls_and_windows_that_have_ended(tmp_path: Path) -> None:
    clock = ManualClock(1_000_000)
    conn = sq.sqlite_connect(tmp_path / "p.db")
    store = SqliteStore(conn, clock=clock, prefix="rw_purge")
    short, long_ = Limit(5, 1_000), Limit(5, 60_000)
    assert store.consume("short", short).allowed
    assert store.consume("short", short).allowed
    assert store.consume("long", long_).allowed
    assert store.consume_many([Entry("both", short), Entry("both", long_)]).allowed
    assert store.consume_many([Entry("short2", short), Entry("long2", long_)]).allowed
    store.hit("w-short", 1_000)
    store.hit("w-long", 60_000)
    clock.advance(999)
    assert store.purge() == (0, 0), "nothing has ended yet"
    clock.advance(1)
    assert store.purge() == (3, 1), "a call leaves at exactly t + window"
    keys = sorted(r[0] for r in conn.execute("SELECT key FROM rw_purge_calls"))
    assert keys == ["both", "long", "long2"]
    assert [r[0] for r in conn.execute("SELECT key FROM rw_purge_windows")] == ["w-long"]
