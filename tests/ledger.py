"""An application table beside perdure's, for the transactional-step tests.

On PostgreSQL the table lives in a schema of its own (``<perdure schema>_app``) that
the App's URL puts on the application's search path (``options=-csearch_path=...``),
as an application keeps its tables apart from perdure's schema; on SQLite it is a
table in the run database's file. The table has no unique key on purpose: a step
applied twice shows as two rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from perdure import Context


@dataclass(frozen=True)
class Ledger:
    """The table ``ledger(run_id, step, value)`` and how to reach it."""

    kind: str
    #: the URL to give `perdure.App` (PostgreSQL: with the application's search path)
    url: str
    schema: str
    path: str | None = None

    @property
    def app_schema(self) -> str:
        return f"{self.schema}_app"

    @classmethod
    def on(cls, database: Any) -> Ledger:
        """Create the table on the test's database."""
        if database.kind == "sqlite":
            ledger = cls("sqlite", database.url, database.schema, str(database.path))
        else:
            options = quote(f"-csearch_path={database.schema}_app")
            sep = "&" if "?" in database.url else "?"
            ledger = cls("postgres", f"{database.url}{sep}options={options}", database.schema)
        ledger._execute(
            "CREATE TABLE IF NOT EXISTS ledger "
            "(id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, value INTEGER)"
            if ledger.kind == "sqlite"
            else "CREATE TABLE ledger (id serial PRIMARY KEY, run_id text NOT NULL, "
            "step text NOT NULL, value integer)",
            create_schema=True,
        )
        return ledger

    def rows(self) -> list[tuple[str, str]]:
        """Every (run_id, step) row, sorted."""
        return sorted(
            (str(r[0]), str(r[1])) for r in self._query("SELECT run_id, step FROM ledger")
        )

    def drop(self) -> None:
        """Drop the application schema (PostgreSQL; the SQLite file goes with tmp_path)."""
        if self.kind == "postgres":
            import psycopg
            from psycopg import sql

            with psycopg.connect(self._base_url(), autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(self.app_schema)
                    )
                )

    def _base_url(self) -> str:
        return self.url.split("?", 1)[0]

    def _execute(self, statement: str, *, create_schema: bool = False) -> None:
        if self.kind == "sqlite":
            assert self.path is not None
            with sqlite3.connect(self.path) as conn:
                conn.execute(statement)
            return
        import psycopg
        from psycopg import sql

        with psycopg.connect(self._base_url(), autocommit=True) as conn:
            if create_schema:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                        sql.Identifier(self.app_schema)
                    )
                )
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.app_schema)))
            conn.execute(statement)  # type: ignore[arg-type]

    def _query(self, statement: str) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            assert self.path is not None
            conn = sqlite3.connect(self.path)
            try:
                return list(conn.execute(statement).fetchall())
            finally:
                conn.close()
        import psycopg
        from psycopg import sql

        with psycopg.connect(self._base_url(), autocommit=True) as pg:
            pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.app_schema)))
            return list(pg.execute(statement).fetchall())  # type: ignore[arg-type]

    def writer(self, ctx: Context, step: str, value: int = 0) -> Callable[[Any], Any]:
        """A step function that records (run, step) in the ledger through the step's
        connection: sync on SQLite, async on PostgreSQL (as a user would write them)."""
        run_id = ctx.run_id
        if self.kind == "sqlite":

            def write_sqlite(conn: sqlite3.Connection) -> int:
                conn.execute(
                    "INSERT INTO ledger (run_id, step, value) VALUES (?, ?, ?)",
                    (run_id, step, value),
                )
                return value

            return write_sqlite

        async def write_pg(conn: Any) -> int:
            await conn.execute(
                "INSERT INTO ledger (run_id, step, value) VALUES (%s, %s, %s)",
                (run_id, step, value),
            )
            return value

        return write_pg


Writer = Callable[[Any], Awaitable[int] | int]
