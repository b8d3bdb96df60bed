"""Rows to records, records to parameters, and driver errors to perdure errors.

Queries return runs as the 20 columns of `Run` in field order, so a row slice
builds a `Run` directly. Journal rows and waits inside a claim arrive as JSON
arrays (one ``json_agg`` per run keeps the claim a single round trip); their
timestamps are ISO strings (the session time zone is UTC).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, get_args

import psycopg

from ...errors import (
    BackendError,
    PerdureError,
    ReadOnlyDatabase,
    RunNotFound,
    RunStateError,
    ValidationError,
)
from ...names import validate_workflow_name
from ...records import (
    Claim,
    ClaimParams,
    Complete,
    CreateResult,
    Fail,
    ListRunsParams,
    NewRun,
    Park,
    Release,
    Retry,
    Run,
    Step,
    StepWrite,
    Transition,
    Wait,
    WakeReason,
    waiting_data,
)
from ...serialization import Undecodable, brief_error
from .._cursor import decode_cursor

__all__ = [
    "RUN_WIDTH",
    "batch_params",
    "claim_from_row",
    "dumps",
    "run_from_row",
    "step_from_row",
    "transition_params",
    "translate_error",
]

#: Number of leading columns that make a `Run`.
RUN_WIDTH = 20

STEP_KINDS = frozenset({"run", "sleep", "wait", "child", "rollback"})
STEP_STATUSES = frozenset({"completed", "failed", "retrying"})
WAKE_REASONS = frozenset(get_args(WakeReason))
FINAL_STEP_STATUSES = frozenset({"completed", "failed"})


# --------------------------------------------------------------------------- errors


def translate_error(exc: BaseException) -> PerdureError:
    """The perdure error for a driver error (the one place SQLSTATEs are mapped).

    ``PD001`` → `ValidationError`, ``PD002`` → `RunNotFound`, ``PD003`` →
    `RunStateError`; ``25006`` (a write in read-only mode) → `ReadOnlyDatabase`; data errors (class
    22) and constraint checks (23502, 23514) → `ValidationError`; everything else
    (connection loss, deadlock after retries, ...) → `BackendError`. The caller
    chains the driver error as __cause__.
    """
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        primary = exc.diag.message_primary or str(exc)
        detail = exc.diag.message_detail or ""
        if state == "PD001":
            return ValidationError(primary)
        if state == "PD002":
            return RunNotFound(detail)
        if state == "PD003":
            return RunStateError(primary)
        if state == "25006":  # read_only_sql_transaction
            return ReadOnlyDatabase(
                f"the database is open read-only: this writes ({primary})", opened_read_only=True
            )
        if state.startswith("22") or state in ("23502", "23514"):
            return ValidationError(f"the database rejected a value: {primary}")
        return BackendError(f"PostgreSQL error ({state or type(exc).__name__}): {primary}")
    return BackendError(f"PostgreSQL error: {exc}")


# --------------------------------------------------------------------------- rows


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def run_from_row(row: Sequence[Any]) -> Run:
    """A `Run` from the first `RUN_WIDTH` columns of a row."""
    return Run(*row[:RUN_WIDTH])


def step_from_row(row: Sequence[Any]) -> Step:
    """A `Step` from (key, kind, status, output, error, attempts, started_at, completed_at)."""
    key, kind, status, output, error, attempts, started_at, completed_at = row
    return Step(key, kind, status, output, error, attempts, _time(started_at), _time(completed_at))


def claim_from_row(row: Sequence[Any]) -> Claim:
    """A `Claim` from a claim_runs row: the run, lease columns, journal and waits (JSON)."""
    run = run_from_row(row)
    token, since_progress, step_attempts, recovered, now, journal, waits, traceparent = row[
        RUN_WIDTH : RUN_WIDTH + 8
    ]
    order = row[RUN_WIDTH + 8] if len(row) > RUN_WIDTH + 8 else None  # flow tasks: none
    poison = next((v for v in (run.input, journal, waits) if isinstance(v, Undecodable)), None)
    if poison is not None:  # the worker fails the run; it never replays it
        journal, waits = (), ()
    return Claim(
        run=run,
        lease_token=token,
        journal=tuple(step_from_row(item) for item in journal or ()),
        waits=tuple(Wait(k, e, m, _time(t)) for k, e, m, t in waits or ()),
        now=now,
        claims_since_progress=since_progress,
        step_attempts=step_attempts,
        recovered=bool(recovered),
        poison=None if poison is None else str(poison),
        traceparent=traceparent,
        call_order=tuple(order or ()),
    )


# --------------------------------------------------------------------------- params


def dumps(value: Any) -> str | None:
    """Compact JSON text of a small engine-made value (errors, event data, options)."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _unique_steps(steps: Sequence[StepWrite]) -> list[StepWrite]:
    """One write per key (a final write is not replaced by a later one in the batch)."""
    chosen: dict[str, StepWrite] = {}
    for step in steps:
        if step.kind not in STEP_KINDS:
            raise ValidationError(f"unknown step kind {step.kind!r} for step {step.key!r}")
        if step.status not in STEP_STATUSES:
            raise ValidationError(f"unknown step status {step.status!r} for step {step.key!r}")
        previous = chosen.get(step.key)
        if previous is None or previous.status not in FINAL_STEP_STATUSES:
            chosen[step.key] = step
    return list(chosen.values())


def transition_params(t: Transition) -> tuple[bool, dict[str, Any]]:
    """Validate a transition and build its query parameters.

    Returns (general, params): ``general`` is True when the transition has waits or
    children and needs the plpgsql path; otherwise the single-statement path serves.
    """
    steps = _unique_steps(t.steps)
    events: list[tuple[str, Any]] = [(e.type, e.data) for e in t.events]
    outcome = t.outcome
    reason: str | None = None
    wake_at: datetime | None = None
    output: str | None = None
    error: dict[str, Any] | None = None
    if outcome is None:
        kind = "none"
    elif isinstance(outcome, Park):
        kind = "park"
        if outcome.reason not in WAKE_REASONS:
            raise ValidationError(f"unknown wake reason {outcome.reason!r}")
        reason, wake_at, error = outcome.reason, outcome.wake_at, outcome.error
        events.append(("waiting", waiting_data(outcome, t.waits)))
    elif isinstance(outcome, Complete):
        kind, output = "complete", outcome.output_json
        events.append(("completed", None))
    elif isinstance(outcome, Fail):
        kind, error = "fail", outcome.error
        events.append(("failed", brief_error(outcome.error)))
    elif isinstance(outcome, Retry):
        kind, wake_at, error = "retry", outcome.wake_at, outcome.error
        events.append(("retrying", {"wake_at": _iso(wake_at), "error": brief_error(outcome.error)}))
    elif isinstance(outcome, Release):
        kind = "release"
    else:  # pragma: no cover - the Outcome union is closed
        raise ValidationError(f"unknown outcome {outcome!r}")
    if t.step_attempts < 0:
        raise ValidationError("step_attempts must not be negative")
    # The journal rows and events go as one JSON document each (JSON text of a value
    # as a string, so SQL NULL stays apart from JSON null): the driver adapts a list
    # parameter element by element, which cost about 50 µs per transition for the
    # ten arrays this replaced (bench/RESULTS.md, 2026-11-26).
    params: dict[str, Any] = {
        "run_id": t.run_id,
        "token": t.lease_token,
        "keys": [s.key for s in steps],  # for the caller: the queries read "steps"
        "steps": dumps(
            [
                {
                    "key": s.key,
                    "kind": s.kind,
                    "status": s.status,
                    "output": s.output_json,
                    "error": dumps(s.error),
                    "attempts": s.attempts,
                    "started_at": _iso(s.started_at),
                    "completed_at": _iso(s.completed_at),
                }
                for s in steps
            ]
        ),
        "events": dumps([{"type": type_, "data": dumps(data)} for type_, data in events]),
        "step_attempts": t.step_attempts,
        "outcome": kind,
        "reason": reason,
        "wake_at": wake_at,
        "output": output,
        "error": dumps(error),
        "reopen": list(outcome.reopen) if isinstance(outcome, Retry) and outcome.reopen else None,
        "asked": list(t.asked),
    }
    general = bool(t.waits or t.children)
    if general and isinstance(outcome, Retry):  # pragma: no cover - the runner never does
        raise ValidationError("a Retry transition carries no waits or children")
    if general:
        params.update(
            wait_keys=[w.key for w in t.waits],
            wait_events=[w.event for w in t.waits],
            wait_matches=[w.match_json for w in t.waits],
            wait_timeouts=[w.timeout_at for w in t.waits],
            children=json.dumps(
                [
                    {
                        "id": c.id,
                        "workflow": c.workflow,
                        "version": c.version,
                        "input_json": c.input_json,
                        "priority": c.priority,
                        "idempotency_key": c.idempotency_key,
                        "delay": c.delay,
                        "run_at": _iso(c.run_at),
                        "deadline_in": c.deadline_in,
                        "deadline_at": _iso(c.deadline_at),
                        "retention_days": c.retention_days,
                        "parent_step": c.parent_step,
                        "traceparent": c.traceparent,
                        **_child_keys(c),
                    }
                    for c in t.children
                ]
            ),
        )
    return general, params


#: The parameters of a transition that `apply_transitions` takes from its batch.
_BATCHED = (
    "run_id", "token", "outcome", "reason", "output", "error", "step_attempts", "reopen",
    "steps", "events", "asked",
)  # fmt: skip


def batch_params(planned: Sequence[dict[str, Any]], quiet: Sequence[bool]) -> dict[str, Any]:
    """The parameters of ``apply_transitions`` for transitions without waits or
    children (``transition_params`` of each, in order: places 1, 2, ...); ``quiet``:
    for each, whether a claim on complete follows it (its flow run sends no wake)."""
    return {
        "batch": json.dumps(
            [
                {
                    **{k: params[k] for k in _BATCHED},
                    "wake_at": _iso(params["wake_at"]),
                    "quiet": shh,
                }
                for params, shh in zip(planned, quiet, strict=True)
            ],
            ensure_ascii=False,
            separators=(",", ":"),
        )
    }


_NEW_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(NewRun))


def new_run_params(new: NewRun) -> dict[str, Any]:
    """The parameters of the ``create_run`` query (named after `NewRun`'s fields; a
    start's hot path: no deep copy)."""
    params = {name: getattr(new, name) for name in _NEW_RUN_FIELDS}
    params["input"] = new.input_json
    params["worker"] = params["lease"] = None  # a start leased to a worker sets them
    return params


def flow_start_params(new: NewRun) -> dict[str, Any]:
    """The parameters of the ``start_flow_run`` query: `new_run_params` and the task
    keys of the flow's limited steps whose key functions ran (`NewRun.step_keys`)."""
    params = new_run_params(new)
    params["step_keys"] = (
        json.dumps({step: list(keys) for step, *keys in new.step_keys}) if new.step_keys else None
    )
    return params


#: Counts limited claims: every eighth also looks for runs of limited workflows started
#: without a lane (in SQL), rare enough not to be worth a scan on every claim.
_LIMITED_CLAIMS = itertools.count()
#: Counts plain claims: every eighth also looks for runs with a lane (started under
#: limits this worker does not know, e.g. since removed).
_PLAIN_CLAIMS = itertools.count()


def plain_claim_params() -> dict[str, Any]:
    """The ``claim_runs`` query's own parameter: whether this claim also looks for runs
    with a lane (one in eight)."""
    return {"keyed": next(_PLAIN_CLAIMS) % 8 == 0}


def _child_keys(child: NewRun) -> dict[str, str | None]:
    """A child's flow-control keys, when its workflow declares limits."""
    if child.concurrency_key is None:
        return {}
    return {
        "concurrency_key": child.concurrency_key,
        "fifo_key": child.fifo_key,
        "rate_key": child.rate_key,
    }


def limited_claim_params(params: ClaimParams, stray: bool | None = None) -> dict[str, Any]:
    """The limits of the ``claim_runs_limited`` query, one array per field; with
    ``stray`` (default: every eighth call), the claim also looks for runs of limited
    workflows without a lane and runs of the others with one (``claim_strays``)."""
    if stray is None:
        stray = next(_LIMITED_CLAIMS) % 8 == 0
    limits = params.limits
    limited = {lim.workflow for lim in limits}
    return {
        "l_workflows": [lim.workflow for lim in limits],
        "l_concurrency": [lim.concurrency for lim in limits],
        "l_key_concurrency": [lim.key_concurrency for lim in limits],
        "l_rate": [lim.rate_limit for lim in limits],
        "l_period": [lim.rate_period for lim in limits],
        "l_fifo": [lim.fifo for lim in limits],
        "plain_workflows": sorted({name for name, _ in params.workflows} - limited),
        "scan": 4 * params.limit + 16 if stray else 0,
    }


def create_query(new: NewRun) -> str:
    """The query that creates ``new``: a start under flow control stores its keys; the
    common start (relative times only) is one plain statement, ``insert_new_run``,
    which returns no row when the run's id or idempotency key is taken (then
    ``create_run`` finds the run that holds it). Its values were validated by the
    caller; the workflow name, which the table does not check, is checked again here
    as create_run() does."""
    validate_workflow_name(new.workflow)
    if new.flow_controlled:
        return "create_keyed_run"
    if new.run_at is None and new.deadline_at is None:
        return "insert_new_run"
    return "create_run"


def created_from_row(row: tuple[Any, ...], leased: bool = False) -> CreateResult:
    """A row of ``_created_columns`` (create_run, create_keyed_run, start_flow_run):
    created, the run's columns, input_differs, then the lease token, the database's now
    and the traceparent, which make the claim of a run ``leased`` at its start (when
    this call created it)."""
    run = run_from_row(row[1 : 1 + RUN_WIDTH])
    differs, token, now, traceparent = row[1 + RUN_WIDTH :]
    result = CreateResult(run=run, created=bool(row[0]), input_differs=differs)
    if not (leased and result.created):
        return result
    claim = Claim(
        run=run,
        lease_token=token,
        journal=(),
        waits=(),
        now=now,
        claims_since_progress=1,
        step_attempts=0,
        traceparent=traceparent,
    )
    return dataclasses.replace(result, claimed=(claim,))


def list_runs_params(params: ListRunsParams, limit: int) -> dict[str, Any]:
    """The parameters of the ``list_runs`` query, the cursor decoded."""
    after_at: datetime | None = None
    after_id: str | None = None
    if params.cursor is not None:
        created, after_id = decode_cursor(params.cursor)
        try:
            after_at = datetime.fromisoformat(created)
        except ValueError:
            raise ValidationError(f"invalid cursor {params.cursor[:80]!r}") from None
    return {
        "workflow": params.workflow,
        "status": params.status,
        "since": params.since,
        "until": params.until,
        "input_match": params.input_match_json,
        "parent_id": params.parent_id,
        "top_level": params.top_level,
        "include_tasks": params.include_tasks,
        "idempotency_key": params.idempotency_key,
        "after_at": after_at,
        "after_id": after_id,
        "limit": limit,
    }
