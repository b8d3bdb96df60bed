"""SQLite migration 0009 widens runs.wake_reason's CHECK (undecodable, divergence) by
editing the table's stored definition: an upgraded file keeps every row, equals a
fresh one, and every connection, old or new, takes the new values."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perdure.backends.sqlite import SQLiteBackend
from perdure.backends.sqlite._session import MIGRATIONS, QUERIES, split_statements

WIDENED = [m for m in MIGRATIONS if m.name.endswith("_wake_undecodable.sql")]


def _schema(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY 1")
        return [(str(name), str(sql)) for name, sql in rows]
    finally:
        conn.close()


def _set_wake_reason(conn: sqlite3.Connection, reason: str) -> None:
    conn.execute("UPDATE runs SET status = 'waiting', wake_reason = ?", (reason,))


async def test_an_upgraded_file_keeps_its_rows_and_takes_the_new_wake_reasons(
    tmp_path: Path,
) -> None:
    [widened] = WIDENED
    old_path = tmp_path / "old.db"
    old = sqlite3.connect(old_path, isolation_level=None)
    old.execute("PRAGMA foreign_keys = ON")
    old.execute(QUERIES["create_schema_version"])
    for migration in MIGRATIONS:
        if migration.version >= widened.version:
            break
        for statement in split_statements(migration.sql):
            old.execute(statement)
        old.execute("INSERT INTO schema_version VALUES (?, 0)", (migration.version,))
    old.execute(
        "INSERT INTO runs (id, workflow, version, status, input, available_at, created_at, "
        "updated_at) VALUES ('r1', 'wf', 1, 'running', '{}', 0, 0, 0)"
    )
    old.execute(
        "INSERT INTO steps (run_id, key, kind, status, output, recorded_at) "
        "VALUES ('r1', 'a', 'run', 'completed', '1', 0)"
    )
    old.execute("INSERT INTO events (run_id, type, created_at) VALUES ('r1', 'created', 0)")
    with pytest.raises(sqlite3.IntegrityError):  # before: refused
        _set_wake_reason(old, "undecodable")

    backend = SQLiteBackend(old_path)
    try:
        assert await backend.migrate() == MIGRATIONS[-1].version
        assert [s.name for s in await backend.get_steps("r1")] == ["a"]
    finally:
        await backend.close()

    fresh_path = tmp_path / "fresh.db"
    fresh = SQLiteBackend(fresh_path)
    try:
        await fresh.migrate()
    finally:
        await fresh.close()
    assert _schema(old_path) == _schema(fresh_path)

    # A connection opened before the migration and a new one both take the new reasons.
    for conn in (old, sqlite3.connect(old_path, isolation_level=None)):
        for reason in ("undecodable", "divergence"):
            _set_wake_reason(conn, reason)
        with pytest.raises(sqlite3.IntegrityError):
            _set_wake_reason(conn, "anything")
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM steps").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1
        conn.close()
