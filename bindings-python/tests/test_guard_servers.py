"""The failure guard against the real Redis and PostgreSQL, with real network faults put in between by
the fault proxy (``tests/faultproxy``, driven by ``faultproxy.py``): latency beyond the timeout, a
stalled connection, reset connections, a reply cut midway, refused connections, a Redis server
restarted mid-run (a private redis-server on 6420-6429), a PostgreSQL pool exhausted. For each: the
verdict comes within ``timeout_ms`` plus a small slack, the policy holds, and afterwards the key's
count on the server is what the verdicts said (a late answer given back, nothing counted twice,
nothing half-written). Also the fallback store taking over and the main store coming back, ``close()``
waiting for a release under way, and the conformance kit on a guarded RedisStore.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
from redis.backoff import NoBackoff
from redis.retry import Retry

import redis_servers as rs
import sql_support as sq
from faultproxy import FaultProxy
from ratewindow import (
    AsyncGuard,
    AsyncPostgresStore,
    AsyncRedisStore,
    Entry,
    Guard,
    Limit,
    MemoryStore,
    PostgresStore,
    RedisStore,
)
from ratewindow.testing import run_checks

LIMIT = Limit(5, 60_000)
SLACK = 0.25
"""Seconds a verdict may come after ``timeout_ms`` on a loaded machine."""

PG_PREFIX = sq.new_prefix("guard")


@pytest.fixture(scope="module", autouse=True)
def pg_schema() -> Iterator[None]:
    with sq.connect() as conn:
        PostgresStore.using(conn, prefix=PG_PREFIX).install_schema()
    yield
    sq.drop_schema(PG_PREFIX)


@pytest.fixture
def redis_proxy() -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", 6379) as proxy:
        yield proxy


def direct() -> redis.Redis:
    """A client straight to the server (not through the proxy), to read what is counted."""
    return redis.Redis.from_url(rs.REDIS_URL)


def redis_count(store: RedisStore | AsyncRedisStore, key: str) -> int:
    """Calls in ``key``'s log on the server (its refusal marker, scored -inf, left out)."""
    return int(direct().zcount(store.redis_key(key), 0, "+inf"))


def pg_count(key: str) -> int:
    with sq.connect() as conn:
        row = conn.execute(
            f"SELECT coalesce(sum(cardinality(ats)), 0)::int FROM {PG_PREFIX}_log WHERE key = %s".encode(), (key,)
        ).fetchone()
    assert row is not None
    count = row[0]
    assert isinstance(count, int)
    return count


def no_retry() -> Retry:
    # Each fault is seen once: a client that retries would hide it.
    return Retry(NoBackoff(), 0)


def async_redis_through(proxy: FaultProxy, **options: Any) -> redis.asyncio.Redis:
    retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
    return redis.asyncio.Redis(host=proxy.host, port=proxy.port, retry=retry, **options)


def key(name: str) -> str:
    return f"{name}:{time.time_ns()}"


async def timed(aw: Any) -> tuple[Any, float]:
    t = time.monotonic()
    v = await aw
    return v, time.monotonic() - t


# --- Redis, asyncio ----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["deny", "allow"])
def test_redis_reply_later_than_the_timeout(redis_proxy: FaultProxy, policy: str) -> None:
    """The script runs at once, its reply comes 400 ms late: under deny the late call is given back,
    under allow it stays; either way the server counts what the verdicts said."""

    async def main() -> None:
        client = async_redis_through(redis_proxy)
        store = rs.async_store(client, prefix=rs.unique_prefix("guard"))
        guard = AsyncGuard(store, timeout_ms=100, on_failure=policy)  # type: ignore[arg-type]
        k = key("late")
        assert (await guard.consume(k, LIMIT)).allowed  # connected, script loaded
        redis_proxy.latency(0, 400)
        v, took = await timed(guard.consume(k, LIMIT))
        assert v.failed == "timeout" and v.allowed is (policy == "allow")
        assert 0.09 <= took < 0.1 + SLACK, took
        batch, took = await timed(guard.consume_many([Entry(k, LIMIT), Entry(k + ":b", LIMIT)]))
        assert batch.failed == "timeout" and took < 0.1 + SLACK
        await guard.close()  # waits for both late answers and their releases
        allowed = 1 + int(v.allowed) + int(batch.allowed)
        assert redis_count(store, k) == allowed
        assert redis_count(store, k + ":b") == int(batch.allowed)
        assert guard.stats().late_releases == (2 if policy == "deny" else 0)
        await client.aclose()

    asyncio.run(main())


def test_redis_stall_then_heal(redis_proxy: FaultProxy) -> None:
    """Nothing forwarded: the verdict comes at the timeout; when the network heals the held script runs
    and its answer, late, is given back."""

    async def main() -> None:
        client = async_redis_through(redis_proxy)
        store = rs.async_store(client, prefix=rs.unique_prefix("guard"))
        guard = AsyncGuard(store, timeout_ms=100)
        k = key("stall")
        assert (await guard.consume(k, LIMIT)).allowed
        redis_proxy.stall()
        v, took = await timed(guard.consume(k, LIMIT))
        assert (v.allowed, v.failed) == (False, "timeout") and took < 0.1 + SLACK
        assert redis_count(store, k) == 1, "the script has not reached the server"
        redis_proxy.unstall()
        await guard.close()
        assert redis_count(store, k) == 1
        assert guard.stats().late_releases == 1
        await client.aclose()

    asyncio.run(main())


def test_redis_reset_connections(redis_proxy: FaultProxy) -> None:
    """A call in flight when the connection is reset: a store error at once (no wait for the timeout),
    the call never counted; the next call on a new connection is counted."""

    async def main() -> None:
        client = async_redis_through(redis_proxy)
        store = rs.async_store(client, prefix=rs.unique_prefix("guard"))
        guard = AsyncGuard(store, timeout_ms=1000)
        k = key("reset")
        assert (await guard.consume(k, LIMIT)).allowed
        redis_proxy.stall()
        call = asyncio.ensure_future(guard.consume(k, LIMIT))
        await asyncio.sleep(0.05)
        assert redis_proxy.reset() >= 1
        redis_proxy.resume()
        v, took = await timed(call)
        assert (v.allowed, v.failed) == (False, "store-error") and took < 0.5
        assert isinstance(v.cause, Exception)
        assert (await guard.consume(k, LIMIT)).failed is None
        await guard.close()
        assert redis_count(store, k) == 2
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("policy", ["deny", "allow"])
def test_redis_reply_cut_midway(redis_proxy: FaultProxy, policy: str) -> None:
    """The script ran but its reply is cut after 2 bytes: a store error. The call was counted whole on
    every key of the batch, never half; under deny the guard gives it back by its call id (the store's
    error carries the release), so nothing stays counted; under allow the count stays (the call ran)."""

    async def main() -> None:
        client = async_redis_through(redis_proxy)
        store = rs.async_store(client, prefix=rs.unique_prefix("guard"))
        guard = AsyncGuard(store, timeout_ms=1000, on_failure=policy)  # type: ignore[arg-type]
        k = key("cut")
        assert (await guard.consume(k + ":warm", LIMIT)).allowed
        redis_proxy.cut(2)
        v, took = await timed(guard.consume_many([Entry(k + ":a", LIMIT), Entry(k + ":b", LIMIT)]))
        assert (v.allowed, v.failed) == (policy == "allow", "store-error") and took < 0.5
        assert (await guard.consume(k + ":warm", LIMIT)).failed is None  # a new connection, warmed
        if policy == "deny":
            # The give-back of the cut batch runs in the background: let it finish first, or the next
            # cut may fall on its reply instead of the single consume's.
            for _ in range(200):
                if guard.stats().late_releases >= 1:
                    break
                await asyncio.sleep(0.01)
            assert guard.stats().late_releases == 1
        redis_proxy.cut(2)
        single = await guard.consume(k + ":c", LIMIT)
        assert (single.allowed, single.failed) == (policy == "allow", "store-error")
        await guard.close()  # waits for the give-backs
        kept = int(policy == "allow")
        assert (redis_count(store, k + ":a"), redis_count(store, k + ":b")) == (kept, kept)
        assert redis_count(store, k + ":c") == kept
        assert guard.stats().late_releases == (2 if policy == "deny" else 0)
        assert guard.stats().late_releases_failed == 0
        await client.aclose()

    asyncio.run(main())


def test_redis_reply_cut_then_the_next_call_counts(redis_proxy: FaultProxy) -> None:
    """After a cut reply given back, the same key counts again from where the verdicts left it."""

    async def main() -> None:
        client = async_redis_through(redis_proxy)
        store = rs.async_store(client, prefix=rs.unique_prefix("guard"))
        guard = AsyncGuard(store, timeout_ms=1000)
        k = key("cut-next")
        assert (await guard.consume(k, LIMIT)).allowed
        redis_proxy.cut(2)
        assert (await guard.consume(k, LIMIT)).failed == "store-error"
        ok = await guard.consume(k, LIMIT)
        assert ok.allowed and ok.failed is None
        await guard.close()
        assert redis_count(store, k) == 2
        await client.aclose()

    asyncio.run(main())


def test_redis_refused_connections_then_back(redis_proxy: FaultProxy) -> None:
    async def main() -> None:
        client = async_redis_through(redis_proxy)
        store = rs.async_store(client, prefix=rs.unique_prefix("guard"))
        fallback = MemoryStore()
        guard = AsyncGuard(store, timeout_ms=300, on_failure=fallback)
        k = key("refused")
        redis_proxy.refuse()
        answers = [await guard.consume(k, LIMIT) for _ in range(2)]
        assert [(a.allowed, a.failed) for a in answers] == [(True, "store-error")] * 2
        assert fallback.peek(k, LIMIT).remaining == LIMIT.uses - 2, "the fallback counted them"
        assert redis_count(store, k) == 0
        redis_proxy.accept()
        back = await guard.consume(k, LIMIT)
        assert (back.allowed, back.failed) == (True, None)
        await guard.close()
        assert redis_count(store, k) == 1
        assert guard.stats().fallback_calls == 2
        await client.aclose()

    asyncio.run(main())


# --- Redis, synchronous ------------------------------------------------------------------------------


def test_sync_redis_reply_later_than_the_timeout(redis_proxy: FaultProxy) -> None:
    """A blocking client without its own timeout: the call returns when the reply comes (the client's
    wait), the verdict is the policy's, and the late call is given back before it returns."""
    client = redis.Redis(host=redis_proxy.host, port=redis_proxy.port, retry=no_retry())
    store = rs.sync_store(client, prefix=rs.unique_prefix("guard"))
    guard = Guard(store, timeout_ms=100)
    k = key("sync-late")
    assert guard.consume(k, LIMIT).allowed
    redis_proxy.latency(0, 250)
    v = guard.consume(k, LIMIT)
    assert (v.allowed, v.failed) == (False, "timeout")
    assert redis_count(store, k) == 1
    redis_proxy.resume()
    guard.close()
    client.close()


@pytest.mark.parametrize("policy", ["deny", "allow"])
def test_sync_redis_reply_cut_midway(redis_proxy: FaultProxy, policy: str) -> None:
    """The synchronous guard: a reply cut after the script ran is given back under deny before the
    call returns, and kept under allow."""
    client = redis.Redis(host=redis_proxy.host, port=redis_proxy.port, retry=no_retry())
    store = rs.sync_store(client, prefix=rs.unique_prefix("guard"))
    guard = Guard(store, timeout_ms=1000, on_failure=policy)  # type: ignore[arg-type]
    k = key("sync-cut")
    assert guard.consume(k + ":warm", LIMIT).allowed
    redis_proxy.cut(2)
    v = guard.consume(k, LIMIT)
    assert (v.allowed, v.failed) == (policy == "allow", "store-error")
    assert guard.consume(k + ":warm", LIMIT).failed is None  # a new connection, warmed
    redis_proxy.cut(2)
    batch = guard.consume_many([Entry(k + ":a", LIMIT), Entry(k + ":b", LIMIT)])
    assert (batch.allowed, batch.failed) == (policy == "allow", "store-error")
    kept = int(policy == "allow")
    assert (redis_count(store, k), redis_count(store, k + ":a"), redis_count(store, k + ":b")) == (kept,) * 3
    assert guard.stats().late_releases == (2 if policy == "deny" else 0)
    guard.close()
    client.close()


def test_sync_redis_client_timeout_is_a_timeout(redis_proxy: FaultProxy) -> None:
    """With the client's socket_timeout at timeout_ms the call returns then, as a 'timeout'."""
    client = redis.Redis(host=redis_proxy.host, port=redis_proxy.port, retry=no_retry(), socket_timeout=0.1)
    store = rs.sync_store(client, prefix=rs.unique_prefix("guard"))
    guard = Guard(store, timeout_ms=100)
    k = key("sync-stall")
    assert guard.consume(k, LIMIT).allowed
    redis_proxy.stall()
    t = time.monotonic()
    v = guard.consume(k, LIMIT)
    assert (v.allowed, v.failed) == (False, "timeout") and time.monotonic() - t < 0.1 + SLACK
    assert isinstance(v.cause, Exception)
    redis_proxy.reset()
    redis_proxy.resume()
    assert guard.consume(k, LIMIT).failed is None
    client.close()


def private_redis() -> rs.PrivateRedis:
    """A redis-server of this module's own on 6420-6429, to kill and restart on the same port."""
    return rs.PrivateRedis(range(6420, 6430))


def test_sync_redis_restarted_mid_run_with_a_fallback() -> None:
    """The server dies: the fallback store counts; it comes back empty (scripts flushed): the main
    store answers again, loading its script after NOSCRIPT."""
    server = private_redis()
    server.start()
    try:
        client = redis.Redis(port=server.port, socket_timeout=0.3, socket_connect_timeout=0.3, retry=no_retry())
        store = rs.sync_store(client, prefix=rs.unique_prefix("guard"))
        fallback = MemoryStore()
        guard = Guard(store, timeout_ms=300, on_failure=fallback)
        k = key("restart")
        assert guard.consume(k, LIMIT).failed is None
        server.kill()
        down = [guard.consume(k, LIMIT) for _ in range(3)]
        assert [(v.allowed, v.failed) for v in down] == [(True, "store-error")] * 3
        server.start()
        up = guard.consume(k, LIMIT)
        assert (up.allowed, up.failed) == (True, None)
        assert int(redis.Redis(port=server.port).zcount(store.redis_key(k), 0, "+inf")) == 1
        assert fallback.peek(k, LIMIT).remaining == LIMIT.uses - 3
        assert guard.stats().fallback_calls == 3
        client.close()
    finally:
        server.stop()


# --- PostgreSQL --------------------------------------------------------------------------------------


def test_postgres_pool_exhausted_sync() -> None:
    """Every connection of the pool is taken: the pool's own timeout (set near timeout_ms) fires and the
    guard answers 'timeout'; nothing is counted; once a connection is free the call goes through."""
    pool = psycopg_pool.ConnectionPool(sq.DSN, min_size=1, max_size=1, timeout=0.15, kwargs={"autocommit": True}, open=False)
    pool.open(wait=True)
    try:
        guard = Guard(PostgresStore.using(pool, prefix=PG_PREFIX), timeout_ms=100)
        k = key("pool")
        held = pool.getconn()
        t = time.monotonic()
        v = guard.consume(k, LIMIT)
        assert (v.allowed, v.failed) == (False, "timeout") and time.monotonic() - t < 0.15 + SLACK
        pool.putconn(held)
        assert guard.consume(k, LIMIT).failed is None
        guard.close()
        assert pg_count(k) == 1
    finally:
        pool.close()


def test_postgres_pool_exhausted_async() -> None:
    """The pool waits longer than the guard: the guard answers at timeout_ms, the call runs once a
    connection is free, and its late answer is given back."""

    async def main() -> None:
        pool = psycopg_pool.AsyncConnectionPool(sq.DSN, min_size=1, max_size=1, timeout=5, kwargs={"autocommit": True}, open=False)
        await pool.open(wait=True)
        try:
            guard = AsyncGuard(AsyncPostgresStore.using(pool, prefix=PG_PREFIX), timeout_ms=100)
            k = key("apool")
            held = await pool.getconn()
            v, took = await timed(guard.consume(k, LIMIT))
            assert (v.allowed, v.failed) == (False, "timeout") and took < 0.1 + SLACK
            await asyncio.sleep(0.1)
            await pool.putconn(held)
            await guard.close()
            assert pg_count(k) == 0 and guard.stats().late_releases == 1
        finally:
            await pool.close()

    asyncio.run(main())


def test_postgres_reply_later_than_the_timeout() -> None:
    """PostgreSQL over TCP through the proxy, its replies 400 ms late: the late call is given back."""

    async def main() -> None:
        with FaultProxy("127.0.0.1", 5432) as proxy:
            conn = await psycopg.AsyncConnection.connect(
                host=proxy.host, port=proxy.port, user="postgres", dbname="test", autocommit=True
            )
            try:
                guard = AsyncGuard(AsyncPostgresStore.using(conn, prefix=PG_PREFIX), timeout_ms=150)
                k = key("pglate")
                assert (await guard.consume(k, LIMIT)).failed is None
                proxy.latency(0, 400)
                v, took = await timed(guard.consume(k, LIMIT))
                assert (v.allowed, v.failed) == (False, "timeout") and took < 0.15 + SLACK
                await guard.close()
                assert pg_count(k) == 1 and guard.stats().late_releases == 1
            finally:
                await conn.close()

    asyncio.run(main())


# --- the conformance kit -----------------------------------------------------------------------------


def test_kit_on_a_guarded_redis_store() -> None:
    client = rs.sync_client()
    prefix = rs.unique_prefix("guardkit")
    failures = {
        name: error
        for name, error in run_checks(lambda: Guard(rs.sync_store(client, prefix=prefix), timeout_ms=2000)).items()
        if error
    }
    assert failures == {}
    client.close()


def test_kit_on_a_guarded_async_redis_store() -> None:
    import contextlib

    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[AsyncGuard]:
        client = rs.async_client()
        try:
            await rs.warm_async(client)
            async with AsyncGuard(rs.async_store(client, prefix=rs.unique_prefix("guardkit")), timeout_ms=2000) as g:
                yield g
        finally:
            await client.aclose()

    failures = {name: error for name, error in run_checks(make).items() if error}
    assert failures == {}
