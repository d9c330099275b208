"""tests/vectors/http/http.json through the native module's HTTP functions (``HttpPlan``, ``Trust``),
the ones the middleware call: a request's entries, the response fields of a verdict, whole flows on a
memory store, the client's address."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ratewindow import InvalidArgumentError, Limit, MemoryStore, Unlimited, Verdict, _ratewindow
from ratewindow._http import HttpError
from ratewindow.testing import ManualClock

VECTORS = json.loads((Path(__file__).parents[2] / "tests" / "vectors" / "http" / "http.json").read_text())


def text(value: Any) -> Any:
    """A vector's string, ``{"prefix": p, "repeat": s, "times": n, "suffix": x}`` spelled out."""
    if isinstance(value, dict) and "repeat" in value:
        return value.get("prefix", "") + value["repeat"] * value["times"] + value.get("suffix", "")
    return value


def limits_of(case: dict[str, Any]) -> list[Limit]:
    return [
        Unlimited() if given.get("unlimited") else Limit(given["uses"], given["window_ms"]).by(text(given.get("key", "")))
        for given in case["limits"]
    ]


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


@pytest.mark.parametrize("case", VECTORS["request_entries"], ids=ids(VECTORS["request_entries"]))
def test_request_entries(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(HttpError) as raised:
            _ratewindow.HttpPlan(case["limiter"], limits_of(case))
        assert raised.value.kind == expect["error"]
        assert raised.value.status == (400 if expect["error"] == "key_too_long" else 500)
        return
    given = limits_of(case)
    plan = _ratewindow.HttpPlan(case["limiter"], given)
    got = [
        {"key": e.key, "uses": e.limit.uses, "window_ms": e.limit.window_ms, "source": plan.source(i)}
        for i, e in enumerate(plan.entries)
    ]
    assert got == [{**e, "key": text(e["key"])} for e in expect["entries"]]
    assert all(e.limit is given[plan.source(i)] for i, e in enumerate(plan.entries))  # the caller's own limits


def verdict_of(given: dict[str, Any]) -> Verdict:
    return Verdict(
        given["allowed"],
        given["retry_after_ms"],
        given["retry_timestamp"],
        given["blocked"],
        limit=given["limit"],
        remaining=given["remaining"],
        refill_after_ms=given["refill_after_ms"],
        reset_after_ms=given["reset_after_ms"],
    )


@pytest.mark.parametrize("case", VECTORS["response_headers"], ids=ids(VECTORS["response_headers"]))
def test_response_headers(case: dict[str, Any]) -> None:
    # The entries' limits, each under a key of its own so none is rewritten.
    limits = [Limit(g["uses"], g["window_ms"]).by(f"k{i}") for i, g in enumerate(case["limits"])]
    plan = _ratewindow.HttpPlan(case["limiter"], limits)
    verdict = verdict_of(case["verdict"])
    headers = plan.headers(verdict, case["ietf"], case["legacy"], case["now_ms"])
    assert [list(h) for h in headers] == case["expect"]["headers"]
    assert (None if verdict.allowed else 429) == case["expect"]["status"]


@pytest.mark.parametrize("case", VECTORS["flows"], ids=ids(VECTORS["flows"]))
def test_flows(case: dict[str, Any]) -> None:
    clock = ManualClock(0)
    store = MemoryStore(clock)
    plan = _ratewindow.HttpPlan(case["limiter"], limits_of(case))
    for step in case["requests"]:
        clock.set(step["now_ms"])
        if plan.entries:
            verdict = store.consume_many(plan.entries)
        else:
            verdict = Verdict(True)  # nothing to count: the middleware makes no store call
        expect = step["expect"]
        assert (None if verdict.allowed else 429) == expect["status"]
        blocked = None if verdict.blocked is None else plan.source(verdict.blocked)
        assert blocked == expect["blocked"]
        headers = plan.headers(verdict, case["ietf"], case["legacy"], step["now_ms"])
        assert [list(h) for h in headers] == expect["headers"]


def trust_of(case: dict[str, Any]) -> _ratewindow.Trust:
    given = case.get("trust", {})
    return _ratewindow.Trust(
        hops=given.get("hops", 0),
        proxies=given.get("proxies"),
        header=given.get("header") or "x-forwarded-for",
        ipv6_prefix=given.get("ipv6_prefix", 128),
    )


@pytest.mark.parametrize("case", VECTORS["client_address"], ids=ids(VECTORS["client_address"]))
def test_client_address(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(HttpError) as raised:
            trust_of(case).client_address(
                text(case["peer"]), text(case.get("x_forwarded_for")), text(case.get("forwarded"))
            )
        assert raised.value.kind == expect["error"]
        return
    trust = trust_of(case)
    address = trust.client_address(text(case["peer"]), text(case.get("x_forwarded_for")), text(case.get("forwarded")))
    assert address == expect["address"]


def test_a_key_with_a_lone_surrogate_is_refused_like_any_store_key() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        _ratewindow.HttpPlan("api", [Limit(1, 1000).by("user\ud800")])
    assert raised.value.field == "key"


def test_plan_and_trust_refuse_wrong_types() -> None:
    with pytest.raises(TypeError):
        _ratewindow.HttpPlan("api", [object()])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        _ratewindow.HttpPlan(1, [])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _ratewindow.Trust(proxies="10.0.0.1")
    with pytest.raises(ValueError):
        _ratewindow.Trust(hops=1, proxies=["10.0.0.1"])
    with pytest.raises(ValueError):
        _ratewindow.Trust(header="x-real-ip")
