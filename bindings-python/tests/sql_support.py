"""Helpers for the PostgreSQL and SQLite store tests: the server, name prefixes of our own, cleanup."""

from __future__ import annotations

import os
import secrets
import sqlite3
from pathlib import Path

import psycopg

DSN = os.environ.get("RATEWINDOW_TEST_PG", "host=/var/run/postgresql user=postgres dbname=test")
"""The machine's PostgreSQL (``scripts/services.sh`` ``postgres_up``): unix socket, user postgres."""


def new_prefix(tag: str) -> str:
    """A name prefix of this run's own, so runs never collide: ``rwpy_{tag}_{pid}_{random}``."""
    return f"rwpy_{tag}_{os.getpid()}_{secrets.token_hex(3)}"


def connect(*, autocommit: bool = True) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(DSN, autocommit=autocommit)


def drop_schema(prefix: str) -> None:
    """Drops what a store's schema created under ``prefix``: every table (of any version, the rates and
    lock tables too) and every function."""
    with connect() as conn:
        tables = conn.execute(
            "SELECT oid::regclass::text FROM pg_class WHERE relkind IN ('r', 'p') AND relname LIKE %s",
            [f"{prefix}\\_%"],
        ).fetchall()
        for (table,) in tables:
            conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE".encode())
        functions = conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE %s", [f"{prefix}\\_%"]
        ).fetchall()
        for (function,) in functions:
            conn.execute(f"DROP FUNCTION IF EXISTS {function}".encode())


def pg_rows(prefix: str, table: str = "calls") -> list[tuple[object, ...]]:
    """Every row of one of ``prefix``'s tables, ordered."""
    with connect() as conn:
        return conn.execute(f"SELECT * FROM {prefix}_{table} ORDER BY 1, 2".encode()).fetchall()


def sqlite_connect(path: str | Path) -> sqlite3.Connection:
    """A connection as ``SqliteStore`` wants it: no implicit transactions, shareable by threads."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)
