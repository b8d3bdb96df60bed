"""Retrying and forking an ended DAG-flow run on SQLite (`Backend.retry_run` and
`Backend.fork_run` of a flow run). The pure planner decides what runs again
(`perdure.flows.planner.rerun`, `fork_copies`); this module writes it, in the
caller's transaction."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ...errors import ValidationError
from ...flows.planner import rerun
from ...records import Run
from .._flow_forks import fork_start
from ._convert import to_run
from ._flows import FLOW_QUERIES as Q
from ._flows import advance_run, flow_steps, get_flow, start_flow_in
from ._rows import add_event
from ._session import QUERIES, Session

__all__ = ["fork_flow", "retry_flow"]


def retry_flow(s: Session, row: sqlite3.Row, from_step: str | None, by: str, now: float) -> Run:
    """Run the ended flow run ``row`` again: the steps `rerun` names, its completed
    steps' outputs kept. A step whose input is kept runs its tasks again in place
    (their ids, and so their idempotency keys, stay; each gets a ``retried`` event);
    any other waits for its dependencies and gets new tasks. The run is ``running``
    with ``attempt + 1`` and a ``retried`` event listing the steps."""
    run_id = row["id"]
    shape = get_flow(s, row["workflow"], row["version"])
    assert shape is not None  # shapes are never deleted while runs use them
    states = s.all(Q["flow_states"], {"run_id": run_id})
    statuses = {state["step"]: state["status"] for state in states}
    if from_step is not None and from_step not in statuses:
        raise ValidationError(f"flow run {run_id} has no step {from_step!r}")
    with_tasks = {state["step"] for state in states if state["task_count"] > 0}
    plan = rerun(shape, statuses, with_tasks, from_step)
    attempt = row["attempt"] + 1
    rerun_tasks = 0
    for name in plan.steps:
        params: dict[str, Any] = {"run_id": run_id, "step": name, "now": now}
        if name in plan.in_place:
            tasks = s.all(Q["tasks_to_rerun"], {**params, "all": name in plan.forced})
            for task in tasks:
                s.run(Q["rerun_task"], {"id": task["id"], "now": now})
                add_event(s, task["id"], "retried", {"by": by, "attempt": attempt}, now)
            s.run(Q["restart_flow_state"], {**params, "count": len(tasks)})
            rerun_tasks += len(tasks)
        else:
            s.run(Q["drop_step_tasks"], params)
            s.run(Q["recreate_flow_state"], params)
    s.run(Q["reopen_flow_run"], {"id": run_id, "now": now})
    data = {"from_step": from_step, "steps": list(plan.steps), "by": by, "attempt": attempt}
    add_event(s, run_id, "retried", data, now)
    if rerun_tasks:
        s.notify("wake", run_id)
    advance_run(s, shape, run_id, now)  # the steps ready now get their tasks
    reopened = s.one(QUERIES["get_run"], {"id": run_id})
    assert reopened is not None
    return to_run(reopened)


def fork_flow(
    s: Session,
    source: sqlite3.Row,
    asked: tuple[str, str | None, str | None, int | None, str],
    now: float,
) -> Run:
    """The fork of the flow run ``source`` that ``asked`` for (`fork_start`)."""
    shape = get_flow(s, source["workflow"], source["version"])
    version = asked[3]
    target = shape if version is None else get_flow(s, source["workflow"], version)
    fork = fork_start(
        to_run(source),
        (shape, target),
        {
            step.name: step.output
            for step in flow_steps(s, source["id"])
            if step.status == "completed"
        },
        [
            (state["step"], state["concurrency_key"], state["fifo_key"], state["rate_key"])
            for state in s.all(Q["flow_states"], {"run_id": source["id"]})
            if state["concurrency_key"] is not None
        ],
        asked,
    )
    result = start_flow_in(s, fork.new, None, now, fork.copied)
    if not result.created:
        raise ValidationError(f"run id {fork.new.id!r} is taken")
    s.run(Q["note_fork"], {"id": fork.new.id, "origin": json.dumps(fork.origin)})
    return result.run
