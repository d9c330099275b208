"""The lock on every store: the vectors of ``tests/vectors/lock/lock.json`` (memory and SQLite on an
injected clock; a real Redis through redis-py sync and asyncio, and a real PostgreSQL through psycopg,
on the server's clock: each step at its offset from the case's start, ``exact`` steps skipped); the
argument errors and ``block``'s schedule; ``block``, the context managers and restore by token; exactly
one holder among 4 processes (``multiprocessing``) x 64 concurrent acquirers on Redis, Redis Cluster,
PostgreSQL and SQLite."""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
import redis_servers as rs
import sql_support as sq

from ratewindow import (
    AsyncMemoryStore,
    AsyncPostgresStore,
    AsyncRedisStore,
    InvalidArgumentError,
    Lock,
    LockTimeoutError,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SqliteStore,
    _ratewindow,
)

VECTORS = json.loads((Path(__file__).parents[2] / "tests" / "vectors" / "lock" / "lock.json").read_text())
BASE = 1_700_000_000_000
REDIS_PREFIX = "rwtest:pylock:"
PREFIX = sq.new_prefix("lock")


def num(v: Any) -> float:
    if isinstance(v, str):
        return {"NaN": math.nan, "Infinity": math.inf}[v]
    return float(v)


class Clock:
    def __init__(self) -> None:
        self.t = BASE

    def __call__(self) -> int:
        return self.t


def run_step(store: Any, key: str, step: dict[str, Any]) -> Any:
    op = step["op"]
    if op == "acquire":
        return store.lock(key, num(step["ttl"]), step["owner"]).acquire()
    if op == "release":
        return store.lock(key, 1, step["owner"]).release()
    if op == "force_release":
        return store.lock(key, 1).force_release()
    return store.lock(key, 1).current_owner()


def run_cases(store: Any, clock: Clock | None) -> None:
    for case in VECTORS["cases"]:
        prefix = secrets.token_hex(4) + ":"
        start = time.monotonic()
        for step in case["steps"]:
            if clock is None and step.get("exact"):
                continue
            if clock is None:
                time.sleep(max(0.0, start + step["at"] / 1000 - time.monotonic()))
            else:
                clock.t = BASE + step["at"]
            got = run_step(store, prefix + step["key"], step)
            assert got == step["expect"], f"{case['name']}: {step}"


async def run_cases_async(store: Any) -> None:
    for case in VECTORS["cases"]:
        prefix = secrets.token_hex(4) + ":"
        start = time.monotonic()
        for step in case["steps"]:
            if step.get("exact"):
                continue
            await asyncio.sleep(max(0.0, start + step["at"] / 1000 - time.monotonic()))
            got = await run_step(store, prefix + step["key"], step)
            assert got == step["expect"], f"{case['name']}: {step}"


@pytest.fixture(scope="module", autouse=True)
def schema() -> Iterator[None]:
    with sq.connect() as conn:
        PostgresStore.using(conn, prefix=PREFIX).install_schema()
    yield
    sq.drop_schema(PREFIX)
    with sq.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {PREFIX}_locks".encode())


def test_vectors_on_memory() -> None:
    clock = Clock()
    run_cases(MemoryStore(clock), clock)


def test_vectors_on_sqlite(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteStore(sq.sqlite_connect(tmp_path / "lock.db"), clock=clock)
    store.install_schema()
    run_cases(store, clock)


def test_vectors_on_redis() -> None:
    # from_client gives `command`: acquire by a plain SET NX PX, force by DEL, owner by GET.
    sent: list[str] = []
    with redis.Redis() as client:

        def command(args: list[str]) -> Any:
            sent.append(args[0])
            return client.execute_command(*args)

        store = RedisStore.using(
            lambda s, keys, args: client.eval(s, len(keys), *keys, *args),
            evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
            command=command,
            prefix=REDIS_PREFIX,
        )
        run_cases(store, None)
    assert sorted(set(sent)) == ["DEL", "GET", "SET"]


def test_vectors_on_redis_by_script_only() -> None:
    # A store made without `command` runs every lock operation as the lock script.
    with redis.Redis() as client:
        store = RedisStore.using(
            lambda s, keys, args: client.eval(s, len(keys), *keys, *args),
            evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
            prefix=REDIS_PREFIX,
        )
        run_cases(store, None)


def test_vectors_on_redis_with_decoded_responses() -> None:
    # decode_responses=True: SET's True / None, GET's str.
    with redis.Redis(decode_responses=True) as client:
        run_cases(RedisStore.from_client(client, prefix=REDIS_PREFIX), None)


def test_vectors_on_postgres() -> None:
    with sq.connect() as conn:
        run_cases(PostgresStore.using(conn, prefix=PREFIX), None)


def test_vectors_on_asyncio_stores() -> None:
    async def go() -> None:
        client = aredis.Redis()
        try:
            await run_cases_async(AsyncRedisStore.from_client(client, prefix=REDIS_PREFIX))
            scripts_only = AsyncRedisStore.using(
                lambda s, keys, args: client.eval(s, len(keys), *keys, *args),
                evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
                prefix=REDIS_PREFIX,
            )
            await run_cases_async(scripts_only)
        finally:
            await client.aclose()
        clock = Clock()
        store = AsyncMemoryStore(clock=clock)
        for case in VECTORS["cases"]:
            prefix = secrets.token_hex(4) + ":"
            for step in case["steps"]:
                clock.t = BASE + step["at"]
                assert await run_step(store, prefix + step["key"], step) == step["expect"], case["name"]
        import psycopg

        async with await psycopg.AsyncConnection.connect(sq.DSN, autocommit=True) as conn:
            await run_cases_async(AsyncPostgresStore.using(conn, prefix=PREFIX))

    asyncio.run(go())


def test_argument_errors_name_the_field() -> None:
    store = MemoryStore()
    for e in VECTORS["errors"]:
        with pytest.raises(InvalidArgumentError) as raised:
            if e["op"] == "acquire":
                store.lock(e["key"], num(e["ttl"]), e["owner"])
            else:
                store.lock("k", 1).block(num(e["seconds"]), num(e["retry_ms"]))
        assert raised.value.field == e["error"], e["name"]
        assert str(raised.value).startswith(f"invalid {e['error']}:"), e["name"]
    with pytest.raises(TypeError):
        store.lock("k", "10")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.lock("k", True)
    with pytest.raises(InvalidArgumentError):
        store.lock("k", 1, wait=-1)


def test_block_schedule_is_the_cores() -> None:
    for w in VECTORS["waits"]:
        if "error" in w:
            with pytest.raises(InvalidArgumentError):
                _ratewindow.LockWait(num(w["seconds"]), num(w["retry_ms"]), w["start"])
            continue
        wait = _ratewindow.LockWait(num(w["seconds"]), num(w["retry_ms"]), w["start"])
        for r in w["refusals"]:
            assert wait.after_refusal(r["at"]) == r["sleep"], (w["name"], r)


def test_block_waits_for_a_release_and_times_out() -> None:
    store = MemoryStore()
    holder = store.lock("job", 10)
    assert holder.acquire()
    waiter = store.lock("job", 10)
    started = time.monotonic()
    with pytest.raises(LockTimeoutError) as raised:
        waiter.block(0.2, 50)
    assert raised.value.key == "job" and time.monotonic() - started >= 0.19
    threading.Timer(0.1, holder.release).start()
    waiter.block(5, 20)
    assert waiter.is_owned()


def test_context_managers_release_on_error_and_refuse_when_held() -> None:
    store = MemoryStore()
    with pytest.raises(RuntimeError):
        with store.lock("c", 10) as lock:
            assert isinstance(lock, Lock) and lock.is_owned()
            raise RuntimeError("boom")
    assert store.lock("c", 1).current_owner() is None
    held = store.lock("c", 10)
    assert held.acquire()
    with pytest.raises(LockTimeoutError):
        with store.lock("c", 10):
            pass
    assert held.is_owned()

    async def go() -> None:
        astore = AsyncMemoryStore(store)
        held.release()
        async with astore.lock("c", 10, wait=1) as lock:
            assert await lock.is_owned()
            assert store.lock("c", 1).current_owner() == lock.owner
        assert await astore.lock("c", 1).current_owner() is None

    asyncio.run(go())


# ---- Other processes ---------------------------------------------------------------------------------


def _store(kind: str, target: str) -> tuple[Any, Callable[[], None]]:
    if kind == "redis":
        client = redis.Redis(max_connections=64)
        return RedisStore.from_client(client, prefix=target), client.close
    if kind == "redis-script":
        client = redis.Redis(max_connections=64)
        store = RedisStore.using(
            lambda s, keys, args: client.eval(s, len(keys), *keys, *args),
            evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
            prefix=target,
        )
        return store, client.close
    if kind == "cluster":
        from redis_servers import cluster_client

        cluster = cluster_client(8)
        return RedisStore.from_client(cluster, prefix=target), cluster.close
    if kind == "pg":
        import psycopg_pool

        pool = psycopg_pool.ConnectionPool(sq.DSN, min_size=8, max_size=8, kwargs={"autocommit": True}, open=True)
        pool.wait()
        return PostgresStore.using(pool, prefix=target), pool.close
    connection = sq.sqlite_connect(target)
    connection.execute("PRAGMA busy_timeout = 10000")
    return SqliteStore(connection), connection.close


def _release_worker(kind: str, target: str, key: str, owner: str, out: Any) -> None:
    store, close = _store(kind, target)
    out.put(store.lock(key, 60, owner).release())
    close()


def _race_worker(kind: str, target: str, key: str, n: int, barrier: Any, out: Any) -> None:
    store, close = _store(kind, target)
    won = []
    barrier.wait()
    threads = [threading.Thread(target=lambda: won.append(store.lock(key, 60).acquire())) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(sum(won))
    close()


def test_a_lock_restored_in_another_process_releases_it() -> None:
    ctx = mp.get_context("spawn")
    with redis.Redis() as client:
        store = RedisStore.from_client(client, prefix=REDIS_PREFIX)
        key = f"restore:{secrets.token_hex(4)}"
        lock = store.lock(key, 60)
        assert lock.acquire()
        for owner, expect in [("not-the-owner", False), (lock.owner, True)]:
            out = ctx.Queue()
            p = ctx.Process(target=_release_worker, args=("redis", REDIS_PREFIX, key, owner, out))
            p.start()
            assert out.get(timeout=60) is expect
            p.join(60)
        assert lock.current_owner() is None


@pytest.mark.parametrize("kind", ["redis", "redis-mixed", "cluster", "pg", "sqlite"])
def test_exactly_one_holder_among_4_processes_x_64(kind: str, tmp_path: Path) -> None:
    # redis: a plain SET NX PX in every process; redis-mixed: two processes by SET, two by the script;
    # cluster: the plain SET routed to the key's master.
    if kind == "sqlite":
        target = str(tmp_path / "race.db")
        connection = sq.sqlite_connect(target)
        connection.execute("PRAGMA journal_mode = WAL")
        SqliteStore(connection).install_schema()
        connection.close()
    else:
        target = REDIS_PREFIX if kind.startswith("redis") or kind == "cluster" else PREFIX
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    out = ctx.Queue()
    key = f"race:{secrets.token_hex(4)}"
    kinds = ["redis", "redis", "redis-script", "redis-script"] if kind == "redis-mixed" else [kind] * 4
    procs = [ctx.Process(target=_race_worker, args=(k, target, key, 64, barrier, out)) for k in kinds]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert total == 1


# ---- Redis Cluster, and the conversations -------------------------------------------------------------


def test_a_cluster_routes_the_plain_commands_by_key() -> None:
    from redis_servers import async_cluster_client, cluster_client

    client = cluster_client(2)
    try:
        store = RedisStore.from_client(client, prefix=REDIS_PREFIX)
        for i in range(20):  # keys on many slots: each SET / DEL / GET goes to its key's master
            key = f"job{i}:{secrets.token_hex(4)}"
            a = store.lock(key, 30)
            assert a.acquire() and not store.lock(key, 30).acquire()
            assert a.current_owner() == a.owner
            assert not store.lock(key, 30, owner="someone-else").release()
            assert a.release() and a.current_owner() is None
            assert a.acquire() and a.force_release() and not a.force_release()
    finally:
        client.close()

    async def go() -> None:
        aclient = async_cluster_client()
        try:
            astore = AsyncRedisStore.from_client(aclient, prefix=REDIS_PREFIX)
            for i in range(10):
                key = f"ajob{i}:{secrets.token_hex(4)}"
                a = astore.lock(key, 30)
                assert await a.acquire() and not await astore.lock(key, 30).acquire()
                assert await a.current_owner() == a.owner
                assert await a.release() and await a.current_owner() is None
        finally:
            await aclient.aclose()

    asyncio.run(go())


CONVERSATIONS = json.loads(
    (Path(__file__).parents[2] / "tests" / "vectors" / "conversations" / "lock" / "redis.json").read_text()
)


@pytest.mark.parametrize("case", CONVERSATIONS["cases"], ids=[c["name"] for c in CONVERSATIONS["cases"]])
@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_lock_conversations(case: dict[str, Any], flavour: str) -> None:
    """``tests/vectors/conversations/lock/redis.json`` through the public stores with a scripted
    client: each command checked against the next step, answered with its reply (``True`` for the
    vectors' 1 and ``b"OK"`` for "OK" in the asyncio run: redis-py's spellings) or its failure."""
    from ratewindow import StoreError, StoreReplyError

    for call in case["calls"]:
        steps = list(call["steps"])

        def answer(sent: dict[str, Any]) -> Any:
            assert steps, f"{case['name']}: a command too many: {sent}"
            step = steps.pop(0)
            assert sent == step["command"], case["name"]
            if "fail" in step:
                raise ConnectionError(step["fail"])
            reply = step["reply"]
            if flavour == "asyncio" and reply == "OK":
                return b"OK"
            if flavour == "asyncio" and reply == 1 and "command" in sent and sent["command"][0] == "SET":
                return True
            return reply

        def script(by_sha1: bool) -> Callable[[str, list[str], list[str]], Any]:
            return lambda s, keys, args: answer({"script": "lock", "by_sha1": by_sha1, "keys": keys, "args": args})

        o = case["options"]
        options: dict[str, Any] = {
            "prefix": o["prefix"],
            "hash_tag": o.get("hash_tag"),
            "evalsha": None if o["evalsha"] is False else script(True),
            "command": (lambda args: answer({"command": args})) if o["commands"] else None,
        }
        op = call["op"]
        want = call["outcome"]

        def act(store: Any) -> Any:
            lock = store.lock(op["key"], op.get("ttl", 1), owner=op.get("owner"))
            return {
                "acquire": lock.acquire,
                "release": lock.release,
                "force_release": lock.force_release,
                "owner": lock.current_owner,
            }[op["op"]]()

        if flavour == "sync":
            store: Any = RedisStore.using(script(False), **options)
            run: Callable[[], Any] = lambda: act(store)  # noqa: E731
        else:

            def wrap(f: Callable[..., Any] | None) -> Any:
                if f is None:
                    return None

                async def g(*a: Any) -> Any:
                    return f(*a)

                return g

            astore = AsyncRedisStore.using(
                wrap(script(False)), **{**options, "evalsha": wrap(options["evalsha"]), "command": wrap(options["command"])}
            )
            run = lambda: asyncio.run(act(astore))  # noqa: E731
        if "error" in want:
            kind = StoreReplyError if want["error"] == "reply" else StoreError
            with pytest.raises(kind) as raised:
                run()
            if want["error"] == "store":
                assert not isinstance(raised.value, StoreReplyError)
        else:
            assert run() == (want["bool"] if "bool" in want else want["owner"]), case["name"]
        assert not steps, f"{case['name']}: steps left"


# ---- A Redis lock with `command`: its commands planned once --------------------------------------------


def _logged_sync(client: redis.Redis, sent: list[tuple[str, list[str], list[str]]], prefix: str) -> RedisStore:
    """A store on ``client`` whose sends are logged as ``(what, keys or args, args)``."""

    def run(s: str, keys: list[str], args: list[str]) -> Any:
        sent.append(("eval", keys, args))
        return client.eval(s, len(keys), *keys, *args)

    def evalsha(sha: str, keys: list[str], args: list[str]) -> Any:
        sent.append(("evalsha", keys, args))
        return client.evalsha(sha, len(keys), *keys, *args)

    def command(args: list[str]) -> Any:
        sent.append(("command", args, []))
        return client.execute_command(*args)  # type: ignore[no-untyped-call]

    return RedisStore.using(run, evalsha=evalsha, command=command, prefix=prefix)


def test_a_planned_lock_sends_the_planned_commands_with_its_owner() -> None:
    """With ``command`` a lock's acquire is the plan's ``SET key owner NX PX ttl`` and its release the
    lock script's keys and arguments, each a copy with the lock's owner; no EVAL, and the lock's
    behaviour is the machine's (shared Redis, sync and asyncio)."""
    client = rs.sync_client(4)
    try:
        sent: list[tuple[str, list[str], list[str]]] = []
        prefix = REDIS_PREFIX + secrets.token_hex(4) + ":"
        store = _logged_sync(client, sent, prefix)
        key = "planned"
        lock, other = store.lock(key, 10), store.lock(key, 10)
        assert lock.acquire() and not other.acquire() and not lock.acquire()
        assert not other.release(), "not the other's to release"
        assert lock.current_owner() == lock.owner
        assert lock.release() and not lock.release()
        assert lock.acquire() and lock.release()
        acquires = [s for s in sent if s[0] == "command" and lock.owner in s[1]]
        assert [a[1] for a in acquires] == [["SET", f"{prefix}lck:{key}", lock.owner, "NX", "PX", "10000"]] * 3
        releases = [s for s in sent if s[0] == "evalsha" and lock.owner in s[2]]
        assert [(r[1], r[2]) for r in releases] == [([f"{prefix}lck:{key}"], ["release", lock.owner])] * 3
        # Another lock on the key and TTL: the kept plan with its owner, in lists of its own.
        third = store.lock(key, 10)
        assert third.acquire() and third.release()
        theirs = [s for s in sent if third.owner in s[1] or third.owner in s[2]]
        assert [(t[0], t[1], t[2]) for t in theirs] == [
            ("command", ["SET", f"{prefix}lck:{key}", third.owner, "NX", "PX", "10000"], []),
            ("evalsha", [f"{prefix}lck:{key}"], ["release", third.owner]),
        ]
        assert theirs[0][1] is not acquires[0][1] and theirs[1][1] is not releases[0][1]
        assert not [s for s in sent if s[0] == "eval"]
        # A restored lock (a given owner) on the kept plan releases it.
        assert lock.acquire() and store.lock(key, 10, lock.owner).release()
    finally:
        client.close()

    async def go() -> None:
        aclient = rs.async_client()
        try:
            astore = AsyncRedisStore.from_client(aclient, prefix=REDIS_PREFIX + secrets.token_hex(4) + ":")
            a, b = astore.lock("planned", 10), astore.lock("planned", 10)
            assert await a.acquire() and not await b.acquire() and not await a.acquire()
            assert not await b.release() and await a.current_owner() == a.owner
            assert await a.release() and not await a.release() and await a.current_owner() is None
        finally:
            await aclient.aclose()

    asyncio.run(go())


def test_a_planned_lock_refuses_a_bad_ttl_owner_or_wait_naming_the_field() -> None:
    """As on every store, and also when the key and TTL's plan is kept (made by a valid lock first)."""
    store = RedisStore.using(lambda s, k, a: 1, evalsha=lambda s, k, a: 1, command=lambda args: True)

    def field(make: Callable[[], Any]) -> str:
        with pytest.raises(InvalidArgumentError) as e:
            make()
        return e.value.field

    for _ in range(2):
        assert field(lambda: store.lock("k", 0)) == "ttl"
        assert field(lambda: store.lock("k", 1, "")) == "owner"
        assert field(lambda: store.lock("k", 1, "x" * 257)) == "owner"
        assert field(lambda: store.lock("k", 1, wait=-1)) == "seconds"
        assert field(lambda: store.lock("k", 1, retry_ms=0)) == "retry_ms"
        with pytest.raises(TypeError):
            store.lock("k", True)
        with pytest.raises(TypeError):
            store.lock("k", 1, 5)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.lock(5, 1)  # type: ignore[arg-type]
        store.lock("k", 1)  # the plan of "k" and 1 s, kept for the second round


def test_a_planned_release_after_script_flush_resends_the_source() -> None:
    """NOSCRIPT on the plan's EVALSHA: the call machine resends the script in full (a private server)."""
    with rs.PrivateRedis() as server:
        client = server.client()
        try:
            sent: list[tuple[str, list[str], list[str]]] = []
            store = _logged_sync(client, sent, "rwtest:")
            lock = store.lock("flushed", 10)
            assert lock.acquire()
            client.script_flush()
            sent.clear()
            assert lock.release()
            assert [s[0] for s in sent] == ["evalsha", "eval"]
            assert lock.current_owner() is None
            assert lock.acquire()
            sent.clear()
            assert lock.release()
            assert [s[0] for s in sent] == ["evalsha"], "loaded again: by SHA1 alone"
        finally:
            client.close()


def test_a_planned_lock_turns_a_client_failure_into_a_store_error_sent_once() -> None:
    from ratewindow import StoreError

    boom = ConnectionError("Connection lost")
    sends = {"command": 0, "evalsha": 0}

    def command(args: list[str]) -> Any:
        sends["command"] += 1
        raise boom

    def evalsha(s: str, k: list[str], a: list[str]) -> Any:
        sends["evalsha"] += 1
        raise boom

    store = RedisStore.using(lambda s, k, a: 1, evalsha=evalsha, command=command)
    lock = store.lock("k", 1)
    with pytest.raises(StoreError) as e:
        lock.acquire()
    assert e.value.__cause__ is boom and sends["command"] == 1
    with pytest.raises(StoreError) as e:
        lock.release()
    assert e.value.__cause__ is boom and sends["evalsha"] == 1

    async def go() -> None:
        async def acommand(args: list[str]) -> Any:
            raise boom

        async def aevalsha(s: str, k: list[str], a: list[str]) -> Any:
            raise boom

        async def arun(s: str, k: list[str], a: list[str]) -> Any:
            return 1

        astore = AsyncRedisStore.using(arun, evalsha=aevalsha, command=acommand)
        alock = astore.lock("k", 1)
        with pytest.raises(StoreError):
            await alock.acquire()
        with pytest.raises(StoreError):
            await alock.release()

    asyncio.run(go())


class _Int(int):
    pass


class _Str(str):
    pass


@pytest.mark.parametrize("op", ["acquire", "release"])
def test_a_planned_lock_reads_every_reply_as_the_call_machine_does(op: str) -> None:
    """The planned lock's own lookup (the core's ``lock_answers`` as a dict) answers what the call
    machine fed the same reply answers (``_finish``: the operation as a call whose first command ran),
    for replies of every type a client may give: each answer the same, or both a StoreReplyError."""
    from ratewindow import StoreReplyError

    replies: list[Any] = [True, False, None, 1, 0, 2, -1, 2**70, "OK", b"OK", "ok", b"ok", "1", b"1", "0", b"0"]
    replies += [b"\xffOK", "", 1.0, 0.0, [1], (1,), ["OK"], bytearray(b"OK"), _Int(1), _Int(0), _Str("OK"), _Str("1")]
    for reply in replies:
        store = RedisStore.using(lambda s, k, a: reply, evalsha=lambda s, k, a: reply, command=lambda args: reply)
        lock = store.lock("k", 1)
        assert type(lock).__name__ == "PlannedLock"
        outcomes = []
        for run in (getattr(lock, op), lambda: lock._finish(op, reply)):  # type: ignore[attr-defined]
            try:
                outcomes.append(run())
            except StoreReplyError as e:
                outcomes.append(type(e))
        assert outcomes[0] == outcomes[1] and type(outcomes[0]) is type(outcomes[1]), (op, reply, outcomes)
    assert RedisStore.using(lambda s, k, a: 1, evalsha=lambda s, k, a: 1, command=lambda args: True).lock("k", 1).acquire() is True


# ---- Purge ------------------------------------------------------------------------------------------


def test_purge_deletes_expired_locks_on_sqlite(tmp_path: Path) -> None:
    clock = Clock()
    connection = sq.sqlite_connect(tmp_path / "purge.db")
    store = SqliteStore(connection, clock=clock)
    store.install_schema()
    assert store.lock("short", 0.1, "a").acquire() and store.lock("live", 60, "b").acquire()

    def keys() -> list[str]:
        return [row[0] for row in connection.execute("SELECT key FROM ratewindow_locks ORDER BY key")]

    clock.t = BASE + 99
    store.purge()
    assert keys() == ["live", "short"]
    clock.t = BASE + 100
    assert store.purge() == (0, 0)  # the locks are not counted
    assert keys() == ["live"]
    assert store.lock("live", 1).current_owner() == "b"


def test_purge_deletes_expired_locks_on_postgres() -> None:
    with sq.connect() as conn:
        store = PostgresStore.using(conn, prefix=PREFIX)
        key = f"purge:{secrets.token_hex(4)}"
        assert store.lock(key + ":short", 0.001, "a").acquire() and store.lock(key + ":live", 60, "b").acquire()
        time.sleep(0.02)
        store.purge()
        rows = conn.execute(f"SELECT key FROM {PREFIX}_locks WHERE key LIKE %s ORDER BY key".encode(), (key + "%",))
        assert [r[0] for r in rows.fetchall()] == [key + ":live"]
        assert store.lock(key + ":live", 1).current_owner() == "b"
