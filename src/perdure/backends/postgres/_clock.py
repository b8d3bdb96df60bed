"""Moving a schema's clock: ``perdure_now()`` replaced by ``pg_catalog.now()`` plus an
offset (`Backend.set_clock_offset`).

The offset lives in the function's body, so the hot path pays nothing for it (the
planner inlines the function as it inlines ``now()``), and each schema has its own:
several test environments on one server never see each other's clock. Replacing the
function invalidates every cached plan that inlined it (PostgreSQL records an inlined
function as a dependency of the plan), so prepared statements and plpgsql functions,
in every session, read the new clock from their next transaction on.

Moves and migrations serialize on the schema's migration lock; a migration that
re-applies the function files restores the offset it found (`restore_offset`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from .._clock import check_offset
from ._conn import QUERIES, PgConnections

__all__ = ["read_offset", "restore_offset", "set_offset"]


async def read_offset(conn: psycopg.AsyncConnection[Any]) -> float:
    """The schema's clock offset in seconds (its ``perdure_now()`` must exist)."""
    cur = await conn.execute(QUERIES["clock_offset"])
    row = await cur.fetchone()
    return round(float(row[0]), 6) if row else 0.0


async def restore_offset(conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
    """Put ``seconds`` back into a clock function just re-applied from its file."""
    if seconds:
        await _replace(conn, seconds)


async def set_offset(db: PgConnections, schema: str, seconds: object) -> None:
    """Move ``schema``'s clock to real time plus ``seconds`` and wake its workers (the
    pool's connections have ``schema`` on their search path)."""
    async with db.connection() as conn, conn.transaction():
        await conn.execute(QUERIES["migrate_lock"], {"schema": schema})
        offset = check_offset(seconds, await read_offset(conn))
        await _replace(conn, offset)
        await conn.execute(QUERIES["clock_moved"])


async def _replace(conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
    micros = round(seconds * 1_000_000)
    await conn.execute(sql.SQL(QUERIES["set_clock"]).format(offset=sql.Literal(micros)))
