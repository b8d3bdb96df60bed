"""The routes of a workflow's runs: start and list; each run's own routes (run.py) under
the workflow and by the run's id alone (``by_id``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from ..errors import ValidationError
from ..telemetry.tracing import remote_parent
from .common import ERRORS, Cursor, Limit, app_of
from .models import List, RunOut, StartIn, StartOut
from .run import any_run, run_of_workflow, run_routes
from .strict import Status, Time

__all__ = ["by_id", "router"]

router = APIRouter(prefix="/v1/workflows/{name}/runs", tags=["runs"])


@router.post(
    "",
    status_code=201,
    response_model=StartOut,
    responses={200: {"model": StartOut, "description": "The run existed already."}, **ERRORS},
)
async def start_run(
    name: str, request: Request, response: Response, body: StartIn | None = None
) -> StartOut:
    """Start a run of workflow ``name`` (one committed insert; it runs whether or not a
    worker is up). An ``idempotencyKey`` or ``runId`` that exists returns that run.
    A W3C ``traceparent`` header makes the run's spans join the caller's trace."""
    app = app_of(request)
    start = body or StartIn()
    with remote_parent(request.headers.get("traceparent")):
        handle = await app.start_async(
            name,
            start.input,
            idempotency_key=start.idempotency_key,
            priority=start.priority,
            delay=start.delay_seconds,
            version=start.version,
            retention_days=start.retention_days,
            run_id=start.run_id,
        )
    run = await app.get_run_async(handle.id)
    if not handle.created:
        response.status_code = 200
    return StartOut(
        run_id=handle.id, created=handle.created, status=run.status, warning=handle.warning
    )


@router.get("", response_model=List[RunOut], responses=ERRORS)
async def list_runs(
    name: str,
    request: Request,
    status: Status | None = None,
    since: Annotated[Time | None, Query(description="Created at or after this time.")] = None,
    until: Annotated[Time | None, Query(description="Created before this time.")] = None,
    parent_id: Annotated[str | None, Query(alias="parentId")] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> List[RunOut]:
    """Runs of workflow ``name``, newest first. Filter the input with query parameters
    ``input.<key>=<value>`` (a JSON value, else a string; ``input.a.b=1`` for nested
    keys): a run matches when its input contains every one."""
    page = await app_of(request).list_runs_async(
        name,
        status=status,
        since=since,
        until=until,
        input_match=_input_match(request),
        limit=limit,
        cursor=cursor,
        parent_id=parent_id,
    )
    return List[RunOut](items=[RunOut.of(r) for r in page.items], next_cursor=page.next_cursor)


def _input_match(request: Request) -> dict[str, Any] | None:
    match: dict[str, Any] = {}
    for key, raw in request.query_params.multi_items():
        if not key.startswith("input."):
            continue
        path = key[len("input.") :].split(".")
        if not all(path) or len(path) > 16:
            raise ValidationError(f"query parameter {key!r} must look like input.<key>=<value>")
        node = match
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValidationError(f"query parameter {key!r} conflicts with another")
            node = child
        node[path[-1]] = _value(raw)
    return match or None


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


router.include_router(run_routes("", run_of_workflow, ["runs"]))
#: One run's routes by its id alone: ``/v1/runs/{run_id}``...
by_id = run_routes("/v1/runs", any_run, ["runs"])
