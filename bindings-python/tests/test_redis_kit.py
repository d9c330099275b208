"""The conformance kit on RedisStore through redis-py, sync and asyncio, with and without evalsha, on the
single server and on the three-master cluster, with and without hash_tag."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis_servers as rs

from ratewindow import AsyncRedisStore
from ratewindow.testing import run_checks

# (client, evalsha, hash_tag)
CONFIGS = [
    ("sync", True, None),
    ("sync", False, None),
    ("async", True, None),
    ("async", False, None),
    ("sync", True, ":"),
    ("sync-cluster", True, None),
    ("sync-cluster", False, None),
    ("sync-cluster", True, ":"),
    ("async-cluster", True, None),
    ("async-cluster", False, None),
    ("async-cluster", True, ":"),
    ("async-cluster", False, ":"),
]


def factory(client: str, evalsha: bool, hash_tag: str | None) -> Any:
    prefix = rs.unique_prefix(f"kit-{client}")
    if client == "sync":
        shared = rs.sync_client()
        return lambda: rs.sync_store(shared, evalsha=evalsha, prefix=prefix, hash_tag=hash_tag)
    if client == "sync-cluster":
        shared_cluster = rs.cluster_client()
        return lambda: rs.sync_store(shared_cluster, evalsha=evalsha, prefix=prefix, hash_tag=hash_tag)

    # An asyncio client belongs to the event loop it runs in: one per check, opened and closed in the
    # check's own loop (the kit enters and exits an async context manager there).
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[AsyncRedisStore]:
        connect = rs.async_cluster_client if client == "async-cluster" else rs.async_client
        redis_client = connect()
        try:
            await rs.warm_async(redis_client)
            yield rs.async_store(redis_client, evalsha=evalsha, prefix=prefix, hash_tag=hash_tag)
        finally:
            await redis_client.aclose()

    return make


@pytest.mark.parametrize(
    ("client", "evalsha", "hash_tag"),
    CONFIGS,
    ids=[f"{c}-{'evalsha' if e else 'eval'}{'-hashtag' if h else ''}" for c, e, h in CONFIGS],
)
def test_kit_passes(client: str, evalsha: bool, hash_tag: str | None) -> None:
    failures = {name: error for name, error in run_checks(factory(client, evalsha, hash_tag)).items() if error}
    assert failures == {}
