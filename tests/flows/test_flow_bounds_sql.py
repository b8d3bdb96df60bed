"""Bounds on fan-out from SQL (PostgreSQL): a role holding only ``perdure_producer``
cannot make a map step fan out past its ``max_tasks``; ``create_flow`` and
``add_step`` take ``max_tasks`` (the flow's bound is its steps' default), validated as
Python validates it, with nothing stored on bad input."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from perdure import App, WorkflowFailed

pytestmark = pytest.mark.postgres

FAN_MESSAGE = (
    "map step 'each' would create 20000 tasks, over its max_tasks of 10000 (flow 'fan': "
    "set a higher max_tasks on the step or the flow to allow more)"
)


@pytest.fixture
def app(postgres_database) -> Iterator[App]:  # type: ignore[no-untyped-def]
    app = App(postgres_database.url, schema=postgres_database.schema, sweep_interval=0)
    app.migrate()
    yield app
    app.close()


@pytest.fixture
def conn(postgres_database, app: App) -> Iterator[psycopg.Connection]:  # type: ignore[no-untyped-def]
    with psycopg.connect(postgres_database.url, autocommit=True) as connection:
        connection.execute(f'SET search_path TO "{postgres_database.schema}"')
        yield connection


@pytest.fixture
def producer(postgres_database, app: App) -> Iterator[psycopg.Connection]:  # type: ignore[no-untyped-def]
    """A connection as a login role granted perdure_producer and nothing else, with the
    default search_path (as another service connects)."""
    role = f"perdure_test_producer_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_database.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT perdure_producer TO {}").format(sql.Identifier(role)))
    try:
        url = psycopg.conninfo.make_conninfo(postgres_database.url, user=role)
        with psycopg.connect(url, autocommit=True) as connection:
            yield connection
    finally:
        with psycopg.connect(postgres_database.url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def one(conn: psycopg.Connection, query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row


def _written(conn: psycopg.Connection, run_id: str) -> tuple[int, int]:
    """The task rows of the run, and the events of any task of it."""
    tasks = one(conn, "SELECT count(*) FROM runs WHERE parent_id = %s", run_id)[0]
    events = one(
        conn,
        "SELECT count(*) FROM events WHERE run_id LIKE %s",
        run_id.replace("%", r"\%").replace("_", r"\_") + ":%",
    )[0]
    return tasks, events


def test_a_producer_only_role_cannot_fan_out_past_the_bound(
    conn: psycopg.Connection, producer: psycopg.Connection, app: App, postgres_database
) -> None:  # type: ignore[no-untyped-def]
    one(conn, "SELECT create_flow('fan')")
    one(conn, "SELECT add_step('fan', 'each', step_type => 'map')")  # over the run's input
    elements = json.dumps(list(range(20_000)))
    query = sql.SQL("SELECT {}.start_run('fan', %s)").format(
        sql.Identifier(postgres_database.schema)
    )
    run_id = one(producer, query.as_string(producer), elements)[0]

    assert _written(conn, run_id) == (0, 0)
    status, error = one(conn, "SELECT status, error FROM runs WHERE id = %s", run_id)
    assert status == "failed"
    assert (error["type"], error["step"], error["message"]) == ("StepFailed", "each", FAN_MESSAGE)
    with pytest.raises(WorkflowFailed, match="would create 20000 tasks"):
        app.result(run_id, timeout=5)
    (step,) = app.get_steps(run_id)
    assert (step.name, step.status, step.tasks) == ("each", "failed", ())

    # perdure.start_flow (a role allowed to call it) alike; under the bound it fans out
    rid, status, _ = one(conn, "SELECT * FROM start_flow('fan', %s)", elements)
    assert status == "failed" and _written(conn, rid) == (0, 0)
    under = one(producer, query.as_string(producer), json.dumps(list(range(10_000))))[0]
    assert _written(conn, under) == (10_000, 10_000)


def test_the_bound_is_set_per_flow_and_per_step_from_sql(
    conn: psycopg.Connection, app: App
) -> None:
    assert one(conn, "SELECT create_flow('small', max_tasks => 2)")[0]
    one(conn, "SELECT add_step('small', 'wide', step_type => 'map', max_tasks => 5)")
    one(conn, "SELECT add_step('small', 'each', step_type => 'map')")  # the flow's: 2
    assert not one(conn, "SELECT add_step('small', 'wide', step_type => 'map', max_tasks => 5)")[0]
    shape = app.get_flow("small")
    assert shape is not None and shape.max_tasks == 2
    assert [(s.name, s.max_tasks) for s in shape.steps] == [("wide", 5), ("each", None)]

    ok_id, ok_status, _ = one(conn, "SELECT * FROM start_flow('small', '[1, 2]')")
    assert ok_status == "running" and _written(conn, ok_id)[0] == 4
    run_id, status, _ = one(conn, "SELECT * FROM start_flow('small', '[1, 2, 3]')")
    assert status == "failed"
    tasks = conn.execute(
        "SELECT parent_step, status FROM runs WHERE parent_id = %s ORDER BY task_index", (run_id,)
    ).fetchall()
    assert tasks == [("wide", "cancelled")] * 3  # none of each's
    error = one(conn, "SELECT error FROM runs WHERE id = %s", run_id)[0]
    assert error["message"].startswith(
        "map step 'each' would create 3 tasks, over its max_tasks of 2"
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT create_flow('g', max_tasks => 0)", "max_tasks of flow 'g' must be at least 1"),
        ("SELECT create_flow('g', max_tasks => -3)", "max_tasks of flow 'g' must be at least 1"),
        ("SELECT create_flow('g', max_tasks => NULL)", "max_tasks of flow 'g' must be at least 1"),
        ("SELECT create_flow('f', max_tasks => 7)", "other options"),
        ("SELECT add_step('f', 'm', step_type => 'map', max_tasks => 0)", "max_tasks of step 'm'"),
        ("SELECT add_step('f', 's', max_tasks => 5)", "for map steps only"),
        ("SELECT add_step('f', 'each', step_type => 'map', max_tasks => 9)", "another definition"),
    ],
)
def test_a_bad_max_tasks_from_sql_is_refused_and_stores_nothing(
    conn: psycopg.Connection, query: str, message: str
) -> None:
    one(conn, "SELECT create_flow('f')")
    one(conn, "SELECT add_step('f', 'each', step_type => 'map')")
    before = one(conn, "SELECT (SELECT count(*) FROM flows), (SELECT count(*) FROM flow_steps)")
    with pytest.raises(psycopg.Error, match=message) as info:
        conn.execute(query)
    assert info.value.sqlstate == "PD001"
    after = one(conn, "SELECT (SELECT count(*) FROM flows), (SELECT count(*) FROM flow_steps)")
    assert after == before == (1, 1)
