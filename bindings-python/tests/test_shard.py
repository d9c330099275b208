"""The sharded store (ratewindow._shard over core::shard) with real processes: spawned workers are the
shards, this test process is their manager (serve_shards, a thread per connection) and counts in a
MemoryStore. Exactly-once across 4 processes x 64 calls (sync and asyncio shards, a Pipe and a Unix
socket Listener), counts kept over a worker's restart, a manager that does not answer (a typed
timeout, alone and under Guard), malformed and unknown messages (a typed error answer, and the manager
keeps serving), every operation, and the conformance kit inside sharding (in a worker) and outside."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import tempfile
import uuid
from multiprocessing.connection import Client, Connection, Listener
from collections.abc import Callable
from typing import Any

import pytest

from ratewindow import (
    AsyncMemoryStore,
    AsyncShardedStore,
    Entry,
    Guard,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    ShardedStore,
    ShardError,
    StoreError,
    serve_shards,
    serve_shards_async,
)
from ratewindow.testing import check_store, run_checks

CTX = mp.get_context("spawn")


def fresh(label: str) -> str:
    return f"shard-test:{label}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# --- what the workers run (module level: spawned processes import them) -------------------------


def _consume(conn: Any, key: str, uses: int, calls: int, out: Any) -> None:
    store = ShardedStore(conn, timeout=20)
    out.send(sum(store.consume(key, Limit(uses, 60_000)).allowed for _ in range(calls)))


def _consume_async(conn: Any, key: str, uses: int, calls: int, out: Any) -> None:
    async def main() -> int:
        store = AsyncShardedStore(conn, timeout=20)
        verdicts = await asyncio.gather(*(store.consume(key, Limit(uses, 60_000)) for _ in range(calls)))
        return sum(v.allowed for v in verdicts)

    out.send(asyncio.run(main()))


def _consume_socket(address: str, key: str, uses: int, calls: int, out: Any) -> None:
    _consume(Client(address), key, uses, calls, out)


def _timeout(conn: Any, out: Any) -> None:
    store = ShardedStore(conn, timeout=0.15)
    try:
        store.consume("k", Limit(1, 1000))
        out.send(("answered",))
    except ShardError as e:
        out.send((type(e).__name__, e.kind, isinstance(e, StoreError), str(e)))
    guarded = Guard(ShardedStore(conn, timeout=0.1), timeout_ms=5000, on_failure="deny")
    v = guarded.consume("k", Limit(1, 1000))
    out.send((v.allowed, v.failed, type(v.cause).__name__, getattr(v.cause, "kind", None)))


def _raw(conn: Connection, key: str, out: Any) -> None:
    answers = []
    for text in [
        b"garbage",
        b'{"rw":1,"id":900001,"op":"explode","key":"k"}',
        b'{"rw":1,"id":900002,"op":"consume","key":"k","uses":3}',
        b'{"rw":9,"id":900003,"op":"consume","key":"k","uses":3,"windowMs":10}',
        b'{"rw":1,"id":900004,"op":"consume","key":"k","uses":0,"windowMs":10}',
        b"\xff\xfe",
    ]:
        conn.send_bytes(text)
        answers.append(json.loads(conn.recv_bytes()))
    store = ShardedStore(conn, timeout=5)
    out.send((answers, store.consume(key, Limit(1, 1000)).allowed))


def _ops(conn: Any, key: str, out: Any) -> None:
    store = ShardedStore(conn, timeout=5)
    r: dict[str, Any] = {}
    r["consume"] = store.consume(key, Limit(2, 60_000)).remaining
    r["peek"] = store.peek(key, Limit(2, 60_000)).remaining
    batch = [Entry(f"{key}:m", Limit(1, 60_000))]
    allowed = store.consume_many(batch)
    r["many"] = (allowed.allowed, allowed.releasable)
    refused = store.consume_many(batch)
    r["refused"] = (refused.allowed, refused.blocked, refused.retry_after_ms > 0)
    r["peek_many"] = store.peek_many(batch).allowed
    allowed.release()
    r["after_release"] = store.consume_many(batch).allowed
    f = f"{key}:f"
    r["hit"] = store.hit(f, 60_000, 2)
    hw = store.hit_window(f, 60_000)
    r["hit_window"] = (hw.count, hw.reset_after_ms > 0)
    at = store.attempt(f, 3, 60_000)
    r["attempt"] = (at.allowed, at.count)
    r["attempts"] = store.attempts(f)
    r["too_many"] = store.too_many_attempts(f, 4)
    r["remaining"] = store.remaining(f, 10)
    r["available_in"] = store.available_in(f)
    r["available_in_ms"] = store.available_in_ms(f) > 59_000
    store.reset_attempts(f)
    r["after_reset"] = store.attempts(f)
    store.clear(f)
    r["after_clear"] = store.available_in(f)
    errors: dict[str, Any] = {}
    calls: dict[str, Callable[[], object]] = {
        "decay": lambda: store.hit(key, -1),
        "amount": lambda: store.hit(key, 1000, 2**70),
        "key": lambda: store.consume("\ud800", Limit(1, 10)),
        "entry_key": lambda: store.consume_many([Entry("ok", Limit(1, 10)), Entry("\ud800", Limit(1, 10))]),
    }
    for name, call in calls.items():
        try:
            call()
            errors[name] = None
        except Exception as e:  # noqa: BLE001
            errors[name] = (type(e).__name__, getattr(e, "field", None), getattr(e, "argument", None))
    out.send((r, errors))


def _kit(conn: Any, out: Any) -> None:
    results = run_checks(lambda: ShardedStore(conn, timeout=10))
    out.send({name: (None if e is None else repr(e)) for name, e in results.items()})


# --- helpers -----------------------------------------------------------------------------------


def run_workers(target: Any, argsets: list[tuple[Any, ...]], store: Any, *, serve: bool = True) -> list[Any]:
    """Starts a spawned worker per argument set, each with a Pipe the manager serves; their reports."""
    procs, outs, conns = [], [], []
    for args in argsets:
        parent, child = CTX.Pipe()
        out_r, out_w = CTX.Pipe(duplex=False)
        p = CTX.Process(target=target, args=(child, *args, out_w))
        p.start()
        procs.append(p)
        outs.append(out_r)
        conns.append(parent)
    server = serve_shards(store, *conns) if serve else None
    reports = []
    for r, p in zip(outs, procs):
        while not r.poll(0.2):
            assert p.is_alive() or r.poll(0), f"a worker exited ({p.exitcode}) without a report"
        reports.append(r.recv())
    for p in procs:
        p.join(30)
    if server is not None:
        server.close()
    return reports


# --- tests -------------------------------------------------------------------------------------


def test_exactly_once_across_4_processes_x_64_calls() -> None:
    store = MemoryStore()
    key = fresh("exact")
    reports = run_workers(_consume, [(key, 50, 64)] * 4, store)
    assert sum(reports) == 50
    assert not store.consume(key, Limit(50, 60_000)).allowed


def test_exactly_once_with_asyncio_shards() -> None:
    store = MemoryStore()
    key = fresh("async")
    reports = run_workers(_consume_async, [(key, 50, 64)] * 4, store)
    assert sum(reports) == 50


def test_exactly_once_over_a_unix_socket_listener() -> None:
    store = MemoryStore()
    key = fresh("socket")
    address = os.path.join(tempfile.mkdtemp(), "shards.sock")
    with Listener(address, family="AF_UNIX") as listener:
        procs, outs = [], []
        for _ in range(4):
            out_r, out_w = CTX.Pipe(duplex=False)
            p = CTX.Process(target=_consume_socket, args=(address, key, 50, 64, out_w))
            p.start()
            procs.append(p)
            outs.append(out_r)
        server = serve_shards(store)
        for _ in range(4):
            server.serve(listener.accept())
        total = 0
        for r in outs:
            assert r.poll(120)
            total += r.recv()
        for p in procs:
            p.join(30)
        server.close()
    assert total == 50


def test_an_asyncio_manager_serves_4_processes_exactly_once() -> None:
    store = AsyncMemoryStore()
    key = fresh("async-manager")
    procs, outs, conns = [], [], []
    for target in (_consume, _consume_async, _consume, _consume_async):
        parent, child = CTX.Pipe()
        out_r, out_w = CTX.Pipe(duplex=False)
        p = CTX.Process(target=target, args=(child, key, 50, 64, out_w))
        p.start()
        procs.append(p)
        outs.append(out_r)
        conns.append(parent)

    async def manage() -> None:
        served = asyncio.ensure_future(serve_shards_async(store, *conns))
        loop = asyncio.get_running_loop()
        try:
            for r in outs:
                while not await loop.run_in_executor(None, r.poll, 0.2):
                    pass
        finally:
            served.cancel()

    asyncio.run(manage())
    assert sum(r.recv() for r in outs) == 50
    for p in procs:
        p.join(30)


def test_a_redis_store_in_the_manager_counts_exactly_once() -> None:
    import redis

    from ratewindow import RedisStore

    client = redis.Redis(host="127.0.0.1", port=6379)
    prefix = f"shard-test-{uuid.uuid4().hex[:8]}:"
    store = RedisStore.from_client(client, prefix=prefix)
    key = fresh("redis")
    try:
        assert sum(run_workers(_consume, [(key, 50, 64)] * 4, store)) == 50
    finally:
        keys = list(client.scan_iter(f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_a_restarted_worker_keeps_the_counts() -> None:
    store = MemoryStore()
    key = fresh("restart")
    assert run_workers(_consume, [(key, 5, 3)], store) == [3]
    assert run_workers(_consume, [(key, 5, 5)], store) == [2]


def test_a_manager_that_does_not_answer_is_a_typed_timeout_and_a_store_failure_to_guard() -> None:
    parent, child = CTX.Pipe()
    out_r, out_w = CTX.Pipe(duplex=False)
    p = CTX.Process(target=_timeout, args=(child, out_w))
    p.start()
    assert out_r.poll(60)
    name, kind, store_error, message = out_r.recv()
    assert (name, kind, store_error) == ("ShardError", "timeout", True)
    assert "did not answer consume within 150 ms" in message
    assert out_r.poll(60)
    assert out_r.recv() == (False, "store-error", "ShardError", "timeout")
    p.join(30)
    parent.close()


def test_malformed_and_unknown_messages_get_typed_errors_and_the_manager_keeps_serving() -> None:
    store = MemoryStore()
    errors: list[ShardError] = []
    parent, child = CTX.Pipe()
    out_r, out_w = CTX.Pipe(duplex=False)
    p = CTX.Process(target=_raw, args=(child, fresh("raw"), out_w))
    p.start()
    server = serve_shards(store, parent, on_error=errors.append)
    assert out_r.poll(60)
    answers, allowed = out_r.recv()
    kinds = [(a["id"], a["error"]["kind"]) for a in answers]
    assert kinds == [
        (0, "malformed"),
        (900001, "unknown"),
        (900002, "malformed"),
        (900003, "unknown"),
        (900004, "invalid_limit"),
        (0, "malformed"),
    ]
    assert "windowMs" in answers[2]["error"]["message"]
    assert allowed is True
    assert all(isinstance(e, ShardError) for e in errors) and len(errors) >= 5
    p.join(30)
    server.close()


def test_every_operation_through_the_manager_and_typed_errors() -> None:
    [(r, errors)] = run_workers(_ops, [(fresh("ops"),)], MemoryStore())
    assert r["consume"] == 1 and r["peek"] == 1
    assert r["many"] == (True, True)
    assert r["refused"] == (False, 0, True)
    assert r["peek_many"] is False
    assert r["after_release"] is True
    assert r["hit"] == 2 and r["hit_window"] == (3, True)
    assert r["attempt"] == (False, 3) and r["attempts"] == 3
    assert r["too_many"] is False and r["remaining"] == 7
    assert r["available_in"] == 60 and r["available_in_ms"] is True
    assert r["after_reset"] == 0 and r["after_clear"] == 0
    assert errors["decay"] == ("InvalidLimitError", "window_ms", "decay_ms")
    assert errors["amount"] == ("InvalidArgumentError", "amount", None)
    assert errors["key"][0] == "InvalidArgumentError" and errors["key"][1] == "key"
    assert errors["entry_key"][0] == "InvalidArgumentError" and errors["entry_key"][1] == "entries[1].key"


def test_store_failures_and_unsupported_operations_cross_as_store_errors() -> None:
    class Down:
        def consume(self, key: str, limit: Limit) -> Any:
            raise StoreError("the database is down")

    parent, child = CTX.Pipe()
    server = serve_shards(Down(), parent)
    store = ShardedStore(child, timeout=5)  # this process as the shard: the manager is a thread
    with pytest.raises(ShardError) as down:
        store.consume("k", Limit(1, 1000))
    assert (down.value.kind, str(down.value)) == ("store", "the database is down")
    with pytest.raises(ShardError) as unsupported:
        store.hit("k", 1000)
    assert unsupported.value.kind == "unsupported"
    with pytest.raises(InvalidLimitError):
        Limit(0, 1000)
    with pytest.raises(InvalidArgumentError):
        ShardedStore(child, timeout=0)
    server.close()


def test_the_conformance_kit_inside_sharding() -> None:
    [results] = run_workers(_kit, [()], MemoryStore())
    failed = {name: e for name, e in results.items() if e is not None}
    assert failed == {}
    assert len(results) >= 10


def test_outside_sharding_it_counts_in_this_process() -> None:
    store = ShardedStore()
    assert store.sharded is False
    assert store.consume("outside", Limit(1, 1000)).allowed
    assert not store.consume("outside", Limit(1, 1000)).allowed


TestShardedStoreOutsideSharding = check_store(ShardedStore)
TestAsyncShardedStoreOutsideSharding = check_store(AsyncShardedStore)
