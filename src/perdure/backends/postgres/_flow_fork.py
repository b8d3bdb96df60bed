"""Forking an ended DAG-flow run on PostgreSQL (`Backend.fork_run` of a flow run): the
pure planner picks the steps the fork keeps (`perdure.flows.planner.fork_copies`),
and ``start_flow_run`` starts the new run with them completed."""

from __future__ import annotations

import json

from ...errors import ValidationError
from ...flows.planner import fork_copies
from ...records import NewRun, Run
from ._conn import QUERIES, PgConnections
from ._convert import created_from_row, flow_start_params
from ._flows import Q, flow_steps, get_flow

__all__ = ["fork_flow"]


async def fork_flow(
    db: PgConnections,
    source: Run,
    new_id: str,
    before_step: str | None,
    input_json: str | None,
    version: int | None,
    by: str,
) -> Run:
    """A new run ``new_id`` of the flow run ``source``'s flow (its version unless
    ``version``; its input unless ``input_json``) that starts with the completed steps
    `fork_copies` keeps, and the source's task keys."""
    assert source.version is not None  # a flow run's version is fixed at its start
    shape = await get_flow(db, source.workflow, source.version)
    target = shape if version is None else await get_flow(db, source.workflow, version)
    if shape is None or target is None or target.version != (version or source.version):
        raise ValidationError(f"flow {source.workflow!r} has no version {version}")
    steps = await flow_steps(db, source.id) or []
    outputs = {step.name: step.output for step in steps if step.status == "completed"}
    copied = fork_copies(shape, target, outputs, before_step)
    keys = await db.all(Q["flow_state_keys"], {"run_id": source.id})
    new = NewRun(
        id=new_id,
        workflow=source.workflow,
        version=target.version,
        input_json=json.dumps(source.input) if input_json is None else input_json,
        priority=source.priority,
        retention_days=source.retention_days,
        step_keys=tuple((step, lane, fifo, rate) for step, lane, fifo, rate in keys),
    )
    origin = {"forked_from": source.id, "by": by}
    if before_step is not None:
        origin["from_step"] = before_step
    params = flow_start_params(new) | {"copied": json.dumps(copied), "origin": json.dumps(origin)}
    row = await db.one(QUERIES["fork_flow_run"], params)
    assert row is not None
    result = created_from_row(row)
    if not result.created:
        raise ValidationError(f"run id {new_id!r} is taken")
    return result.run
