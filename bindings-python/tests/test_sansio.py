"""The sans-I/O drivers: one generator, driven sync and async, the same answer."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

from ratewindow._sansio import run_async, run_sync


def doubling(values: list[int]) -> Generator[int, int, int]:
    total = 0
    for v in values:
        total += yield v
    return total


def test_one_op_two_drivers() -> None:
    assert run_sync(doubling([1, 2, 3]), lambda v: v * 2) == 12

    async def twice(v: int) -> int:
        await asyncio.sleep(0)
        return v * 2

    assert asyncio.run(run_async(doubling([1, 2, 3]), twice)) == 12
    assert run_sync(doubling([]), lambda v: v) == 0
