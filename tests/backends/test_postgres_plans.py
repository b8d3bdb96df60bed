"""Plans: the engine's connections plan each statement once (generic plans), and
those plans stay right without statistics: a task's completion reads its own row by
key, whatever the planner knows. With autovacuum off, or before its first ANALYZE, a
generic plan costs every index alike; the lookup of the completed task once went
through the partial index of all tasks (``kind = 'task'``), filtering it for the id,
so each completion read every task ever run."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from perdure.backends.base import Backend
from perdure.backends.postgres._conn import QUERIES
from perdure.backends.postgres._convert import plain_claim_params
from perdure.backends.postgres._flows import Q as FLOW_QUERIES

pytestmark = pytest.mark.postgres

FLOW_ID = "flow-1"


@pytest.fixture
def conn(postgres_backend, postgres_database):  # type: ignore[no-untyped-def]
    with psycopg.connect(postgres_database.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(postgres_database.schema))
        )
        conn.execute(
            "INSERT INTO runs (id, workflow, version, status, input, priority, available_at,"
            " retention_days, kind) VALUES (%s, 'f', 1, 'running', '{}', 100, 'infinity', 30,"
            " 'flow')",
            (FLOW_ID,),
        )
        # A few ended tasks and no statistics (no ANALYZE): a fresh install, where a
        # connection makes the generic plan it keeps while the tasks grow to millions.
        conn.execute(
            "INSERT INTO runs (id, workflow, version, status, input, priority, available_at,"
            " retention_days, kind, parent_id, parent_step, task_index, lease_token)"
            " SELECT 'flow-' || g || ':a:0', 'f:a', 1, 'completed', '{}', 100, now(), 30,"
            " 'task', 'flow-' || g, 'a', 0, 1 FROM generate_series(2, 6) g"
        )
        conn.execute("SET plan_cache_mode = force_generic_plan")
        yield conn


def _generic_plan(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> Any:
    """The generic plan of ``query`` (its %(name)s placeholders made $n, NULL where
    ``params`` has no value), as JSON."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, query)
    conn.execute(sql.SQL("PREPARE planned AS {}").format(sql.SQL(text)))  # type: ignore[arg-type]
    try:
        values = sql.SQL(", ").join(sql.Literal(params.get(name)) for name in names)
        explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE planned ({})").format(values)
        row = conn.execute(explain).fetchone()
    finally:
        conn.execute("DEALLOCATE planned")
    assert row is not None
    return row[0][0]["Plan"]


def _scans_of_runs(node: Any) -> list[dict[str, Any]]:
    found = [node] if node.get("Relation Name") == "runs" else []
    for child in node.get("Plans", []):
        found += _scans_of_runs(child)
    return found


@pytest.mark.parametrize(
    "query",
    [
        pytest.param(FLOW_QUERIES["claim_on_complete"], id="claim_on_complete"),
        pytest.param(FLOW_QUERIES["claim_started_tasks"], id="claim_started_tasks"),
        pytest.param(QUERIES["claim_runs"], id="claim_runs"),
        pytest.param(QUERIES["apply_transition"], id="apply_transition"),
        pytest.param(QUERIES["get_run"], id="get_run"),
    ],
)
def test_a_hot_statement_reads_runs_by_index_conditions_only(
    conn: psycopg.Connection[Any], query: str
) -> None:
    params = {
        "run_id": "flow-2:a:0",
        "token": 1,
        "id": FLOW_ID,
        "limit": 10,
        "worker": "w1",
        "lease": 30.0,
        "workflows": ["f:a"],
        "versions": [1],
        "outcome": "complete",
        "steps": "[]",
        "events": "[]",
        "step_attempts": 0,
        "ord": 1,
        **plain_claim_params(),
    }
    scans = _scans_of_runs(_generic_plan(conn, query, params))
    assert scans
    for scan in scans:
        if scan["Node Type"] == "ModifyTable":
            continue
        # Every read of runs is bounded by its index condition (a run's id, a flow
        # run's tasks; a claim walks the claim index in order under its limit), never
        # a filter over a whole index or the table.
        assert "Index Cond" in scan, (scan["Node Type"], scan.get("Index Name"))


async def test_the_engine_connections_plan_each_statement_once(
    postgres_backend: Backend,
) -> None:
    # Left to PostgreSQL's choice, a transition was planned anew on every call.
    db = postgres_backend._db  # type: ignore[attr-defined]
    assert await db.one("SHOW plan_cache_mode") == ("force_generic_plan",)


async def test_a_listing_is_planned_for_its_filters_on_each_call(
    postgres_backend: Backend,
) -> None:
    db = postgres_backend._db  # type: ignore[attr-defined]
    assert await db.all("SHOW plan_cache_mode", custom_plan=True) == [("force_custom_plan",)]
    # Only for that statement: its transaction ended, and the setting with it.
    assert await db.one("SHOW plan_cache_mode") == ("force_generic_plan",)


def test_no_function_is_planned_again_on_every_call(conn: psycopg.Connection[Any]) -> None:
    # PostgreSQL before 18 keeps no plan for a SQL-language function it cannot inline,
    # and a SET clause (search_path) rules inlining out: such a function planned its
    # query on every call. flow_complete and a readiness check were, and took a third of
    # the server's time per DAG-flow task. PL/pgSQL keeps its plans.
    replanned = conn.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = current_schema()::regnamespace"
        " AND l.lanname = 'sql' AND p.proconfig IS NOT NULL ORDER BY 1"
    ).fetchall()
    assert replanned == []
    # And the one SQL function left is inlined: the clock seam.
    sql_functions = conn.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = current_schema()::regnamespace AND l.lanname = 'sql'"
    ).fetchall()
    assert sql_functions == [("perdure_now",)]
