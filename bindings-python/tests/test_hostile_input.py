"""Hostile input at the boundary (issue 11): keys are bytes-exact — a ``str`` with a lone surrogate is
refused with ``InvalidArgumentError`` naming its position, not a bare ``UnicodeEncodeError`` — and a
clock reading outside 0 .. 2**53 - 1 is refused without touching the store."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ratewindow import Entry, InvalidArgumentError, Limit, MemoryStore
from ratewindow.testing import ManualClock

ONE = Limit(1, 60_000)


def refused_key(field: str, at: int) -> Any:
    pattern = rf"^invalid {re.escape(field)}: not valid Unicode \(a lone surrogate at index {at}\)"
    return pytest.raises(InvalidArgumentError, match=pattern)


def test_three_users_differing_in_a_lone_surrogate_never_share_a_cooldown() -> None:
    store = MemoryStore()
    assert store.consume("s\ufffd", ONE).allowed
    for key in ["s\ud800", "s\udc00"]:
        with refused_key("key", 1) as info:
            store.consume(key, ONE)
        assert info.value.field == "key"
        assert info.value.value == key
        assert isinstance(info.value.__cause__, UnicodeEncodeError)
    with refused_key("key", 0):
        store.peek("\udc00s", ONE)
    with refused_key("key", 1):
        store.hit("s\ud800", 1000)
    with refused_key("key", 1):
        store.attempts("s\ud800")
    with refused_key("key", 1):
        store.clear("s\ud800")
    assert not store.consume("s\ufffd", ONE).allowed
    assert store.consume("s\U0001f600", ONE).allowed


def test_a_batch_names_the_entry_and_records_nothing() -> None:
    store = MemoryStore()
    with refused_key("entries[2].key", 1) as info:
        store.consume_many([Entry("ok", ONE), Entry("fine", ONE), Entry("x\udbff", ONE)])
    assert info.value.field == "entries[2].key"
    assert store.consume("ok", ONE).allowed, "the refused batch recorded nothing"
    with refused_key("entries[0].key", 0):
        store.peek_many([Entry("\ud800", ONE)])


@pytest.mark.parametrize("bad", [-1, 2**53, 2**64, 2**64 - 1, True, 1.5])
def test_a_clock_outside_the_range_is_refused_and_cannot_expire_the_store(bad: object) -> None:
    clock = ManualClock(1_000)
    store = MemoryStore(clock)
    assert store.consume("alice", ONE).allowed
    clock.set(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^invalid now: ") as info:
        store.consume("other", ONE)
    assert info.value.field == "now"
    with pytest.raises(InvalidArgumentError):
        store.hit("w", 1000)
    clock.set(1_001)
    assert not store.consume("alice", ONE).allowed
    assert store.consume("other", ONE).allowed


def test_the_last_valid_time_is_accepted() -> None:
    clock = ManualClock(2**53 - 1)
    assert MemoryStore(clock).consume("k", ONE).allowed


def test_a_redis_prefix_that_could_name_another_prefixs_keys_is_refused() -> None:
    from ratewindow import RedisStore

    def run(*_: Any) -> Any:
        raise AssertionError("not reached")

    for prefix in ["p:log:", "plog:", "a:win:"]:
        with pytest.raises(InvalidArgumentError, match='must not contain "log:", "win:", "lck:", "gcr:" or "ctr:"'):
            RedisStore(run, prefix=prefix)
    RedisStore(run, prefix="p:lo")


def _every_single_key_call(store: Any, key: str) -> list[Any]:
    """Each single-key method of a networked store, as a thunk."""
    return [
        lambda: store.consume(key, ONE),
        lambda: store.peek(key, ONE),
        lambda: store.hit(key, 1000),
        lambda: store.hit_window(key, 1000),
        lambda: store.attempt(key, 3, 1000),
        lambda: store.attempts(key),
        lambda: store.too_many_attempts(key, 3),
        lambda: store.remaining(key, 3),
        lambda: store.available_in(key),
        lambda: store.available_in_ms(key),
        lambda: store.reset_attempts(key),
        lambda: store.clear(key),
    ]


def test_a_redis_stores_single_key_calls_refuse_a_lone_surrogate_as_a_typed_error() -> None:
    from ratewindow import RedisStore

    def run(*_: Any) -> Any:
        raise AssertionError("not reached: the key is refused before any command")

    store = RedisStore(run, prefix="hostile:")
    for call in _every_single_key_call(store, "s\ud800"):
        with refused_key("key", 1) as info:
            call()
        assert info.value.field == "key"
        assert isinstance(info.value.__cause__, UnicodeEncodeError)


def test_a_sqlite_stores_single_key_calls_refuse_a_lone_surrogate_and_keep_the_real_key() -> None:
    import sqlite3

    from ratewindow import SqliteStore

    store = SqliteStore(sqlite3.connect(":memory:", isolation_level=None), prefix="hostile")
    assert store.consume("s\ufffd", ONE).allowed
    for call in _every_single_key_call(store, "\udc00s"):
        with refused_key("key", 0):
            call()
    # Nothing was counted against the key U+FFFD would have replaced it with.
    assert not store.consume("s\ufffd", ONE).allowed
    assert store.consume("s\U0001f600", ONE).allowed
