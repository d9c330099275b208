"""GCRA and the sliding-window counter through the component in wasmtime-py, in both worlds: every case
of tests/vectors/gcra/*.json and tests/vectors/counter/*.json, and bad input as the error variant."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest
from wasmtime import component as wc

from ratewindow_component_host import (
    EngineWorld,
    HostedWorld,
    counter_limit,
    gcra_limit,
    mixed_entry,
    sliding_limit,
)
from ratewindow_component_host import verdict_json as verdict

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors"
FILES = sorted(VECTORS.glob("gcra/*.json")) + sorted(VECTORS.glob("counter/*.json"))


def rate(algorithm: str, v: dict[str, Any]) -> wc.Variant:
    if algorithm == "gcra":
        return gcra_limit(v["uses"], v["window_ms"], v.get("burst"))
    if algorithm == "counter":
        return counter_limit(v["uses"], v["window_ms"])
    return sliding_limit(v["uses"], v["window_ms"])


def entries(op: dict[str, Any]) -> list[wc.Record]:
    return [mixed_entry(e["key"], rate(e["algorithm"], e["limit"]), e.get("cost", 1)) for e in op["entries"]]


def result(r: Any, ok: Callable[[Any], Any]) -> Any:
    if isinstance(r, wc.Variant):
        payload: Any = r.payload
        if r.tag == "invalid-argument":
            assert payload.field == "cost", f"unexpected error {r.tag}: {payload!r}"
            return {"error": "invalid_rate", "field": "cost"}
        assert r.tag == "invalid-limit", f"unexpected error {r.tag}: {payload!r}"
        return {"error": "invalid_rate", "field": payload.field.replace("-", "_")}
    return ok(r)


def run(w: Any, op: dict[str, Any]) -> Any:
    now = op["now"]
    name = op["op"]
    cost = op.get("cost", 1)
    algorithm, _, action = name.partition("_")
    if algorithm in ("gcra", "counter") and action in ("consume", "peek"):
        call = w.consume_rate if action == "consume" else w.peek_rate
        return result(call(op["key"], rate(algorithm, op["limit"]), cost, now), verdict)
    if algorithm in ("gcra", "counter") and action == "reset":
        w.reset_rate(op["key"], algorithm, now)
        return None
    if algorithm in ("gcra", "counter") and action == "limit":
        return result(w.check_rate(rate(algorithm, op["limit"])), lambda _: {"ok": True})
    if name == "consume_mixed":
        return result(w.consume_mixed(entries(op), now, op.get("id")), lambda v: verdict(v, True))
    if name == "peek_mixed":
        return result(w.peek_mixed(entries(op), now), lambda v: verdict(v, True))
    if name == "release":
        w.release(op["id"], now)
        return None
    raise AssertionError(f"unknown vector op {name}: teach this runner")


def test_there_are_vectors() -> None:
    assert len(FILES) >= 2, f"no gcra/counter vectors in {VECTORS}"


@pytest.fixture(scope="module")
def worlds() -> dict[str, Any]:
    return {"engine": EngineWorld(), "hosted": HostedWorld()}


@pytest.mark.parametrize("world", ["engine", "hosted"])
@pytest.mark.parametrize("file", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_vector_file(worlds: dict[str, Any], world: str, file: Path) -> None:
    w = worlds[world]
    doc = json.loads(file.read_text())
    for case in doc["cases"]:
        w.fresh_store()
        for i, op in enumerate(case["ops"]):
            got = run(w, op)
            assert got == op.get("expect"), f"{case['name']} / op {i}: {op}"


BAD_LIMITS = [
    (gcra_limit(math.nan, 1000), "uses", "NaN"),
    (gcra_limit(10, 2.5), "window-ms", "2.5"),
    (gcra_limit(10, 1000, 0), "burst", "0"),
    (gcra_limit(10, 1000, -1), "burst", "-1"),
    (gcra_limit(10, 1000, 1.5), "burst", "1.5"),
    (gcra_limit(10, 1000, math.inf), "burst", "Infinity"),
    (gcra_limit(10, 1000, 2**32), "burst", "4294967296"),
    (counter_limit(0, 1000), "uses", "0"),
    (counter_limit(1, -0.0), "window-ms", "-0"),
    (counter_limit(4294967295, 4320000000000000), "uses", "4294967295"),
]


@pytest.mark.parametrize("world", ["engine", "hosted"])
def test_bad_rates_are_the_error_variant_and_record_nothing(worlds: dict[str, Any], world: str) -> None:
    w = worlds[world]
    w.fresh_store()
    fine = gcra_limit(10, 1000, 10)
    for lim, field, value in BAD_LIMITS:
        for r in (
            w.check_rate(lim),
            w.consume_rate("k", lim, 1, 5),
            w.peek_rate("k", lim, 1, 5),
            w.consume_mixed([mixed_entry("fine", fine), mixed_entry("k", lim)], 5),
            w.peek_mixed([mixed_entry("k", lim)], 5),
        ):
            assert isinstance(r, wc.Variant) and r.tag == "invalid-limit", (lim, r)
            payload: Any = r.payload
            assert (payload.field, payload.value) == (field, value)
    for cost in (0, -1, 1.5, math.nan, math.inf, 11):
        for lim in (fine, counter_limit(10, 1000)):
            for r in (
                w.consume_rate("k", lim, cost, 5),
                w.peek_rate("k", lim, cost, 5),
                w.consume_mixed([mixed_entry("s", sliding_limit(10, 1000)), mixed_entry("k", lim, cost)], 5),
            ):
                assert isinstance(r, wc.Variant) and r.tag == "invalid-argument", (cost, r)
                cost_error: Any = r.payload
                assert cost_error.field == "cost"
    assert w.key_count() == 0
    if world == "engine":
        r = w.consume_rate("k", fine, 1, 2**64 - 1)
        assert isinstance(r, wc.Variant) and r.tag == "invalid-argument"
        now_error: Any = r.payload
        assert now_error.field == "now"
    assert w.consume_rate("k", fine, 10, 5).allowed
    assert getattr(w.consume_rate("k", fine, 1, 5), "retry-after-ms") == 100
