"""One process of the contention tests: 64 concurrent calls at the same keys, fired at a given moment.

    python sql_worker.py BACKEND SCENARIO TARGET KEY

It prints ``ready`` once set up (imports, pool filled), then fires when a line arrives on stdin.

BACKEND is ``pg-async`` (64 tasks over an AsyncConnectionPool of 8), ``pg-sync`` (64 threads over a
ConnectionPool of 8) or ``sqlite`` (64 threads over 4 connections to the file TARGET); TARGET is the
name prefix for PostgreSQL. SCENARIO is ``single`` (one key, uses 10), ``batch`` (three keys, uses 10
each) or ``opposite`` (the same three keys, half the calls naming them in reverse order, uses 10,000).
Prints ``{"allowed": n, "errors": [...]}`` as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any, cast

import psycopg_pool
import sql_support as sq

from ratewindow import AsyncPostgresStore, Entry, Limit, PostgresStore, SqliteStore, Verdict

CALLS = 64


def calls(scenario: str, key: str) -> list[list[Entry]]:
    if scenario == "single":
        return [[Entry(key, Limit(10, 60_000))]] * CALLS
    keys = [f"{key}:a", f"{key}:b", f"{key}:c"]
    uses = 10 if scenario == "batch" else 10_000
    forward = [Entry(k, Limit(uses, 60_000)) for k in keys]
    if scenario == "batch":
        return [forward] * CALLS
    return [forward if i % 2 else forward[::-1] for i in range(CALLS)]


def go() -> None:
    """Tells the test this process is set up, and waits for the word to fire."""
    print("ready", flush=True)
    sys.stdin.readline()


def on_threads(stores: list[Any], work: list[list[Entry]]) -> dict[str, Any]:
    allowed: list[bool] = []
    errors: list[str] = []
    barrier = threading.Barrier(len(work))

    def run(i: int) -> None:
        barrier.wait()
        try:
            entries = work[i]
            store = stores[i % len(stores)]
            verdict: Verdict = store.consume(entries[0].key, entries[0].limit) if len(entries) == 1 else (
                store.consume_many(entries)
            )
            allowed.append(verdict.allowed)
        except Exception as error:  # noqa: BLE001 - reported to the test
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    go()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"allowed": sum(allowed), "errors": errors}


async def on_tasks(prefix: str, work: list[list[Entry]]) -> dict[str, Any]:
    async with psycopg_pool.AsyncConnectionPool(
        sq.DSN, min_size=8, max_size=8, kwargs={"autocommit": True}, open=False
    ) as pool:
        await pool.wait()
        store = AsyncPostgresStore.using(pool, prefix=prefix)
        errors: list[str] = []

        async def run(entries: list[Entry]) -> bool:
            try:
                if len(entries) == 1:
                    return (await store.consume(entries[0].key, cast(Limit, entries[0].limit))).allowed
                return (await store.consume_many(entries)).allowed
            except Exception as error:  # noqa: BLE001
                errors.append(f"{type(error).__name__}: {error}")
                return False

        go()
        results = await asyncio.gather(*(run(entries) for entries in work))
        return {"allowed": sum(results), "errors": errors}


def main() -> None:
    backend, scenario, target, key = sys.argv[1:5]
    work = calls(scenario, key)
    if backend == "pg-async":
        result = asyncio.run(on_tasks(target, work))
    elif backend == "pg-sync":
        with psycopg_pool.ConnectionPool(
            sq.DSN, min_size=8, max_size=8, kwargs={"autocommit": True}, open=False
        ) as pool:
            pool.wait()
            result = on_threads([PostgresStore.using(pool, prefix=target)], work)
    else:
        connections = [sq.sqlite_connect(target) for _ in range(4)]
        result = on_threads([SqliteStore(c) for c in connections], work)
        for c in connections:
            c.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
