"""PostgreSQL specifics of the limited claim: its plan on a 100k backlog, and fairness
at that scale."""

from __future__ import annotations

import json
from typing import Any

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
        {k: params[k] for k in ("workflows", "versions", "worker", "limit", "lease")}
        | {"keyed": False},
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


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", ()) for n in _nodes(child))]


async def test_a_claim_for_other_workflows_never_reads_a_limited_backlog(
    make_backend: BackendFactory,  # noqa: F811
    admin: psycopg.AsyncConnection[tuple[object, ...]],  # noqa: F811
) -> None:
    # The worker serves 'wf' under limits and 'other' without: the claim's search for
    # runs of 'other' goes through the index of runs without a lane, not past the
    # 100,000 runs of wf's lanes (it read them all on every claim before). The plan
    # is the generic one a worker's prepared claim runs, as auto_explain logs it.
    await make_backend()
    await _backlog(admin)
    claim = ClaimParams("w1", (("wf", 1), ("other", 1)), 10, 30.0, LIMITS)
    params = {
        "workflows": ["wf", "other"],
        "versions": [1, 1],
        "worker": "w1",
        "limit": 10,
        "lease": 30.0,
        **limited_claim_params(claim, stray=True),
    }
    plans: list[str] = []
    admin.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in (
        "SET plan_cache_mode = force_generic_plan",
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_format = 'json'",
        "SET auto_explain.log_level = 'notice'",
        "SET client_min_messages = 'notice'",
    ):
        await admin.execute(setting)
    await admin.execute("BEGIN")
    await admin.execute(QUERIES["claim_runs_limited"], params, prepare=True)
    await admin.execute("ROLLBACK")
    await admin.execute("SET auto_explain.log_min_duration = -1")
    (logged,) = [p for p in plans if "claim_served" in p]
    plan = json.loads(logged[logged.index("{") :])["Plan"]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "runs"]
    assert any(n.get("Index Name") == "runs_claim_idx" for n in scans), scans
    read = sum(
        n["Actual Rows"] * n["Actual Loops"] + n.get("Rows Removed by Filter", 0)
        for n in scans
        if n.get("Index Name") != "runs_pkey"
    )
    assert read < 1_000, scans
    assert not any(n["Node Type"] == "Seq Scan" for n in scans), scans
