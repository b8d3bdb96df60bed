"""Creating and upgrading a schema: numbered migrations (tables and indexes), then the
function files, re-applied when their text changed.

Concurrent migrators (many processes starting at once) serialize on an advisory lock
taken for the schema's name, so each migration is applied exactly once.
"""

from __future__ import annotations

import logging
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from ..._version import __version__
from ...errors import SchemaVersionError
from .._sqlfiles import function_set, load_migrations, pending_migrations
from ._clock import read_offset, restore_offset
from ._conn import QUERIES, PgConnections

log = logging.getLogger("perdure.backends.postgres")

#: The function file of the clock seam, ``perdure_now()``.
CLOCK_FILE = "00_perdure_now.sql"


def ident(query: LiteralString, name: str) -> sql.Composed:
    """``query`` with ``{ident}`` replaced by the quoted identifier ``name`` (the only
    dynamic SQL: the schema name or a notice channel derived from it)."""
    return sql.SQL(query).format(ident=sql.Identifier(name))


async def migrate(db: PgConnections, schema: str, *, up_to: int | None = None) -> int:
    """Bring ``schema`` up to date; returns its version. ``up_to`` stops after that
    migration, without the functions (tests build an older install with it)."""
    migrations = load_migrations(__package__)
    if up_to is not None:
        migrations = [m for m in migrations if m.version <= up_to]
    latest = migrations[-1].version if migrations else 0
    async with db.connection() as conn, conn.transaction():
        await conn.execute(QUERIES["migrate_lock"], {"schema": schema})
        cur = await conn.execute(QUERIES["schema_exists"], {"schema": schema})
        if not (await cur.fetchone() or (False,))[0]:
            await conn.execute(ident(QUERIES["create_schema"], schema))
        await conn.execute(ident(QUERIES["set_local_search_path"], schema))
        cur = await conn.execute(QUERIES["clock_exists"])
        if not (await cur.fetchone() or (False,))[0]:  # the tables' defaults read it
            await conn.execute(function_set(__package__).text_of(CLOCK_FILE))
        await conn.execute(QUERIES["create_schema_version"])
        cur = await conn.execute(QUERIES["schema_version"])
        row = await cur.fetchone()
        current = int(row[0]) if row else 0
        for migration in pending_migrations(migrations, current):
            log.info("applying migration %s to schema %s", migration.name, schema)
            await conn.execute(migration.sql)
            await conn.execute(QUERIES["record_migration"], {"version": migration.version})
        if up_to is None:
            await _apply_functions(conn, schema)
    return max(current, latest)


async def _apply_functions(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Apply the function files when their text differs from what the schema last
    applied, unless a newer perdure applied it (a rolling deploy's old process)."""
    functions = function_set(__package__)
    cur = await conn.execute(QUERIES["functions_applied"])
    row = await cur.fetchone()
    if row is not None and (
        row[0] == functions.digest or _version_key(row[1]) > _version_key(__version__)
    ):
        return
    log.info("applying the functions of schema %s", schema)
    offset = await read_offset(conn)  # a moved test clock stays where it was
    for _name, text in functions.files:
        await conn.execute(text)
    await restore_offset(conn, offset)
    await conn.execute(
        QUERIES["record_functions"], {"digest": functions.digest, "version": __version__}
    )


async def check_schema(db: PgConnections, schema: str) -> int:
    """The schema's version, read without writing (read-only mode); `SchemaVersionError`
    when there is no perdure schema or an older one than this code."""
    migrations = load_migrations(__package__)
    latest = migrations[-1].version if migrations else 0
    row = await db.one(QUERIES["schema_version_exists"], {"schema": schema})
    current = 0
    if row is not None and row[0]:
        row = await db.one(QUERIES["schema_version"])
        current = int(row[0]) if row else 0
    if current == 0:
        raise SchemaVersionError(
            f"schema {schema} holds no perdure schema; read-only mode does not create one "
            "(run `perdure migrate` with write access first)"
        )
    if current < latest:
        raise SchemaVersionError(
            f"schema {schema} is at version {current}, this perdure needs {latest}; "
            "read-only mode does not migrate: run `perdure migrate` with write access"
        )
    return current


def _version_key(version: str) -> tuple[int, ...]:
    """``"1.10.2"`` as ``(1, 10, 2)`` (a non-numeric part counts as 0)."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))
