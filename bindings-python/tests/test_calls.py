"""The native call machines driven by hand, without a server: the commands they ask for, what a fed
reply or failure becomes, and hostile replies and rows refused with StoreReplyError (never a verdict,
never a panic)."""

from __future__ import annotations

from typing import Any

import pytest

from ratewindow import Entry, InternalError, Limit, StoreError, StoreReplyError, Verdict
from ratewindow._ratewindow import Machine, Script, Sql


def test_a_redis_consume_is_evalsha_then_the_source_on_noscript() -> None:
    call = Machine.redis_store("p:").consume_many([Entry("a", Limit(3, 1000))])
    first = call.next()
    assert isinstance(first, Script) and first.by_sha1 and first.keys == ["p:log:a"]
    assert first.script_name == "sliding" and len(first.sha1) == 40 and "redis.call" in first.source
    call.fail("NoScriptError: No matching script. Please use EVAL.")
    second = call.next()
    assert isinstance(second, Script) and not second.by_sha1 and second.args == first.args
    call.feed_reply([1, 0, -1, -1, 1000, 0, 2, 1000, 1000])
    verdict = call.next()
    assert isinstance(verdict, Verdict) and verdict.allowed and (verdict.limit, verdict.remaining, verdict.reset_after_ms) == (3, 2, 1000)


def test_the_client_error_is_the_store_errors_cause() -> None:
    call = Machine.redis_store().peek("a", Limit(3, 1000))
    call.next()
    cause = ConnectionError("lost")
    call.fail("ConnectionError: lost", cause)
    with pytest.raises(StoreError) as caught:
        call.next()
    assert caught.value.__cause__ is cause and type(caught.value) is StoreError


HOSTILE_REPLIES: list[Any] = [None, [], [1, 2], "OK", [b"x"] * 9, [2**70] * 9, [1.5] * 9, {"a": 1}, [[[[[[1]]]]]]]


@pytest.mark.parametrize("reply", HOSTILE_REPLIES)
def test_hostile_replies_are_a_store_reply_error(reply: Any) -> None:
    call = Machine.redis_store().consume("a", Limit(3, 1000))
    call.next()
    call.feed_reply(reply)
    with pytest.raises(StoreReplyError) as caught:
        call.next()
    assert caught.value.source == "sliding" and caught.value.expected


HOSTILE_ROWS: list[Any] = [[], [(True, 0)], [("yes",) * 9], [None], [b"\xff\xfe"], [object()], [(2**70,) * 9], [(0.5,) * 9]]


@pytest.mark.parametrize("rows", HOSTILE_ROWS)
def test_hostile_rows_are_a_store_reply_error(rows: Any) -> None:
    call = Machine.postgres_store("rw_x").consume_many([Entry("a", Limit(1, 1000))])
    command = call.next()
    assert isinstance(command, Sql) and "rw_x_" in command.statements[0][0]
    call.feed_rows(rows)
    with pytest.raises(StoreReplyError):
        call.next()
    with pytest.raises(StoreReplyError):
        Machine.decode_purge(rows)


def test_a_sqlite_call_rolls_back_then_raises_the_original_error() -> None:
    call = Machine.sqlite_store(clock=lambda: 5_000).consume_many([Entry("k", Limit(1, 1000))])
    begin = call.next()
    assert isinstance(begin, Sql) and begin.statements[0][0] == "BEGIN IMMEDIATE"
    call.fail("OperationalError: database is locked")
    rollback = call.next()
    assert isinstance(rollback, Sql) and [s for s, _ in rollback.statements] == ["ROLLBACK"]
    call.feed_rows([])
    with pytest.raises(StoreError):
        call.next()
    with pytest.raises(InternalError):  # fed after the outcome: the host's bug, typed
        call.next()


def test_a_fed_value_of_the_wrong_kind_is_an_internal_error() -> None:
    call = Machine.postgres_store().attempts("k")
    call.next()
    call.feed_reply(1)
    with pytest.raises(InternalError):
        call.next()


def test_calls_are_planned_without_waiting_for_the_flush_unless_durable() -> None:
    assert "set_config('synchronous_commit', 'off', true)" in Machine.postgres_store("rw_x").schema()
    for durable in (False, True):
        command = Machine.postgres_store("rw_x", durable).hit("a", 1000, 1).next()
        assert isinstance(command, Sql) and command.statements[0][1][-1] is (not durable)
    assert Machine.sqlite_connection_setup(250) == "PRAGMA busy_timeout = 250"
