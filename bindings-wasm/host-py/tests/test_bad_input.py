"""Bad input comes back as the component's ``error`` variant, never a trap, in both worlds."""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest

from ratewindow_component_host import ComponentError, EngineWorld, HostedWorld, entry, limit, ok

BAD = [
    ((math.nan, 1000), "uses", "NaN"),
    ((math.inf, 1000), "uses", "Infinity"),
    ((-math.inf, 1000), "uses", "-Infinity"),
    ((0, 1000), "uses", "0"),
    ((-1, 1000), "uses", "-1"),
    ((1.5, 1000), "uses", "1.5"),
    ((2**32, 1000), "uses", "4294967296"),
    ((1, math.nan), "window-ms", "NaN"),
    ((1, 0), "window-ms", "0"),
    ((1, -0.0), "window-ms", "-0"),
    ((1, 2.5), "window-ms", "2.5"),
    ((1, 4320000000000001), "window-ms", "4320000000000001"),
    ((1, 2**80), "window-ms", "1208925819614629174706176"),  # the f64's exact value, as the engine spells it
]


@pytest.fixture(params=["engine", "hosted"])
def world(request: pytest.FixtureRequest) -> Any:
    w = EngineWorld() if request.param == "engine" else HostedWorld()
    w.fresh_store()
    return w


@pytest.mark.parametrize(("args", "field", "value"), BAD, ids=[f"{a}" for a, _, _ in BAD])
def test_every_operation_refuses_a_bad_limit(world: Any, args: tuple[float, float], field: str, value: str) -> None:
    bad = limit(*args)
    calls: list[Callable[[], Any]] = [
        lambda: world.check_limit(bad),
        lambda: world.consume("k", bad, 5),
        lambda: world.peek("k", bad, 5),
        lambda: world.consume_many([entry("fine", limit(1, 1000)), entry("k", bad)], 5),
        lambda: world.peek_many([entry("k", bad)], 5),
    ]
    if field == "window-ms":
        calls.append(lambda: world.hit("h", args[1], 1, 5))
        calls.append(lambda: world.check_window(args[1]))
    for call in calls:
        with pytest.raises(ComponentError) as info:
            ok(call())
        assert (info.value.tag, info.value.field, info.value.value) == ("invalid-limit", field, value)
    # Nothing was counted, and the instance still answers.
    assert world.key_count() == 0
    assert ok(world.consume("fine", limit(1, 1000), 5)).allowed


def test_wrongly_typed_host_values_fail_in_the_host_and_leave_the_instance_usable(world: Any) -> None:
    # u64 and s64 out of range (ctypes would wrap them silently) or not numbers at all are refused by this
    # host before the call.
    with pytest.raises((TypeError, OverflowError, ValueError)):
        world.attempts("k", -1)
    with pytest.raises((TypeError, OverflowError, ValueError)):
        world.hit("k", 1000, 2**63, 0)
    with pytest.raises((TypeError, OverflowError, ValueError)):
        world.consume(b"bytes-not-str", limit(1, 1000), 0)
    assert ok(world.consume("k", limit(1, 1000), 0)).allowed


def test_odd_but_valid_input(world: Any) -> None:
    big = limit(2**32 - 1, 4320000000000000)
    for key in ["", "ключ:🔑", "x" * 100_000]:
        assert ok(world.consume(key, big, 0)).allowed
        assert ok(world.consume(key, limit(1, 1), 2**53 - 1)).allowed
        assert ok(world.hit(key, 1, 2**63 - 1, 2**53 - 2)) == 2**63 - 1
        assert ok(world.hit(key, 1, 2**63 - 1, 2**53 - 2)) == 2**63 - 1  # saturates
    assert ok(world.consume_many([], 0, "e")).allowed
    world.release("e", 0)
    world.release("e", 0)


def test_a_time_past_2_53_is_the_invalid_argument_error_and_changes_nothing(world: Any) -> None:
    # A wrapped clock (-1 stored as 2**64 - 1 by ctypes) used to move the horizon to the end of time and
    # expire every key: now it is refused, naming `now`, and the refused key stays refused.
    assert ok(world.consume("alice", limit(1, 60_000), 1_000)).allowed
    for bad in [2**64 - 1, 2**53, 2**60]:
        with pytest.raises(ComponentError) as info:
            ok(world.consume("other", limit(1, 60_000), bad))
        assert info.value.tag == "invalid-argument"
        assert (info.value.payload.field, info.value.payload.value) == ("now", str(bad))
        with pytest.raises(ComponentError):
            ok(world.hit("w", 1000, 1, bad))
    assert not ok(world.consume("alice", limit(1, 60_000), 1_001)).allowed


def test_hosted_store_reads_the_host_clock() -> None:
    w = HostedWorld()
    w.fresh_store()
    before = w.clock_reads
    w.clock_ms = 10_000
    m = w._m["consume"]
    assert ok(m(w.store, w.handle, "k", limit(1, 1000))).allowed
    assert w.clock_reads == before + 1
    w.clock_ms = 10_400
    refused = ok(m(w.store, w.handle, "k", limit(1, 1000)))
    assert (refused.allowed, getattr(refused, "retry-after-ms"), getattr(refused, "retry-timestamp")) == (
        False, 600, 11_000)
    w.clock_ms = 11_000
    assert ok(m(w.store, w.handle, "k", limit(1, 1000))).allowed


def test_hosted_redis_store_reports_the_host_runner_error() -> None:
    # This host's `store-io.run-script` answers an error (it has no Redis client): every Redis store
    # call is the `store-failed` variant carrying that message, never a trap.
    w = HostedWorld()
    s = w.redis_store(prefix="t:")
    calls: list[Callable[[], Any]] = [
        lambda: s.call("consume-many", [entry("k", limit(1, 1000))]),
        lambda: s.call("hit", "k", 1000.0, 1),
        lambda: s.call("attempt", "k", 3, 1000.0),
        lambda: s.call("clear", "k"),
    ]
    for call in calls:
        with pytest.raises(ComponentError) as e:
            ok(call())
        assert (e.value.tag, e.value.payload) == ("store-failed", w.no_client)


@pytest.mark.parametrize("prefix", ["p:log:", "plog:", "a:win:b"])
def test_hosted_redis_store_with_a_colliding_prefix_refuses_every_call(prefix: str) -> None:
    # `p:` + `log:x` and `p:log:` + `x` would be one Redis key. The WIT constructor cannot fail, so the
    # store is made and each call is the `invalid-argument` variant naming `prefix`, before any command.
    w = HostedWorld()
    s = w.redis_store(prefix=prefix)
    calls: list[Callable[[], Any]] = [
        lambda: s.call("consume", "k", limit(1, 1000)),
        lambda: s.call("peek-many", [entry("k", limit(1, 1000))]),
        lambda: s.call("hit", "k", 1000.0, 1),
        lambda: s.call("attempt", "k", 3, 1000.0),
        lambda: s.call("clear", "k"),
    ]
    for call in calls:
        with pytest.raises(ComponentError) as e:
            ok(call())
        assert e.value.tag == "invalid-argument"
        assert (e.value.payload.field, e.value.payload.value) == ("prefix", prefix)
    # A prefix without a marker reaches the host's runner (which has no client here).
    fine = w.redis_store(prefix="p:lo")
    with pytest.raises(ComponentError) as e:
        ok(fine.call("hit", "k", 1000.0, 1))
    assert e.value.tag == "store-failed"


def test_a_lone_surrogate_key_is_refused_by_wasmtime_py_before_the_component(world: Any) -> None:
    # wasmtime-py encodes a `str` as strict UTF-8: a lone surrogate raises UnicodeEncodeError in the host
    # and the component is not called (a host limit, documented in the component README). Nothing is
    # counted, and `s\ufffd` stays its own key.
    assert ok(world.consume("s\ufffd", limit(1, 60_000), 1_000)).allowed
    for key in ["s\ud800", "\udc00"]:
        with pytest.raises(UnicodeEncodeError):
            world.consume(key, limit(1, 60_000), 1_001)
    assert not ok(world.consume("s\ufffd", limit(1, 60_000), 1_002)).allowed
    assert ok(world.consume("s\U0001f600", limit(1, 60_000), 1_003)).allowed
