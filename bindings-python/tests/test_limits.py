"""Limits: validated by the core, typed errors, the seed's constructors."""

from __future__ import annotations

import math

import pytest

import ratewindow
from ratewindow import GlobalLimit, InvalidLimitError, Limit, RateWindowError, Unlimited


@pytest.mark.parametrize(
    ("uses", "window_ms"),
    [(1, 1), (5, 10_000), (4294967295, 4320000000000000), (3.0, 1000.0), (2, 1e3)],
)
def test_valid_limits_from_int_and_float(uses: float, window_ms: float) -> None:
    limit = Limit(uses, window_ms)
    assert (limit.uses, limit.window_ms) == (int(uses), int(window_ms))
    assert type(limit.uses) is int and type(limit.window_ms) is int


@pytest.mark.parametrize(
    ("uses", "window_ms", "field"),
    [
        (0, 1000, "uses"),
        (-1, 1000, "uses"),
        (1.5, 1000, "uses"),
        (4294967296, 1000, "uses"),
        (math.nan, 1000, "uses"),
        (math.inf, 1000, "uses"),
        (2**200, 1000, "uses"),
        (1, 0, "window_ms"),
        (1, -5, "window_ms"),
        (1, 0.5, "window_ms"),
        (1, 4320000000000001, "window_ms"),
        (1, -math.inf, "window_ms"),
        (1, math.nan, "window_ms"),
        (1, -(2**100), "window_ms"),
    ],
)
def test_invalid_limits_raise_typed_error(uses: float, window_ms: float, field: str) -> None:
    with pytest.raises(InvalidLimitError) as caught:
        Limit(uses, window_ms)
    error = caught.value
    assert isinstance(error, RateWindowError) and isinstance(error, ValueError)
    assert error.field == field
    given = uses if field == "uses" else window_ms
    assert error.value is given
    assert error.code == "invalid_limit"
    assert field in str(error)


@pytest.mark.parametrize("bad", [True, False, "5", None, b"1", [1], 1j])
def test_wrong_types_raise_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        Limit(bad, 1000)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Limit(1, bad)  # type: ignore[arg-type]


def test_error_names_uses_first() -> None:
    with pytest.raises(InvalidLimitError) as caught:
        Limit(0, 0)
    assert caught.value.field == "uses"


def test_seed_constructors() -> None:
    assert Limit.per_second(3) == Limit(3, 1_000)
    assert Limit.per_second(3, 0.5) == Limit(3, 500)
    assert Limit.per_minute(5) == Limit(5, 60_000)
    assert Limit.per_minute(5, 2) == Limit.per_minutes(2, 5) == Limit(5, 120_000)
    assert Limit.per_hour(1) == Limit(1, 3_600_000)
    assert Limit.per_day(10_000) == Limit(10_000, 86_400_000)
    assert Limit.per_second(1, 0.007).window_ms == 7
    with pytest.raises(InvalidLimitError):
        Limit.per_second(1, 0.0001)
    with pytest.raises(InvalidLimitError):
        Limit.per_minute(0)
    with pytest.raises(TypeError):
        Limit.per_minute(1, True)


def test_global_and_unlimited() -> None:
    none = Limit.none()
    assert isinstance(none, Unlimited) and isinstance(none, GlobalLimit) and isinstance(none, Limit)
    assert none.uses == ratewindow.MAX_USES
    assert GlobalLimit(1000).window_ms == 60_000
    assert not isinstance(Limit(1, 1), GlobalLimit)


def test_by_and_fallback_key() -> None:
    limit = Limit.per_minute(5).by("user:1")
    assert limit.key == "user:1" and limit.uses == 5
    assert isinstance(GlobalLimit(3).by("x"), GlobalLimit)
    assert limit.fallback_key() == "user:1:attempts:5:decay:60"
    assert Limit(2, 10).fallback_key() == "attempts:2:decay:0.01"  # as the Node package spells it
    with pytest.raises(TypeError):
        Limit(1, 1, 5)  # type: ignore[arg-type]


def test_limits_are_immutable_values() -> None:
    limit = Limit(2, 1000, "k")
    with pytest.raises(AttributeError):
        limit.key = "other"
    with pytest.raises(AttributeError):
        limit.uses = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del limit.key
    assert limit == Limit(2, 1000, "k") and hash(limit) == hash(Limit(2, 1000, "k"))
    assert limit != Limit(2, 1000) and limit != Limit(3, 1000, "k")
    assert repr(limit) == "Limit(uses=2, window_ms=1000, key='k')"
    assert limit.decay_seconds == 1.0


def test_check_window() -> None:
    assert ratewindow._ratewindow.check_window(1000) == 1000
    with pytest.raises(InvalidLimitError) as caught:
        ratewindow._ratewindow.check_window(0)
    assert caught.value.field == "window_ms"


def test_no_panic_crosses_into_python() -> None:
    """A Rust panic inside an entry point arrives as InternalError, a RateWindowError, not PyO3's
    PanicException (a BaseException that `except Exception` would miss)."""
    with pytest.raises(ratewindow.InternalError) as caught:
        ratewindow._ratewindow._panic_for_tests()
    assert isinstance(caught.value, RateWindowError)
    assert "deliberate panic" in str(caught.value)
    assert caught.value.code == "internal"


def test_limits_pickle_and_copy() -> None:
    import copy
    import pickle

    for limit in (Limit(2, 1000, "k"), GlobalLimit(5), Unlimited()):
        assert pickle.loads(pickle.dumps(limit)) == limit
        assert copy.deepcopy(limit) == limit and type(copy.copy(limit)) is type(limit)
