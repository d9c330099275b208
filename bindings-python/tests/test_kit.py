"""The conformance kit: passes on correct stores, sync and asyncio, and fails on each broken one."""

from __future__ import annotations

import pytest
import stores

from ratewindow import AsyncMemoryStore, MemoryStore
from ratewindow.testing import CHECKS, check_store, run_checks

# The kit as a user runs it: one pytest test per check.
TestMemoryStore = check_store(MemoryStore)
TestAsyncMemoryStore = check_store(AsyncMemoryStore)


@pytest.mark.parametrize(
    "factory",
    [stores.LogStore, stores.AsyncLogStore, stores.ConsumeOnlyStore],
    ids=["python-log", "python-log-async", "consume-only-defaults"],
)
def test_kit_passes_on_correct_python_stores(factory: type) -> None:
    failures = {name: error for name, error in run_checks(factory).items() if error is not None}
    assert failures == {}


@pytest.mark.parametrize(
    ("factory", "must_fail"),
    [
        (stores.AwaitBetweenCheckAndRecord, {"concurrent_calls_at_limit", "concurrent_batches_at_limit"}),
        (stores.YieldBetweenCheckAndRecord, {"concurrent_calls_at_limit", "concurrent_batches_at_limit"}),
        (stores.MergedSameMillisecond, {"same_millisecond_calls_stay_distinct"}),
        (stores.BucketedWindow, {"never_more_than_uses_in_any_window"}),
        (stores.OverRelease, {"release_gives_back_exactly_the_call"}),
        (stores.RecordingPeek, {"peek_records_nothing"}),
    ],
    ids=["await-between", "yield-between", "merged-same-ms", "bucketed", "over-release", "recording-peek"],
)
def test_kit_fails_on_broken_store(factory: type, must_fail: set[str]) -> None:
    results = run_checks(factory)
    failed = {name for name, error in results.items() if error is not None}
    assert must_fail <= failed, f"expected {sorted(must_fail)} to fail, failed: {sorted(failed)}"
    for name in must_fail:
        assert isinstance(results[name], AssertionError), results[name]


def test_every_check_is_named_and_documented() -> None:
    assert len(CHECKS) >= 12
    for check in CHECKS.values():
        assert check.__doc__
