"""DAG flows on SQLite: storing shapes, starting flow runs, and the rule that ends a
task (`task_ended`, called from the transaction that ends it). The decisions are the
pure planner's (`perdure.flows.planner`); this module only reads and writes rows.
Every function runs on the backend's thread with a `Session`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...errors import RunNotFound, ValidationError
from ...flows.definition import FlowShape, StepShape, task_workflow
from ...flows.planner import Advance, advance, step_output
from ...records import ClaimParams, CreateResult, FlowTask, NewRun, Step
from ...serialization import brief_error
from .._sqlfiles import load_queries
from ._claims import lease_new_tasks
from ._convert import dumps, loads, to_dt_opt, to_run
from ._json import json_equal
from ._reads import get_steps
from ._rows import add_event, cancel_descendants, insert_run, write_child_result
from ._session import QUERIES, Session

__all__ = [
    "advance_run",
    "child_ended",
    "flow_steps",
    "get_flow",
    "is_flow_run",
    "register_flows",
    "start_flow",
    "start_flow_in",
    "steps_or_journal",
    "task_ended",
]

FLOW_QUERIES = load_queries(__package__, "flows.sql")
Q = FLOW_QUERIES


# --------------------------------------------------------------------------- shapes


def get_flow(s: Session, name: str, version: int | None) -> FlowShape | None:
    """The stored shape of that version (None: the highest), or None."""
    if version is None:
        row = s.one(Q["get_flow_latest"], {"name": name})
    else:
        row = s.one(Q["get_flow_version"], {"name": name, "version": version})
    if row is None:
        return None
    params = {"name": row["name"], "version": row["version"]}
    deps: dict[str, list[str]] = {}
    for dep in s.all(Q["get_flow_deps"], params):
        deps.setdefault(dep["step"], []).append(dep["dep"])
    steps = tuple(
        StepShape(
            name=r["step"],
            depends_on=tuple(deps.get(r["step"], ())),
            map_over=r["map_over"],
            max_attempts=r["max_attempts"],
            base_delay=r["base_delay"],
            timeout=r["timeout"],
            concurrency=r["concurrency"],
            key_concurrency=r["key_concurrency"],
            rate_limit=r["rate_limit"],
            rate_period=r["rate_period"],
            rate_keyed=bool(r["rate_keyed"]),
            fifo=bool(r["fifo"]),
            max_tasks=r["max_tasks"],
        )
        for r in s.all(Q["get_flow_steps"], params)
    )
    return FlowShape(
        row["name"],
        row["version"],
        row["max_attempts"],
        row["base_delay"],
        row["timeout"],
        steps,
        row["max_tasks"],
    )


def register_flows(s: Session, shapes: list[FlowShape]) -> None:
    """Store each shape unless it is stored already; a different stored shape of the
    same version is refused (a changed shape needs a new version)."""
    with s.write() as now:
        for shape in shapes:
            stored = get_flow(s, shape.name, shape.version)
            if stored is not None:
                if stored.to_dict() != shape.to_dict():
                    raise ValidationError(
                        f"flow {shape.name!r} version {shape.version} is stored with another "
                        "shape: a changed flow needs a new version"
                    )
                continue
            s.run(
                Q["insert_flow"],
                {
                    "name": shape.name,
                    "version": shape.version,
                    "max_attempts": shape.max_attempts,
                    "base_delay": shape.base_delay,
                    "timeout": shape.timeout,
                    "max_tasks": shape.max_tasks,
                    "now": now,
                },
            )
            for index, step in enumerate(shape.steps):
                s.run(
                    Q["insert_flow_step"],
                    {
                        "flow": shape.name,
                        "version": shape.version,
                        "step": step.name,
                        "step_index": index,
                        "map_over": step.map_over,
                        "max_attempts": step.max_attempts,
                        "base_delay": step.base_delay,
                        "timeout": step.timeout,
                        "concurrency": step.concurrency,
                        "key_concurrency": step.key_concurrency,
                        "rate_limit": step.rate_limit,
                        "rate_period": step.rate_period,
                        "rate_keyed": int(step.rate_keyed),
                        "fifo": int(step.fifo),
                        "max_tasks": step.max_tasks,
                    },
                )
                for dep_index, dep in enumerate(step.depends_on):
                    s.run(
                        Q["insert_flow_dep"],
                        {
                            "flow": shape.name,
                            "version": shape.version,
                            "step": step.name,
                            "dep": dep,
                            "dep_index": dep_index,
                        },
                    )


# --------------------------------------------------------------------------- runs


def start_flow(s: Session, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
    """Create a flow run of the stored shape (``new.version`` None: the highest):
    its step states, and the tasks of its root steps, in one transaction; with
    ``claim``, those tasks leased to that worker."""
    with s.write() as now:
        return start_flow_in(s, new, claim, now)


def start_flow_in(
    s: Session,
    new: NewRun,
    claim: ClaimParams | None,
    now: float,
    copied: Mapping[str, Any] | None = None,
) -> CreateResult:
    """`start_flow` inside the caller's transaction; ``copied``: a fork's steps that
    are completed from the start, with their outputs."""
    shape = get_flow(s, new.workflow, new.version)
    if shape is None:
        raise ValidationError(
            f"no flow {new.workflow!r}"
            + ("" if new.version is None else f" version {new.version}")
            + " is stored: define it with app.flow(...) or perdure.create_flow first"
        )
    new = replace(new, version=shape.version)
    if insert_run(s, new, now, parent_id=None) is None:
        return _existing(s, new, now)
    s.run(Q["mark_flow_run"], {"id": new.id, "now": now})
    given = {step: keys for step, *keys in new.step_keys}
    for index, step in enumerate(shape.steps):
        lane, fifo, rate = given.get(step.name) or step.keyless()
        if not step.limited:  # keys from a definition that no longer matches: none
            lane = fifo = rate = None
        s.run(
            Q["insert_flow_state"],
            {
                "run_id": new.id,
                "step": step.name,
                "step_index": index,
                "lane": lane,
                "fifo": fifo,
                "rate": rate,
            },
        )
    for step_name, value in (copied or {}).items():
        s.run(
            Q["complete_flow_state"],
            {"run_id": new.id, "step": step_name, "output": json.dumps(value), "now": now},
        )
    flow = {
        "id": new.id,
        "input": new.input_json,
        "priority": new.priority,
        "retention_days": new.retention_days,
    }
    _advance(s, shape, flow, now)
    claimed = () if claim is None else lease_new_tasks(s, new.id, claim, now)
    row = s.one(QUERIES["get_run"], {"id": new.id})
    assert row is not None
    return CreateResult(to_run(row), True, claimed=claimed)


def _existing(s: Session, new: NewRun, now: float) -> CreateResult:
    """The run a start's id or idempotency key names already (as `create_run`)."""
    existing = None
    if new.idempotency_key is not None:
        existing = s.one(
            QUERIES["get_run_by_key"],
            {"workflow": new.workflow, "idempotency_key": new.idempotency_key},
        )
    if existing is None:
        existing = s.one(QUERIES["get_run"], {"id": new.id})
    if existing is None:  # pragma: no cover - a conflict always has a holder
        raise RunNotFound(new.id)
    if existing["workflow"] != new.workflow:
        raise ValidationError(
            f"run id {new.id!r} already names a run of workflow {existing['workflow']!r}"
        )
    differs = not json_equal(existing["input"], new.input_json)
    if differs:
        data: dict[str, Any] = {"input_differs": True}
        if new.idempotency_key is not None:
            data["idempotency_key"] = new.idempotency_key
        add_event(s, existing["id"], "duplicate_start", data, now)
    return CreateResult(to_run(existing), False, differs)


def is_flow_run(s: Session, run_id: str) -> bool:
    """True if ``run_id`` is a flow run."""
    row = s.one(Q["run_kind"], {"id": run_id})
    return row is not None and row["kind"] == "flow"


def _advance(s: Session, shape: FlowShape, flow: dict[str, Any], now: float) -> None:
    """Apply the planner's decisions for the flow run's current state."""
    run_id = flow["id"]
    run_input = loads(flow["input"])
    outputs: dict[str, Any] = {}
    started: set[str] = set()
    keys: dict[str, dict[str, str | None]] = {}  # the keys of each step's tasks
    for state in s.all(Q["flow_states"], {"run_id": run_id}):
        keys[state["step"]] = {
            "lane": state["concurrency_key"],
            "fifo": state["fifo_key"],
            "rate": state["rate_key"],
        }
        if state["status"] == "completed":
            outputs[state["step"]] = loads(state["output"])
        if state["status"] != "created":
            started.add(state["step"])
    plan: Advance = advance(shape, run_input, outputs, started)
    for step_name, value in plan.completed.items():
        s.run(
            Q["complete_flow_state"],
            {"run_id": run_id, "step": step_name, "output": json.dumps(value), "now": now},
        )
    counts: dict[str, int] = {}
    for task in plan.tasks:
        counts[task.step] = counts.get(task.step, 0) + 1
    for step_name in plan.started:
        s.run(
            Q["start_flow_state"],
            {"run_id": run_id, "step": step_name, "count": counts[step_name], "now": now},
        )
    rows = [
        {
            "id": f"{run_id}:{task.step}:{task.index}",
            "workflow": task_workflow(shape.name, task.step),
            "version": shape.version,
            "input": json.dumps(task.input, ensure_ascii=False, separators=(",", ":")),
            "priority": flow["priority"],
            "parent_id": run_id,
            "step": task.step,
            "retention_days": flow["retention_days"],
            "task_index": task.index,
            "now": now,
            **keys[task.step],
        }
        for task in plan.tasks
    ]
    if rows:
        s.conn.executemany(Q["insert_task"], rows)
        s.conn.executemany(Q["task_created_event"], rows)
        s.notify("wake", run_id)
    if plan.failure is not None:
        step_name, message = plan.failure
        error = {"type": "StepFailed", "message": message, "step": step_name}
        _fail_flow(s, run_id, step_name, error, now)
    elif plan.output is not None:
        _end_flow(s, run_id, "completed", json.dumps(plan.output), None, now)


def _end_flow(
    s: Session, run_id: str, status: str, output: str | None, error: Any, now: float
) -> None:
    changed = s.run(
        Q["end_flow_run"],
        {"id": run_id, "status": status, "output": output, "error": dumps(error), "now": now},
    )
    if not changed:
        return
    add_event(s, run_id, status, None if error is None else brief_error(error), now)
    s.notify("done", run_id)


def _fail_flow(s: Session, run_id: str, step: str, error: dict[str, Any], now: float) -> None:
    """The run fails at ``step``: its other live tasks are cancelled (fenced out)."""
    s.run(Q["fail_flow_state"], {"run_id": run_id, "step": step, "error": dumps(error), "now": now})
    s.run(Q["cancel_flow_states"], {"run_id": run_id, "now": now})
    _end_flow(s, run_id, "failed", None, error, now)
    cancel_descendants(s, run_id, now)


def child_ended(
    s: Session,
    child: sqlite3.Row | dict[str, Any],
    now: float,
    *,
    output_json: str | None,
    error: dict[str, Any] | None,
) -> None:
    """A run with a parent ended: a task hands its end to its flow run (`task_ended`),
    any other child writes its parent's journal row (`write_child_result`)."""
    parent = s.one(Q["run_kind"], {"id": child["parent_id"]})
    if parent is not None and parent["kind"] == "flow":
        if parent["status"] == "running":
            task_ended(
                s, child["parent_id"], child["id"], output_json=output_json, error=error, now=now
            )
        return
    write_child_result(s, child, now, output_json=output_json, error=error)


def task_ended(
    s: Session,
    flow_id: str,
    task_id: str,
    *,
    output_json: str | None,
    error: dict[str, Any] | None,
    now: float,
) -> None:
    """A task of the live flow run ``flow_id`` ended (``error`` None: completed):
    record it, start what became ready, end the flow run when nothing remains or when
    the task failed for good."""
    task = s.one(Q["task_row"], {"id": task_id})
    flow = s.one(Q["run_kind"], {"id": flow_id})
    if task is None or flow is None or flow["status"] != "running":
        return
    shape = get_flow(s, flow["workflow"], flow["version"])
    if shape is None:  # pragma: no cover - shapes are never deleted while runs use them
        return
    step_name = task["parent_step"]
    run_id = flow_id
    if error is not None:
        cause = {k: v for k, v in error.items() if k != "traceback"}
        failed = {
            "type": "StepFailed",
            "message": f"step {step_name!r} failed: {error.get('type')}: {error.get('message')}",
            "step": step_name,
            "task_index": task["task_index"],
            "cause": cause,
        }
        _fail_flow(s, run_id, step_name, failed, now)
        return
    left = s.one(Q["task_done"], {"run_id": run_id, "step": step_name})
    if left is None or left["remaining_tasks"] > 0:
        return
    step = shape.step(step_name)
    outputs = [
        loads(r["output"]) for r in s.all(Q["task_outputs"], {"run_id": run_id, "step": step_name})
    ]
    value = step_output(step, outputs)
    s.run(
        Q["complete_flow_state"],
        {"run_id": run_id, "step": step_name, "output": json.dumps(value), "now": now},
    )
    advance_run(s, shape, run_id, now)


def advance_run(s: Session, shape: FlowShape, run_id: str, now: float) -> None:
    """Start what is ready in the live flow run ``run_id``; end it if nothing remains."""
    full = s.one(Q["flow_run_row"], {"id": run_id})
    assert full is not None
    _advance(s, shape, dict(full), now)


def steps_or_journal(s: Session, run_id: str) -> list[Step]:
    """A flow run's steps (`flow_steps`), any other run's journal."""
    if is_flow_run(s, run_id):
        return flow_steps(s, run_id)
    return get_steps(s, run_id)


def flow_steps(s: Session, run_id: str) -> list[Step]:
    """A flow run's steps (definition order) with their tasks."""
    tasks: dict[str, list[FlowTask]] = {}
    for r in s.all(Q["flow_tasks"], {"run_id": run_id}):
        attempts = r["attempt"] - (1 if r["status"] in ("pending", "waiting") else 0)
        if r["started_at"] is None:
            attempts = 0
        tasks.setdefault(r["parent_step"], []).append(
            FlowTask(
                index=r["task_index"],
                status=r["status"],
                attempts=attempts,
                output=loads(r["output"]),
                error=loads(r["error"]),
                run_id=r["id"],
                started_at=to_dt_opt(r["started_at"]),
                completed_at=to_dt_opt(r["completed_at"]),
            )
        )
    steps = []
    for state in s.all(Q["flow_states"], {"run_id": run_id}):
        mine = tuple(tasks.get(state["step"], ()))
        steps.append(
            Step(
                name=state["step"],
                kind="flow-task",
                status=state["status"],
                output=loads(state["output"]),
                error=loads(state["error"]),
                attempts=sum(t.attempts for t in mine),
                started_at=to_dt_opt(state["started_at"]),
                completed_at=to_dt_opt(state["completed_at"]),
                tasks=mine,
            )
        )
    return steps
