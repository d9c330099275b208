"""The exceptions ratewindow raises. Each has a stable ``code`` to branch on."""

from __future__ import annotations

__all__ = ["RateWindowError", "InvalidLimitError", "InternalError"]


class RateWindowError(Exception):
    """Base of every error ratewindow raises (store errors of later stores included)."""

    code: str = "ratewindow_error"


class InvalidLimitError(RateWindowError, ValueError):
    """A limit (or a fixed window's decay) that cannot be held.

    ``field`` is ``"uses"`` or ``"window_ms"``; ``value`` is the object given for it, unchanged.
    """

    code = "invalid_limit"

    def __init__(self, message: str, field: str, value: object) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class InternalError(RateWindowError):
    """A bug inside the native engine (a Rust panic), caught before it reached Python."""

    code = "internal"
