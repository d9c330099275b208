"""PostgresStore and AsyncPostgresStore on the machine's real PostgreSQL, under a name prefix of this
run's own (dropped after): the kit over a connection, a pool, an asyncio connection and an asyncio pool;
RateLimiter on both; errors (a statement error, a killed connection) typed, rolled back, nothing
half-recorded; the server's clock; purge."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest
import sql_support as sq

from ratewindow import (
    AsyncPostgresStore,
    AsyncRateLimiter,
    Entry,
    Limit,
    PostgresStore,
    RateLimiter,
    RateWindowError,
    StoreError,
    StoreReplyError,
)
from ratewindow.testing import check_store

PREFIX = sq.new_prefix("pg")
_opened: list[psycopg.Connection[Any]] = []
_opened_async: list[psycopg.AsyncConnection[Any]] = []


@pytest.fixture(scope="module", autouse=True)
def schema() -> Iterator[None]:
    with sq.connect() as conn:
        PostgresStore.using(conn, prefix=PREFIX).install_schema()
    yield
    for conn in _opened:
        conn.close()
    for aconn in _opened_async:
        asyncio.run(aconn.close())
    sq.drop_schema(PREFIX)


def _shared_connection() -> psycopg.Connection[Any]:
    if not _opened:
        _opened.append(sq.connect())
    return _opened[0]


_pool: list[psycopg_pool.ConnectionPool[Any]] = []


def _shared_pool() -> psycopg_pool.ConnectionPool[Any]:
    if not _pool:
        pool = psycopg_pool.ConnectionPool(sq.DSN, min_size=4, max_size=8, kwargs={"autocommit": True}, open=False)
        pool.open(wait=True)
        _pool.append(pool)
    return _pool[0]


@pytest.fixture(scope="module", autouse=True)
def close_pool() -> Iterator[None]:
    yield
    for pool in _pool:
        pool.close()


async def _async_connection_store() -> AsyncPostgresStore:
    # An asyncio connection waits in the loop it is used from: one per check (each has its own loop).
    conn = await psycopg.AsyncConnection.connect(sq.DSN, autocommit=True)
    _opened_async.append(conn)
    return AsyncPostgresStore.using(conn, prefix=PREFIX)


@contextlib.asynccontextmanager
async def _async_pool_store() -> AsyncIterator[AsyncPostgresStore]:
    async with psycopg_pool.AsyncConnectionPool(
        sq.DSN, min_size=2, max_size=8, kwargs={"autocommit": True}, open=False
    ) as pool:
        yield AsyncPostgresStore.using(pool, prefix=PREFIX)


# The kit, on every driver shape. The server's clock times the verdicts: allow a little skew.
TestKitConnection = check_store(lambda: PostgresStore.using(_shared_connection(), prefix=PREFIX), tolerance_ms=10)
TestKitPool = check_store(lambda: PostgresStore.using(_shared_pool(), prefix=PREFIX), tolerance_ms=10)
TestKitAsyncConnection = check_store(_async_connection_store, tolerance_ms=10)
TestKitAsyncPool = check_store(_async_pool_store, tolerance_ms=10)


def _key(name: str) -> str:
    return f"{name}:{time.time_ns()}"


def _calls_of(key: str) -> int:
    with sq.connect() as conn:
        row = conn.execute(
            f"SELECT coalesce(sum(cardinality(ats)), 0)::int FROM {PREFIX}_log WHERE key = %s".encode(), (key,)
        ).fetchone()
    assert row is not None and isinstance(row[0], int)
    return row[0]


def test_rate_limiter_runs_on_postgres_store() -> None:
    limiter = RateLimiter(PostgresStore.using(_shared_connection(), prefix=PREFIX))
    key = _key("login")
    assert not limiter.too_many_attempts(key, 2)
    assert limiter.hit(key, 60) == 1
    assert limiter.increment(key, 60, 2) == 3
    assert limiter.too_many_attempts(key, 3)
    assert limiter.remaining(key, 5) == 2
    assert limiter.available_in(key) == 60
    limiter.reset_attempts(key)
    assert limiter.attempts(key) == 0
    limiter.clear(key)
    assert limiter.available_in(key) == 0


def test_async_rate_limiter_runs_on_async_postgres_store() -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(sq.DSN, autocommit=True) as conn:
            limiter = AsyncRateLimiter(AsyncPostgresStore.using(conn, prefix=PREFIX))
            key = _key("alogin")
            assert await limiter.hit(key, 60) == 1
            assert await limiter.attempts(key) == 1
            assert await limiter.too_many_attempts(key, 1)
            assert await limiter.available_in(key) == 60

    asyncio.run(main())


def test_a_connection_outside_autocommit_is_left_idle_and_joins_a_transaction_of_yours() -> None:
    with sq.connect(autocommit=False) as conn:
        store = PostgresStore.using(conn, prefix=PREFIX)
        key, limit = _key("tx"), Limit(1, 60_000)
        assert store.consume(key, limit).allowed
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, "the call committed"
        assert _calls_of(key) == 1
        # Inside a transaction of the caller's, the call is a savepoint: it goes with that transaction.
        other = _key("tx-rolled-back")
        with conn.transaction(force_rollback=True):
            assert store.consume(other, limit).allowed
        assert _calls_of(other) == 0, "rolled back with the caller's transaction"
        assert store.consume(other, limit).allowed


def test_a_call_inside_a_transaction_of_yours_leaves_its_commit_setting_alone() -> None:
    with sq.connect(autocommit=False) as conn:
        store = PostgresStore.using(conn, prefix=PREFIX)
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL synchronous_commit = on")
            assert store.consume(_key("tx-setting"), Limit(1, 60_000)).allowed
            row = conn.execute("SHOW synchronous_commit").fetchone()
            assert row is not None and row[0] == "on", "the relaxed commit stays in the call's own transactions"


def test_using_refuses_what_is_not_a_psycopg_connection_or_pool() -> None:
    with pytest.raises(TypeError, match="AsyncPostgresStore"):
        PostgresStore.using(psycopg.AsyncConnection.__new__(psycopg.AsyncConnection), prefix=PREFIX)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PostgresStore.using(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AsyncPostgresStore.using(_shared_connection())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix"):
        PostgresStore.using(_shared_connection(), prefix="Bad-Name")


def test_a_statement_error_mid_batch_is_typed_rolled_back_and_records_nothing() -> None:
    """A constraint refuses the second key's row after the first key's was taken: the whole call is
    one statement, so the first key's write goes too."""
    poison = _key("poison")
    with sq.connect() as conn:
        conn.execute(
            f"ALTER TABLE {PREFIX}_log ADD CONSTRAINT {PREFIX}_no_poison CHECK (key <> '{poison}')".encode()
        )
    try:
        for conn in (sq.connect(), sq.connect(autocommit=False)):
            with conn:
                store = PostgresStore.using(conn, prefix=PREFIX)
                first = _key("first")
                with pytest.raises(StoreError) as caught:
                    store.consume_many([Entry(first, Limit(5, 60_000)), Entry(poison, Limit(5, 60_000))])
                assert isinstance(caught.value, RateWindowError) and caught.value.code == "store_error"
                assert isinstance(caught.value.__cause__, psycopg.errors.CheckViolation)
                assert _calls_of(first) == 0, "nothing half-recorded"
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                assert store.consume(first, Limit(1, 60_000)).allowed, "the connection still works"
    finally:
        with sq.connect() as conn:
            conn.execute(f"ALTER TABLE {PREFIX}_log DROP CONSTRAINT {PREFIX}_no_poison".encode())


def test_a_missing_schema_is_a_typed_store_error() -> None:
    store = PostgresStore.using(_shared_connection(), prefix=sq.new_prefix("missing"))
    with pytest.raises(StoreError) as caught:
        store.consume("k", Limit(1, 1000))
    # The one-entry statement reads {p}_log first: a missing schema is a missing table (or function).
    assert isinstance(caught.value.__cause__, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction))


@pytest.mark.parametrize("shape", ["connection", "pool"])
def test_a_connection_killed_mid_call_is_a_typed_error_and_records_nothing(shape: str) -> None:
    """The call waits for a key's lock held elsewhere; its backend is terminated meanwhile."""
    key = _key("killed")
    limit = Limit(5, 60_000)
    with sq.connect(autocommit=False) as holder, contextlib.ExitStack() as stack:
        if shape == "pool":
            pool = stack.enter_context(
                psycopg_pool.ConnectionPool(sq.DSN, min_size=1, max_size=1, kwargs={"autocommit": True})
            )
            with pool.connection() as c:
                pid = c.info.backend_pid
            store = PostgresStore.using(pool, prefix=PREFIX)
        else:
            conn = stack.enter_context(sq.connect())
            pid = conn.info.backend_pid
            store = PostgresStore.using(conn, prefix=PREFIX)
        # The key's row, inserted and not committed: the call's own insert waits for this transaction.
        holder.execute(f"INSERT INTO {PREFIX}_log VALUES (%s, '{{}}', '{{}}', 0)".encode(), (key,))
        outcome: list[BaseException | object] = []

        def call() -> None:
            try:
                outcome.append(store.consume_many([Entry(key, limit)]))
            except BaseException as error:  # noqa: BLE001 - the outcome is checked below
                outcome.append(error)

        thread = threading.Thread(target=call)
        thread.start()
        for _ in range(1000):  # until the call waits on the lock (10 s at most)
            row = holder.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            ).fetchone()
            if row and row[0]:
                break
            time.sleep(0.01)
        holder.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(10)
        holder.rollback()
        assert len(outcome) == 1
        error = outcome[0]
        assert isinstance(error, StoreError), error
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert _calls_of(key) == 0, "nothing recorded"
        if shape == "pool":
            assert store.consume_many([Entry(key, limit)]).allowed, "the pool replaced the connection"


def test_rows_of_the_wrong_shape_are_a_store_reply_error() -> None:
    prefix = sq.new_prefix("bad")
    try:
        with sq.connect() as conn:
            store = PostgresStore.using(conn, prefix=prefix)
            store.install_schema()
            conn.execute(
                f"CREATE OR REPLACE FUNCTION {prefix}_window(p_op text, p_key text, p_decay bigint, p_amount bigint, p_relaxed boolean) "
                f"RETURNS TABLE (hits bigint, ms_left bigint) LANGUAGE sql AS $$ SELECT 1::bigint, -5::bigint $$".encode()
            )
            with pytest.raises(StoreReplyError) as caught:
                store.attempts("k")
            assert isinstance(caught.value, StoreError) and caught.value.code == "store_reply"
            assert caught.value.source == "window" and "(1, -5)" in caught.value.got
    finally:
        sq.drop_schema(prefix)


def _server_ms() -> int:
    with sq.connect() as conn:
        row = conn.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
    assert row is not None
    assert isinstance(row[0], int)
    return row[0]


def test_verdicts_follow_the_servers_clock_whatever_the_hosts_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two "hosts" an hour apart (time.time and time.time_ns offset) count one key on one clock."""
    key, limit = _key("clock"), Limit(2, 10_000)
    real_time, real_time_ns = time.time, time.time_ns
    verdicts = []
    for offset_s in (3600, -3600):
        monkeypatch.setattr(time, "time", lambda o=offset_s: real_time() + o)
        monkeypatch.setattr(time, "time_ns", lambda o=offset_s: real_time_ns() + o * 1_000_000_000)
        verdicts.append(PostgresStore.using(_shared_connection(), prefix=PREFIX).consume(key, limit))
    monkeypatch.undo()
    before = _server_ms()
    store = PostgresStore.using(_shared_connection(), prefix=PREFIX)
    refused = store.consume(key, limit)
    after = _server_ms()
    assert all(v.allowed for v in verdicts) and not refused.allowed
    assert refused.retry_timestamp is not None
    # The first call was made shortly before `before` on the server's clock (well within 5 s).
    assert before - 5_000 + 10_000 <= refused.retry_timestamp <= after + 10_000
    assert refused.retry_after_ms <= 10_000


def test_purge_removes_exactly_the_calls_and_windows_that_have_ended() -> None:
    prefix = sq.new_prefix("purge")
    try:
        with sq.connect() as conn:
            store = PostgresStore.using(conn, prefix=prefix)
            store.install_schema()
            short, long_ = Limit(5, 1_000), Limit(5, 60_000)
            start = time.monotonic()
            assert store.consume("short", short).allowed
            assert store.consume("short", short).allowed
            assert store.consume("long", long_).allowed
            # A key's row stays as long as the longest window its calls were counted under.
            assert store.consume_many([Entry("both", short), Entry("both", long_)]).allowed
            assert store.consume_many([Entry("short2", short), Entry("long2", long_)]).allowed
            store.hit("w-short", 1_000)
            store.hit("w-long", 60_000)
            purged = store.purge()
            if time.monotonic() - start < 0.9:  # (a machine stalled for a second proves nothing here)
                assert purged == (0, 0), "nothing has ended yet"
            time.sleep(max(0.0, start + 1.1 - time.monotonic()))
            assert store.purge() == (3, 1), "short's two calls, short2's, and w-short"
            assert sorted(str(r[0]) for r in sq.pg_rows(prefix, "log")) == ["both", "long", "long2"]
            assert [r[0] for r in sq.pg_rows(prefix, "windows")] == ["w-long"]
            assert store.purge() == (0, 0)
    finally:
        sq.drop_schema(prefix)


def test_install_schema_is_idempotent_on_a_connection_outside_autocommit() -> None:
    prefix = sq.new_prefix("schema")
    try:
        with sq.connect(autocommit=False) as conn:
            store = PostgresStore.using(conn, prefix=prefix)
            store.install_schema()
            store.install_schema()
            assert not conn.autocommit
            assert store.consume("k", Limit(1, 1000)).allowed
            conn.execute("SELECT 1")
            with pytest.raises(StoreError, match="inside a transaction"):
                store.install_schema()
            conn.rollback()
    finally:
        sq.drop_schema(prefix)


def test_async_release_and_errors() -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(sq.DSN, autocommit=False) as conn:
            store = AsyncPostgresStore.using(conn, prefix=PREFIX)
            key, limit = _key("arel"), Limit(1, 60_000)
            verdict = await store.consume_many([Entry(key, limit)])
            assert verdict.allowed and not (await store.peek(key, limit)).allowed
            await verdict.release()  # type: ignore[misc]
            assert (await store.peek_many([Entry(key, limit)])).allowed
            missing = AsyncPostgresStore.using(conn, prefix=sq.new_prefix("amissing"))
            with pytest.raises(StoreError) as caught:
                await missing.consume(key, limit)
            assert isinstance(caught.value.__cause__, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction))
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert (await store.consume(key, limit)).allowed

    asyncio.run(main())
