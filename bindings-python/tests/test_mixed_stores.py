"""Batches mixing algorithms (sliding-log, GCRA and counter entries in one all-or-nothing
``consume_many``) on SqliteStore (real files): a seeded walk equal to MemoryStore field by field,
processes racing a batch whose global entry is the bottleneck (exactly its uses pass), the release of
the sliding-log calls, bad input (typed errors, nothing written); the same on RedisStore and
AsyncRedisStore (a walk on the server's clock, 4 processes x 64 concurrent asyncio batches; a Cluster
when the keys share a slot, else UnsupportedError); and on PostgresStore and AsyncPostgresStore (one
statement a batch: sync and asyncio walks on the server's clock, 4 processes x 64 concurrent asyncio
batches, release, bad input). ``RATEWINDOW_SEED`` replays a walk."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mixed_pg_worker
import mixed_redis_worker
import psycopg
import pytest
import redis_servers as rs
import sql_support as sql

from ratewindow import (
    AsyncPostgresStore,
    AsyncRedisStore,
    CounterLimit,
    Entry,
    GcraLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SqliteStore,
    UnsupportedError,
    Verdict,
)

FIELDS = (
    "allowed",
    "retry_after_ms",
    "retry_timestamp",
    "blocked",
    "limit",
    "remaining",
    "refill_after_ms",
    "reset_after_ms",
)

# One key name under two algorithms is two keys; a key under two limits of its algorithm is one.
RULES: list[tuple[str, list[Any]]] = [
    ("a", [Limit(3, 1000), Limit(5, 2500)]),
    ("a", [GcraLimit(3, 1000, 2), GcraLimit(3, 1000, 3)]),
    ("b", [GcraLimit(10, 1000, 5), GcraLimit(7, 3000, 4)]),
    ("c", [CounterLimit(4, 1000)]),
    ("d", [CounterLimit(9, 700), CounterLimit(9, 1400)]),
    ("g", [Limit(6, 1500)]),
]


def fields(v: Verdict) -> tuple[Any, ...]:
    return tuple(getattr(v, f) for f in FIELDS)


def top(limit: Any) -> int:
    if isinstance(limit, GcraLimit):
        return int(limit.burst)
    return int(limit.uses)


def test_a_seeded_walk_gives_memory_stores_verdicts(tmp_path: Path) -> None:
    seed = int(os.environ.get("RATEWINDOW_SEED", time.time_ns() % 2**31))
    print(f"RATEWINDOW_SEED={seed}")
    rng = random.Random(seed)
    now = [1_000_000]
    lite = SqliteStore(sql.sqlite_connect(tmp_path / "walk.db"), clock=lambda: now[0])
    memory = MemoryStore(lambda: now[0])
    for step in range(600):
        now[0] += rng.randrange(4) * rng.randrange(160)
        entries: list[Entry] = []
        for _ in range(1 + rng.randrange(4)):
            key, choices = RULES[rng.randrange(len(RULES))]
            limit = rng.choice(choices)
            entries.append(Entry(key, limit, 1 + rng.randrange(min(top(limit), 3))))
        if all(isinstance(e.limit, Limit) for e in entries):
            entries.append(Entry("b", GcraLimit(10, 1000, 5), 1))
        peek = rng.randrange(4) == 0
        want = memory.peek_many(entries) if peek else memory.consume_many(entries)
        got = lite.peek_many(entries) if peek else lite.consume_many(entries)
        assert fields(got) == fields(want), f"step {step} at {now[0]}: {entries} (RATEWINDOW_SEED={seed})"
        slides = any(isinstance(e.limit, Limit) for e in entries)
        assert got.releasable == (got.allowed and not peek and slides), f"step {step}"


def test_release_gives_back_the_sliding_calls_and_keeps_the_gcra_use(tmp_path: Path) -> None:
    now = [5000]
    connection = sql.sqlite_connect(tmp_path / "release.db")
    store = SqliteStore(connection, clock=lambda: now[0])
    entries = [Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(1, 10_000))]
    v = store.consume_many(entries)
    assert v.allowed and v.releasable
    now[0] = 5001
    refused = store.consume_many(entries)
    assert (refused.allowed, refused.blocked) == (False, 1)
    v.release()
    assert connection.execute("SELECT count(*) FROM ratewindow_calls").fetchone()[0] == 0
    assert store.consume_many(entries).allowed
    # 1 of the burst of 2 was left before this call, and this call took it.
    assert not store.peek("u", GcraLimit(2, 1000, 2)).allowed


WORKER = """
import sqlite3, sys
from ratewindow import CounterLimit, GcraLimit, Limit, SqliteStore
path, index, calls, uses = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = SqliteStore(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
allowed = 0
for _ in range(calls):
    v = store.consume_many([
        (f"user{index}", GcraLimit(100, 1000, 100)),
        (f"user{index}", CounterLimit(100, 60_000)),
        ("global", Limit(uses, 60_000)),
    ])
    allowed += v.allowed
print(allowed)
"""


def test_processes_racing_a_global_entry_let_exactly_its_uses_pass(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    SqliteStore(sql.sqlite_connect(path))  # the schema, before the race
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(i), "15", "20"], stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    allowed = 0
    for w in workers:
        out, _ = w.communicate(timeout=120)
        assert w.returncode == 0
        allowed += int(out)
    assert allowed == 20
    connection = sql.sqlite_connect(path)
    assert connection.execute("SELECT count(*) FROM ratewindow_calls WHERE key = 'global'").fetchone()[0] == 20
    # All or nothing: the users' counters hold exactly the calls the global entry let pass.
    assert connection.execute("SELECT coalesce(sum(cur), 0) FROM ratewindow_counters").fetchone()[0] == 20


def test_bad_input_is_a_typed_error_and_writes_nothing(tmp_path: Path) -> None:
    connection = sql.sqlite_connect(tmp_path / "bad.db")
    store = SqliteStore(connection)
    with pytest.raises(InvalidArgumentError) as e:
        store.consume_many([Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(3, 1000), 4)])
    assert e.value.field == "entries[1].cost"
    with pytest.raises(InvalidArgumentError):
        store.peek_many([Entry("u", CounterLimit(2, 1000), 3), Entry("all", Limit(3, 1000))])
    with pytest.raises(InvalidLimitError):
        GcraLimit(2, 1000, 0)
    with pytest.raises(TypeError):
        store.consume_many([Entry("u", GcraLimit(2, 1000, 2), "1")])  # type: ignore[arg-type]
    rows = connection.execute(
        "SELECT (SELECT count(*) FROM ratewindow_calls) + (SELECT count(*) FROM ratewindow_gcra)"
        " + (SELECT count(*) FROM ratewindow_counters)"
    ).fetchone()[0]
    assert rows == 0


def never(*_: Any) -> Any:
    raise AssertionError("nothing may be sent")


async def never_async(*_: Any) -> Any:
    raise AssertionError("nothing may be sent")


# --- PostgreSQL: one statement ({prefix}_mixed) locks every key's row in one global order, reads the
# state on the server's clock, counts all or nothing and answers the state it read; the engine decides
# from it as MemoryStore does (and refuses rows whose verdict disagrees).


def watched(conn: Any, now: list[int], statements: list[int]) -> Any:
    """A ``query(sql, params)`` over ``conn`` that counts statements and keeps the mixed statement's
    clock: its last row is (-1, NULL, now, did), and its clock is never before the newest call it read
    (rows (0, key, at, expires_at))."""

    def query(text: str, params: list[Any]) -> list[tuple[Any, ...]]:
        statements[0] += 1
        with psycopg.RawCursor(conn) as cur:
            cur.execute(text, params)
            rows = cur.fetchall() if cur.description is not None else []
        if rows and rows[-1][0] == -1:
            now[0] = max([int(rows[-1][2])] + [int(r[2]) for r in rows if r[0] == 0])
        return rows

    return query


def test_postgres_a_seeded_walk_on_the_server_clock_gives_memory_stores_verdicts() -> None:
    seed = int(os.environ.get("RATEWINDOW_SEED", time.time_ns() % 2**31))
    print(f"RATEWINDOW_SEED={seed}")
    rng = random.Random(seed)
    prefix = sql.new_prefix("mixed_walk")
    conn = sql.connect()
    try:
        PostgresStore(conn, prefix=prefix).install_schema()
        now, statements = [0], [0]
        store = PostgresStore.using(watched(conn, now, statements), prefix=prefix)
        memory = MemoryStore(lambda: now[0])
        for step in range(250):
            time.sleep(rng.randrange(4) * rng.randrange(25) / 1000)
            entries, peek = walk_batch(rng)
            before = statements[0]
            got = store.peek_many(entries) if peek else store.consume_many(entries)
            assert statements[0] - before == 1, "one statement a batch"
            want = memory.peek_many(entries) if peek else memory.consume_many(entries)
            assert fields(got) == fields(want), f"step {step} at {now[0]}: {entries} (RATEWINDOW_SEED={seed})"
            slides = any(isinstance(e.limit, Limit) for e in entries)
            assert got.releasable == (got.allowed and not peek and slides), f"step {step}"
    finally:
        conn.close()
        sql.drop_schema(prefix)


def test_async_postgres_a_seeded_walk_gives_memory_stores_verdicts() -> None:
    seed = int(os.environ.get("RATEWINDOW_SEED", time.time_ns() % 2**31))
    print(f"RATEWINDOW_SEED={seed}")
    rng = random.Random(seed)
    prefix = sql.new_prefix("mixed_awalk")
    now = [0]

    async def go() -> None:
        conn = await psycopg.AsyncConnection.connect(sql.DSN, autocommit=True)

        async def query(text: str, params: list[Any]) -> list[tuple[Any, ...]]:
            async with psycopg.AsyncRawCursor(conn) as cur:
                await cur.execute(text, params)
                rows = await cur.fetchall() if cur.description is not None else []
            if rows and rows[-1][0] == -1:
                now[0] = max([int(rows[-1][2])] + [int(r[2]) for r in rows if r[0] == 0])
            return rows

        try:
            await AsyncPostgresStore(conn, prefix=prefix).install_schema()
            store = AsyncPostgresStore.using(query, prefix=prefix)
            memory = MemoryStore(lambda: now[0])
            for step in range(120):
                await asyncio.sleep(rng.randrange(4) * rng.randrange(25) / 1000)
                entries, peek = walk_batch(rng)
                got = await (store.peek_many(entries) if peek else store.consume_many(entries))
                want = memory.peek_many(entries) if peek else memory.consume_many(entries)
                assert fields(got) == fields(want), f"step {step} at {now[0]}: {entries} (RATEWINDOW_SEED={seed})"
        finally:
            await conn.close()

    try:
        asyncio.run(go())
    finally:
        sql.drop_schema(prefix)


def test_postgres_release_gives_back_the_sliding_calls_and_a_refusal_writes_nothing() -> None:
    prefix = sql.new_prefix("mixed_release")
    conn = sql.connect()
    try:
        store = PostgresStore(conn, prefix=prefix)
        store.install_schema()
        times = f"SELECT coalesce(cardinality(ats), 0) FROM {prefix}_log WHERE key = 'all'".encode()
        entries = [Entry("u", GcraLimit(2, 60_000, 2)), Entry("all", Limit(2, 60_000), 2)]
        v = store.consume_many(entries)
        assert v.allowed and v.releasable
        assert conn.execute(times).fetchone() == (2,)  # a call costing 2 is two times
        refused = store.consume_many([Entry("new", CounterLimit(5, 60_000)), *entries])
        assert (refused.allowed, refused.blocked, refused.releasable) == (False, 2, False)
        new = f"SELECT count(*) FROM {prefix}_counters WHERE key = 'new'".encode()
        assert conn.execute(new).fetchone() == (0,), "nothing written"
        v.release()
        assert conn.execute(times).fetchone() == (0,)
        assert store.consume_many(entries).allowed
        # 1 of the burst of 2 was left before this call, and this call took it.
        assert not store.peek("u", GcraLimit(2, 60_000, 2)).allowed
    finally:
        conn.close()
        sql.drop_schema(prefix)


def test_postgres_bad_input_is_a_typed_error_and_sends_nothing() -> None:
    for store in (PostgresStore.using(never),):
        with pytest.raises(InvalidArgumentError) as e:
            store.consume_many([Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(3, 1000), 4)])
        assert e.value.field == "entries[1].cost"
        with pytest.raises(InvalidArgumentError):
            store.peek_many([Entry("u", CounterLimit(2, 1000), 3), Entry("all", Limit(3, 1000))])
    astore = AsyncPostgresStore.using(never_async)

    async def go() -> None:
        with pytest.raises(InvalidArgumentError):
            await astore.consume_many([Entry("u", GcraLimit(2, 1000, 2), 3), Entry("all", Limit(3, 1000))])

    asyncio.run(go())


def test_postgres_4_processes_x_64_concurrent_batches_let_exactly_the_global_uses_pass() -> None:
    prefix = sql.new_prefix("mixed_race")
    try:
        with sql.connect() as conn:
            PostgresStore(conn, prefix=prefix).install_schema()
        start_at = time.time() + 3  # after every process has connected
        context = multiprocessing.get_context("spawn")
        with context.Pool(4) as pool:
            counts = pool.starmap(mixed_pg_worker.worker, [(prefix, i, 20, 64, start_at) for i in range(4)])
        assert sum(counts) == 20
        with sql.connect() as conn:
            row = conn.execute(f"SELECT cardinality(ats) FROM {prefix}_log WHERE key = 'api'".encode()).fetchone()
            assert row == (20,)
            # All or nothing: the users' counters hold exactly the calls the global entry let pass.
            counted = conn.execute(f"SELECT coalesce(sum(cur), 0) FROM {prefix}_counters".encode()).fetchone()
            assert counted == (20,)
    finally:
        sql.drop_schema(prefix)


# --- Redis: the engine reads every key (mixed.lua 'r', on the server's TIME), decides as MemoryStore
# does and writes only if nothing changed since (mixed.lua 'w'); a Cluster needs the keys in one slot.


# Short windows: the walk runs on the server's clock, so time passes by sleeping.
WALK: list[tuple[str, list[Any]]] = [
    ("a", [Limit(3, 120), Limit(5, 300)]),
    ("a", [GcraLimit(3, 120, 2), GcraLimit(3, 120, 3)]),
    ("b", [GcraLimit(10, 120, 5), GcraLimit(7, 360, 4)]),
    ("c", [CounterLimit(4, 120)]),
    ("d", [CounterLimit(9, 90), CounterLimit(9, 180)]),
    ("g", [Limit(6, 180)]),
]


def is_mixed_read(keys: list[str], args: list[str], reply: Any) -> bool:
    """mixed.lua's read: mode 'r' and a reply of TIME's two fields then one item a key (a release,
    also mode 'r', answers one number)."""
    return args[0] == "r" and isinstance(reply, list) and len(reply) == len(keys) + 2


def server_ms(reply: Any) -> int:
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


def walk_batch(rng: random.Random) -> tuple[list[Entry], bool]:
    entries: list[Entry] = []
    for _ in range(1 + rng.randrange(4)):
        key, choices = WALK[rng.randrange(len(WALK))]
        limit = rng.choice(choices)
        entries.append(Entry(key, limit, 1 + rng.randrange(min(top(limit), 3))))
    if all(isinstance(e.limit, Limit) for e in entries):
        entries.append(Entry("b", GcraLimit(10, 120, 5), 1))
    return entries, rng.randrange(4) == 0


def test_redis_a_seeded_walk_on_the_server_clock_gives_memory_stores_verdicts() -> None:
    seed = int(os.environ.get("RATEWINDOW_SEED", time.time_ns() % 2**31))
    print(f"RATEWINDOW_SEED={seed}")
    rng = random.Random(seed)
    client = rs.sync_client(2)
    now = [0]

    # The host sees every reply: the read's TIME is the clock MemoryStore then decides at.
    def run(script: str, keys: list[str], args: list[str]) -> Any:
        reply = client.eval(script, len(keys), *keys, *args)
        if is_mixed_read(keys, args, reply):
            now[0] = server_ms(reply)
        return reply

    def evalsha(sha: str, keys: list[str], args: list[str]) -> Any:
        reply = client.evalsha(sha, len(keys), *keys, *args)
        if is_mixed_read(keys, args, reply):
            now[0] = server_ms(reply)
        return reply

    store = RedisStore.using(run, evalsha=evalsha, prefix=rs.unique_prefix("mixed-walk"))
    memory = MemoryStore(lambda: now[0])
    for step in range(250):
        time.sleep(rng.randrange(4) * rng.randrange(25) / 1000)
        entries, peek = walk_batch(rng)
        got = store.peek_many(entries) if peek else store.consume_many(entries)
        want = memory.peek_many(entries) if peek else memory.consume_many(entries)
        assert fields(got) == fields(want), f"step {step} at {now[0]}: {entries} (RATEWINDOW_SEED={seed})"
        slides = any(isinstance(e.limit, Limit) for e in entries)
        assert got.releasable == (got.allowed and not peek and slides), f"step {step}"
    client.close()


def test_async_redis_a_seeded_walk_gives_memory_stores_verdicts() -> None:
    seed = int(os.environ.get("RATEWINDOW_SEED", time.time_ns() % 2**31))
    print(f"RATEWINDOW_SEED={seed}")
    rng = random.Random(seed)
    now = [0]

    async def go() -> None:
        client = rs.async_client()

        async def run(script: str, keys: list[str], args: list[str]) -> Any:
            reply = await client.eval(script, len(keys), *keys, *args)
            if is_mixed_read(keys, args, reply):
                now[0] = server_ms(reply)
            return reply

        async def evalsha(sha: str, keys: list[str], args: list[str]) -> Any:
            reply = await client.evalsha(sha, len(keys), *keys, *args)
            if is_mixed_read(keys, args, reply):
                now[0] = server_ms(reply)
            return reply

        try:
            store = AsyncRedisStore.using(run, evalsha=evalsha, prefix=rs.unique_prefix("mixed-awalk"))
            memory = MemoryStore(lambda: now[0])
            for step in range(120):
                await asyncio.sleep(rng.randrange(4) * rng.randrange(25) / 1000)
                entries, peek = walk_batch(rng)
                got = await (store.peek_many(entries) if peek else store.consume_many(entries))
                want = memory.peek_many(entries) if peek else memory.consume_many(entries)
                assert fields(got) == fields(want), f"step {step} at {now[0]}: {entries} (RATEWINDOW_SEED={seed})"
        finally:
            await client.aclose()

    asyncio.run(go())


def test_redis_release_gives_back_the_sliding_calls_and_keeps_the_gcra_use() -> None:
    client = rs.sync_client(2)
    prefix = rs.unique_prefix("mixed-release")
    store = rs.sync_store(client, prefix=prefix)
    entries = [Entry("u", GcraLimit(2, 60_000, 2)), Entry("all", Limit(2, 60_000), 2)]
    v = store.consume_many(entries)
    assert v.allowed and v.releasable
    assert client.zcard(f"{prefix}log:all") == 2  # a call costing 2 is two members
    refused = store.consume_many(entries)
    assert (refused.allowed, refused.blocked) == (False, 1)
    v.release()
    assert client.zcard(f"{prefix}log:all") == 0
    assert store.consume_many(entries).allowed
    # 1 of the burst of 2 was left before this call, and this call took it.
    assert not store.peek("u", GcraLimit(2, 60_000, 2)).allowed
    client.close()


def test_redis_bad_input_is_a_typed_error_and_sends_nothing() -> None:
    store = RedisStore.using(never)
    with pytest.raises(InvalidArgumentError) as e:
        store.consume_many([Entry("u", GcraLimit(2, 1000, 2)), Entry("all", Limit(3, 1000), 4)])
    assert e.value.field == "entries[1].cost"


def race(cluster: bool) -> int:
    prefix = rs.unique_prefix("mixed-race")
    start_at = time.time() + 3  # after every process has connected
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        counts = pool.starmap(mixed_redis_worker.worker, [(prefix, i, 20, 64, cluster, start_at) for i in range(4)])
    if not cluster:
        client = rs.sync_client(1)
        assert client.zcount(f"{prefix}log:api", 0, "+inf") == sum(counts)
        # All or nothing: the users' counters hold exactly the calls the global entry let pass.
        counted = 0
        for key in client.keys(f"{prefix}ctr:*"):
            value = client.get(key)
            assert isinstance(value, bytes)
            counted += int(value.split(b":")[2])
        assert counted == sum(counts)
        client.close()
    return sum(counts)


def test_redis_4_processes_x_64_concurrent_batches_let_exactly_the_global_uses_pass() -> None:
    assert race(cluster=False) == 20


def test_redis_cluster_4_processes_x_64_concurrent_batches_in_one_slot() -> None:
    assert race(cluster=True) == 20


def test_redis_cluster_runs_keys_of_one_slot_and_refuses_keys_across_slots() -> None:
    client = rs.cluster_client(2)
    prefix = rs.unique_prefix("mixed-cluster")
    tagged = rs.sync_store(client, prefix=prefix, hash_tag=":")
    entries = [
        Entry("api:alice", GcraLimit(5, 60_000, 5)),
        Entry("api:alice", CounterLimit(5, 60_000)),
        Entry("api", Limit(2, 60_000)),
    ]
    assert [tagged.consume_many(entries).allowed for _ in range(3)] == [True, True, False]
    assert tagged.peek_many(entries).blocked == 2
    plain = rs.sync_store(client, prefix=prefix)
    # The engine's `unsupported` outcome of a running call: UnsupportedError naming the batch's algorithm
    # (as PostgreSQL's refusal does), a consume and a peek alike.
    spread = [Entry("alice", GcraLimit(5, 60_000, 5)), Entry("bob", Limit(2, 60_000))]
    for call in (plain.consume_many, plain.peek_many):
        with pytest.raises(UnsupportedError, match="one slot") as caught:
            call(spread)
        assert (caught.value.algorithm, caught.value.code) == ("gcra", "unsupported")
    with pytest.raises(UnsupportedError, match="one slot") as caught:
        plain.consume_many([Entry("carol", Limit(2, 60_000)), Entry("dave", CounterLimit(5, 60_000))])
    assert caught.value.algorithm == "counter"
    assert client.exists(f"{prefix}gcr:alice") == 0  # nothing written
    assert client.exists(f"{prefix}ctr:dave") == 0
    client.close()


def test_async_redis_cluster_runs_keys_of_one_slot_and_refuses_keys_across_slots() -> None:
    async def go() -> None:
        client = rs.async_cluster_client()
        try:
            await rs.warm_async(client)
            prefix = rs.unique_prefix("mixed-acluster")
            tagged = rs.async_store(client, prefix=prefix, hash_tag=":")
            entries = [Entry("api:alice", GcraLimit(5, 60_000, 5)), Entry("api", Limit(1, 60_000))]
            assert (await tagged.consume_many(entries)).allowed
            refused = await tagged.consume_many(entries)
            assert (refused.allowed, refused.blocked) == (False, 1)
            plain = rs.async_store(client, prefix=prefix)
            spread = [Entry("alice", GcraLimit(5, 60_000, 5)), Entry("bob", Limit(2, 60_000))]
            with pytest.raises(UnsupportedError, match="one slot") as caught:
                await plain.peek_many(spread)
            assert caught.value.algorithm == "gcra"
            with pytest.raises(UnsupportedError, match="one slot"):
                await plain.consume_many(spread)
            assert await client.exists(f"{prefix}gcr:alice") == 0  # nothing written
        finally:
            await client.aclose()

    asyncio.run(go())
