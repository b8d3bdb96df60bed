"""The reads section of the contract: runs, journals, audit trails, workflows, workers."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ...errors import ValidationError
from ...records import (
    RUN_STATUSES,
    Event,
    ListRunsParams,
    Page,
    Run,
    Step,
    WorkerInfo,
    WorkflowSummary,
)
from .._cursor import decode_cursor, encode_cursor
from ._convert import micro, to_event, to_run, to_step, to_ts, to_worker
from ._session import QUERIES, Session

_FIRST_PAGE = (float("inf"), "")  # a position after every run: the first page's bound


def count_children(s: Session, run_ids: Sequence[str]) -> dict[str, int]:
    rows = s.all(QUERIES["count_children"], {"ids": json.dumps(list(run_ids))})
    return {row["parent_id"]: int(row["children"]) for row in rows}


def get_run(s: Session, run_id: str) -> Run | None:
    row = s.one(QUERIES["get_run"], {"id": run_id})
    return None if row is None else to_run(row)


def list_runs(s: Session, params: ListRunsParams) -> Page[Run]:
    limit = int(params.limit)
    if limit <= 0:
        return Page([], None)
    after_at, after_id = _FIRST_PAGE
    if params.cursor is not None:
        created, after_id = decode_cursor(params.cursor)
        try:
            after_at = float(created)
        except ValueError:
            raise ValidationError(f"invalid cursor {params.cursor[:80]!r}") from None
    args = {
        "after_at": after_at,
        "after_id": after_id,
        "status": params.status,
        "since": None if params.since is None else to_ts(params.since),
        "until": None if params.until is None else to_ts(params.until),
        "parent_id": params.parent_id,
        "input_match": params.input_match_json,
        "top_level": 1 if params.top_level else 0,
        "include_tasks": 1 if params.include_tasks else 0,
        "idempotency_key": params.idempotency_key,
        "limit": limit + 1,
    }
    if params.workflow is None:
        rows = s.all(QUERIES["list_runs"], args)
    else:
        rows = s.all(QUERIES["list_runs_of_workflow"], {**args, "workflow": params.workflow})
    items = [to_run(row) for row in rows[:limit]]
    if len(rows) <= limit:
        return Page(items, None)
    last = rows[limit - 1]
    return Page(items, encode_cursor(repr(float(last["created_at"])), last["id"]))


def get_steps(s: Session, run_id: str) -> list[Step]:
    return [to_step(row) for row in s.all(QUERIES["get_steps"], {"run_id": run_id})]


def get_events(s: Session, run_id: str) -> list[Event]:
    params = {"run_id": run_id, "now": s.clock()}
    return [to_event(row) for row in s.all(QUERIES["get_events"], params)]


def workflow_summaries(s: Session) -> list[WorkflowSummary]:
    counts: dict[str, dict[str, int]] = {}
    for row in s.all(QUERIES["workflow_summaries"], {}):
        per = counts.setdefault(row["name"], dict.fromkeys(RUN_STATUSES, 0))
        if row["status"] is not None:
            per[row["status"]] = per.get(row["status"], 0) + int(row["n"])
    return [WorkflowSummary(name, counts[name]) for name in sorted(counts)]


def list_workers(s: Session, seen_within: float) -> list[WorkerInfo]:
    since = micro(s.clock() - seen_within)
    return [to_worker(row) for row in s.all(QUERIES["list_workers"], {"since": since})]
