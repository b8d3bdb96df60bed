"""Helpers for engine tests: waiting on conditions with deadlines, never bare sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


async def wait_for_async(
    predicate: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.02
) -> T:
    """Async `wait_for`."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def raw_sql(database: object, sql: str, params: tuple[object, ...] = ()) -> None:
    """Run one statement on the test's database around the engine (``?`` placeholders):
    how tests plant data no entry of the engine would accept."""
    kind, url, schema = database.kind, database.url, database.schema  # type: ignore[attr-defined]
    if kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url.split("sqlite:///", 1)[1], isolation_level=None)
        try:
            conn.execute(sql, params)
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as pg:
        pg.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
