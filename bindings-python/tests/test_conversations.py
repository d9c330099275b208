"""Every conversation vector (tests/vectors/conversations/*.json) through the PUBLIC stores, sync and
asyncio, with a scripted client: each command the store sends is checked against the case's next step,
answered with its reply or rows, or failed with its message; the outcome, the error kind and the
reported give-backs must be the case's."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratewindow import (
    AsyncPostgresStore,
    AsyncRedisStore,
    CounterLimit,
    Entry,
    GcraLimit,
    GiveBackError,
    GiveBackWarning,
    InternalError,
    Limit,
    PostgresStore,
    RedisStore,
    SqliteStore,
    StoreError,
    StoreReplyError,
)
from ratewindow._ratewindow import redis_scripts

FOLDER = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "conversations"
CASES = [case for path in sorted(FOLDER.glob("*.json")) for case in json.loads(path.read_text())["cases"]]
SCRIPTS = {text: name for name, sha, source in redis_scripts() for text in (sha, source)}
ERRORS: dict[str, Callable[[BaseException], bool]] = {
    "store": lambda e: type(e) is StoreError,
    "reply": lambda e: isinstance(e, StoreReplyError),
    "protocol": lambda e: isinstance(e, InternalError),
    "unsupported": lambda e: isinstance(e, TypeError),
}


class Scripted:
    """The client: the steps of one call at a time; what went wrong is kept (an assertion raised inside
    the client would be fed to the call as the client's failure)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.call_id: str | None = None
        self.statement = 0  # the statement of a SQL step's command being run

    def start(self, steps: list[dict[str, Any]]) -> None:
        self.steps, self.call_id, self.statement = list(steps), None, 0

    def same(self, expected: Any, got: Any) -> bool:
        if expected == "{call_id}":
            if not isinstance(got, str) or not got or self.call_id not in (None, got):
                return False
            self.call_id = got
            return True
        if isinstance(expected, list):
            return isinstance(got, list) and len(got) == len(expected) and all(map(self.same, expected, got))
        return type(expected) is type(got) and bool(expected == got)

    def check(self, what: str, expected: Any, got: Any) -> None:
        if not self.same(expected, got):
            self.problems.append(f"{what}: expected {expected!r}, got {got!r}")

    def answer(self, step: dict[str, Any]) -> Any:
        if "fail" in step:
            raise Exception(step["fail"])
        return step["reply"] if "reply" in step else [tuple(row) for row in step["rows"]]

    def script(self, text: str, keys: list[str], args: list[str], by_sha1: bool) -> Any:
        if not self.steps:
            self.problems.append("the call asked for more than its steps")
            raise Exception("no step left")
        step = self.steps.pop(0)
        command = step.get("command", {})
        got = {"script": SCRIPTS.get(text), "by_sha1": by_sha1, "keys": keys, "args": args}
        for field in ("script", "by_sha1", "keys", "args"):
            if field in command:
                self.check(field, command[field], got[field])
        return self.answer(step)

    def query(self, sql: str, params: list[Any]) -> Any:
        if not self.steps:
            self.problems.append("the call asked for more than its steps")
            raise Exception("no step left")
        command = self.steps[0].get("command", {})
        n = self.statement
        if "sql" in command:
            self.check(f"sql {n}", command["sql"][n], sql)
        if "params" in command:
            self.check(f"params {n}", command["params"][n], params)
        if n + 1 < len(command.get("sql", [sql])):
            self.statement += 1
            return []
        self.statement = 0
        return self.answer(self.steps.pop(0))


def _limit(spec: dict[str, Any]) -> Limit:
    return Limit(spec["uses"], spec["window_ms"])


def _any_limit(entry: dict[str, Any]) -> Limit | GcraLimit | CounterLimit:
    """A mixed batch's entry limit by its ``algorithm`` (sliding, gcra or counter)."""
    spec, algorithm = entry["limit"], entry["algorithm"]
    if algorithm == "gcra":
        return GcraLimit(spec["uses"], spec["window_ms"], burst=spec.get("burst"))
    if algorithm == "counter":
        return CounterLimit(spec["uses"], spec["window_ms"])
    return _limit(spec)


def _method(store: Any, op: dict[str, Any], made: list[Any]) -> Callable[[], Any]:
    kind = op["op"]
    # A `cost` (weights.json) is passed only when the vector gives one.
    if kind in ("consume", "peek"):
        cost = {"cost": op["cost"]} if "cost" in op else {}
        return lambda: getattr(store, kind)(op["key"], _limit(op["limit"]), **cost)
    if kind in ("consume_many", "peek_many"):
        return lambda: getattr(store, kind)(
            [Entry(e["key"], _limit(e["limit"]), e.get("cost")) for e in op["entries"]]
        )
    if kind in ("consume_mixed", "peek_mixed"):
        method = kind.replace("mixed", "many")
        return lambda: getattr(store, method)(
            [Entry(e["key"], _any_limit(e), e.get("cost")) for e in op["entries"]]
        )
    if kind == "release":
        return made[op["of"]].release  # type: ignore[no-any-return]
    if kind == "hit":
        return lambda: store.hit_window(op["key"], op["decay_ms"], op["amount"])
    if kind == "attempt":
        return lambda: store.attempt(op["key"], op["max"], op["decay_ms"])
    if kind in ("too_many_attempts", "remaining"):
        return lambda: getattr(store, kind)(op["key"], op["max"])
    return lambda: getattr(store, kind)(op["key"])


def _outcome(got: Any) -> dict[str, Any]:
    """The public result as the vectors spell an outcome (type by type: ``True`` is not ``1``)."""
    if got is None:
        return {"unit": None}
    if isinstance(got, bool):
        return {"bool": got}
    if isinstance(got, int):
        return {"int": got}
    names = type(got).__name__
    if names == "HitResult":
        return {"hit": {"count": got.count, "reset_after_ms": got.reset_after_ms}}
    if names == "AttemptResult":
        return {"attempt": {"allowed": got.allowed, "count": got.count, "reset_after_ms": got.reset_after_ms}}
    return {"verdict": got, "release": got.releasable}


def _compare(name: str, expected: dict[str, Any], got: Any, error: BaseException | None) -> None:
    if "error" in expected:
        assert error is not None and ERRORS[expected["error"]](error), f"{name}: expected {expected}, got {error!r}"
        return
    assert error is None, f"{name}: expected {expected}, got {error!r}"
    outcome = _outcome(got)
    if "verdict" in expected:
        assert "verdict" in outcome, f"{name}: expected {expected}, got {got!r}"
        verdict = outcome["verdict"]
        fields = {k: getattr(verdict, k) for k in expected["verdict"]}
        assert fields == expected["verdict"] and outcome["release"] == expected["release"], f"{name}: {verdict!r}"
    else:
        assert outcome == expected and type(outcome.get("int")) is type(expected.get("int")), f"{name}: {got!r}"


def _store(case: dict[str, Any], client: Scripted, reports: list[GiveBackError], aio: bool, now: list[int]) -> Any:
    options = case.get("options", {})
    if case["store"] == "redis":
        kwargs: dict[str, Any] = {
            "prefix": options.get("prefix", "ratewindow:"),
            "hash_tag": options.get("hash_tag"),
            "on_give_back_error": reports.append,
        }
        if aio:

            async def arun(source: str, keys: list[str], args: list[str]) -> Any:
                return client.script(source, keys, args, False)

            async def asha(sha: str, keys: list[str], args: list[str]) -> Any:
                return client.script(sha, keys, args, True)

            return AsyncRedisStore.using(arun, evalsha=asha if options.get("evalsha", True) else None, **kwargs)
        sha = (lambda s, k, a: client.script(s, k, a, True)) if options.get("evalsha", True) else None
        return RedisStore.using(lambda s, k, a: client.script(s, k, a, False), evalsha=sha, **kwargs)
    prefix = options.get("prefix", "ratewindow")
    if case["store"] == "sqlite":
        return SqliteStore(client.query, prefix=prefix, clock=lambda: now[0])
    if aio:

        async def aquery(sql: str, params: list[Any]) -> Any:
            return client.query(sql, params)

        return AsyncPostgresStore.using(aquery, prefix=prefix)
    return PostgresStore.using(client.query, prefix=prefix)


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_conversation(case: dict[str, Any], aio: bool) -> None:
    if aio and case["store"] == "sqlite":
        pytest.skip("SQLite has no asyncio store (sqlite3 is synchronous)")
    client, reports, now = Scripted(), list[GiveBackError](), [0]
    store = _store(case, client, reports, aio, now)
    made: list[Any] = []
    for index, call in enumerate(case["calls"]):
        name = f"call {index} ({call['op']['op']})"
        client.start(call["steps"])
        now[0] = call.get("now", 0)
        reports.clear()
        got: Any = None
        error: BaseException | None = None
        try:
            got = _method(store, call["op"], made)()
            if inspect.iscoroutine(got):
                got = asyncio.run(got)
        except Exception as caught:  # noqa: BLE001 - compared with the case's error kind
            error = caught
        made.append(got)
        assert not client.problems, f"{name}: {client.problems}"
        assert not client.steps, f"{name}: the call ended before its steps did: {client.steps}"
        _compare(name, call["outcome"], got, error)
        failures = [{"keys": r.keys} for r in reports]
        assert failures == call.get("give_back_failures", []), f"{name}: reported {failures}"


def test_a_failed_give_back_is_a_warning_by_default() -> None:
    (case,) = [c for c in CASES if any(call.get("give_back_failures") for call in c["calls"])][:1]
    client = Scripted()
    store = RedisStore.using(
        lambda s, k, a: client.script(s, k, a, False), evalsha=lambda s, k, a: client.script(s, k, a, True)
    )
    (call,) = case["calls"]
    client.start(call["steps"])
    with pytest.warns(GiveBackWarning, match="could not give back"):
        verdict = _method(store, call["op"], [])()
    assert not client.problems and not verdict.allowed
