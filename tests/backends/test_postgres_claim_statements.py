"""What a claim costs the worker: one statement that commits without waiting for its
WAL flush (``commit_unsynced()`` in its SQL, as lease renewals do, and only those),
whose text psycopg parses once (its cache keeps queries up to 4 KB; a longer one is
parsed again on every call, about a third of a millisecond of the worker's CPU)."""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from perdure.backends.postgres._conn import QUERIES
from perdure.backends.postgres._convert import limited_claim_params, plain_claim_params
from perdure.backends.postgres._flows import Q as FLOW_QUERIES
from perdure.records import ClaimParams, WorkflowLimits

pytestmark = pytest.mark.postgres


def _setting_after(
    conn: psycopg.Connection[Any], query: LiteralString, params: dict[str, Any]
) -> tuple[int, str]:
    """Run ``query`` in a transaction block: its rows, and synchronous_commit before
    the commit (then roll back)."""
    with conn.transaction(force_rollback=True):
        rows = conn.execute(query, params).fetchall()
        setting = conn.execute("SHOW synchronous_commit").fetchone()
    assert setting is not None
    return len(rows), str(setting[0])


@pytest.fixture
def conn(postgres_backend, postgres_database):  # type: ignore[no-untyped-def]
    with psycopg.connect(postgres_database.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(postgres_database.schema))
        )
        for workflow, key in (("plain", None), ("limited", "")):
            conn.execute(
                "INSERT INTO runs (id, workflow, version, status, input, priority, available_at,"
                " retention_days, concurrency_key)"
                " SELECT new_run_id(), %s, 1, 'pending', to_jsonb(g), 100, now(), 30, %s"
                " FROM generate_series(1, 3) g",
                (workflow, key),
            )
        yield conn


def _claim(workflow: str) -> dict[str, Any]:
    return {
        "workflows": [workflow],
        "versions": [1],
        "worker": "w1",
        "limit": 2,
        "lease": 30.0,
        **plain_claim_params(),
    }


def test_a_claim_commits_unsynced(conn: psycopg.Connection[Any]) -> None:
    assert _setting_after(conn, QUERIES["claim_runs"], _claim("plain")) == (2, "off")


def test_a_limited_claim_commits_unsynced(conn: psycopg.Connection[Any]) -> None:
    params = ClaimParams("w1", (("limited", 1),), 2, 30.0, (WorkflowLimits("limited", 5),))
    values = _claim("limited") | limited_claim_params(params)
    assert _setting_after(conn, QUERIES["claim_runs_limited"], values) == (2, "off")


def test_a_lease_renewal_commits_unsynced(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO workers (id, host, pid, concurrency, started_at, last_seen_at)"
        " VALUES ('w1', 'h', 1, 1, now(), now())"
    )
    claimed = conn.execute(QUERIES["claim_runs"], _claim("plain")).fetchall()
    held = conn.execute(
        "SELECT id, lease_token FROM runs WHERE id = ANY(%s)", ([row[0] for row in claimed],)
    ).fetchall()
    renewal = {
        "worker": "w1",
        "ids": [row[0] for row in held],
        "tokens": [row[1] for row in held],
        "lease": 30.0,
    }
    assert _setting_after(conn, QUERIES["extend_leases"], renewal) == (2, "off")


def test_other_writes_wait_for_the_flush(conn: psycopg.Connection[Any]) -> None:
    conn.execute(QUERIES["claim_runs"], _claim("plain")).fetchall()
    released = _setting_after(conn, QUERIES["release_orphans"], {"worker": "w1", "ids": []})
    assert released == (2, "on")


def test_every_query_is_parsed_once() -> None:
    too_long = {
        name: len(query.encode())
        for name, query in (QUERIES | FLOW_QUERIES).items()
        if len(query.encode()) > MAX_CACHED_STATEMENT_LENGTH
    }
    assert not too_long, f"over psycopg's parse cache ({MAX_CACHED_STATEMENT_LENGTH} bytes)"
