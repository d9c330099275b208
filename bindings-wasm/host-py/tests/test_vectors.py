"""Every case of tests/vectors/*.json and tests/vectors/weights/*.json through the component in
wasmtime-py, in both worlds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from wasmtime import component as wc

from ratewindow_component_host import EngineWorld, HostedWorld, entry, limit
from ratewindow_component_host import verdict_json as verdict

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors"
FILES = sorted(VECTORS.glob("*.json")) + sorted((VECTORS / "weights").glob("*.json"))


def lim(v: dict[str, Any]) -> wc.Record:
    return limit(v["uses"], v["window_ms"])


def entries(op: dict[str, Any]) -> list[wc.Record]:
    return [entry(e["key"], lim(e["limit"]), e.get("cost")) for e in op["entries"]]


def result(r: Any, ok: Callable[[Any], Any]) -> Any:
    if isinstance(r, wc.Variant):
        payload: Any = r.payload
        if r.tag == "invalid-argument":
            return {"error": "invalid_argument", "field": payload.field}
        assert r.tag == "invalid-limit", f"unexpected error {r.tag}: {payload!r}"
        return {"error": "invalid_limit", "field": payload.field.replace("-", "_")}
    return ok(r)


def run(w: Any, op: dict[str, Any]) -> Any:
    # A negative time (a wrapped clock) crosses as wasmtime-py's ctypes would store it: -1 as 2^64 - 1.
    now = op["now"] % 2**64
    name = op["op"]
    if name == "limit":
        return result(w.check_limit(lim(op)), lambda _: {"ok": True})
    if name == "consume" and "cost" in op:
        return result(w.consume_cost(op["key"], lim(op["limit"]), op["cost"], now), verdict)
    if name == "peek" and "cost" in op:
        return result(w.peek_cost(op["key"], lim(op["limit"]), op["cost"], now), verdict)
    if name == "consume":
        return result(w.consume(op["key"], lim(op["limit"]), now), verdict)
    if name == "peek":
        return result(w.peek(op["key"], lim(op["limit"]), now), verdict)
    if name == "consume_many":
        return result(w.consume_many(entries(op), now, op.get("id")), lambda v: verdict(v, True))
    if name == "peek_many":
        return result(w.peek_many(entries(op), now), lambda v: verdict(v, True))
    if name == "release":
        w.release(op["id"], now)
        return None
    if name == "hit":
        return result(w.hit(op["key"], op["decay_ms"], op["amount"], now), lambda n: n)
    if name == "hit_window":
        return result(
            w.hit_window(op["key"], op["decay_ms"], op["amount"], now),
            lambda h: {"count": h.count, "reset_after_ms": getattr(h, "reset-after-ms")},
        )
    if name == "attempt":
        return result(
            w.attempt(op["key"], op["max"], op["decay_ms"], now),
            lambda a: {"allowed": a.allowed, "count": a.count, "reset_after_ms": getattr(a, "reset-after-ms")},
        )
    if name == "attempts":
        return w.attempts(op["key"], now)
    if name == "too_many_attempts":
        return w.too_many_attempts(op["key"], op["max"], now)
    if name == "remaining":
        return w.remaining(op["key"], op["max"], now)
    if name == "available_in":
        return w.available_in(op["key"], now)
    if name == "available_in_ms":
        return w.available_in_ms(op["key"], now)
    if name == "reset_attempts":
        w.reset_attempts(op["key"], now)
        return None
    if name == "clear":
        w.clear(op["key"], now)
        return None
    raise AssertionError(f"unknown op {name}")


def test_there_are_vectors() -> None:
    assert FILES, f"no vectors in {VECTORS}"
    assert any(f.parent.name == "weights" for f in FILES), "no weights vectors"


@pytest.fixture(scope="module")
def worlds() -> dict[str, Any]:
    return {"engine": EngineWorld(), "hosted": HostedWorld()}


@pytest.mark.parametrize("world", ["engine", "hosted"])
@pytest.mark.parametrize("file", FILES, ids=lambda p: p.name)
def test_vector_file(worlds: dict[str, Any], world: str, file: Path) -> None:
    w = worlds[world]
    doc = json.loads(file.read_text())
    for case in doc["cases"]:
        w.fresh_store()
        for i, op in enumerate(case["ops"]):
            got = run(w, op)
            assert got == op.get("expect"), f"{case['name']} / op {i}: {op}"
    if world == "hosted":
        assert w.clock_reads > 0
