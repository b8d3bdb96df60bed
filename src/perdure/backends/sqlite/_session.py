"""The SQLite connection as the backend's own thread uses it.

A `Session` wraps the one connection (autocommit mode: ``isolation_level=None``) with
the backend's clock and the notices that the current operation will emit after it
commits. Write transactions always start with ``BEGIN IMMEDIATE`` and take "now" only
once the write lock is held, so time order matches commit order across processes.

"Now" is the injected clock plus the offset stored in the file's ``clock`` table
(moved by `perdure.testing`), read with each "now": one primary-key lookup on a page
already in the cache, inside the caller's transaction, so every process on the file
judges time alike and an offset moved by one is seen by the others at once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...records import Notice
from .._sqlfiles import load_migrations, load_queries

__all__ = ["MIGRATIONS", "QUERIES", "Session", "is_busy", "split_statements"]

QUERIES = load_queries(__package__)
MIGRATIONS = load_migrations(__package__)

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


def is_busy(exc: sqlite3.Error) -> bool:
    """True for "database is locked/busy" errors (worth retrying)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return True
    text = str(exc).lower()
    return "is locked" in text or "database is busy" in text


def split_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements (comments stay with the next one)."""
    statements: list[str] = []
    lines: list[str] = []
    for line in script.splitlines(keepends=True):
        lines.append(line)
        text = "".join(lines)
        if sqlite3.complete_statement(text):
            statements.append(text.strip())
            lines = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            raise ValueError(f"incomplete SQL statement at the end of a script: {stripped!r}")
    return statements


class Session:
    """The backend's connection, used only on the backend's thread."""

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self.conn = conn
        self._clock = clock
        self.notices: list[Notice] = []

    def clock(self) -> float:
        """The database clock, to the microsecond (so datetimes round-trip exactly)."""
        return round(self._clock() + self.clock_offset(), 6)

    def clock_offset(self) -> float:
        """The offset stored in the file (0.0 while it has no ``clock`` table yet: a
        file not migrated by this perdure)."""
        try:
            row = self.conn.execute(QUERIES["clock_offset"]).fetchone()
        except sqlite3.OperationalError:
            if self._has_clock():
                raise
            return 0.0
        return float(row[0]) if row is not None else 0.0

    def _has_clock(self) -> bool:
        row = self.conn.execute(QUERIES["clock_table_exists"]).fetchone()
        return row is not None

    def notify(self, kind: str, run_id: str | None) -> None:
        """Queue a notice; it is sent only after the operation committed."""
        if kind in ("wake", "done", "progress"):
            self.notices.append(Notice(kind, run_id))  # type: ignore[arg-type]
        else:
            self.notices.append(Notice("cancel", run_id))

    @contextmanager
    def write(self) -> Iterator[float]:
        """A ``BEGIN IMMEDIATE`` transaction; yields the clock read under the lock."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.clock()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def one(self, sql: str, params: dict[str, Any]) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        rows: list[sqlite3.Row] = self.conn.execute(sql, params).fetchall()
        return rows

    def run(self, sql: str, params: dict[str, Any]) -> int:
        """Execute a write; return the number of rows it changed."""
        return self.conn.execute(sql, params).rowcount

    def close(self) -> None:
        self.conn.close()
