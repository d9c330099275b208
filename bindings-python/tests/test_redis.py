"""RedisStore against real servers: exactly-once under contention, NOSCRIPT after SCRIPT FLUSH and a
restart, expiry, errors with the client's error as cause, server time, the cluster's one-key-at-a-time
path and its give-back, the decoders' typed errors, and RateLimiter on RedisStore."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import time
from typing import Any, cast

import pytest
import redis
import redis_contention
import redis_servers as rs
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewindow import (
    AsyncRateLimiter,
    AsyncRedisStore,
    Entry,
    GiveBackError,
    Limit,
    RateLimiter,
    RedisStore,
    StoreError,
    StoreReplyError,
    _ratewindow,
)

NO_RETRY = Retry(NoBackoff(), 0)


@pytest.fixture(scope="module")
def client() -> redis.Redis:
    return rs.sync_client(connections=4)


@pytest.fixture(scope="module")
def cluster() -> redis.cluster.RedisCluster:
    return rs.cluster_client(connections=2)


# --- exactly once under contention ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "on_cluster", "hash_tag"),
    [(["one"], False, None), (["b:x", "b:y", "b:z"], False, None), (["b:x", "b:y", "b:z"], True, ":")],
    ids=["one-key", "batch-of-3", "batch-of-3-cluster-hashtag"],
)
def test_exactly_uses_allowed_from_4_processes_of_64_concurrent_calls(
    client: Any, cluster: Any, keys: list[str], on_cluster: bool, hash_tag: str | None
) -> None:
    prefix, uses = rs.unique_prefix("race"), 10
    start_at = time.time() + 1.5  # every process starts its 64 calls at this instant
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        allowed = pool.starmap(
            redis_contention.worker, [(prefix, keys, uses, 64, on_cluster, hash_tag, start_at)] * 4
        )
    assert sum(allowed) == uses, f"{allowed} allowed per process"
    store = RedisStore.from_client(cluster if on_cluster else client, prefix=prefix, hash_tag=hash_tag)
    target = cluster if on_cluster else client
    for key in keys:
        # ZCOUNT 0 +inf: the calls (a refusal marker scores -inf)
        assert target.zcount(store.redis_key(key), 0, "+inf") == uses, "every key holds exactly the allowed calls"


# --- NOSCRIPT: SCRIPT FLUSH and a restart ---------------------------------------------------------


class Counting:
    """The README's one-liners over a real client, counting what is sent."""

    def __init__(self, client: redis.Redis) -> None:
        self.client, self.evals, self.evalshas = client, 0, 0

    def run(self, script: str, keys: list[str], args: list[str]) -> Any:
        self.evals += 1
        return self.client.eval(script, len(keys), *keys, *args)

    def evalsha(self, sha: str, keys: list[str], args: list[str]) -> Any:
        self.evalshas += 1
        return self.client.evalsha(sha, len(keys), *keys, *args)


def test_script_flush_and_restart_keep_calls_working_and_count_each_call_once() -> None:
    with rs.PrivateRedis() as server:
        raw = server.client(retry=NO_RETRY)
        sent = Counting(raw)
        store = RedisStore.using(sent.run, evalsha=sent.evalsha, prefix=rs.unique_prefix("noscript"))
        entries = [Entry("a", Limit(6, 60_000)), Entry("b", Limit(6, 60_000))]
        assert store.consume_many(entries).allowed
        assert (sent.evals, sent.evalshas) == (1, 1), "the first call finds no script: EVALSHA, then EVAL"
        assert store.consume_many(entries).allowed
        assert (sent.evals, sent.evalshas) == (1, 2), "then the script goes by SHA1 alone"

        raw.script_flush()
        assert store.consume_many(entries).allowed
        assert (sent.evals, sent.evalshas) == (2, 3), "after SCRIPT FLUSH: NOSCRIPT, then EVAL once"

        raw.save()  # the keys survive the restart; the script cache does not
        server.kill()
        server.start()
        assert store.consume_many(entries).allowed, "the client reconnects; the call goes through"
        assert sent.evals == 3, "after the restart: NOSCRIPT, then EVAL once"
        for key in ("a", "b"):
            assert raw.zcard(store.redis_key(key)) == 4, "four calls, each counted once"
        assert store.consume_many(entries).allowed and store.consume_many(entries).allowed
        refused = store.consume_many(entries)
        assert not refused.allowed and refused.blocked == 0, "the seventh call is refused: nothing doubled"


def test_any_other_error_propagates_typed_with_the_cause_and_nothing_is_resent(client: redis.Redis) -> None:
    sent = Counting(client)
    store = RedisStore.using(sent.run, evalsha=sent.evalsha, prefix=rs.unique_prefix("wrongtype"))
    store.consume("warm", Limit(1, 1_000))  # the script is loaded
    sent.evals = sent.evalshas = 0
    client.set(store.redis_key("k"), "not a sorted set", px=5_000)
    with pytest.raises(StoreError) as caught:
        store.consume("k", Limit(1, 1_000))
    assert isinstance(caught.value.__cause__, redis.ResponseError)
    assert "WRONGTYPE" in str(caught.value.__cause__)
    assert caught.value.code == "store_error"
    assert (sent.evals, sent.evalshas) == (0, 1), "a script that may have run is never resent"


# --- expiry ---------------------------------------------------------------------------------------


def test_every_key_written_expires_within_its_window_and_peeks_write_nothing(client: redis.Redis) -> None:
    store = RedisStore.from_client(client, prefix=rs.unique_prefix("ttl"))
    batch = [Entry("short", Limit(2, 300)), Entry("long", Limit(2, 600)), Entry("short", Limit(5, 450))]
    assert store.peek_many(batch).allowed
    assert client.exists(store.redis_key("short"), store.redis_key("long")) == 0, "a peek creates no key"
    assert store.consume_many(batch).allowed
    short, long_ = client.pttl(store.redis_key("short")), client.pttl(store.redis_key("long"))
    assert 0 < short <= 450, "a key lives no longer than the longest window it was counted under"
    assert 0 < long_ <= 600
    assert store.hit("fw", 400) == 1
    assert 0 < client.pttl(store.redis_window_key("fw")) <= 400
    time.sleep(0.05)
    before = client.pttl(store.redis_key("long"))
    store.peek_many(batch)
    store.peek("long", Limit(1, 60_000))
    assert client.pttl(store.redis_key("long")) <= before, "a peek changes no expiry"
    assert store.consume("single", Limit(1, 300)).allowed
    assert 0 < client.pttl(store.redis_key("single")) <= 300
    time.sleep(0.65)
    for key in (store.redis_key("short"), store.redis_key("long"), store.redis_key("single"),
                store.redis_window_key("fw")):
        assert client.exists(key) == 0, f"{key} is gone once its window has passed"


# --- errors: server down, CLIENT PAUSE ------------------------------------------------------------


def test_server_down_is_a_store_error_with_the_clients_error_as_cause() -> None:
    with rs.PrivateRedis() as server:
        raw = server.client(retry=NO_RETRY, socket_timeout=0.5, socket_connect_timeout=0.5)
        store = RedisStore.from_client(raw, prefix=rs.unique_prefix("down"))
        assert store.consume("k", Limit(1, 10_000)).allowed
        server.kill()
        for call in (lambda: store.consume("k", Limit(1, 10_000)),
                     lambda: store.consume_many([Entry("a", Limit(1, 10_000)), Entry("b", Limit(1, 10_000))]),
                     lambda: store.hit("w", 1_000)):
            with pytest.raises(StoreError) as caught:
                call()
            assert isinstance(caught.value.__cause__, redis.ConnectionError), caught.value.__cause__


def test_client_pause_is_a_store_error_and_a_batch_is_recorded_whole_or_not_at_all() -> None:
    with rs.PrivateRedis() as server:
        admin = server.client()
        raw = server.client(retry=NO_RETRY, socket_timeout=0.2)
        store = RedisStore.from_client(raw, prefix=rs.unique_prefix("pause"))
        batch = [Entry(k, Limit(5, 10_000)) for k in ("a", "b", "c")]
        assert store.consume_many(batch).allowed
        admin.client_pause(600, all=True)
        with pytest.raises(StoreError) as caught:
            store.consume_many(batch)
        assert isinstance(caught.value.__cause__, redis.TimeoutError)
        time.sleep(0.7)  # the paused script runs once the pause ends: whole, never half
        counts = {admin.zcard(store.redis_key(k)) for k in ("a", "b", "c")}
        assert len(counts) == 1 and counts <= {1, 2}, f"every key counted the same calls: {counts}"


# --- clocks ---------------------------------------------------------------------------------------


def test_verdicts_follow_the_servers_time_not_the_hosts(client: redis.Redis, monkeypatch: Any) -> None:
    prefix = rs.unique_prefix("clock")
    ahead = RedisStore.from_client(rs.sync_client(connections=1), prefix=prefix)
    behind = RedisStore.from_client(rs.sync_client(connections=1), prefix=prefix)
    real_time, real_ns = time.time, time.time_ns
    limit = Limit(2, 10_000)
    monkeypatch.setattr(time, "time", lambda: real_time() + 3_600)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + 3_600 * 10**9)
    assert ahead.consume("k", limit).allowed
    monkeypatch.setattr(time, "time", lambda: real_time() - 3_600)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() - 3_600 * 10**9)
    assert behind.consume("k", limit).allowed
    refused_behind = behind.consume("k", limit)
    monkeypatch.setattr(time, "time", lambda: real_time() + 3_600)
    refused_ahead = ahead.consume("k", limit)
    monkeypatch.undo()
    seconds, micros = client.time()
    server_ms = seconds * 1000 + micros // 1000
    assert not refused_ahead.allowed and not refused_behind.allowed, "both hosts see the same two calls"
    assert refused_ahead.retry_timestamp == refused_behind.retry_timestamp, "one wait on one clock"
    assert refused_ahead.retry_timestamp is not None
    assert server_ms < refused_ahead.retry_timestamp <= server_ms + 10_000, "timed by the server's TIME"


# --- the cluster: one key at a time, giving back ---------------------------------------------------


class FailingRelease:
    """A real cluster client whose network drops every release (the script's mode "r")."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, script: str, keys: list[str], args: list[str]) -> Any:
        if args[0] == "r":
            raise redis.ConnectionError("connection lost (injected)")
        return self.client.eval(script, len(keys), *keys, *args)


def test_cluster_counts_key_by_key_and_gives_back_on_a_refusal(cluster: Any) -> None:
    store = RedisStore.from_client(cluster, prefix=rs.unique_prefix("apart"))
    free, full = Entry("free", Limit(1, 10_000)), Entry("full", Limit(1, 10_000))
    assert cluster.keyslot(store.redis_key("free")) != cluster.keyslot(store.redis_key("full"))
    assert store.consume("full", cast(Limit, full.limit)).allowed
    refused = store.consume_many([free, full, Entry("free", Limit(5, 10_000))])
    assert not refused.allowed and refused.blocked == 1
    assert cluster.zcard(store.redis_key("free")) == 0, "the use counted on 'free' was given back"
    allowed = store.consume_many([free, Entry("other", Limit(1, 10_000))])
    assert allowed.allowed
    allowed.release()
    assert cluster.zcard(store.redis_key("free")) == 0 and cluster.zcard(store.redis_key("other")) == 0, (
        "release gives back every key"
    )


def test_a_servers_crossslot_reply_also_goes_key_by_key(cluster: Any) -> None:
    """A client that sends across slots (a plain connection to one master) gets the server's CROSSSLOT."""
    store = RedisStore.from_client(cluster, prefix=rs.unique_prefix("crossslot"))
    node = cluster.get_node_from_key(store.redis_key("k0"))
    mine = [f"k{i}" for i in range(200) if cluster.get_node_from_key(store.redis_key(f"k{i}")) == node]
    first, second = mine[0], next(k for k in mine if cluster.keyslot(store.redis_key(k)) != cluster.keyslot(
        store.redis_key(mine[0])))
    direct = redis.Redis(host=node.host, port=node.port)
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):
        direct.eval("return 1", 2, store.redis_key(first), store.redis_key(second))
    plain = RedisStore.from_client(direct, prefix=store.prefix)
    batch = [Entry(first, Limit(1, 10_000)), Entry(second, Limit(1, 10_000))]
    verdict = plain.consume_many(batch)
    # ZCOUNT by score: the calls (a full log also holds its refusal marker, scored -inf).
    calls = [cluster.zcount(store.redis_key(k), 0, "+inf") for k in (first, second)]
    assert verdict.allowed and calls == [1, 1]
    refused = plain.consume_many([Entry(mine[-1], Limit(1, 10_000)), *batch])
    assert not refused.allowed and refused.blocked in (1, 2), "the longest wait of the two full keys"
    assert cluster.exists(store.redis_key(mine[-1])) == 0, "given back: the member and the key it made are gone"
    direct.close()


def test_a_failed_give_back_is_reported_and_the_refusal_stands(cluster: Any) -> None:
    reported: list[GiveBackError] = []
    flaky = FailingRelease(cluster)
    store = RedisStore.using(flaky.run, prefix=rs.unique_prefix("giveback"), on_give_back_error=reported.append)
    assert store.consume("full", Limit(1, 10_000)).allowed
    refused = store.consume_many([Entry("free", Limit(1, 10_000)), Entry("full", Limit(1, 10_000))])
    assert not refused.allowed and refused.blocked == 1, "the refusal stands"
    assert len(reported) == 1
    assert reported[0].keys == [store.redis_key("free")] and reported[0].code == "give_back_failed"
    assert isinstance(reported[0].__cause__, redis.ConnectionError)


def test_an_error_midway_gives_back_what_was_counted_and_raises(cluster: Any) -> None:
    prefix = rs.unique_prefix("midway")
    calls: list[list[str]] = []

    def run(script: str, keys: list[str], args: list[str]) -> Any:
        calls.append(keys)
        # The second key's own consume: the one-entry form ('uses:window_ms', the call id).
        if len(args) == 2 and args[0] != "r" and keys == [probe.redis_key("second")]:
            raise redis.ConnectionError("connection lost (injected)")
        return cluster.eval(script, len(keys), *keys, *args)

    probe = RedisStore.using(run, prefix=prefix)
    with pytest.raises(StoreError) as caught:
        probe.consume_many([Entry("first", Limit(1, 10_000)), Entry("second", Limit(1, 10_000))])
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    assert cluster.zcard(probe.redis_key("first")) == 0, "the use counted before the error was given back"


def test_a_cancelled_async_cluster_call_gives_back_what_it_counted() -> None:
    async def main() -> None:
        client = rs.async_cluster_client()
        try:
            await rs.warm_async(client)
            prefix = rs.unique_prefix("cancel")
            stalled = asyncio.Event()

            async def evalsha(sha: str, keys: list[str], args: list[str]) -> Any:
                # The second key's own consume (the one-entry form: the limit, the call id).
                if len(args) == 2 and args[0] != "r" and keys[0].endswith(":second"):
                    stalled.set()
                    await asyncio.sleep(30)  # a slow network: the caller gives up first
                return await client.evalsha(sha, len(keys), *keys, *args)

            store = AsyncRedisStore.using(
                lambda script, keys, args: client.eval(script, len(keys), *keys, *args), evalsha=evalsha,
                prefix=prefix,
            )
            first = store.redis_key("first")
            call = asyncio.ensure_future(
                store.consume_many([Entry("first", Limit(1, 10_000)), Entry("second", Limit(1, 10_000))])
            )
            await asyncio.wait_for(stalled.wait(), 5)
            # ZCOUNT by score: the calls (a full log also holds its refusal marker, scored -inf).
            assert await client.zcount(first, 0, "+inf") == 1, "the first key was counted"
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            for _ in range(100):
                if await client.zcard(first) == 0:
                    break
                await asyncio.sleep(0.01)
            assert await client.zcard(first) == 0, "the cancelled call gave back what it had counted"
        finally:
            await client.aclose()

    asyncio.run(main())


def test_async_cluster_release_and_peek_across_slots() -> None:
    async def main() -> None:
        client = rs.async_cluster_client()
        try:
            await rs.warm_async(client)
            store = rs.async_store(client, prefix=rs.unique_prefix("apart-async"))
            batch = [Entry("x", Limit(1, 10_000)), Entry("y", Limit(1, 20_000))]
            assert client.keyslot(store.redis_key("x")) != client.keyslot(store.redis_key("y"))
            verdict = await store.consume_many(batch)
            assert verdict.allowed
            peeked = await store.peek_many(batch)
            assert not peeked.allowed and peeked.blocked == 1, "a peek across slots names the longest wait"
            released = verdict.release()
            assert inspect.isawaitable(released)
            await released
            assert (await store.peek_many(batch)).allowed, "release gave back every key"
        finally:
            await client.aclose()

    asyncio.run(main())


# --- decoders, limiter ----------------------------------------------------------------------------


def test_replies_of_the_wrong_shape_are_typed_errors_never_verdicts() -> None:
    hostile: list[object] = [
        [1, 2], "OK", None, b"\xff", [1, 0, -1, -1], [1.5, 0, -1, -1, 1, 0, 2, 1, 1],
        [2**70, 0, -1, -1, 1, 0, 2, 1, 1], [1, 0, -1, -1, {"time": 1}, 0, 2, 1, 1],
        [1, 0, -1, -1, redis.ResponseError("ERR inside"), 0, 2, 1, 1], [[[[[[1]]]]]],
    ]
    reply: list[object] = []
    store = RedisStore.using(lambda script, keys, args: reply[0])
    entries = [Entry("a", Limit(3, 1000)), Entry("b", Limit(3, 1000))]
    for bad in hostile:
        reply[:] = [bad]
        with pytest.raises(StoreReplyError) as caught:
            store.consume_many(entries)
        assert caught.value.expected and caught.value.got, caught.value
        if bad != [1, 2]:  # a window of one hit and 2 ms to the fixed script
            with pytest.raises(StoreReplyError):
                store.attempts("k")
    reply[:] = [(1, 0, -1, -1, 1000, 0, 2, 1000, 1000)]
    assert store.consume("a", Limit(3, 1000)).remaining == 2, "a tuple is an array reply"
    reply[:] = [[b"3", b"250"]]
    assert store.hit_window("k", 1000) == store.hit_window("k", 1000) and store.attempts("k") == 3, "bytes as ints"
    with pytest.raises(ValueError):
        RedisStore.using(lambda script, keys, args: None, hash_tag="")


def test_the_sha1_is_what_the_server_computes(client: redis.Redis) -> None:
    for _name, sha, source in _ratewindow.redis_scripts():
        assert client.script_load(source) == sha


def test_rate_limiter_runs_on_redis_store_unchanged(client: redis.Redis) -> None:
    limiter = RateLimiter(RedisStore.from_client(client, prefix=rs.unique_prefix("limiter")))
    for _ in range(3):
        limiter.hit("login:alice", decay_seconds=60)
    assert limiter.too_many_attempts("login:alice", 3)
    assert limiter.remaining("login:alice", 5) == 2
    assert 58 <= limiter.available_in("login:alice") <= 60
    limiter.clear("login:alice")
    assert limiter.attempts("login:alice") == 0

    async def main() -> None:
        async_client = rs.async_client()
        try:
            store = rs.async_store(async_client, prefix=rs.unique_prefix("async-limiter"))
            limiter = AsyncRateLimiter(store)
            assert await limiter.hit("k", 1) == 1
            assert await limiter.attempt("k", 2, lambda: "ran") == "ran"
            assert await limiter.attempt("k", 2, lambda: "ran") is False
            assert await limiter.available_in("k") == 1
        finally:
            await async_client.aclose()

    asyncio.run(main())
