"""The SQL producer functions, called as any non-Python service would: over a plain
connection (default search_path), and from a `psql` shell one-liner."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from perdure import App, Context

pytestmark = pytest.mark.postgres

VICTIM = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


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
        assert (
            call(conn, schema, "signal_run", run_id, "verified", '{"email": "ada@example.com"}')
            is True
        )
        assert app.result(run_id, timeout=20) == "welcome ada@example.com"
    assert call(conn, schema, "signal_run", run_id, "verified", "{}") is False


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
        ("start_run", ("bad name!", "{}"), "invalid workflow name"),
        ("start_run", ("onboard-user", "{}", ""), "idempotency key"),
        ("start_run", ("onboard-user", "{}", "k" * 256), "idempotency key"),
        ("start_run", ("onboard-user", None), "not SQL NULL"),
        ("start_run", ("onboard-user", "[" * 65 + "]" * 65), "nested more than 64"),
        ("start_run", ("onboard-user", '"' + "x" * (10 * 1024 * 1024) + '"'), "over the limit"),
        ("start_run", ("onboard-user", "{}", None, None, "200000-01-01"), "within 100 years"),
        ("start_run", ("onboard-user", "{}", None, None, "1800-01-01"), "within 100 years"),
        ("start_run", ("onboard-user", "{}", None, None, "infinity"), "within 100 years"),
        ("start_run", ("onboard-user", "{}", None, None, None, ""), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, "r" * 256), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, "tenant/42"), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, f"zz/../{VICTIM}"), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, ".."), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, "bell\x07"), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, "c1\x85"), "run id"),
        ("start_run", ("onboard-user", "{}", None, None, None, "a?b#c%d\\e"), "run id"),
        ("start_run", ("onboard-user", "{}", "key/1"), "idempotency key"),
        ("start_run", ("onboard-user", "{}", "key\n1"), "idempotency key"),
        ("signal_run", (VICTIM, "verified", "{}", "s/1"), "idempotency key"),
        ("publish", ("go", "{}", "a/../b"), "idempotency key"),
        ("signal_run", ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "verified", "[" * 70 + "]" * 70), "nested"),
        ("signal_run", ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "verified", "{}", ""), "idempotency key"),
        ("publish", ("go", "[" * 70 + "]" * 70), "nested"),
        ("publish", ("go", "{}", "k" * 300), "idempotency key"),
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
    assert app.list_runs().items == []


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


def named(conn: psycopg.Connection, schema: str, function: str, **args: object) -> object:
    """Call a producer in named notation (``name => value``), as the docs show."""
    query = sql.SQL("SELECT {}.{}({})").format(
        sql.Identifier(schema),
        sql.Identifier(function),
        sql.SQL(", ").join(
            sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args
        ),
    )
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


def test_producers_take_the_user_facing_names(
    app: App, conn: psycopg.Connection, postgres_database
) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema
    run_id = named(
        conn,
        schema,
        "start_run",
        workflow="onboard-user",
        input='{"email": "n@example.com"}',
        idempotency_key="k-1",
        priority=3,
        run_id="signup-n",
    )
    assert run_id == "signup-n"
    run = app.get_run("signup-n")
    assert (run.priority, run.input) == (3, {"email": "n@example.com"})
    again = named(conn, schema, "start_run", workflow="onboard-user", idempotency_key="k-1")
    assert again == "signup-n"  # the same key returns the run whatever the input
    assert [e.type for e in app.get_events("signup-n")] == ["created", "duplicate_start"]
    for _ in range(2):  # the same signal key delivers once
        assert named(
            conn, schema, "signal_run", run_id="signup-n", event="poke", payload="1",
            idempotency_key="sig-1",
        ) is True  # fmt: skip
    buffered = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.signals WHERE run_id = 'signup-n'").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    assert buffered == (1,)
    assert named(conn, schema, "publish", event="nothing.here", idempotency_key="p-1") == {
        "started": [],
        "resumed": [],
    }
    assert named(conn, schema, "cancel_run", run_id="signup-n") is True


def test_a_workflow_no_process_registered_is_accepted_and_waits_for_its_worker(
    postgres_database, conn: psycopg.Connection
) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema
    producer = App(postgres_database.url, schema=schema, sweep_interval=0)
    producer.migrate()
    run_id = call(conn, schema, "start_run", "billing.invoice", '{"order": 7}')
    run = producer.get_run(str(run_id))
    assert (run.status, run.version) == ("pending", None)
    producer.close()

    worker_app = App(postgres_database.url, schema=schema, sweep_interval=0)

    @worker_app.workflow(name="billing.invoice", version=2)
    async def invoice(ctx: Context, data: dict) -> int:
        return int(data["order"]) * 2

    with worker_app.worker():
        assert worker_app.result(str(run_id), timeout=20) == 14
    assert worker_app.get_run(str(run_id)).version == 2
    worker_app.close()


def test_a_producer_only_role_can_start_signal_cancel_and_publish_and_nothing_else(
    app: App, postgres_database
) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema
    role = f"perdure_test_client_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_database.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT perdure_producer TO {}").format(sql.Identifier(role)))
    try:
        url = psycopg.conninfo.make_conninfo(postgres_database.url, user=role)
        with psycopg.connect(url, autocommit=True) as conn:
            run_id = call(conn, schema, "start_run", "onboard-user", '{"email": "r@example.com"}')
            assert call(conn, schema, "signal_run", run_id, "verified", "{}") is True
            assert call(conn, schema, "publish", "user.signup", "{}") == {
                "started": [],
                "resumed": [],
            }
            assert call(conn, schema, "cancel_run", run_id) is True
            forbidden = [
                sql.SQL("SELECT * FROM {}.runs"),
                sql.SQL("UPDATE {}.runs SET status = 'completed'"),
                sql.SQL("INSERT INTO {}.steps (run_id, key, kind, status)"
                        " VALUES ('x', 'k', 'run', 'completed')"),
                sql.SQL("SELECT {}.create_run('x', 'wf', 1, '{{}}')"),
                sql.SQL("SELECT {}.cancel_tree('x')"),
                sql.SQL("SELECT {}.deliver_signal('x', 'e', '{{}}')"),
                sql.SQL("SELECT {}.new_run_id()"),
            ]  # fmt: skip
            for statement in forbidden:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement.format(sql.Identifier(schema)))
        assert app.get_run(str(run_id)).status == "cancelled"
    finally:
        with psycopg.connect(postgres_database.url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_producer_only_role_cannot_store_an_id_no_route_can_address(
    app: App, postgres_database
) -> None:  # type: ignore[no-untyped-def]
    schema = postgres_database.schema
    role = f"perdure_test_client_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_database.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT perdure_producer TO {}").format(sql.Identifier(role)))
    try:
        url = psycopg.conninfo.make_conninfo(postgres_database.url, user=role)
        with psycopg.connect(url, autocommit=True) as conn:
            target = call(conn, schema, "start_run", "onboard-user", "{}", None, None, None, "t")
            for bad in ("tenant/42", f"zz/../{VICTIM}", "..", ".", "a\x01b", "a\x9fb", "a%2F"):
                with pytest.raises(psycopg.Error, match="the run id must be") as info:
                    named(conn, schema, "start_run", workflow="onboard-user", run_id=bad)
                assert info.value.sqlstate == "PD001"
                for function, args in (
                    ("start_run", {"workflow": "onboard-user"}),
                    ("signal_run", {"run_id": target, "event": "verified"}),
                    ("publish", {"event": "user.signup"}),
                ):
                    with pytest.raises(psycopg.Error, match="the idempotency key must be"):
                        named(conn, schema, function, idempotency_key=bad, **args)
        assert [r.id for r in app.list_runs().items] == ["t"]
        assert [e.type for e in app.get_events("t")] == ["created"]
    finally:
        with psycopg.connect(postgres_database.url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_no_function_is_executable_by_public_and_every_one_pins_its_search_path(
    app: App, conn: psycopg.Connection, postgres_database
) -> None:  # type: ignore[no-untyped-def]
    rows = conn.execute(
        """
        SELECT p.proname, p.proconfig, p.prosecdef,
               has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
        FROM pg_proc p WHERE p.pronamespace = %s::regnamespace
        """,
        (postgres_database.schema,),
    ).fetchall()
    assert len(rows) > 15
    producers = {"start_run", "signal_run", "cancel_run", "publish"}
    for name, config, definer, public_may in rows:
        assert not public_may, name
        if name == "perdure_now":  # the clock: no SET clause, so the planner inlines it
            assert config is None and not definer
            continue
        assert any(c.startswith("search_path=") for c in config or []), name
        assert definer == (name in producers), name
