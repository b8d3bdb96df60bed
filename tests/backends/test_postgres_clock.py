"""PostgreSQL-only behaviour of the movable clock (the contract lives in
tests/contract/test_clock.py): each schema has its own clock, cached plans and
plpgsql functions in every session read a moved clock at once, and re-applying the
function files (an upgrade) keeps the offset."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from perdure.backends.postgres import PostgresBackend
from perdure.ids import new_run_id
from perdure.records import ClaimParams, NewRun

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

DAY = 86400.0
Make = Callable[..., Awaitable[PostgresBackend]]


@pytest.fixture
async def make(pg_dsn: str) -> AsyncIterator[Make]:
    """Open migrated backends; ``schema=None`` gives a fresh schema, dropped afterwards."""
    opened: list[PostgresBackend] = []
    schemas: list[str] = []

    async def factory(schema: str | None = None, **pool: Any) -> PostgresBackend:
        if schema is None:
            schema = "swt_" + secrets.token_hex(6)
            schemas.append(schema)
        backend = PostgresBackend(pg_dsn, schema=schema, **pool)
        opened.append(backend)
        await backend.open()
        await backend.migrate()
        return backend

    try:
        yield factory
    finally:
        for backend in reversed(opened):
            await backend.close()
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
            for schema in schemas:
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                await admin.execute(drop)


def _new(delay: float = 0.0) -> NewRun:
    return NewRun(id=new_run_id(), workflow="wf", version=1, input_json="null", delay=delay)


def _claim(worker: str = "w1") -> ClaimParams:
    return ClaimParams(worker, (("wf", 1),), 10, 30.0)


async def test_each_schema_has_its_own_clock(make: Make) -> None:
    moved, still = await make(), await make()
    await moved.create_run(_new(delay=DAY))
    waiting = await still.create_run(_new(delay=DAY))
    await moved.set_clock_offset(2 * DAY)
    assert await still.clock_offset() == 0.0
    assert await still.claim_runs(_claim()) == []
    assert len(await moved.claim_runs(_claim())) == 1
    assert (await still.get_run(waiting.run.id)).wake_at is not None  # type: ignore[union-attr]


async def test_prepared_statements_and_functions_read_the_moved_clock(make: Make) -> None:
    """psycopg prepares a statement after 5 runs; the claim and the plpgsql start
    function both inline perdure_now(). A one-connection pool per backend keeps
    every call on the same session, whose cached plans must not keep the old clock."""
    mover = await make(min_size=1, max_size=1)
    other = await make(mover.schema, min_size=1, max_size=1)
    for backend in (mover, other):
        for _ in range(8):
            await backend.claim_runs(_claim())
            created = await backend.create_run(_new(delay=DAY))
    assert created.run.wake_at is not None
    before = await other.now()

    await mover.set_clock_offset(DAY + 3600)
    for backend in (mover, other):  # both sessions, the mover's and another one
        late = await backend.create_run(_new())
        assert late.run.created_at - before > timedelta(days=1)
        claims = await backend.claim_runs(_claim(f"w-{id(backend)}"))
        assert any(c.now - before > timedelta(days=1) for c in claims)
    assert await other.claim_runs(_claim()) == []  # 18 runs were due and are all claimed


async def test_reapplying_the_functions_keeps_the_offset(make: Make, pg_dsn: str) -> None:
    backend = await make()
    await backend.set_clock_offset(3 * DAY)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
        stale = sql.SQL("UPDATE {}.functions_applied SET digest = 'old'").format(
            sql.Identifier(backend.schema)
        )
        await admin.execute(stale)
    await backend.migrate()  # applies every function file again, the clock's included
    assert await backend.clock_offset() == 3 * DAY
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
        cur = await admin.execute(
            sql.SQL("SELECT digest FROM {}.functions_applied").format(
                sql.Identifier(backend.schema)
            )
        )
        assert (await cur.fetchone()) != ("old",)  # they were applied
