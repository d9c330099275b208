"""ratewindow: sliding-window cooldowns and fixed-window rate limits, one Rust engine.

.. code-block:: python

    from ratewindow import Entry, Limit, MemoryStore

    store = MemoryStore()
    per_user = Limit(3, 10_000)          # 3 calls per 10 s for each user
    everyone = Limit.per_minute(100)     # 100 per minute in all
    verdict = store.consume_many([Entry("click:alice", per_user), Entry("click", everyone)])
    if not verdict.allowed:
        print(f"retry in {verdict.retry_after_ms} ms")

Synchronous code uses :class:`MemoryStore` and :class:`RateLimiter`; asyncio code uses
:class:`AsyncMemoryStore` and :class:`AsyncRateLimiter`. ``ratewindow.testing`` checks any store.
"""

from ._errors import (
    InternalError,
    InvalidArgumentError,
    InvalidLimitError,
    RateWindowError,
    StoreError,
    StoreReplyError,
    UnsupportedError,
)
from ._guard import AsyncGuard, Guard, GuardEvent, GuardFailure, GuardOperation, GuardStats
from ._limiter import AsyncRateLimiter, RateLimiter
from ._limits import MAX_USES, MAX_WINDOW_MS, AnyLimit, CounterLimit, Entry, GcraLimit, GlobalLimit, Limit, Unlimited
from ._lock import AsyncLock, Lock, LockTimeoutError
from ._memory import AsyncMemoryStore, MemoryStore
from ._postgres import AsyncPostgresStore, PostgresStore
from ._redis import AsyncRedisStore, GiveBackError, GiveBackWarning, RedisStore
from ._shard import AsyncShardedStore, ShardError, ShardedStore, ShardServer, serve_shards, serve_shards_async
from ._sqlite import SqliteStore
from ._store import (
    AsyncCooldownStore,
    AsyncFixedWindowStore,
    AttemptResult,
    CooldownStore,
    FixedWindowStore,
    HitResult,
    Verdict,
)

__all__ = [
    "AnyLimit",
    "CounterLimit",
    "GcraLimit",
    "UnsupportedError",
    "AsyncLock",
    "Lock",
    "LockTimeoutError",
    "AsyncCooldownStore",
    "AsyncFixedWindowStore",
    "AsyncGuard",
    "AsyncMemoryStore",
    "AsyncPostgresStore",
    "AsyncRateLimiter",
    "AsyncRedisStore",
    "AttemptResult",
    "CooldownStore",
    "Entry",
    "FixedWindowStore",
    "GiveBackError",
    "GiveBackWarning",
    "GlobalLimit",
    "Guard",
    "GuardEvent",
    "GuardFailure",
    "GuardOperation",
    "GuardStats",
    "HitResult",
    "InternalError",
    "InvalidArgumentError",
    "InvalidLimitError",
    "Limit",
    "MAX_USES",
    "MAX_WINDOW_MS",
    "MemoryStore",
    "PostgresStore",
    "RateLimiter",
    "RateWindowError",
    "RedisStore",
    "ShardError",
    "ShardServer",
    "ShardedStore",
    "AsyncShardedStore",
    "serve_shards",
    "serve_shards_async",
    "SqliteStore",
    "StoreError",
    "StoreReplyError",
    "Unlimited",
    "Verdict",
]
