"""The sharded store's lock (ShardedStore.lock / AsyncShardedStore.lock) with real processes: spawned
workers are the shards, this test process is their manager (serve_shards, a thread per connection,
or serve_shards_async) and runs every lock step on its store's lock: a MemoryStore, or a RedisStore
on the shared 127.0.0.1:6379. Exactly one holder among 4 processes x 64 acquirers, the kit's lock
check inside sharding (sync and asyncio) and outside, and malformed lock messages answered with typed
errors while the manager keeps serving."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import threading
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest

from ratewindow import (
    AsyncMemoryStore,
    AsyncShardedStore,
    InvalidArgumentError,
    LockTimeoutError,
    MemoryStore,
    ShardedStore,
    serve_shards,
    serve_shards_async,
)
from ratewindow.testing import run_checks

CTX = mp.get_context("spawn")
ACQUIRERS = 64


def fresh(label: str) -> str:
    return f"shard-lock-test:{label}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# --- what the workers run (module level: spawned processes import them) -------------------------


def _race_sync(conn: Any, key: str, out: Any) -> None:
    """64 threads, each with a lock of its own, acquire `key` at once: the owners that got it."""
    store = ShardedStore(conn, timeout=30)
    locks = [store.lock(key, 60) for _ in range(ACQUIRERS)]
    barrier = threading.Barrier(ACQUIRERS)
    won: list[str] = []

    def take(i: int) -> None:
        barrier.wait()
        if locks[i].acquire():
            won.append(locks[i].owner)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(ACQUIRERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.send(won)


def _race_async(conn: Any, key: str, out: Any) -> None:
    """64 asyncio tasks on one connection acquire `key` at once: the owners that got it."""

    async def main() -> list[str]:
        store = AsyncShardedStore(conn, timeout=30)
        locks = [store.lock(key, 60) for _ in range(ACQUIRERS)]
        got = await asyncio.gather(*(lock.acquire() for lock in locks))
        return [lock.owner for lock, ok in zip(locks, got) if ok]

    out.send(asyncio.run(main()))


def _steps(conn: Any, key: str, out: Any) -> None:
    """Every lock step through the manager, a restore by token, block's timeout and a bad ttl."""
    store = ShardedStore(conn, timeout=10)
    a, b = store.lock(key, 30), store.lock(key, 30)
    r: dict[str, Any] = {}
    r["free"] = a.current_owner()
    r["a"] = a.acquire()
    r["b"] = b.acquire()
    r["b_release"] = b.release()
    r["owner_is_a"] = a.current_owner() == a.owner
    with pytest.raises(LockTimeoutError):
        b.block(0.3, 100)
    r["restored_release"] = store.lock(key, 30, a.owner).release()
    r["after"] = a.current_owner()
    with b:
        r["with"] = b.is_owned()
    r["after_with"] = b.current_owner()
    r["a_again"] = a.acquire()
    r["force"] = b.force_release()
    r["force_again"] = b.force_release()
    try:
        store.lock(key, 0)
        r["bad_ttl"] = None
    except InvalidArgumentError as e:
        r["bad_ttl"] = e.field
    out.send(r)


def _kit_lock(conn: Any, asynchronous: bool, out: Any) -> None:
    if asynchronous:
        results = run_checks(lambda: AsyncShardedStore(conn, timeout=10), only=["lock"])
    else:
        results = run_checks(lambda: ShardedStore(conn, timeout=10), only=["lock"])
    out.send({name: (None if e is None else repr(e)) for name, e in results.items()})


# --- helpers -----------------------------------------------------------------------------------


def run_workers(targets: list[tuple[Any, tuple[Any, ...]]], store: Any) -> list[Any]:
    """A spawned worker per (target, args), each on a Pipe the manager serves; their reports."""
    procs, outs, conns = [], [], []
    for target, args in targets:
        parent, child = CTX.Pipe()
        out_r, out_w = CTX.Pipe(duplex=False)
        p = CTX.Process(target=target, args=(child, *args, out_w))
        p.start()
        procs.append(p)
        outs.append(out_r)
        conns.append(parent)
    server = serve_shards(store, *conns)
    reports = []
    for r, p in zip(outs, procs):
        while not r.poll(0.2):
            assert p.is_alive() or r.poll(0), f"a worker exited ({p.exitcode}) without a report"
        reports.append(r.recv())
    for p in procs:
        p.join(30)
    server.close()
    return reports


@pytest.fixture
def redis_store() -> Iterator[Any]:
    import redis

    from ratewindow import RedisStore

    client = redis.Redis(host="127.0.0.1", port=6379)
    prefix = f"shard-lock-test-{uuid.uuid4().hex[:8]}:"
    try:
        yield RedisStore.from_client(client, prefix=prefix)
    finally:
        keys = list(client.scan_iter(f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


# --- tests -------------------------------------------------------------------------------------


def _exactly_one_holder(store: Any) -> None:
    key = fresh("race")
    racers = [(_race_sync, (key,)), (_race_async, (key,)), (_race_sync, (key,)), (_race_async, (key,))]
    won = [owner for report in run_workers(racers, store) for owner in report]
    assert len(won) == 1, f"exactly one of 4 x {ACQUIRERS} acquirers holds the lock: {won}"
    # The manager's own store agrees on the holder, and the holder's token frees it.
    assert store.lock(key, 60).current_owner() == won[0]
    assert store.lock(key, 60, won[0]).release() is True


def test_exactly_one_holder_among_4_processes_x_64_acquirers_on_a_memory_store() -> None:
    _exactly_one_holder(MemoryStore())


def test_exactly_one_holder_among_4_processes_x_64_acquirers_on_a_redis_store(redis_store: Any) -> None:
    _exactly_one_holder(redis_store)


def test_an_asyncio_manager_runs_the_lock_steps_exactly_one_holder() -> None:
    store = AsyncMemoryStore()
    key = fresh("async-manager")
    procs, outs, conns = [], [], []
    for target in (_race_sync, _race_async, _race_sync, _race_async):
        parent, child = CTX.Pipe()
        out_r, out_w = CTX.Pipe(duplex=False)
        p = CTX.Process(target=target, args=(child, key, out_w))
        p.start()
        procs.append(p)
        outs.append(out_r)
        conns.append(parent)

    async def manage() -> str | None:
        served = asyncio.ensure_future(serve_shards_async(store, *conns))
        loop = asyncio.get_running_loop()
        try:
            for r in outs:
                while not await loop.run_in_executor(None, r.poll, 0.2):
                    pass
            return await store.lock(key, 60).current_owner()
        finally:
            served.cancel()

    holder = asyncio.run(manage())
    won = [owner for r in outs for owner in r.recv()]
    assert len(won) == 1 and holder == won[0]
    for p in procs:
        p.join(30)


@pytest.mark.parametrize("on_redis", [False, True])
def test_every_lock_step_through_the_manager(on_redis: bool, request: pytest.FixtureRequest) -> None:
    store = request.getfixturevalue("redis_store") if on_redis else MemoryStore()
    [r] = run_workers([(_steps, (fresh("steps"),))], store)
    assert r == {
        "free": None,
        "a": True,
        "b": False,
        "b_release": False,
        "owner_is_a": True,
        "restored_release": True,
        "after": None,
        "with": True,
        "after_with": None,
        "a_again": True,
        "force": True,
        "force_again": False,
        "bad_ttl": "ttl",
    }


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_kits_lock_check_inside_sharding(asynchronous: bool) -> None:
    [results] = run_workers([(_kit_lock, (asynchronous,))], MemoryStore())
    assert results == {"lock": None}


def test_the_kits_lock_check_outside_sharding() -> None:
    assert run_checks(lambda: ShardedStore(), only=["lock"]) == {"lock": None}
    assert run_checks(lambda: AsyncShardedStore(), only=["lock"]) == {"lock": None}


def test_malformed_lock_messages_get_typed_errors_and_the_manager_keeps_serving() -> None:
    store = MemoryStore()
    parent, child = CTX.Pipe()
    server = serve_shards(store, parent)

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        conn: Connection = child
        conn.send_bytes(json.dumps(request).encode())
        assert conn.poll(10)
        answer: dict[str, Any] = json.loads(conn.recv_bytes())
        return answer

    def error(request: dict[str, Any]) -> tuple[int, str, str | None]:
        a = ask(request)
        return a["id"], a["error"]["kind"], a["error"].get("field")

    base = {"rw": 1, "op": "lockAcquire", "key": "k", "owner": "o", "ttl": 1}
    assert error({**base, "id": 1, "owner": None}) == (1, "malformed", None)
    assert error({"rw": 1, "id": 2, "op": "lockAcquire", "key": "k", "ttl": 1}) == (2, "malformed", None)
    assert error({**base, "id": 3, "ttl": "1"}) == (3, "malformed", None)
    assert error({**base, "id": 4, "key": 7}) == (4, "malformed", None)
    assert error({**base, "id": 5, "ttl": 0}) == (5, "invalid_argument", "ttl")
    assert error({**base, "id": 6, "ttl": -1}) == (6, "invalid_argument", "ttl")
    assert error({**base, "id": 7, "owner": ""}) == (7, "invalid_argument", "owner")
    assert error({**base, "id": 8, "owner": "x" * 257}) == (8, "invalid_argument", "owner")
    assert error({**base, "id": 9, "op": "lockSteal"}) == (9, "unknown", None)
    # The manager kept serving, and none of the refused steps took the lock.
    assert ask({**base, "id": 10, "op": "lockOwner"}) == {"rw": 1, "id": 10, "value": None}
    assert ask({**base, "id": 11}) == {"rw": 1, "id": 11, "value": True}
    assert store.lock("k", 1).current_owner() == "o"
    server.close()


def test_a_manager_store_without_lock_answers_unsupported() -> None:
    class NoLock:
        pass

    parent, child = CTX.Pipe()
    server = serve_shards(NoLock(), parent)
    store = ShardedStore(child, timeout=5)
    from ratewindow import ShardError

    with pytest.raises(ShardError) as e:
        store.lock("k", 1).acquire()
    assert e.value.kind == "unsupported"
    server.close()
