"""Plans that stay right without statistics: a task's completion reads its own row by
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
    """The generic plan of ``query`` (its %(name)s placeholders made $n), as JSON."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, query)
    conn.execute(sql.SQL("PREPARE planned AS {}").format(sql.SQL(text)))  # type: ignore[arg-type]
    try:
        values = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
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


@pytest.mark.parametrize("name", ["claim_on_complete", "claim_started_tasks"])
def test_a_completion_reads_runs_by_index_conditions_only(
    conn: psycopg.Connection[Any], name: str
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
    }
    scans = _scans_of_runs(_generic_plan(conn, FLOW_QUERIES[name], params))
    assert scans
    for scan in scans:
        if scan["Node Type"] == "ModifyTable":
            continue
        # Every read of runs is bounded by its index condition (the task's id, or its
        # flow run's tasks), never a filter over a whole index.
        assert "Index Cond" in scan, (name, scan["Node Type"], scan.get("Index Name"))
