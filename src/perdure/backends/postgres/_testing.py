"""What `perdure.testing` needs of PostgreSQL beyond the contract: removing the
throwaway schema a test environment made."""

from __future__ import annotations

import psycopg

from ._conn import QUERIES
from ._schema import ident

__all__ = ["drop_schema"]


async def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` with everything in it (no error if it is gone already)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(ident(QUERIES["drop_schema"], schema))
