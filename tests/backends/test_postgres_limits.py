"""PostgreSQL specifics of the limited claim: its plan on a 100k backlog, and fairness
at that scale."""

from __future__ import annotations

import psycopg
import pytest

from perdure.backends.postgres._conn import QUERIES
from perdure.backends.postgres._convert import limited_claim_params
from perdure.records import ClaimParams, WorkflowLimits

from .test_postgres import BackendFactory, admin, make_backend, schema  # noqa: F401

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

LIMITS = (WorkflowLimits("wf", concurrency=50, key_concurrency=5),)


async def _backlog(admin: psycopg.AsyncConnection[tuple[object, ...]]) -> None:  # noqa: F811
    # One tenant's backlog of 100,000 due runs, ten other tenants with one run each,
    # and 20,000 finished runs.
    await admin.execute(
        """
        INSERT INTO runs (id, workflow, version, status, input, available_at, concurrency_key,
                          completed_at)
        SELECT 'a' || lpad(i::text, 25, '0'), 'wf', 1,
               CASE WHEN i <= 100000 THEN 'pending' ELSE 'completed' END, '{}',
               now() - interval '1 hour' + i * interval '1 millisecond', 'big',
               CASE WHEN i > 100000 THEN now() END
        FROM generate_series(1, 120000) AS i
        """
    )
    await admin.execute(
        """
        INSERT INTO runs (id, workflow, version, status, input, available_at, concurrency_key)
        SELECT 'b' || lpad(i::text, 25, '0'), 'wf', 1, 'pending', '{}', now(), 'small' || i
        FROM generate_series(1, 10) AS i
        """
    )
    await admin.execute("ANALYZE runs")


async def test_limited_claim_uses_the_lane_index_on_a_100k_backlog(
    make_backend: BackendFactory,  # noqa: F811
    admin: psycopg.AsyncConnection[tuple[object, ...]],  # noqa: F811
) -> None:
    await make_backend()
    await _backlog(admin)
    claim = ClaimParams("w1", (("wf", 1),), 10, 30.0, LIMITS)
    params = {
        "workflows": ["wf"],
        "versions": [1],
        "worker": "w1",
        "limit": 10,
        "lease": 30.0,
        **limited_claim_params(claim, stray=True),
    }
    # The claim's runs come from limited_candidates(): auto_explain shows the plans of
    # the statements it runs (nested statements, sent back as notices).
    plans: list[str] = []
    admin.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_level = 'notice'",
        "SET client_min_messages = 'notice'",
    ):
        await admin.execute(setting)
    await admin.execute("BEGIN")
    await admin.execute(QUERIES["claim_runs_limited"], params)
    await admin.execute("ROLLBACK")
    plan = "\n".join(plans)
    assert "runs_lane_idx" in plan, plan
    assert "runs_lane_running_idx" in plan, plan
    assert "Seq Scan on runs" not in plan, plan
    await admin.execute("SET auto_explain.log_min_duration = -1")
    # The plain claim keeps its plan: the claim index, no lane index.
    cur = await admin.execute(
        b"EXPLAIN " + QUERIES["claim_runs"].encode(),
        {k: params[k] for k in ("workflows", "versions", "worker", "limit", "lease")},
    )
    plain = "\n".join(str(row[0]) for row in await cur.fetchall())
    assert "runs_claim_idx" in plain and "runs_lane" not in plain, plain


async def test_one_tenants_backlog_does_not_delay_another_tenants_run(
    make_backend: BackendFactory,  # noqa: F811
    admin: psycopg.AsyncConnection[tuple[object, ...]],  # noqa: F811
) -> None:
    backend = await make_backend()
    await _backlog(admin)
    claims = await backend.claim_runs(ClaimParams("w1", (("wf", 1),), 15, 30.0, LIMITS))
    ids = [c.run.id for c in claims]
    # The ten single runs of the small tenants come in this first claim, beside the
    # five the big tenant's key_concurrency allows.
    assert sorted(i for i in ids if i.startswith("b")) == [
        "b" + str(i).zfill(25) for i in range(1, 11)
    ]
    assert len([i for i in ids if i.startswith("a")]) == 5
