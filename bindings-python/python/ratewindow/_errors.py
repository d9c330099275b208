"""The exceptions ratewindow raises. Each has a stable ``code`` to branch on."""

from __future__ import annotations

__all__ = [
    "RateWindowError",
    "InvalidLimitError",
    "InvalidArgumentError",
    "InternalError",
    "UnsupportedError",
    "StoreError",
    "StoreReplyError",
]


class RateWindowError(Exception):
    """Base of every error ratewindow raises (store errors of later stores included)."""

    code: str = "ratewindow_error"


class InvalidLimitError(RateWindowError, ValueError):
    """A limit (or a fixed window's decay) that cannot be held.

    ``field`` is the core's field, ``"uses"`` or ``"window_ms"`` (or a GCRA limit's ``"burst"``; stable, to
    branch on); ``value`` is the
    object given for it, unchanged. ``argument`` is the name the caller gave the number, which the
    message starts with: ``uses`` and ``window_ms`` for a :class:`~ratewindow.Limit` built from them,
    ``decay_ms`` for a store's ``hit``, ``max_attempts`` and ``decay_seconds`` (or ``decay_minutes`` ...)
    for the seed's constructors and the rate limiter.
    """

    code = "invalid_limit"

    def __init__(self, message: str, field: str, value: object, argument: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.argument = field if argument is None else argument


_RANGES = {
    "uses": "a whole number from 1 to 4294967295",
    "window_ms": "a whole number of milliseconds from 1 to 4320000000000000",
}
_DECAY_RANGE = "a decay making a whole number of milliseconds from 1 to 4320000000000000"


def _invalid_limit(field: str, argument: str, value: object, expected: str | None = None) -> InvalidLimitError:
    """``InvalidLimitError`` for ``value`` given as ``argument``: ``invalid <argument>: <value> (...)``."""
    return InvalidLimitError(
        f"invalid {argument}: {value!r} (expected {_RANGES[field] if expected is None else expected})",
        field,
        value,
        argument,
    )


class InvalidArgumentError(RateWindowError, ValueError):
    """A number that must be a whole number in range is not: a fixed window's ``amount``, a ``max`` or
    ``max_attempts`` (each a signed 64-bit integer).

    ``field`` is the argument's name as the caller spelled it; ``value`` the object given, unchanged.
    A value of the wrong type (``bool``, ``str``, ``float`` ...) is a ``TypeError`` instead.
    """

    code = "invalid_argument"

    def __init__(self, message: str, field: str, value: object) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class UnsupportedError(RateWindowError, TypeError):
    """The store cannot count this kind of call: a :class:`~ratewindow.GcraLimit` or
    :class:`~ratewindow.CounterLimit` given to what counts the sliding log only (the sharded store,
    :class:`~ratewindow.Guard` / :class:`~ratewindow.AsyncGuard`), or a call a networked store does not
    count yet (a batch mixing algorithms on PostgreSQL; see docs/algorithms.md). The memory stores count everything.
    ``algorithm`` names what was refused (``"gcra"``, ``"counter"``, ``"weighted sliding"``).
    """

    code = "unsupported"

    def __init__(self, algorithm: str, message: str | None = None) -> None:
        super().__init__(
            message
            if message is not None
            else f"this store does not count {algorithm} limits (the memory store does; see docs/algorithms.md)"
        )
        self.algorithm = algorithm


class InternalError(RateWindowError):
    """A bug inside the native engine (a Rust panic), caught before it reached Python."""

    code = "internal"


class StoreError(RateWindowError):
    """A store's backend failed a call: a lost connection, a statement or script error, a timeout.

    The driver's own exception is ``__cause__``. Never half-recorded: stores run each call as one
    transaction (or one script) that the backend rolls back when it fails, so an error before it
    commits leaves nothing; only a connection lost after the commit (or a timeout after the script
    ran) leaves the call counted, whole.
    """

    code = "store_error"


class StoreReplyError(StoreError):
    """A store's backend answered with a reply (or rows) of the wrong shape; it never becomes a verdict.

    ``source`` names the script or statement that answered, ``expected`` what its reply should have
    been, ``got`` what came (rendered briefly).
    """

    code = "store_reply"

    def __init__(self, message: str, source: str, expected: str, got: str) -> None:
        super().__init__(message)
        self.source = source
        self.expected = expected
        self.got = got
