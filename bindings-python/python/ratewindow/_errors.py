"""The exceptions ratewindow raises. Each has a stable ``code`` to branch on."""

from __future__ import annotations

__all__ = ["RateWindowError", "InvalidLimitError", "InternalError", "StoreError", "StoreReplyError"]


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
