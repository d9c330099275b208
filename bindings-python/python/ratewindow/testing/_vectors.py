"""Runs the shared conformance vectors (``tests/vectors/*.json``) against ``MemoryStore``.

Each case starts on a fresh store timed by a :class:`ManualClock` set to each op's ``now``; every
expected value is compared field for field, ``null`` and types included (``true`` is not ``1``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import InvalidArgumentError, InvalidLimitError
from .._limits import Entry, Limit
from .._memory import MemoryStore
from .._store import Verdict
from ._clock import ManualClock

__all__ = ["load_vector_file", "run_vector_case", "VectorMismatch"]


class VectorMismatch(AssertionError):
    """An op whose result differs from the vector's ``expect``."""


def load_vector_file(path: str | Path) -> list[dict[str, Any]]:
    """The cases of one vector file."""
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    cases = document["cases"]
    assert isinstance(cases, list)
    return cases


def _same(a: object, b: object) -> bool:
    """Equality that tells ``True`` from ``1`` and ``1`` from ``1.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _limit(spec: Mapping[str, Any]) -> Limit:
    return Limit(spec["uses"], spec["window_ms"])


def _single(v: Verdict) -> dict[str, Any]:
    return {
        "allowed": v.allowed,
        "retry_after_ms": v.retry_after_ms,
        "retry_timestamp": v.retry_timestamp,
        "limit": v.limit,
        "remaining": v.remaining,
        "refill_after_ms": v.refill_after_ms,
        "reset_after_ms": v.reset_after_ms,
    }


def _batch(v: Verdict) -> dict[str, Any]:
    return {**_single(v), "blocked": v.blocked}


def _apply(store: MemoryStore, op: Mapping[str, Any], consumed: dict[Any, Verdict]) -> object:
    kind = op["op"]
    if kind == "consume":
        return _single(store.consume(op["key"], _limit(op["limit"])))
    if kind == "peek":
        return _single(store.peek(op["key"], _limit(op["limit"])))
    if kind in ("consume_many", "peek_many"):
        entries = [Entry(e["key"], _limit(e["limit"])) for e in op["entries"]]
        if kind == "peek_many":
            return _batch(store.peek_many(entries))
        verdict = store.consume_many(entries)
        if "id" in op:
            consumed[op["id"]] = verdict
        return _batch(verdict)
    if kind == "release":
        earlier = consumed.get(op["id"])
        if earlier is not None:
            earlier.release()
        return None
    if kind == "hit":
        return store.hit(op["key"], op["decay_ms"], op["amount"])
    if kind == "hit_window":
        hit = store.hit_window(op["key"], op["decay_ms"], op["amount"])
        return {"count": hit.count, "reset_after_ms": hit.reset_after_ms}
    if kind == "attempt":
        attempt = store.attempt(op["key"], op["max"], op["decay_ms"])
        return {"allowed": attempt.allowed, "count": attempt.count, "reset_after_ms": attempt.reset_after_ms}
    if kind == "attempts":
        return store.attempts(op["key"])
    if kind == "too_many_attempts":
        return store.too_many_attempts(op["key"], op["max"])
    if kind == "remaining":
        return store.remaining(op["key"], op["max"])
    if kind == "available_in":
        return store.available_in(op["key"])
    if kind == "available_in_ms":
        return store.available_in_ms(op["key"])
    if kind == "reset_attempts":
        store.reset_attempts(op["key"])
        return None
    if kind == "clear":
        store.clear(op["key"])
        return None
    if kind == "limit":
        Limit(op["uses"], op["window_ms"])
        return {"ok": True}
    raise VectorMismatch(f"unknown op {kind!r}")


def run_vector_case(case: Mapping[str, Any]) -> None:
    """Runs one case on a fresh store; raises :class:`VectorMismatch` at the first difference."""
    clock = ManualClock(0)
    store = MemoryStore(clock)
    consumed: dict[Any, Verdict] = {}
    for index, op in enumerate(case["ops"]):
        clock.set(op["now"])
        try:
            got = _apply(store, op, consumed)
        except InvalidLimitError as error:
            got = {"error": "invalid_limit", "field": error.field}
        except InvalidArgumentError as error:
            if error.field != "now":
                raise
            got = {"error": "invalid_argument", "field": "now"}
        expected = op.get("expect")
        if not _same(got, expected):
            raise VectorMismatch(
                f"case {case.get('name')!r}, op {index} ({op['op']}): expected {expected!r}, got {got!r}"
            )
