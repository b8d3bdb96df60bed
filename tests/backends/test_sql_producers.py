"""The SQL producer functions, called as any non-Python service would: over a plain
connection (default search_path), and from a `psql` shell one-liner."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from perdure import App, Context

pytestmark = pytest.mark.postgres


@pytest.fixture
def app(postgres_database) -> Iterator[App]:  # type: ignore[no-untyped-def]
    app = App(postgres_database.url, schema=postgres_database.schema, sweep_interval=0)

    @app.workflow(name="onboard-user", priority=7, retention="3d")
    async def onboard(ctx: Context, user: dict) -> str:
        await ctx.step.wait_for_event("verified", match={"email": user["email"]}, timeout="1h")
        return await ctx.step.run("welcome", lambda: f"welcome {user['email']}")

    app.list_workflows()  # opens the database: migrates and registers the workflow
    yield app
    app.close()


@pytest.fixture
def conn(postgres_database) -> Iterator[psycopg.Connection]:  # type: ignore[no-untyped-def]
    with psycopg.connect(postgres_database.url, autocommit=True) as connection:
        yield connection


def call(conn: psycopg.Connection, schema: str, function: str, *args: object) -> object:
    query = sql.SQL("SELECT {}.{}({})").format(
        sql.Identifier(schema),
        sql.Identifier(function),
        sql.SQL(", ").join(sql.Placeholder() * len(args)),
    )
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


def test_start_signal_and_complete_from_sql(
    app: App, conn: psycopg.Connection, postgres_database
) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema
    run_id = call(conn, schema, "start_run", "onboard-user", '{"email": "ada@example.com"}')
    assert isinstance(run_id, str)
    run = app.get_run(run_id)
    assert (run.workflow, run.version, run.priority, run.retention_days) == (
        "onboard-user",
        1,
        7,
        3,
    )
    assert call(conn, schema, "start_run", "onboard-user", '{"email": "x@y.z"}', "key-1") == call(
        conn, schema, "start_run", "onboard-user", '{"email": "x@y.z"}', "key-1"
    )
    with app.worker():
        # Wake the worker by NOTIFY from SQL; resolve the wait from SQL.
        assert call(
            conn, schema, "signal_run", run_id, "verified", '{"email": "ada@example.com"}'
        ) in (
            "resolved",
            "buffered",
        )
        assert app.result(run_id, timeout=20) == "welcome ada@example.com"
    assert call(conn, schema, "signal_run", run_id, "verified", "{}") == "ended"


def test_cancel_and_publish_from_sql(app: App, conn: psycopg.Connection, postgres_database) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema
    run_id = call(conn, schema, "start_run", "onboard-user", '{"email": "b@example.com"}')
    assert call(conn, schema, "cancel_run", run_id) is True
    assert call(conn, schema, "cancel_run", run_id) is False
    assert app.get_run(str(run_id)).status == "cancelled"
    app.subscribe("user.signup", "onboard-user")
    published = call(conn, schema, "publish", "user.signup", '{"email": "c@example.com"}')
    assert isinstance(published, dict) and len(published["started"]) == 1
    assert app.get_run(published["started"][0]).input == {"email": "c@example.com"}


@pytest.mark.parametrize(
    ("function", "args", "message"),
    [
        ("start_run", ("no-such-workflow", "{}"), "is not registered"),
        ("start_run", ("bad name!", "{}"), "invalid workflow name"),
        ("start_run", ("onboard-user", "{}", ""), "idempotency key"),
        ("signal_run", ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "verified", "{}"), "no run"),
        ("signal_run", ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "bad event!", "{}"), "invalid event name"),
        ("publish", ("bad event!", "{}"), "invalid event name"),
        ("cancel_run", ("nope",), "no run"),
    ],
)
def test_bad_calls_are_rejected_with_clear_errors_and_store_nothing(
    app: App,
    conn: psycopg.Connection,
    postgres_database,
    function: str,
    args: tuple[object, ...],
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    with pytest.raises(psycopg.Error, match=message) as info:
        call(conn, postgres_database.schema, function, *args)
    assert (info.value.sqlstate or "").startswith("PD")
    assert app.list_runs().items == ()


async def test_concurrent_idempotent_starts_make_one_run(app: App, postgres_database) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema

    async def start() -> str:
        async with await psycopg.AsyncConnection.connect(
            postgres_database.url, autocommit=True
        ) as c:
            query = sql.SQL(
                "SELECT {}.start_run('onboard-user', '{{\"email\": \"z@z.z\"}}', 'same-key')"
            ).format(sql.Identifier(schema))
            row = await (await c.execute(query)).fetchone()
            assert row is not None
            return str(row[0])

    ids = await asyncio.gather(*(start() for _ in range(20)))
    assert len(set(ids)) == 1
    assert len((await app.list_runs_async()).items) == 1
    await app.close_async()


def test_psql_one_liner(app: App, postgres_database) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("psql") is None:
        if os.environ.get("CI"):
            pytest.fail("the psql client is missing and CI is set")
        pytest.skip("needs the psql client")
    schema = postgres_database.schema
    result = subprocess.run(
        [
            "psql", postgres_database.url, "-tAc",
            f"SELECT {schema}.start_run('onboard-user', '{{\"email\": \"shell@example.com\"}}')",
        ],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    run_id = result.stdout.strip()
    assert app.get_run(run_id).input == {"email": "shell@example.com"}
