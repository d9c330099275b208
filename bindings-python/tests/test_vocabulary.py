"""One vocabulary with the Node package: GlobalLimit(max_attempts, decay_seconds), the Limit constructors
and fields, and typed errors naming every out-of-range number as Python spells it."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import ratewindow
from ratewindow import (
    AsyncRateLimiter,
    GlobalLimit,
    InvalidArgumentError,
    InvalidLimitError,
    Limit,
    MemoryStore,
    RateLimiter,
    RateWindowError,
    SqliteStore,
    Unlimited,
)

SHARED = json.loads((Path(__file__).parents[2] / "tests" / "vocabulary" / "global_limit.json").read_text())
I64_MAX = 2**63 - 1


def _limit_refused(error: InvalidLimitError, field: str, argument: str, value: object) -> None:
    assert isinstance(error, RateWindowError) and isinstance(error, ValueError)
    assert error.code == "invalid_limit"
    assert (error.field, error.argument) == (field, argument)
    assert error.value is value or error.value == value or (math.isnan(error.value) and math.isnan(value))  # type: ignore[arg-type]
    assert str(error).startswith(f"invalid {argument}: "), str(error)


def _argument_refused(error: InvalidArgumentError, field: str, value: object) -> None:
    assert isinstance(error, RateWindowError) and isinstance(error, ValueError)
    assert error.code == "invalid_argument"
    assert error.field == field and error.value == value
    assert str(error).startswith(f"invalid {field}: "), str(error)


@pytest.mark.parametrize("case", SHARED["global_limit"], ids=lambda c: json.dumps(c)[:60])
def test_global_limit_is_max_attempts_per_decay_seconds(case: dict[str, Any]) -> None:
    args = [case["max_attempts"]] + ([case["decay_seconds"]] if "decay_seconds" in case else [])
    if "error" in case:
        with pytest.raises(InvalidLimitError) as caught:
            GlobalLimit(*args)
        given = args[0] if case["error"]["field"] == "uses" else args[1]
        _limit_refused(caught.value, case["error"]["field"], case["error"]["argument"], given)
        return
    limit = GlobalLimit(*args)
    assert (limit.uses, limit.window_ms, limit.max_attempts) == (case["uses"], case["window_ms"], case["uses"])
    assert limit.fallback_key() == case["fallback_key"]
    assert limit.decay_seconds == case.get("decay_seconds", 60)
    # Counted as that window: one use, refused until the window has passed.
    now = [0]
    store = MemoryStore(lambda: now[0])
    one = GlobalLimit(1, args[1] if len(args) > 1 else 60)
    assert store.consume("k", one).allowed
    assert store.consume("k", one).retry_after_ms == case["window_ms"]
    assert store.hit("w", limit.window_ms) == 1


@pytest.mark.parametrize("case", SHARED["constructors"], ids=lambda c: f"{c['call']}{c['args']}")
def test_seed_constructors_as_in_node(case: dict[str, Any]) -> None:
    build = getattr(Limit, case["call"])
    if "error" in case:
        with pytest.raises(InvalidLimitError) as caught:
            build(*case["args"])
        error = caught.value
        assert (error.field, error.argument) == (case["error"]["field"], case["error"]["argument"])
        assert str(error).startswith(f"invalid {case['error']['argument']}: ")
        return
    limit = build(*case["args"])
    assert (limit.max_attempts, limit.window_ms) == (case["uses"], case["window_ms"])


def test_global_limit_keeps_seconds_not_milliseconds() -> None:
    """The change from 0.x: GlobalLimit(1000, 60) was 1,000 per 60 ms."""
    assert GlobalLimit(1000, 60).window_ms == 60_000
    assert GlobalLimit(1000, 60) == GlobalLimit(1000) == GlobalLimit(max_attempts=1000, decay_seconds=60)
    assert Unlimited().max_attempts == ratewindow.MAX_USES and Unlimited().decay_seconds == 60
    assert GlobalLimit(5, 1, "k").key == "k"


def test_limit_fields_and_keywords_as_in_node() -> None:
    limit = Limit(max_attempts=5, decay_seconds=2)
    assert (limit.max_attempts, limit.decay_seconds, limit.uses, limit.window_ms, limit.key) == (5, 2, 5, 2000, "")
    assert Limit() == Limit(60, 60_000)  # `new Limit()`: 60 per 60 seconds
    assert Limit(3, 10_000) == Limit(uses=3, window_ms=10_000) == Limit(max_attempts=3, decay_seconds=10)
    assert Limit(3, 250).decay_seconds == 0.25 and type(Limit(3, 2000).decay_seconds) is int
    assert Limit.per_second(max_attempts=2, decay_seconds=3) == Limit(2, 3000)
    assert Limit.per_minute(max_attempts=2, decay_minutes=3) == Limit.per_minutes(decay_minutes=3, max_attempts=2)
    assert Limit.per_hour(max_attempts=1, decay_hours=2) == Limit.per_day(1, 1 / 12)
    with pytest.raises(TypeError):
        Limit(1, 1000, max_attempts=1)
    with pytest.raises(TypeError):
        Limit(1, 1000, decay_seconds=1)
    with pytest.raises(TypeError):
        Limit(max_attempts="3")  # type: ignore[arg-type]


def test_after_and_response_return_new_limits() -> None:
    def record(result: object) -> bool:
        return result is not None

    def answer(*args: object) -> str:
        return "slow down"

    base = Limit.per_minute(5).by("u")
    after = base.after(record)
    both = after.response(answer)
    assert base.after_callback is None and base.response_callback is None
    assert after.after_callback is record and after.response_callback is None
    assert both.after_callback is record and both.response_callback is answer
    assert both.key == "u" and both.max_attempts == 5 and both != base
    assert both.by("v").response_callback is answer and both.by("v").key == "v"
    assert isinstance(GlobalLimit(3).after(record), GlobalLimit)
    with pytest.raises(TypeError):
        base.after(5)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        base.after_callback = record


@pytest.mark.parametrize(
    ("build", "field", "argument", "value"),
    [
        (lambda: Limit(0, 1000), "uses", "uses", 0),
        (lambda: Limit(1, math.nan), "window_ms", "window_ms", math.nan),
        (lambda: Limit(max_attempts=2**40, decay_seconds=1), "uses", "max_attempts", 2**40),
        (lambda: Limit(max_attempts=1, decay_seconds=-1), "window_ms", "decay_seconds", -1),
        (lambda: Limit(max_attempts=0, window_ms=1000), "uses", "max_attempts", 0),
        (lambda: GlobalLimit(1, math.inf), "window_ms", "decay_seconds", math.inf),
        (lambda: Unlimited(1, 0), "window_ms", "decay_seconds", 0),
    ],
)
def test_limit_errors_name_the_argument(build: Any, field: str, argument: str, value: object) -> None:
    with pytest.raises(InvalidLimitError) as caught:
        build()
    _limit_refused(caught.value, field, argument, value)


def test_memory_store_numbers() -> None:
    store = MemoryStore(lambda: 0)
    with pytest.raises(InvalidLimitError) as limit_caught:
        store.hit("k", 0)
    _limit_refused(limit_caught.value, "window_ms", "decay_ms", 0)
    with pytest.raises(InvalidLimitError) as limit_caught:
        store.hit("k", 0.5)
    _limit_refused(limit_caught.value, "window_ms", "decay_ms", 0.5)
    for huge in (I64_MAX + 1, -(2**63) - 1, 10**30):
        with pytest.raises(InvalidArgumentError) as caught:
            store.hit("k", 1000, huge)
        _argument_refused(caught.value, "amount", huge)
        with pytest.raises(InvalidArgumentError) as caught:
            store.too_many_attempts("k", huge)
        _argument_refused(caught.value, "max", huge)
        with pytest.raises(InvalidArgumentError) as caught:
            store.remaining("k", huge)
        _argument_refused(caught.value, "max", huge)
    assert store.hit("k", 1000, I64_MAX) == I64_MAX  # the edge itself is an amount
    assert store.attempts("other") == 0 and store.remaining("k", 5) == 0
    for bad in (True, "1", 1.0):
        with pytest.raises(TypeError):
            store.hit("k", 1000, bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.too_many_attempts("k", bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.remaining("k", bad)  # type: ignore[arg-type]
    for bad_decay in (True, "1000", None):
        with pytest.raises(TypeError):
            store.hit("k", bad_decay)  # type: ignore[arg-type]


def test_sqlite_store_hit_numbers() -> None:
    store = SqliteStore(sqlite3.connect(":memory:", isolation_level=None))
    with pytest.raises(InvalidArgumentError) as caught:
        store.hit("k", 1000, 2**64)
    _argument_refused(caught.value, "amount", 2**64)
    with pytest.raises(InvalidLimitError) as limit_caught:
        store.hit("k", -1)
    _limit_refused(limit_caught.value, "window_ms", "decay_ms", -1)
    assert store.attempts("k") == 0


def test_rate_limiter_numbers() -> None:
    limiter = RateLimiter(MemoryStore(lambda: 0))
    with pytest.raises(InvalidLimitError) as limit_caught:
        limiter.hit("k", 0)
    _limit_refused(limit_caught.value, "window_ms", "decay_seconds", 0)
    with pytest.raises(InvalidLimitError) as limit_caught:
        limiter.increment("k", math.nan)
    _limit_refused(limit_caught.value, "window_ms", "decay_seconds", math.nan)
    with pytest.raises(InvalidArgumentError) as caught:
        limiter.increment("k", 60, 2**63)
    _argument_refused(caught.value, "amount", 2**63)
    with pytest.raises(InvalidArgumentError) as caught:
        limiter.decrement("k", 60, -(2**63) - 1)
    _argument_refused(caught.value, "amount", -(2**63) - 1)
    for call in (limiter.too_many_attempts, limiter.remaining, limiter.retries_left):
        with pytest.raises(InvalidArgumentError) as caught:
            call("k", 2**64)
        _argument_refused(caught.value, "max_attempts", 2**64)
        with pytest.raises(TypeError, match="max_attempts"):
            call("k", True)
    with pytest.raises(InvalidArgumentError) as caught:
        limiter.attempt("k", 2**70, lambda: None)
    _argument_refused(caught.value, "max_attempts", 2**70)
    with pytest.raises(TypeError, match="amount"):
        limiter.increment("k", 60, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decay_seconds"):
        limiter.hit("k", "60")  # type: ignore[arg-type]
    assert limiter.attempts("k") == 0  # nothing was counted by the refused calls
    assert limiter.hit("k", 0.25) == 1


def test_async_rate_limiter_numbers() -> None:
    async def run() -> None:
        limiter = AsyncRateLimiter()
        with pytest.raises(InvalidLimitError) as limit_caught:
            await limiter.hit("k", -5)
        _limit_refused(limit_caught.value, "window_ms", "decay_seconds", -5)
        with pytest.raises(InvalidArgumentError) as caught:
            await limiter.increment("k", 60, 2**63)
        _argument_refused(caught.value, "amount", 2**63)
        with pytest.raises(InvalidArgumentError) as caught:
            await limiter.too_many_attempts("k", -(2**64))
        _argument_refused(caught.value, "max_attempts", -(2**64))
        with pytest.raises(InvalidArgumentError) as caught:
            await limiter.remaining("k", 2**64)
        _argument_refused(caught.value, "max_attempts", 2**64)
        assert await limiter.attempts("k") == 0

    asyncio.run(run())
