"""A bulk-loaded backlog does not leave claims with stale planner statistics."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from perdure.backends.base import Backend
from perdure.records import ClaimParams, WorkerInfo

pytestmark = pytest.mark.postgres


async def test_a_worker_start_analyzes_a_freshly_loaded_backlog(
    postgres_backend: Backend,
    postgres_database,  # type: ignore[no-untyped-def]
) -> None:
    schema = sql.Identifier(postgres_database.schema)
    with psycopg.connect(postgres_database.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.runs (id, workflow, version, status, input, priority,"
                " available_at, retention_days)"
                " SELECT {}.new_run_id(), 'backlog', 1, 'pending', to_jsonb(g), 100, now(), 30"
                " FROM generate_series(1, 20000) g"
            ).format(schema, schema)
        )

        def analyzed() -> bool:
            row = conn.execute(
                "SELECT reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = 'runs'",
                (postgres_database.schema,),
            ).fetchone()
            return row is not None and row[0] >= 20000 * 0.9

        assert not analyzed()
        now = await postgres_backend.now()
        await postgres_backend.register_worker(
            WorkerInfo("w1", "h", 1, ("backlog@1",), 1, now, now)
        )
        assert analyzed()
        plan = conn.execute(
            sql.SQL(
                "EXPLAIN SELECT id FROM {}.runs r WHERE r.status IN ('pending','waiting','running')"
                " AND r.concurrency_key IS NULL"
                " AND r.available_at <= now() AND (r.workflow, r.version) IN"
                " (SELECT * FROM unnest(ARRAY['backlog'], ARRAY[1]))"
                " ORDER BY r.priority, r.available_at LIMIT 10 FOR UPDATE OF r SKIP LOCKED"
            ).format(schema)
        ).fetchall()
        assert "runs_claim_idx" in "\n".join(row[0] for row in plan)
    claims = await postgres_backend.claim_runs(ClaimParams("w1", (("backlog", 1),), 10, 30))
    assert len(claims) == 10
