"""Every Redis case of tests/vectors/conversations/*.json through the component's public ``redis-store``
(hosted world, wasmtime-py) with a scripted client: each script the component's call machine sends is
checked against the case's next step and answered with its reply, or the step's failure is raised (the
host hands ``f"{type(e).__name__}: {e}"`` to the machine). Outcome, error kind and give-back failures
must be the case's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from wasmtime import component as wc

from ratewindow_component_host import HostedWorld, RedisStore, entry, limit
from ratewindow_component_host import verdict_json as verdict

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted((ROOT / "tests" / "vectors" / "conversations").glob("*.json"))
# The component's redis-store has no batch mixing algorithms (its core is built without the `mixed`
# feature, which needs the SQL machines): cases with `consume_mixed` / `peek_mixed` are left out, and
# counted in test_there_are_redis_conversations.
MIXED = ("consume_mixed", "peek_mixed")


def _mixes(case: dict[str, Any]) -> bool:
    return any(call["op"]["op"] in MIXED for call in case["calls"])


REDIS_CASES = [
    (f, case) for f in FILES for case in json.loads(f.read_text())["cases"] if case["store"] == "redis"
]
CASES = [pytest.param(case, id=f"{f.name}: {case['name']}") for f, case in REDIS_CASES if not _mixes(case)]

def shipped(source: bytes) -> bytes:
    """A script as the core ships it: without its comment lines (a line whose first non-blank
    characters are ``--``), every other byte kept (``sql::schema_text!``)."""
    return b"".join(line for line in source.splitlines(keepends=True) if not line.lstrip(b" \t").startswith(b"--"))


# The scripts' names by SHA1, from the core's Lua sources.
SCRIPTS = {
    hashlib.sha1(shipped((ROOT / "core" / "src" / "redis" / f"{name}.lua").read_bytes())).hexdigest(): name
    for name in ("sliding", "fixed", "weighted")
}
KINDS = {"store-failed": "store", "malformed-reply": "reply", "protocol": "protocol", "unsupported": "unsupported"}


class ClientError(Exception):
    """What the scripted client raises: its ``str()`` is the step's failure."""


def reply(r: Any) -> wc.Variant:
    """A ``store-io.reply`` from a JSON reply."""
    return wc.Variant("array", list(r)) if isinstance(r, list) else wc.Variant("value", r)


class Scripted:
    """A scripted client for one call: checks each command, answers with the step's reply or raises."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        self.steps = steps
        self.next = 0
        self.call_id: Optional[str] = None
        self.mismatches: list[str] = []

    def __call__(self, script: str, sha1: str, keys: list[str], args: list[str]) -> wc.Variant:
        if self.next >= len(self.steps):
            self.mismatches.append(f"a command after the last step: {keys} {args}")
            raise ClientError("the conversation has no more steps")
        step = self.steps[self.next]
        self.next += 1
        want = step.get("command")
        if want is not None:
            by_sha1 = script == ""
            if not by_sha1 and hashlib.sha1(script.encode()).hexdigest() != sha1:
                self.mismatches.append(f"the source sent is not {sha1}")
            got_args: list[str] = []
            for i, a in enumerate(args):
                if i < len(want["args"]) and want["args"][i] == "{call_id}":
                    if not a or (self.call_id is not None and self.call_id != a):
                        self.mismatches.append(f"call id {a!r}")
                    self.call_id = a
                    got_args.append("{call_id}")
                else:
                    got_args.append(a)
            got = {"script": SCRIPTS.get(sha1, "?"), "by_sha1": by_sha1, "keys": list(keys), "args": got_args}
            if got != want:
                self.mismatches.append(f"step {self.next - 1}: sent {got}, expected {want}")
        if "fail" in step:
            raise ClientError(step["fail"])
        return reply(step["reply"])




def lim(v: dict[str, Any]) -> wc.Record:
    return limit(v["uses"], v["window_ms"])


def run(store: RedisStore, op: dict[str, Any], tokens: list[Any]) -> dict[str, Any]:
    """One public call; its outcome in the vectors' shape (its release token appended to ``tokens``)."""
    token: Any = None

    def outcome(r: Any, ok: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        if isinstance(r, wc.Variant):
            return {"error": KINDS.get(r.tag, r.tag)}
        return ok(r)

    def consumed(batch: bool) -> Callable[[Any], dict[str, Any]]:
        def ok(c: Any) -> dict[str, Any]:
            nonlocal token
            token = c.release
            return {"verdict": verdict(c.verdict, batch), "release": token is not None}

        return ok

    def number(n: Any) -> dict[str, Any]:
        return {"int": n}

    def unit(_: Any) -> dict[str, Any]:
        return {"unit": None}

    name, key = op["op"], op.get("key")
    entries = [entry(e["key"], lim(e["limit"]), e.get("cost")) for e in op.get("entries", [])]
    if name == "consume" and "cost" in op:
        out = outcome(store.call("consume-cost", key, lim(op["limit"]), float(op["cost"])), consumed(False))
    elif name == "peek" and "cost" in op:
        out = outcome(
            store.call("peek-cost", key, lim(op["limit"]), float(op["cost"])),
            lambda v: {"verdict": verdict(v, False), "release": False},
        )
    elif name == "consume":
        out = outcome(store.call("consume", key, lim(op["limit"])), consumed(False))
    elif name == "consume_many":
        out = outcome(store.call("consume-many", entries), consumed(True))
    elif name == "peek":
        out = outcome(store.call("peek", key, lim(op["limit"])), lambda v: {"verdict": verdict(v, False), "release": False})
    elif name == "peek_many":
        out = outcome(store.call("peek-many", entries), lambda v: {"verdict": verdict(v, True), "release": False})
    elif name == "release":
        out = outcome(store.call("release", tokens[op["of"]]), unit)
    elif name == "hit":
        out = outcome(
            store.call("hit-window", key, float(op["decay_ms"]), op["amount"]),
            lambda h: {"hit": {"count": h.count, "reset_after_ms": getattr(h, "reset-after-ms")}},
        )
    elif name == "attempt":
        out = outcome(
            store.call("attempt", key, op["max"], float(op["decay_ms"])),
            lambda a: {"attempt": {"allowed": a.allowed, "count": a.count, "reset_after_ms": getattr(a, "reset-after-ms")}},
        )
    elif name == "too_many_attempts":
        out = outcome(store.call("too-many-attempts", key, op["max"]), lambda b: {"bool": b})
    elif name == "remaining":
        out = outcome(store.call("remaining", key, op["max"]), number)
    elif name in ("attempts", "available_in", "available_in_ms"):
        out = outcome(store.call(name.replace("_", "-"), key), number)
    elif name in ("reset_attempts", "clear"):
        out = outcome(store.call(name.replace("_", "-"), key), unit)
    else:
        raise AssertionError(f"unknown op {name}")
    tokens.append(token)
    return out


def test_there_are_redis_conversations() -> None:
    assert len(CASES) >= 19
    # Weighted cases run; only the mixed ones (two of weights.json) are left out.
    assert any("cost" in call["op"] for _, case in REDIS_CASES if not _mixes(case) for call in case["calls"])
    assert 1 <= len(REDIS_CASES) - len(CASES) <= 2


@pytest.fixture(scope="module")
def world() -> HostedWorld:
    return HostedWorld()


@pytest.mark.parametrize("case", CASES)
def test_conversation(world: HostedWorld, case: dict[str, Any]) -> None:
    o = case.get("options", {})
    store = world.redis_store(prefix=o.get("prefix"), hash_tag_before=o.get("hash_tag"), evalsha=o.get("evalsha"))
    tokens: list[Any] = []
    for i, call in enumerate(case["calls"]):
        client = Scripted(call["steps"])
        world.runner = client
        world.give_back_failures = []
        got = run(store, call["op"], tokens)
        assert client.mismatches == [], f"call {i}"
        assert client.next == len(call["steps"]), f"call {i}: ran {client.next} of {len(call['steps'])} steps"
        assert got == call["outcome"], f"call {i}: {call['op']}"
        for f in world.give_back_failures:
            assert getattr(f, "call-id") and f.message
        assert [{"keys": list(f.keys)} for f in world.give_back_failures] == call.get("give_back_failures", []), (
            f"call {i}: give-back failures"
        )
