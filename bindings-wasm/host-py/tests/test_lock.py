"""The ``lock`` interface of the hosted world in wasmtime-py: the lock vectors
(tests/vectors/lock/lock.json) on a ``clocked-memory`` store (this host's clock set to each step's time)
and on the real Redis at 127.0.0.1:6379 through redis-py (each step at its offset on the real clock,
the ``exact`` steps skipped), refused arguments as ``invalid-argument`` naming the field, ``block``'s
schedule through the imported ``clock.sleep-ms`` and its ``lock-timeout``, and exactly one holder among
4 processes (an instance and a Redis connection each) x 64 acquirers."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
from wasmtime import component as wc

from ratewindow_component_host import ComponentError, HostedWorld, Lock, RedisStore

ROOT = Path(__file__).resolve().parents[3]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "lock" / "lock.json").read_text())


def number(v: Any) -> float:
    return float("nan") if v == "NaN" else float("inf") if v == "Infinity" else float(v)


def _value(v: Any) -> Any:
    """A ``store-io.value``: wasmtime-py picks the case of an untagged variant by the Python type."""
    return v if v is None or isinstance(v, (int, bytes)) else str(v)


def redis_runner(client: Any) -> Any:
    """The host's runner over a redis-py client: EVALSHA when no source is sent, else EVAL."""

    def run(script: str, sha1: str, keys: list[str], args: list[str]) -> wc.Variant:
        if script:
            r = client.eval(script, len(keys), *keys, *args)
        else:
            r = client.evalsha(sha1, len(keys), *keys, *args)
        if isinstance(r, list):
            return wc.Variant("array", [_value(x) for x in r])
        return wc.Variant("value", _value(r))

    return run


def redis_world(prefix: str) -> tuple[HostedWorld, RedisStore]:
    import redis

    world = HostedWorld()
    world.runner = redis_runner(redis.Redis(host="127.0.0.1", port=6379))
    world.real_time = True
    return world, world.redis_store(prefix=prefix)


@pytest.fixture
def prefix() -> Iterator[str]:
    import redis

    p = f"ratewindow-wasm-py-lock:{uuid.uuid4().hex[:8]}:"
    yield p
    client = redis.Redis(host="127.0.0.1", port=6379)
    keys = list(client.scan_iter(f"{p}*"))
    if keys:
        client.delete(*keys)
    client.close()


def step(make: Any, s: dict[str, Any], key_prefix: str) -> Any:
    ttl = 1.0 if s.get("ttl") is None else number(s["ttl"])
    lock: Lock = make(key_prefix + s["key"], ttl, s.get("owner") or "someone")
    method = {"acquire": "acquire", "release": "release", "force_release": "force-release", "owner": "owner"}[s["op"]]
    try:
        return lock.call(method)
    finally:
        lock.drop()


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_lock_vectors_on_the_clocked_memory_store(case: dict[str, Any]) -> None:
    world = HostedWorld()
    world.fresh_store()
    for s in case["steps"]:
        world.clock_ms = 1_700_000_000_000 + s["at"]
        assert step(world.lock_on_memory, s, "") == s["expect"], s


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_lock_vectors_on_redis(case: dict[str, Any], prefix: str) -> None:
    world, store = redis_world(prefix)
    start = time.monotonic()
    for s in case["steps"]:
        if s.get("exact"):
            continue
        time.sleep(max(0.0, start + s["at"] / 1000 - time.monotonic()))
        got = step(lambda k, t, o: world.lock_on_redis(store, k, t, o), s, "")
        assert got == s["expect"], s


@pytest.mark.parametrize("case", VECTORS["errors"], ids=lambda c: c["name"])
def test_refused_arguments_are_invalid_argument_naming_the_field(case: dict[str, Any]) -> None:
    world = HostedWorld()
    world.fresh_store()
    with pytest.raises(ComponentError) as e:
        if case["op"] == "acquire":
            world.lock_on_memory(case["key"], number(case["ttl"]), case["owner"])
        else:
            world.lock_on_memory("job", 1).call("block", number(case["seconds"]), number(case["retry_ms"]))
    assert e.value.tag == "invalid-argument"
    assert e.value.payload.field == case["error"].replace("_", "-")
    assert world.slept_ms == []


def _chained(case: dict[str, Any]) -> bool:
    r = case.get("refusals")
    if not r or r[-1]["sleep"] is not None:
        return False
    return all(b["at"] - a["at"] == a["sleep"] for a, b in zip(r, r[1:]))


@pytest.mark.parametrize("case", [c for c in VECTORS["waits"] if _chained(c)], ids=lambda c: c["name"])
def test_block_sleeps_the_cores_schedule_then_times_out(case: dict[str, Any]) -> None:
    world = HostedWorld()
    world.fresh_store()
    world.clock_ms = case["start"]
    assert world.lock_on_memory("job", 1e9, "holder").call("acquire") is True
    waiter = world.lock_on_memory("job", 1)
    with pytest.raises(ComponentError) as e:
        waiter.call("block", number(case["seconds"]), number(case["retry_ms"]))
    assert (e.value.tag, e.value.payload) == ("lock-timeout", "job")
    assert world.slept_ms == [r["sleep"] for r in case["refusals"][:-1]]


def test_block_on_redis_waits_on_the_real_clock_and_restores_by_token(prefix: str) -> None:
    world, store = redis_world(prefix)
    held = world.lock_on_redis(store, "job", 0.3)
    waiter = world.lock_on_redis(store, "job", 5)
    assert held.call("acquire") is True
    with pytest.raises(ComponentError) as e:
        waiter.call("block", 0.1, 20.0)
    assert e.value.tag == "lock-timeout"
    start = time.monotonic()
    assert waiter.call("block", 3.0, 20.0) is None
    assert time.monotonic() - start >= 0.1
    token = waiter.call("owner-token")
    assert held.call("owner") == token
    other, other_store = redis_world(prefix)  # another instance, the same keys
    assert other.lock_on_redis(other_store, "job", 5, token).call("release") is True
    assert held.call("owner") is None


def _race(prefix: str, out: Any) -> None:
    world, store = redis_world(prefix)
    locks = [world.lock_on_redis(store, "race", 60) for _ in range(64)]
    deadline = float(os.environ.get("RACE_AT", "0"))
    time.sleep(max(0.0, deadline - time.time()))
    out.send([lk.call("owner-token") for lk in locks if lk.call("acquire")])


def test_exactly_one_holder_among_4_processes_x_64_acquirers_on_redis(prefix: str) -> None:
    ctx = mp.get_context("spawn")
    outs, procs = [], []
    os.environ["RACE_AT"] = str(time.time() + 3)
    try:
        for _ in range(4):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_race, args=(prefix, w))
            p.start()
            outs.append(r)
            procs.append(p)
        won = [t for r in outs if r.poll(120) for t in r.recv()]
    finally:
        os.environ.pop("RACE_AT", None)
        for p in procs:
            p.join(30)
    assert len(won) == 1, won
    world, store = redis_world(prefix)
    assert world.lock_on_redis(store, "race", 60).call("owner") == won[0]


def test_a_redis_store_with_a_refused_prefix_refuses_every_lock_call() -> None:
    world, store = redis_world("bad:lck:")
    lock = world.lock_on_redis(store, "job", 1)
    with pytest.raises(ComponentError) as e:
        lock.call("acquire")
    assert (e.value.tag, e.value.payload.field) == ("invalid-argument", "prefix")


def test_getters(prefix: Optional[str] = None) -> None:
    world = HostedWorld()
    world.fresh_store()
    lock = world.lock_on_memory("job", 1.5, "me")
    assert (lock.call("key"), lock.call("owner-token"), lock.call("ttl")) == ("job", "me", 1.5)
    assert len(world.lock_on_memory("job", 1).call("owner-token")) == 32
