"""DAG flows from SQL alone (PostgreSQL), as a worker in any language would drive
them: define, start, claim, complete and fail tasks over a plain connection; the
same validation as Python; stale lease tokens change nothing; and a Python worker
serving only the steps it has handlers for, beside a SQL worker serving the rest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from perdure import App
from perdure.flows.dsl import TaskContext

from ..engine.helpers import wait_for

pytestmark = pytest.mark.postgres


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


def one(conn: psycopg.Connection, query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row


def test_a_flow_driven_entirely_from_sql(conn: psycopg.Connection, app: App) -> None:
    assert one(conn, "SELECT create_flow('analyze_website', max_attempts => 2, base_delay => 0)")[0]
    assert not one(
        conn, "SELECT create_flow('analyze_website', max_attempts => 2, base_delay => 0)"
    )[0]
    one(conn, "SELECT add_step('analyze_website', 'website')")
    one(conn, "SELECT add_step('analyze_website', 'sentiment', deps => ARRAY['website'])")
    one(conn, "SELECT add_step('analyze_website', 'summary', deps => ARRAY['website'])")
    one(
        conn,
        "SELECT add_step('analyze_website', 'pages', deps => ARRAY['website'], step_type => 'map',"
        " map_over => 'website')",
    )
    one(
        conn,
        "SELECT add_step('analyze_website', 'save',"
        " deps => ARRAY['sentiment', 'summary', 'pages'])",
    )
    assert not one(conn, "SELECT add_step('analyze_website', 'website')")[0]  # identical: no-op

    run_id, status, remaining = one(
        conn, "SELECT * FROM start_flow('analyze_website', '{\"url\": \"https://example.com\"}')"
    )
    assert (status, remaining) == ("running", 5)

    def claim(*steps: str) -> list[Any]:
        return conn.execute(
            "SELECT * FROM claim_tasks('analyze_website', 'sql-1', qty => 10, steps => %s)",
            (list(steps) or None,),
        ).fetchall()

    ((rid, step, index, value, attempt, token),) = claim()
    assert (rid, step, index, attempt) == (run_id, "website", 0, 1)
    assert value == {"run": {"url": "https://example.com"}}
    assert not claim()  # nothing else is ready
    # the first attempt fails and is retried (base_delay 0: at once)
    assert one(conn, "SELECT fail_task(%s, %s, %s, 'timed out', %s)", rid, step, index, token)[0]
    ((_, _, _, _, attempt, token2),) = claim()
    assert attempt == 2
    # the stale token of the first attempt changes nothing and says so
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    stale = one(conn, "SELECT complete_task(%s, 'website', 0, '[\"a\", \"b\"]', %s)", rid, token)
    assert stale[0] is False and "nothing changed" in notices[-1]
    assert one(conn, "SELECT complete_task(%s, 'website', 0, '[\"a\", \"b\"]', %s)", rid, token2)[0]

    ready = claim("sentiment", "pages")  # a worker serving two steps only
    assert sorted((r[1], r[2]) for r in ready) == [("pages", 0), ("pages", 1), ("sentiment", 0)]
    for _, step, index, value, _, token in ready:
        output = {"score": 0.8} if step == "sentiment" else f"page {value}"
        assert one(
            conn,
            "SELECT complete_task(%s, %s, %s, %s, %s)",
            rid,
            step,
            index,
            json.dumps(output),
            token,
        )[0]
    ((_, step, index, value, _, token),) = claim()
    assert step == "summary" and value["website"] == ["a", "b"]
    one(conn, "SELECT complete_task(%s, 'summary', 0, '\"short\"', %s)", rid, token)
    ((_, step, index, value, _, token),) = claim()
    assert step == "save"
    assert value == {
        "run": {"url": "https://example.com"},
        "sentiment": {"score": 0.8},
        "summary": "short",
        "pages": ["page a", "page b"],
    }
    one(conn, "SELECT complete_task(%s, 'save', 0, '{\"ok\": true}', %s)", rid, token)
    status, output = one(conn, "SELECT status, output FROM runs WHERE id = %s", rid)
    assert (status, output) == ("completed", {"save": {"ok": True}})
    assert app.result(rid, timeout=5) == {"save": {"ok": True}}
    assert [s.attempts for s in app.get_steps(rid)] == [2, 1, 1, 2, 1]


def test_sql_definitions_are_validated_like_python(conn: psycopg.Connection) -> None:
    one(conn, "SELECT create_flow('f')")
    one(conn, "SELECT add_step('f', 'a')")
    bad = [
        ("SELECT add_step('f', 'b', deps => ARRAY['zz'])", "unknown step 'zz'"),
        ("SELECT add_step('f', 'b', deps => ARRAY['b'])", "itself"),
        ("SELECT add_step('f', 'a', deps => ARRAY['a'])", "itself"),
        ("SELECT add_step('f', 'a', max_attempts => 5)", "another definition"),
        (
            "SELECT add_step('f', 'm', deps => ARRAY['a'], step_type => 'map', map_over => 'x')",
            "neither 'run'",
        ),
        ("SELECT add_step('f', 'bad:name')", "invalid step name"),
        ("SELECT add_step('nope', 'a')", "no flow 'nope'"),
        ("SELECT create_flow('f', max_attempts => 0)", "max_attempts"),
        ("SELECT create_flow('f', timeout => 9)", "other options"),
        ("SELECT * FROM start_flow('nope')", "no flow 'nope'"),
        ("SELECT * FROM start_flow('f', id => 'tenant/42')", "the run id must be"),
        ("SELECT * FROM start_flow('f', id => '..')", "the run id must be"),
        ("SELECT * FROM start_flow('f', idempotency_key => 'k/../x')", "idempotency key must"),
        ("SELECT * FROM claim_tasks('f', 'w', qty => 0)", "qty"),
    ]
    for query, message in bad:
        with pytest.raises(psycopg.Error, match=message) as info:
            conn.execute(query)
        assert info.value.sqlstate == "PD001"
    assert one(conn, "SELECT count(*) FROM flow_steps WHERE flow = 'f'")[0] == 1  # nothing stored
    assert one(conn, "SELECT count(*) FROM runs")[0] == 0
    one(conn, "SELECT * FROM start_flow('f')")
    with pytest.raises(psycopg.Error, match="has runs already"):
        conn.execute("SELECT add_step('f', 'later', deps => ARRAY['a'])")  # a run keeps its shape


def test_a_python_worker_serves_only_its_steps(conn: psycopg.Connection, app: App) -> None:
    flow = app.flow("mixed", base_delay=0)

    @flow.step
    async def website(ctx: TaskContext, input: Any) -> dict[str, str]:
        return {"content": "hello " + input["run"]["name"]}

    flow.external_step("sentiment", depends_on=[website])  # served by another language

    @flow.step(depends_on=["sentiment"])
    async def save(ctx: TaskContext, input: Any) -> str:
        return f"{input['sentiment']['score']}"

    with app.worker():
        handle = app.start(flow, {"name": "ada"})
        # the SQL worker polls, as a Node or Go worker would
        row = wait_for(
            lambda: conn.execute(
                "SELECT * FROM claim_tasks('mixed', 'node-1', steps => ARRAY['sentiment'])"
            ).fetchone()
        )
        assert row is not None
        rid, step, index, value, _, token = row
        assert value["website"] == {"content": "hello ada"}
        one(
            conn,
            "SELECT complete_task(%s, %s, %s, '{\"score\": 0.9}', %s)",
            rid,
            step,
            index,
            token,
        )
        assert handle.result(timeout=30) == {"save": "0.9"}
    events = app.get_events(f"{handle.id}:sentiment:0")
    assert any(e.type == "claimed" and e.data["worker"] == "node-1" for e in events)


def test_the_sql_producer_start_run_starts_a_flow_as_a_flow(
    conn: psycopg.Connection, app: App
) -> None:
    one(conn, "SELECT create_flow('f', base_delay => 0)")
    one(conn, "SELECT add_step('f', 'each', step_type => 'map')")  # over the run
    run_id = one(conn, "SELECT start_run('f', '[]')")[0]
    assert app.get_run(run_id).status == "completed"  # an empty map: done at once
    assert app.result(run_id, timeout=5) == {"each": []}
    with pytest.raises(psycopg.Error, match="start at once"):
        conn.execute("SELECT start_run('f', '[1]', run_at => now() + interval '1 hour')")


def test_a_lapsed_lease_counts_as_an_attempt(conn: psycopg.Connection, app: App) -> None:
    one(conn, "SELECT create_flow('slow', max_attempts => 2, base_delay => 0)")
    one(conn, "SELECT add_step('slow', 'only')")
    run_id = one(conn, "SELECT run_id FROM start_flow('slow')")[0]

    def claim() -> Any:
        return conn.execute("SELECT * FROM claim_tasks('slow', 'w', lease => 0.2)").fetchone()

    first = claim()
    assert first is not None and first[4] == 1
    second = wait_for(claim)  # the lease lapsed: claimable again, as attempt 2
    assert second[4] == 2
    assert not one(conn, "SELECT complete_task(%s, 'only', 0, '1', %s)", run_id, first[5])[0]
    # the last attempt lapses too: the task fails, and so does the run
    wait_for(lambda: claim() is None and app.get_run(run_id).status == "failed")
    error = app.get_run(run_id).error
    assert error is not None and error["step"] == "only"
    assert error["cause"]["type"] == "TimeoutError"


def test_flow_runs_under_way_keep_their_order_across_the_upgrade_that_counts_deps(
    conn: psycopg.Connection, app: App
) -> None:
    # Migration 0010 added flow_states.remaining_deps (what a step still waits for)
    # and counted it for runs under way. Rebuild that moment: a diamond whose root
    # completed and one of its three middle steps too, the column dropped, then the
    # migration applied as an upgrade applies it.
    from importlib import resources

    one(conn, "SELECT create_flow('upgrade_diamond', base_delay => 0)")
    one(conn, "SELECT add_step('upgrade_diamond', 'a')")
    for step in ("b", "c", "d"):
        one(conn, "SELECT add_step('upgrade_diamond', %s, deps => ARRAY['a'])", step)
    one(conn, "SELECT add_step('upgrade_diamond', 'e', deps => ARRAY['b', 'c', 'd'])")
    run_id = one(conn, "SELECT run_id FROM start_flow('upgrade_diamond', '1')")[0]

    def claim() -> list[Any]:
        return conn.execute(
            "SELECT * FROM claim_tasks('upgrade_diamond', 'sql-1', qty => 10)"
        ).fetchall()

    def complete(task: Any) -> None:
        _, step, index, _, _, token = task
        assert one(conn, "SELECT complete_task(%s, %s, %s, '1', %s)", run_id, step, index, token)[0]

    (root,) = claim()
    complete(root)
    middle = sorted(claim(), key=lambda t: t[1])
    assert [t[1] for t in middle] == ["b", "c", "d"]
    complete(middle[0])

    migration = (
        resources.files("perdure.backends.postgres")
        .joinpath("sql", "migrations", "0010_flow_remaining_deps.sql")
        .read_text("utf-8")
    )
    conn.execute("ALTER TABLE flow_states DROP COLUMN remaining_deps")
    conn.execute(migration)
    counts: dict[str, int] = dict(
        conn.execute(
            "SELECT step, remaining_deps FROM flow_states WHERE run_id = %s AND status = 'created'",
            (run_id,),
        ).fetchall()
    )
    assert counts == {"e": 2}

    complete(middle[1])
    assert not claim()  # e still waits for d
    complete(middle[2])
    (last,) = claim()
    assert last[1] == "e" and last[3] == {"run": 1, "b": 1, "c": 1, "d": 1}
    complete(last)
    assert app.result(run_id, timeout=5) == {"e": 1}


def test_a_task_lease_token_is_random_and_no_event_shows_it(
    conn: psycopg.Connection, app: App
) -> None:
    one(conn, "SELECT create_flow('tokens')")
    one(conn, "SELECT add_step('tokens', 'each', step_type => 'map')")
    run_id = one(conn, "SELECT run_id FROM start_flow('tokens', %s::jsonb)", json.dumps([1] * 50))[
        0
    ]
    tasks = conn.execute("SELECT * FROM claim_tasks('tokens', 'sql-1', qty => 50)").fetchall()
    now_ms = one(conn, "SELECT (extract(epoch FROM perdure_now()) * 1000)::bigint")[0]
    tokens = [task[5] for task in tasks]
    assert len(set(tokens)) == 50
    assert all(abs(token - now_ms) > 10**7 for token in tokens)
    assert len({(token >> 48) & 0xFFFF for token in tokens}) > 40
    shown = conn.execute(
        "SELECT e.data FROM events e JOIN runs r ON r.id = e.run_id"
        " WHERE r.parent_id = %s AND e.type = 'claimed'",
        (run_id,),
    ).fetchall()
    assert [data for (data,) in shown] == [{"worker": "sql-1"}] * 50
