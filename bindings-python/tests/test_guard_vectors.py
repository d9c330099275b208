"""The failure guard's shared vectors (``tests/vectors/guard/guard.json``) through the Python binding, as
the core (``core/tests/guard_vectors.rs``) and Node (``bindings-node/test/guard-vectors.test.mjs``) run
them: the options through ``Guard`` (the errors naming the field as Python spells it), the rest through
the binding's ``GuardCore`` as ``_guard.py`` feeds it (the block cache at the vectors' explicit times).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ratewindow import Entry, Guard, InvalidArgumentError, Limit, MemoryStore, Verdict
from ratewindow._ratewindow import GuardCore

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "tests" / "vectors" / "guard" / "guard.json").read_text(encoding="utf-8")
)
FIELD = {
    "invalid_argument:timeout_ms": "timeout_ms",
    "invalid_argument:policy": "on_failure",
    "invalid_argument:max_keys": "block_cache",
}


def number(v: Any) -> Any:
    """A vector's number: JSON's, or the spelled non-finite ones."""
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(v, v) if isinstance(v, str) else v


def spelled(v: Verdict | None) -> dict[str, Any] | None:
    """A verdict as the vectors spell it (the core's serialisation)."""
    if v is None:
        return None
    return {
        "allowed": v.allowed,
        "retry_after_ms": v.retry_after_ms,
        "retry_timestamp": v.retry_timestamp,
        "blocked": v.blocked,
        "limit": v.limit,
        "remaining": v.remaining,
        "refill_after_ms": v.refill_after_ms,
        "reset_after_ms": v.reset_after_ms,
    }


def entries(listed: list[list[Any]]) -> list[Entry]:
    return [Entry(key, Limit(uses, window_ms)) for key, uses, window_ms in listed]


@pytest.mark.parametrize("case", VECTORS["options"], ids=lambda c: json.dumps(c))
def test_options(case: dict[str, Any]) -> None:
    on_failure: Any = MemoryStore() if case["policy"] == "fallback" else case["policy"]
    options: dict[str, Any] = {"timeout_ms": number(case["timeout_ms"]), "on_failure": on_failure}
    if "max_keys" in case:
        options["block_cache"] = number(case["max_keys"])
    if "error" not in case:
        Guard(MemoryStore(), **options)
        return
    with pytest.raises(InvalidArgumentError) as raised:
        Guard(MemoryStore(), **options)
    field = FIELD[case["error"]["code"]]
    assert raised.value.field == field
    assert str(raised.value).startswith(f"invalid {field}: "), str(raised.value)


class _Coded(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@pytest.mark.parametrize("case", VECTORS["error_codes"], ids=lambda c: c["code"] or "(empty)")
def test_error_codes(case: dict[str, Any]) -> None:
    core = GuardCore(100, "deny", None)
    got = core.failure_of(_Coded(case["code"]), GuardCore.now())
    assert got == case["failure"]


@pytest.mark.parametrize("case", VECTORS["failures"], ids=lambda c: json.dumps(c))
def test_failures(case: dict[str, Any]) -> None:
    policy = None if case["policy"] == "fallback" else case["policy"]
    core = GuardCore(number(case["timeout_ms"]), policy, None)
    cause = RuntimeError("the store failed")
    v = core.failed(case["failure"], cause)
    if case.get("fallback"):
        assert v is None
        assert spelled(core.fallback_failed(case["failure"], cause)) == case["fallback_failed"]
    else:
        assert v is not None
        assert spelled(v) == case["verdict"]
        assert v.failed == case["failure"]


@pytest.mark.parametrize("case", VECTORS["late"], ids=lambda c: json.dumps(c))
def test_late(case: dict[str, Any]) -> None:
    assert GuardCore(100, "deny", None).late(case["answered_allowed"], case["late_allowed"]) == case["action"]


@pytest.mark.parametrize("case", VECTORS["cache"], ids=lambda c: c["name"])
def test_block_cache(case: dict[str, Any]) -> None:
    core = GuardCore(100, "deny", number(case["max_keys"]))
    for i, step in enumerate(case["steps"]):
        at = f"step {i}: {json.dumps(step)}"
        op = step["op"]
        if op == "refused":
            v = step["verdict"]
            verdict = Verdict(
                v["allowed"],
                v["retry_after_ms"],
                v["retry_timestamp"],
                v["blocked"],
                limit=v["limit"],
                remaining=v["remaining"],
                refill_after_ms=v["refill_after_ms"],
                reset_after_ms=v["reset_after_ms"],
            )
            core.refused_at(entries(step["entries"]), verdict, step["started"])
        elif op == "check":
            assert spelled(core.check_at(entries(step["entries"]), step["now"])) == step["expect"], at
        elif op == "forget":
            core.forget_many(entries(step["entries"]))
        elif op == "len":
            assert core.cached() == step["expect"], at
        else:
            raise AssertionError(f"unknown op {op}")
