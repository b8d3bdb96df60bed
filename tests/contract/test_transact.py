"""Contract: transact (the writes of a transactional step and its transition commit
together, fenced like apply, or not at all)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from perdure.backends.base import Backend
from perdure.records import Claim, Transition

from .helpers import claim_one, completed, create

pytestmark = pytest.mark.asyncio


@pytest.fixture
def db(request: pytest.FixtureRequest, backend: Backend) -> Any:
    """The test's database description, with the table ``ledger_t(note)`` in it."""
    database = request.getfixturevalue(f"{backend.dialect}_database")
    if backend.dialect == "sqlite":
        with sqlite3.connect(database.path) as conn:
            conn.execute("CREATE TABLE ledger_t (note TEXT)")
    else:
        import psycopg
        from psycopg import sql

        with psycopg.connect(database.url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE TABLE {}.ledger_t (note text)").format(
                    sql.Identifier(database.schema)
                )
            )
    return database


def _table(db: Any) -> str:
    # The transaction's connection has the application's search path: name it fully.
    return "ledger_t" if db.kind == "sqlite" else f"{db.schema}.ledger_t"


def _notes(db: Any) -> list[str]:
    if db.kind == "sqlite":
        conn = sqlite3.connect(db.path)
        try:
            return [r[0] for r in conn.execute("SELECT note FROM ledger_t ORDER BY note")]
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(db.url, autocommit=True) as pg:
        rows = pg.execute(f"SELECT note FROM {_table(db)} ORDER BY note").fetchall()  # type: ignore[arg-type]
    return [r[0] for r in rows]


class _Boom(Exception):
    pass


def _work(db: Any, transition: Transition, note: str, *, fail: bool = False) -> Any:
    async def work(conn: Any) -> Transition:
        result = conn.execute(f"INSERT INTO {_table(db)} (note) VALUES ('{note}')")
        if db.kind == "postgres":
            await result
        if fail:
            raise _Boom()
        return transition

    return work


async def _claimed(backend: Backend) -> Claim:
    await create(backend)
    return await claim_one(backend)


async def test_the_writes_and_the_transition_commit_together(backend: Backend, db: Any) -> None:
    held = await _claimed(backend)
    t = Transition(held.run.id, held.lease_token, steps=(completed("s", 1),), step_attempts=1)
    result = await backend.transact(_work(db, t, "written"))
    assert result.ok and result.existing == ()
    assert _notes(db) == ["written"]
    (step,) = await backend.get_steps(held.run.id)
    assert (step.name, step.status, step.output) == ("s", "completed", 1)
    run = await backend.get_run(held.run.id)
    assert run is not None and run.status == "running"


async def test_a_lost_lease_commits_nothing(backend: Backend, db: Any) -> None:
    held = await _claimed(backend)
    stale = Transition(held.run.id, held.lease_token + 1, steps=(completed("s", 1),))
    result = await backend.transact(_work(db, stale, "zombie"))
    assert not result.ok
    assert _notes(db) == []
    assert await backend.get_steps(held.run.id) == []


async def test_a_cancelled_run_commits_nothing(backend: Backend, db: Any) -> None:
    held = await _claimed(backend)
    assert await backend.cancel_run(held.run.id)
    t = Transition(held.run.id, held.lease_token, steps=(completed("s", 1),))
    assert not (await backend.transact(_work(db, t, "late"))).ok
    assert _notes(db) == []


async def test_work_that_raises_rolls_back_and_the_error_propagates(
    backend: Backend, db: Any
) -> None:
    held = await _claimed(backend)
    t = Transition(held.run.id, held.lease_token, steps=(completed("s", 1),))
    with pytest.raises(_Boom):
        await backend.transact(_work(db, t, "half", fail=True))
    assert _notes(db) == []
    assert await backend.get_steps(held.run.id) == []
    assert (await backend.transact(_work(db, t, "whole"))).ok  # the connection is usable
    assert _notes(db) == ["whole"]


async def test_a_final_row_already_stored_wins_and_nothing_is_written(
    backend: Backend, db: Any
) -> None:
    held = await _claimed(backend)
    first = Transition(held.run.id, held.lease_token, steps=(completed("s", "first"),))
    assert (await backend.apply([first]))[0].ok
    again = Transition(held.run.id, held.lease_token, steps=(completed("s", "second"),))
    result = await backend.transact(_work(db, again, "again"))
    assert result.ok
    assert [(s.name, s.output) for s in result.existing] == [("s", "first")]
    assert _notes(db) == []
