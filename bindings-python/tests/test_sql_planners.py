"""The native SQL planners without a database: statement shapes, and hostile rows refused with
StoreReplyError (never a verdict, never a panic)."""

from __future__ import annotations

from typing import Any

import pytest

from ratewindow import Entry, Limit, StoreReplyError
from ratewindow._ratewindow import PostgresPlanner, SqlitePlanner


def test_postgres_statements_carry_the_call_in_arrays() -> None:
    planner = PostgresPlanner("rw_x")
    sql, params, n, keys = planner.consume_many([Entry("a", Limit(1, 1000)), ("b", Limit(2, 500))], "id1")
    assert "rw_x_consume($1, $2, $3::text[], $4::bigint[], $5::bigint[], $6::boolean)" in sql
    assert params == ["c", "id1", ["a", "b"], [1, 2], [1000, 500], True]
    assert (n, keys) == (2, ["a", "b"])
    assert planner.release(keys, "id1")[1] == [["a", "b"], "id1"]
    assert planner.peek("a", Limit(1, 1000))[1][0] == "p"
    with pytest.raises(ValueError):
        planner.consume("a", Limit(1, 1000), "")


HOSTILE: list[Any] = [
    [],
    [(True, 0, -1, -1, 5), (True, 0, -1, -1, 5)],
    [(True, 0, -1)],
    [("yes", 0, -1, -1, 5)],
    [(False, 0, 10, 0, 5)],
    [(False, 5, 10, 3, 5)],
    [(True, 2**70, -1, -1, 5)],
    [(True, 0.0, -1, -1, 5)],
    [([1], 0, -1, -1, 5)],
    [None],
    [b"\xff\xfe"],
    [object()],
]


@pytest.mark.parametrize("rows", HOSTILE)
def test_hostile_rows_are_a_store_reply_error(rows: Any) -> None:
    with pytest.raises(StoreReplyError) as caught:
        PostgresPlanner.decode_batch(rows, 1)
    assert caught.value.source == "consume" and caught.value.expected
    with pytest.raises(StoreReplyError):
        PostgresPlanner.decode_window(rows)
    with pytest.raises(StoreReplyError):
        PostgresPlanner.decode_purge(rows)


def test_driver_shapes_decode() -> None:
    assert PostgresPlanner.decode_batch([(True, 0, -1, -1, 5)], 1).allowed
    refused = PostgresPlanner.decode_batch([[False, 5, 10, 0, 5]], 2)
    assert (refused.allowed, refused.retry_after_ms, refused.retry_timestamp, refused.blocked) == (False, 5, 10, 0)
    assert PostgresPlanner.decode_single([(False, "5", "10", "0", "5")]).blocked is None
    assert PostgresPlanner.decode_window([(3, 0)]) is None
    assert PostgresPlanner.decode_window([(3, 250)]) == (3, 250)
    assert PostgresPlanner.decode_purge([(2, 1)]) == (2, 1)


def test_a_sqlite_call_is_decided_once() -> None:
    planner = SqlitePlanner()
    call = planner.begin_consume_many([Entry("k", Limit(1, 1000))], 5_000, "id")
    assert [sql for sql, _ in call.statements()][0] == "BEGIN IMMEDIATE" and call.in_transaction
    verdict, rest, keys = call.decide([("k", 4_500)])
    assert not verdict.allowed and verdict.blocked == 0 and [s for s, _ in rest] == ["COMMIT"] and keys is None
    with pytest.raises(RuntimeError):
        call.decide([])
    with pytest.raises(RuntimeError):
        call.statements()
    hostile = planner.begin_consume("k", Limit(1, 1000), 5_000, "id")
    with pytest.raises(StoreReplyError):
        hostile.decide([("other-key", 1)])
    window = planner.begin_get_window("k", 10)
    assert not window.in_transaction
    with pytest.raises(StoreReplyError):
        window.decide([(1, 2), (3, 4)])


def test_calls_are_planned_without_waiting_for_the_flush_unless_durable() -> None:
    assert "set_config('synchronous_commit', 'off', true)" in PostgresPlanner("rw_x").schema()
    entries = [Entry("a", Limit(1, 1000))]
    assert PostgresPlanner("rw_x").consume_many(entries, "id")[1][-1] is True
    assert PostgresPlanner("rw_x", durable=True).consume_many(entries, "id")[1][-1] is False
    assert PostgresPlanner("rw_x", durable=True).hit("a", 1000, 1)[1][-1] is False
    assert SqlitePlanner.connection_setup(250) == "PRAGMA busy_timeout = 250"
