"""A clock that moves only when told to."""

from __future__ import annotations

import threading

__all__ = ["ManualClock"]


class ManualClock:
    """A callable clock for ``MemoryStore(clock)``: returns the time it was set to, in Unix ms.

    Thread-safe. It may step back, as real clocks do.
    """

    __slots__ = ("_now", "_lock")

    def __init__(self, now_ms: int = 0) -> None:
        self._now = now_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def set(self, now_ms: int) -> None:
        """Sets the reading."""
        with self._lock:
            self._now = now_ms

    def advance(self, ms: int) -> None:
        """Moves the reading forward by ``ms``."""
        with self._lock:
            self._now += ms
