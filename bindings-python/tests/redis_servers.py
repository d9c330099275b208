"""The Redis servers the RedisStore tests talk to, and stores over redis-py built the documented way.

- the shared server on 127.0.0.1:6379 (``REDIS_URL``), started by ``scripts/test-python.sh``;
- the three-master cluster of ``scripts/redis-cluster.sh`` on 7101-7103 (``RATEWINDOW_CLUSTER_PORT``);
- :class:`PrivateRedis`: a redis-server of the test's own on 6395-6399, for restarts and pauses.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from ratewindow import AsyncRedisStore, RedisStore

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER_PORT = int(os.environ.get("RATEWINDOW_CLUSTER_PORT", "7101"))


def unique_prefix(name: str) -> str:
    """A prefix of this run's own, so runs never see each other's keys."""
    return f"rwtest:{name}:{uuid.uuid4().hex[:10]}:"


def _warm(pool: Any, connections: int) -> None:
    """Opens ``connections`` connections now, so no timed check pays for a connect."""
    held = [pool.get_connection() for _ in range(connections)]
    for connection in held:
        pool.release(connection)


def sync_client(connections: int = 24) -> redis.Redis:
    """A blocking client with ``connections`` connections open (the kit's checks run side by side)."""
    client = redis.Redis.from_url(REDIS_URL)
    _warm(client.connection_pool, connections)
    return client


def cluster_client(connections: int = 24) -> redis.cluster.RedisCluster:
    """A blocking cluster client with ``connections`` connections open to every master."""
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
    for node in client.get_primaries():  # type: ignore[no-untyped-call]  # untyped in redis-py
        _warm(node.redis_connection.connection_pool, connections)
    return client


def async_client() -> redis.asyncio.Redis:
    """An asyncio client (it belongs to the event loop it first runs in: close it there)."""
    return redis.asyncio.Redis.from_url(REDIS_URL)


def async_cluster_client() -> redis.asyncio.cluster.RedisCluster:
    """An asyncio cluster client (close it in the loop it ran in)."""
    return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)


async def warm_async(client: Any) -> None:
    """Connects (and, for a cluster, learns the slots) before any timed call."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        await client.initialize()
    else:
        await client.ping()


def sync_store(client: Any, *, evalsha: bool = True, **options: Any) -> RedisStore:
    """A store over a redis-py client (``Redis`` or ``RedisCluster``), with the README's one-liners."""
    if not evalsha:
        return RedisStore.using(lambda script, keys, args: client.eval(script, len(keys), *keys, *args), **options)
    return RedisStore.using(
        lambda script, keys, args: client.eval(script, len(keys), *keys, *args),
        evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
        **options,
    )


def async_store(client: Any, *, evalsha: bool = True, **options: Any) -> AsyncRedisStore:
    """An asyncio store over a ``redis.asyncio`` client, with the README's one-liners."""
    if not evalsha:
        return AsyncRedisStore.using(
            lambda script, keys, args: client.eval(script, len(keys), *keys, *args), **options
        )
    return AsyncRedisStore.using(
        lambda script, keys, args: client.eval(script, len(keys), *keys, *args),
        evalsha=lambda sha, keys, args: client.evalsha(sha, len(keys), *keys, *args),
        **options,
    )


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class PrivateRedis:
    """A redis-server of this test's own (the first free port of ``ports``, by default 6395-6399), which
    the test may stop, restart or pause.

    Always stopped by :meth:`stop` (use it as a context manager)."""

    def __init__(self, ports: range = range(6395, 6400)) -> None:
        port = next((p for p in ports if _free(p)), None)
        if port is None:
            raise RuntimeError(f"ports {ports.start}-{ports.stop - 1} are all taken")
        self.port = port
        self.dir = tempfile.mkdtemp(prefix=f"rw-redis-{port}-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PrivateRedis:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.port, socket_timeout=0.5).ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def kill(self) -> None:
        """Stops the server at once (its data goes: no persistence)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis(port=self.port, **options)

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


Factory = Callable[[], Any]
