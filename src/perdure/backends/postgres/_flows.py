"""DAG flows on PostgreSQL: storing shapes (through the public ``create_flow`` /
``add_step`` functions, so Python and SQL share one validation), starting flow runs
(``start_flow_run``) and reading a flow run's steps. The rule that ends a task runs
inside the database (``flow_task_ended``, from ``child_ended``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg

from ...errors import ValidationError
from ...flows.definition import FlowShape, StepShape
from ...records import (
    Claim,
    ClaimParams,
    Complete,
    CreateResult,
    FlowTask,
    NewRun,
    Step,
    Transition,
)
from .._sqlfiles import load_queries
from ._conn import QUERIES, PgConnections, pipelined_transaction
from ._convert import claim_from_row, created_from_row, flow_start_params

__all__ = [
    "claim_on_complete",
    "claimed_on_complete",
    "flow_steps",
    "get_flow",
    "handed_at_start",
    "handed_before",
    "register_flows",
    "start_flow",
]

Q = load_queries(__package__, "flows.sql")


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def claim_on_complete(t: Transition) -> tuple[str, str, dict[str, Any]] | None:
    """Claim on complete (`Transition.claim`): the statements to send before and
    after the transition's own, in its transaction, with their parameters; None for a
    transition that claims nothing (no ``claim``, or no `Complete`)."""
    claim = t.claim
    if claim is None or not isinstance(t.outcome, Complete):
        return None
    params = {
        "run_id": t.run_id,
        "token": t.lease_token,
        "workflows": [w for w, _ in claim.workflows],
        "versions": [v for _, v in claim.workflows],
        "worker": claim.worker_id,
        "limit": max(0, int(claim.limit)),
        "lease": float(claim.lease_seconds),
    }
    return Q["quiet_flow_wake"], Q["claim_on_complete"], params


async def handed_before(conn: psycopg.AsyncConnection[Any], t: Transition) -> tuple[Claim, ...]:
    """For a claim on complete whose transition was fenced out: the tasks an earlier
    attempt of it leased to the worker, if that attempt committed (a retry after its
    answer was lost); none otherwise."""
    assert t.claim is not None
    params = {"run_id": t.run_id, "token": t.lease_token, "worker": t.claim.worker_id}
    cur = await conn.execute(Q["handed_before"], params)
    return claimed_on_complete(await cur.fetchall())


async def handed_at_start(db: PgConnections, run_id: str, worker_id: str) -> tuple[Claim, ...]:
    """See `Backend.handed_at_start`."""
    rows = await db.all(Q["handed_at_start"], {"run_id": run_id, "worker": worker_id})
    return claimed_on_complete(rows)


def claimed_on_complete(rows: list[Any]) -> tuple[Claim, ...]:
    """The claims of a claim_on_complete answer (its all-NULL row is no claim)."""
    return tuple(claim_from_row(row) for row in rows if row[0] is not None)


async def get_flow(db: PgConnections, name: str, version: int | None) -> FlowShape | None:
    """The stored shape of that version (None: the highest), or None."""
    row = await db.one(Q["get_flow"], {"name": name, "version": version})
    if row is None:
        return None
    flow, ver, max_attempts, base_delay, timeout, max_tasks, steps = row
    return FlowShape(
        flow,
        ver,
        max_attempts,
        base_delay,
        timeout,
        tuple(
            StepShape(step, tuple(deps), map_over, attempts, delay, limit, *limits)
            for step, map_over, attempts, delay, limit, *limits, deps in steps
        ),
        max_tasks,
    )


async def register_flows(db: PgConnections, shapes: list[FlowShape]) -> None:
    """Store each shape not stored yet (one transaction each); a different stored
    shape of the same version raises `ValidationError`."""
    for shape in shapes:
        stored = await get_flow(db, shape.name, shape.version)
        if stored is not None:
            if stored.to_dict() != shape.to_dict():
                raise ValidationError(
                    f"flow {shape.name!r} version {shape.version} is stored with another "
                    "shape: a changed flow needs a new version"
                )
            continue
        async with db.connection() as conn, conn.transaction():
            await conn.execute(
                Q["create_flow"],
                {
                    "name": shape.name,
                    "max_attempts": shape.max_attempts,
                    "base_delay": shape.base_delay,
                    "timeout": shape.timeout,
                    "version": shape.version,
                    "max_tasks": shape.max_tasks,
                },
            )
            for step in shape.steps:
                await conn.execute(
                    Q["add_step"],
                    {
                        "flow": shape.name,
                        "step": step.name,
                        "deps": list(step.depends_on),
                        "max_attempts": step.max_attempts,
                        "base_delay": step.base_delay,
                        "timeout": step.timeout,
                        "step_type": "single" if step.map_over is None else "map",
                        "map_over": step.map_over,
                        "version": shape.version,
                        "max_tasks": step.max_tasks,
                    },
                )
                if step.limited:
                    await conn.execute(
                        Q["set_step_limits"],
                        {
                            "flow": shape.name,
                            "version": shape.version,
                            "step": step.name,
                            "concurrency": step.concurrency,
                            "key_concurrency": step.key_concurrency,
                            "rate_limit": step.rate_limit,
                            "rate_period": step.rate_period,
                            "rate_keyed": step.rate_keyed,
                            "fifo": step.fifo,
                        },
                    )


async def start_flow(db: PgConnections, new: NewRun, claim: ClaimParams) -> CreateResult:
    """Start a flow run through ``start_flow_run`` and lease the tasks it starts to the
    worker of ``claim`` in the same transaction (``claim_started_tasks``). A start
    without a claim is a `Starts.start_flow`."""
    params = flow_start_params(new)
    params.update(
        workflows=[w for w, _ in claim.workflows],
        versions=[v for _, v in claim.workflows],
        worker=claim.worker_id,
        limit=max(0, int(claim.limit)),
        lease=float(claim.lease_seconds),
    )
    async with db.connection() as conn:
        async with pipelined_transaction(conn):
            await conn.execute(Q["quiet_start_wake"], params)
            started = await conn.execute(QUERIES["start_flow_run"], params)
            leased = await conn.execute(Q["claim_started_tasks"], params)
        row = await started.fetchone()
        assert row is not None
        claimed = claimed_on_complete(await leased.fetchall())
    return replace(created_from_row(row), claimed=claimed)


async def flow_steps(db: PgConnections, run_id: str) -> list[Step] | None:
    """A flow run's steps with their tasks; None if ``run_id`` is no flow run."""
    kind = await db.one(Q["run_kind"], {"run_id": run_id})
    if kind is None or kind[0] != "flow":
        return None
    steps = []
    for step, status, output, error, started, completed, tasks in await db.all(
        Q["flow_steps"], {"run_id": run_id}
    ):
        mine = tuple(_task(*t) for t in tasks)
        steps.append(
            Step(
                name=step,
                kind="flow-task",
                status=status,
                output=output,
                error=error,
                attempts=sum(t.attempts for t in mine),
                started_at=started,
                completed_at=completed,
                tasks=mine,
            )
        )
    return steps


def _task(
    index: int,
    status: str,
    attempt: int,
    output: Any,
    error: Any,
    task_id: str,
    started: Any,
    completed: Any,
) -> FlowTask:
    attempts = 0 if started is None else attempt - (status in ("pending", "waiting"))
    return FlowTask(
        index, status, attempts, output, error, task_id, _time(started), _time(completed)
    )
