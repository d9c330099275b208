"""Stores written in Python for the kit's own tests: a correct sliding log, and five broken ones.

They are real stores (they count, with their own state and locking), not mocks: each broken one
differs from the correct one by exactly the fault its name says, so the kit must catch it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import cast
from collections.abc import Sequence

from ratewindow import AsyncCooldownStore, CooldownStore, Entry, Limit, Verdict


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogStore(CooldownStore):
    """A correct sliding-window log in Python: lists of call times under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[str, list[int]] = {}

    # The parts the broken stores change.
    def trimmed(self, key: str, window_ms: int, now: int) -> list[int]:
        log = [t for t in self.logs.get(key, []) if now - t < window_ms]
        if log:
            self.logs[key] = log
        else:
            self.logs.pop(key, None)
        return log

    def wait_until(self, key: str, limit: Limit, now: int) -> int | None:
        log = [t for t in self.logs.get(key, []) if now - t < limit.window_ms]
        if len(log) < limit.uses:
            return None
        return log[len(log) - limit.uses] + limit.window_ms

    def record(self, key: str, now: int) -> int:
        self.logs.setdefault(key, []).append(now)
        return now

    def check(self, entries: Sequence[Entry], now: int) -> Verdict:
        blocked: tuple[int, int] | None = None
        for i, entry in enumerate(entries):
            until = self.wait_until(entry.key, cast(Limit, entry.limit), now)
            if until is not None and (blocked is None or until > blocked[1]):
                blocked = (i, until)
        if blocked is None:
            return Verdict(True)
        return Verdict(False, max(1, blocked[1] - now), blocked[1], blocked[0])

    def forget(self, calls: list[tuple[str, int]]) -> None:
        with self.lock:
            for key, at in calls:
                log = self.logs.get(key, [])
                if at in log:
                    log.remove(at)

    def releaser(self, calls: list[tuple[str, int]]) -> object:
        return lambda: self.forget(calls)

    # The contract.
    def consume(self, key: str, limit: Limit) -> Verdict:
        verdict = self.consume_many([Entry(key, limit)])
        return Verdict(verdict.allowed, verdict.retry_after_ms, verdict.retry_timestamp)

    def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        with self.lock:
            now = now_ms()
            for entry in entries:
                self.trimmed(entry.key, max(e.limit.window_ms for e in entries if e.key == entry.key), now)
            verdict = self.check(entries, now)
            if not verdict.allowed:
                return verdict
            calls = [(key, self.record(key, now)) for key in dict.fromkeys(e.key for e in entries)]
        return Verdict(True, release=self.releaser(calls))  # type: ignore[arg-type]

    def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        with self.lock:
            return self.check(entries, now_ms())


class AsyncLogStore(AsyncCooldownStore):
    """The correct log for asyncio code: no await between check and record."""

    def __init__(self) -> None:
        self.sync = LogStore()

    async def consume(self, key: str, limit: Limit) -> Verdict:
        return self.sync.consume(key, limit)

    async def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        return self.sync.consume_many(entries)

    async def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        return self.sync.peek_many(entries)


class ConsumeOnlyStore(CooldownStore):
    """A correct store implementing ``consume`` alone: the defaults give ``consume_many``/``peek_many``."""

    def __init__(self) -> None:
        self.log = LogStore()

    def consume(self, key: str, limit: Limit) -> Verdict:
        return self.log.consume(key, limit)


# --- broken stores ---------------------------------------------------------------------------------


class AwaitBetweenCheckAndRecord(AsyncCooldownStore):
    """Broken: awaits between the check and the record, so concurrent tasks all see room."""

    def __init__(self) -> None:
        self.log = LogStore()

    async def consume(self, key: str, limit: Limit) -> Verdict:
        return await self.consume_many([Entry(key, limit)])

    async def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        now = now_ms()
        verdict = self.log.check(entries, now)
        await asyncio.sleep(0)  # the fault: another task runs here
        if verdict.allowed:
            for key in dict.fromkeys(e.key for e in entries):
                self.log.record(key, now)
        return verdict

    async def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        return self.log.check(entries, now_ms())


class YieldBetweenCheckAndRecord(LogStore):
    """Broken (sync): lets go of its lock between the check and the record."""

    def consume_many(self, entries: Sequence[Entry]) -> Verdict:
        with self.lock:
            now = now_ms()
            verdict = self.check(entries, now)
        time.sleep(0.002)  # the fault: other threads check here
        if verdict.allowed:
            with self.lock:
                for key in dict.fromkeys(e.key for e in entries):
                    self.record(key, now)
        return verdict


class MergedSameMillisecond(LogStore):
    """Broken: records a call's time only once per millisecond (a set of times)."""

    def record(self, key: str, now: int) -> int:
        log = self.logs.setdefault(key, [])
        if now not in log:  # the fault
            log.append(now)
        return now


class BucketedWindow(LogStore):
    """Broken: counts in fixed buckets of ``window_ms`` aligned to the epoch, not a sliding window."""

    def wait_until(self, key: str, limit: Limit, now: int) -> int | None:
        bucket = now - now % limit.window_ms  # the fault
        log = [t for t in self.logs.get(key, []) if t >= bucket]
        if len(log) < limit.uses:
            return None
        return bucket + limit.window_ms


class OverRelease(LogStore):
    """Broken: release() gives back every call of the key, not just its own."""

    def forget(self, calls: list[tuple[str, int]]) -> None:
        with self.lock:
            for key, _ in calls:
                self.logs.pop(key, None)  # the fault


class RecordingPeek(LogStore):
    """Broken: peek_many records the call as consume_many does."""

    def peek_many(self, entries: Sequence[Entry]) -> Verdict:
        verdict = self.consume_many(entries)  # the fault
        return Verdict(verdict.allowed, verdict.retry_after_ms, verdict.retry_timestamp, verdict.blocked)
