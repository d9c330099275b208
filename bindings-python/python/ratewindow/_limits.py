"""Limits and entries: validated by the Rust core when they are built."""

from __future__ import annotations

from typing import Final, NoReturn

from . import _ratewindow

__all__ = ["Limit", "GlobalLimit", "Unlimited", "Entry"]

Number = int | float


def _seconds_to_ms(seconds: Number, field: str = "window_ms", scale: int = 1) -> Number:
    """Seconds to milliseconds, leaving the core to refuse what cannot be a window.

    A float is rounded to the millisecond (``0.007`` s is 7 ms, not 7.000000000000001); NaN and
    infinities pass through for the core to refuse, as do wrong types (a ``TypeError`` there).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{field} must be an int or a float, not {type(seconds).__name__}")
    ms = seconds * scale * 1000
    if isinstance(ms, float) and ms == ms and abs(ms) != float("inf"):
        return float(round(ms))
    return ms


class Limit(_ratewindow.Limit):
    """``uses`` calls within ``window_ms`` milliseconds, optionally scoped to a ``key``. Immutable.

    The Rust core checks the numbers: ``uses`` a whole number from 1 to 4294967295, ``window_ms`` a
    whole number from 1 to 4320000000000000. An ``int`` or ``float`` outside that raises
    :class:`~ratewindow.InvalidLimitError`; any other type (``bool`` included) raises ``TypeError``.
    """

    __slots__ = ("key",)
    key: str

    def __new__(cls, uses: Number, window_ms: Number, key: str = "") -> Limit:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        self = super().__new__(cls, uses, window_ms)
        object.__setattr__(self, "key", key)
        return self

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    # The seed's constructors (decay in seconds, minutes, hours, days).
    @classmethod
    def per_second(cls, uses: Number, seconds: Number = 1) -> Limit:
        """``uses`` calls per ``seconds`` seconds."""
        return Limit(uses, _seconds_to_ms(seconds, "seconds"))

    @classmethod
    def per_minute(cls, uses: Number, minutes: Number = 1) -> Limit:
        """``uses`` calls per ``minutes`` minutes."""
        return Limit(uses, _seconds_to_ms(minutes, "minutes", 60))

    @classmethod
    def per_minutes(cls, minutes: Number, uses: Number) -> Limit:
        """Decay first, then uses (Laravel's order): ``per_minutes(2, 5) == per_minute(5, 2)``."""
        return Limit(uses, _seconds_to_ms(minutes, "minutes", 60))

    @classmethod
    def per_hour(cls, uses: Number, hours: Number = 1) -> Limit:
        """``uses`` calls per ``hours`` hours."""
        return Limit(uses, _seconds_to_ms(hours, "hours", 3600))

    @classmethod
    def per_day(cls, uses: Number, days: Number = 1) -> Limit:
        """``uses`` calls per ``days`` days."""
        return Limit(uses, _seconds_to_ms(days, "days", 86400))

    @staticmethod
    def none() -> Unlimited:
        """A marker limit that consumers skip entirely."""
        return Unlimited()

    def by(self, key: str) -> Limit:
        """The same limit scoped to ``key`` (a user id, an IP, an API key)."""
        return type(self)(self.uses, self.window_ms, key)

    def fallback_key(self) -> str:
        """A key derived from this limit itself, for limits of one named limiter that share a key."""
        prefix = f"{self.key}:" if self.key else ""
        # The seed's spelling, as the Node package spells it: `[key:]attempts:<max>:decay:<seconds>`.
        ms = self.window_ms
        seconds = str(ms // 1000) if ms % 1000 == 0 else repr(ms / 1000)
        return f"{prefix}attempts:{self.uses}:decay:{seconds}"

    @property
    def decay_seconds(self) -> float:
        """The window in seconds."""
        return self.window_ms / 1000

    def __reduce__(self) -> tuple[type[Limit], tuple[int, int, str]]:
        return (type(self), (self.uses, self.window_ms, self.key))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ratewindow.Limit):
            return NotImplemented
        return (type(self), self.uses, self.window_ms, self.key) == (
            type(other),
            other.uses,
            other.window_ms,
            getattr(other, "key", ""),
        )

    def __hash__(self) -> int:
        return hash((type(self), self.uses, self.window_ms, self.key))

    def __repr__(self) -> str:
        key = f", key={self.key!r}" if self.key else ""
        return f"{type(self).__name__}(uses={self.uses}, window_ms={self.window_ms}{key})"


class GlobalLimit(Limit):
    """A limit with no per-caller split: every caller shares one counter."""

    __slots__ = ()

    def __new__(cls, uses: Number, window_ms: Number = 60_000, key: str = "") -> GlobalLimit:
        made = super().__new__(cls, uses, window_ms, key)
        assert isinstance(made, GlobalLimit)
        return made


class Unlimited(GlobalLimit):
    """A marker: consumers check ``isinstance(limit, Unlimited)`` and skip rate limiting."""

    __slots__ = ()

    def __new__(cls, uses: Number = _ratewindow.MAX_USES, window_ms: Number = 60_000, key: str = "") -> Unlimited:
        made = super().__new__(cls, uses, window_ms, key)
        assert isinstance(made, Unlimited)
        return made


Entry = _ratewindow.Entry
"""One entry of a batch: ``Entry(key, limit)``, ``key`` counted against ``limit``. Immutable."""


MAX_USES: Final = _ratewindow.MAX_USES
MAX_WINDOW_MS: Final = _ratewindow.MAX_WINDOW_MS
