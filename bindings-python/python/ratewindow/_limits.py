"""Limits and entries: validated by the Rust core when they are built."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeAlias, TypeVar

from . import _ratewindow
from ._errors import _DECAY_RANGE, InvalidLimitError, _invalid_limit

__all__ = [
    "Limit",
    "GlobalLimit",
    "Unlimited",
    "GcraLimit",
    "CounterLimit",
    "AnyLimit",
    "Entry",
    "AfterCallback",
    "ResponseCallback",
]

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


class _Missing(enum.Enum):
    """An argument not given (``None`` is a value, refused like any other wrong type)."""

    MISSING = 0


_MISSING: Final = _Missing.MISSING

AfterCallback = Callable[[Any], bool]
"""Called with the guarded operation's result; a hit is recorded only when it returns true."""
ResponseCallback = Callable[..., Any]
"""Builds the answer given when a limit is exceeded, instead of the default."""


class Limit(_ratewindow.Limit):
    """``uses`` calls within ``window_ms`` milliseconds, optionally scoped to a ``key``. Immutable.

    The snake_case twin of the Node package's ``Limit``: ``max_attempts`` (= ``uses``) within
    ``decay_seconds``, with the seed's constructors (:meth:`per_second`, :meth:`per_minute`,
    :meth:`per_minutes`, :meth:`per_hour`, :meth:`per_day`, :meth:`none`) and :meth:`by`,
    :meth:`after` and :meth:`response`. Build one from milliseconds, ``Limit(3, 10_000)``, or from the
    seed's units, ``Limit(max_attempts=3, decay_seconds=10)``; ``Limit()`` is 60 per 60 seconds, as in
    Node.

    The Rust core checks the numbers: ``uses`` a whole number from 1 to 4294967295, ``window_ms`` a
    whole number from 1 to 4320000000000000. An ``int`` or ``float`` outside that raises
    :class:`~ratewindow.InvalidLimitError` naming the argument as given (``uses``, ``window_ms``,
    ``max_attempts``, ``decay_seconds``, ``decay_minutes`` ...); any other type (``bool`` included)
    raises ``TypeError``.
    """

    __slots__ = ("key", "after_callback", "response_callback")
    key: str
    after_callback: AfterCallback | None
    response_callback: ResponseCallback | None

    def __new__(
        cls,
        uses: Number | _Missing = _MISSING,
        window_ms: Number | _Missing = _MISSING,
        key: str = "",
        *,
        max_attempts: Number | _Missing = _MISSING,
        decay_seconds: Number | _Missing = _MISSING,
    ) -> Limit:
        if uses is not _MISSING and max_attempts is not _MISSING:
            raise TypeError("give uses or max_attempts, not both")
        if window_ms is not _MISSING and decay_seconds is not _MISSING:
            raise TypeError("give window_ms or decay_seconds, not both")
        count_name = "max_attempts" if max_attempts is not _MISSING else "uses"
        count = uses if uses is not _MISSING else (max_attempts if max_attempts is not _MISSING else 60)
        if window_ms is not _MISSING:
            return _build(cls, count, window_ms, key, count_name=count_name)
        seconds = 60 if decay_seconds is _MISSING else decay_seconds
        return _build(cls, count, seconds, key, count_name=count_name, unit="decay_seconds", scale=1)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    # The seed's constructors (decay in seconds, minutes, hours, days), named as in the Node package.
    @classmethod
    def per_second(cls, max_attempts: Number, decay_seconds: Number = 1) -> Limit:
        """``max_attempts`` calls per ``decay_seconds`` seconds."""
        return _build(Limit, max_attempts, decay_seconds, unit="decay_seconds", scale=1)

    @classmethod
    def per_minute(cls, max_attempts: Number, decay_minutes: Number = 1) -> Limit:
        """``max_attempts`` calls per ``decay_minutes`` minutes."""
        return _build(Limit, max_attempts, decay_minutes, unit="decay_minutes", scale=60)

    @classmethod
    def per_minutes(cls, decay_minutes: Number, max_attempts: Number) -> Limit:
        """Decay first, then attempts (Laravel's order): ``per_minutes(2, 5) == per_minute(5, 2)``."""
        return _build(Limit, max_attempts, decay_minutes, unit="decay_minutes", scale=60)

    @classmethod
    def per_hour(cls, max_attempts: Number, decay_hours: Number = 1) -> Limit:
        """``max_attempts`` calls per ``decay_hours`` hours."""
        return _build(Limit, max_attempts, decay_hours, unit="decay_hours", scale=3600)

    @classmethod
    def per_day(cls, max_attempts: Number, decay_days: Number = 1) -> Limit:
        """``max_attempts`` calls per ``decay_days`` days."""
        return _build(Limit, max_attempts, decay_days, unit="decay_days", scale=86400)

    @staticmethod
    def none() -> Unlimited:
        """A marker limit that consumers skip entirely."""
        return Unlimited()

    def by(self, key: str) -> Limit:
        """The same limit scoped to ``key`` (a user id, an IP, an API key)."""
        return self._with(key=key)

    def after(self, callback: AfterCallback) -> Limit:
        """The same limit, recording a hit only when ``callback(result)`` is true."""
        if not callable(callback):
            raise TypeError("callback must be callable")
        return self._with(after_callback=callback)

    def response(self, callback: ResponseCallback) -> Limit:
        """The same limit, answering with ``callback(...)`` when it is exceeded."""
        if not callable(callback):
            raise TypeError("callback must be callable")
        return self._with(response_callback=callback)

    def _with(self, **changes: Any) -> Limit:
        fields: dict[str, Any] = {
            "key": self.key,
            "after_callback": self.after_callback,
            "response_callback": self.response_callback,
        }
        fields.update(changes)
        return _rebuild(type(self), self.uses, self.window_ms, **fields)

    def fallback_key(self) -> str:
        """A key derived from this limit itself, for limits of one named limiter that share a key."""
        prefix = f"{self.key}:" if self.key else ""
        # The seed's spelling, as the Node package spells it: `[key:]attempts:<max>:decay:<seconds>`.
        return f"{prefix}attempts:{self.uses}:decay:{self.decay_seconds!r}"

    @property
    def max_attempts(self) -> int:
        """Attempts allowed per window: ``uses``, as the rate limiter names it."""
        return self.uses

    @property
    def decay_seconds(self) -> Number:
        """The window in seconds: an ``int`` when whole, else a ``float``."""
        ms = self.window_ms
        return ms // 1000 if ms % 1000 == 0 else ms / 1000

    def __reduce__(self) -> tuple[Callable[..., Limit], tuple[Any, ...]]:
        return (_rebuild, (type(self), self.uses, self.window_ms, self.key, self.after_callback, self.response_callback))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ratewindow.Limit):
            return NotImplemented
        return (type(self), self.uses, self.window_ms, self.key) == (
            type(other),
            other.uses,
            other.window_ms,
            getattr(other, "key", ""),
        ) and (self.after_callback, self.response_callback) == (
            getattr(other, "after_callback", None),
            getattr(other, "response_callback", None),
        )

    def __hash__(self) -> int:
        return hash((type(self), self.uses, self.window_ms, self.key))

    def __repr__(self) -> str:
        key = f", key={self.key!r}" if self.key else ""
        return f"{type(self).__name__}(uses={self.uses}, window_ms={self.window_ms}{key})"


L = TypeVar("L", bound=Limit)


def _build(
    cls: type[L],
    count: object,
    window: object,
    key: str = "",
    *,
    count_name: str = "max_attempts",
    unit: str | None = None,
    scale: int = 1,
) -> L:
    """A ``cls`` of ``count`` uses within ``window`` (milliseconds, or ``unit`` of ``scale`` seconds),
    checked by the core, a refusal naming ``count_name`` or ``unit`` and holding the value given."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    ms = window if unit is None else _seconds_to_ms(window, unit, scale)  # type: ignore[arg-type]
    try:
        made = _ratewindow.Limit.__new__(cls, count, ms)  # type: ignore[arg-type]
    except InvalidLimitError as error:
        if error.field == "uses" and count_name != "uses":
            raise _invalid_limit("uses", count_name, count) from None
        if error.field == "window_ms" and unit is not None:
            raise _invalid_limit("window_ms", unit, window, _DECAY_RANGE) from None
        raise
    except TypeError:
        if count_name != "uses" and (isinstance(count, bool) or not isinstance(count, (int, float))):
            raise TypeError(f"{count_name} must be an int or a float, not {type(count).__name__}") from None
        raise
    object.__setattr__(made, "key", key)
    object.__setattr__(made, "after_callback", None)
    object.__setattr__(made, "response_callback", None)
    return made


def _rebuild(
    cls: type[L],
    uses: int,
    window_ms: int,
    key: str = "",
    after_callback: AfterCallback | None = None,
    response_callback: ResponseCallback | None = None,
) -> L:
    """``cls`` from the core's numbers (for ``by``, ``after``, ``response``, pickling and copies)."""
    made = _build(cls, uses, window_ms, key)
    object.__setattr__(made, "after_callback", after_callback)
    object.__setattr__(made, "response_callback", response_callback)
    return made


class GlobalLimit(Limit):
    """``max_attempts`` within ``decay_seconds`` (default 60) with no per-caller split: every caller
    shares one counter. As in the Node package, the decay is in **seconds**."""

    __slots__ = ()

    def __new__(cls, max_attempts: Number, decay_seconds: Number = 60, key: str = "") -> GlobalLimit:
        return _build(cls, max_attempts, decay_seconds, key, unit="decay_seconds", scale=1)


class Unlimited(GlobalLimit):
    """A marker: consumers check ``isinstance(limit, Unlimited)`` and skip rate limiting."""

    __slots__ = ()

    def __new__(
        cls, max_attempts: Number = _ratewindow.MAX_USES, decay_seconds: Number = 60, key: str = ""
    ) -> Unlimited:
        return _build(cls, max_attempts, decay_seconds, key, unit="decay_seconds", scale=1)


GcraLimit = _ratewindow.GcraLimit
"""GCRA, a token bucket kept as one time per key (governor's and redis-cell's algorithm; Upstash's
``tokenBucket``): ``GcraLimit(uses, window_ms, burst=None)`` allows ``uses`` per ``window_ms`` on
average and up to ``burst`` (default ``uses``) at once. Immutable; checked by the core when built
(:class:`~ratewindow.InvalidLimitError` naming ``uses``, ``window_ms`` or ``burst``). Counted by the
memory stores; see docs/algorithms.md."""

CounterLimit = _ratewindow.CounterLimit
"""The sliding-window counter (Upstash's ``slidingWindow``, ``limits``' ``SlidingWindowCounter``):
``CounterLimit(uses, window_ms)`` allows about ``uses`` per any ``window_ms``, estimated from two fixed
windows in constant memory per key (error bound in docs/algorithms.md). Immutable; counted by the memory
stores."""

AnyLimit: TypeAlias = Limit | GcraLimit | CounterLimit
"""Any limit a memory store's ``consume``, ``peek`` and batches take: :class:`Limit` is the exact
sliding log."""

Entry = _ratewindow.Entry
"""One entry of a batch: ``Entry(key, limit, cost=1)``, ``key`` counted against ``limit`` (any
algorithm), the call taking ``cost`` uses from it. Immutable."""


MAX_USES: Final = _ratewindow.MAX_USES
MAX_WINDOW_MS: Final = _ratewindow.MAX_WINDOW_MS


def sliding_limit(limit: AnyLimit) -> Limit:
    """``limit`` as the sliding log's :class:`Limit`, for the code that counts nothing else (the
    networked and sharded stores, the guard, a store's default ``consume_many``): a
    :class:`GcraLimit` or :class:`CounterLimit` is :class:`~ratewindow.UnsupportedError`."""
    if isinstance(limit, Limit):
        return limit
    from ._errors import UnsupportedError

    raise UnsupportedError(getattr(limit, "algorithm", type(limit).__name__))
