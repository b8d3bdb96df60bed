"""Forking an ended DAG-flow run on PostgreSQL (`Backend.fork_run` of a flow run):
`fork_start` says what the fork starts with, and ``start_flow_run`` starts it with
those steps completed."""

from __future__ import annotations

import json

from ...errors import ValidationError
from ...records import Run
from .._flow_forks import fork_start
from ._conn import QUERIES, PgConnections
from ._convert import created_from_row, flow_start_params
from ._flows import Q, flow_steps, get_flow

__all__ = ["fork_flow"]


async def fork_flow(
    db: PgConnections, source: Run, asked: tuple[str, str | None, str | None, int | None, str]
) -> Run:
    """The fork of the flow run ``source`` that ``asked`` for (`fork_start`)."""
    shape = await get_flow(db, source.workflow, source.version)
    version = asked[3]
    target = shape if version is None else await get_flow(db, source.workflow, version)
    steps = await flow_steps(db, source.id) or []
    keys = await db.all(Q["flow_state_keys"], {"run_id": source.id})
    fork = fork_start(
        source,
        (shape, target),
        {step.name: step.output for step in steps if step.status == "completed"},
        [(step, lane, fifo, rate) for step, lane, fifo, rate in keys],
        asked,
    )
    params = flow_start_params(fork.new) | {
        "copied": json.dumps(fork.copied),
        "origin": json.dumps(fork.origin),
    }
    row = await db.one(QUERIES["fork_flow_run"], params)
    assert row is not None
    result = created_from_row(row)
    if not result.created:
        raise ValidationError(f"run id {fork.new.id!r} is taken")
    return result.run
