"""The routes of runs: start, list, read, cancel, signal, journal, audit trail, and the
live stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import StreamingResponse

from ..app import App
from ..errors import RunNotFound, ValidationError
from ..records import Run
from ..telemetry.tracing import remote_parent
from .common import ERRORS, Cursor, Limit, app_of
from .models import CancelOut, EventOut, List, RunOut, SignalOut, StartIn, StartOut, StepOut
from .paging import page_of
from .strict import Status, Time

__all__ = ["router"]

router = APIRouter(prefix="/v1/workflows/{name}/runs", tags=["runs"])


async def run_of(app: App, name: str, run_id: str) -> Run:
    """The run, if it is one of workflow ``name`` (else `RunNotFound`)."""
    run = await app.get_run_async(run_id)
    if run.workflow != name:
        raise RunNotFound(run_id)
    return run


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


@router.get("/{run_id}", response_model=RunOut, responses=ERRORS)
async def get_run(name: str, run_id: str, request: Request) -> RunOut:
    """One run."""
    return RunOut.of(await run_of(app_of(request), name, run_id))  # type: ignore[no-any-return]


@router.delete("/{run_id}", response_model=CancelOut, responses=ERRORS)
async def cancel_run(name: str, run_id: str, request: Request, rollback: bool = False) -> CancelOut:
    """Cancel a live run and its live children; ``cancelled`` is false when it had
    already ended. With ``rollback=true`` a worker first runs the rollbacks of its
    completed steps, newest first, then cancels it."""
    app = app_of(request)
    await run_of(app, name, run_id)
    cancelled = await app.cancel_async(run_id, rollback=rollback)
    return CancelOut(run_id=run_id, cancelled=cancelled)


@router.post("/{run_id}/signals/{event}", response_model=SignalOut, responses=ERRORS)
async def signal_run(
    name: str,
    run_id: str,
    event: str,
    request: Request,
    payload: Annotated[Any, Body(description="The payload: any JSON value.")] = None,
    idempotency_key: Annotated[str | None, Query(alias="idempotencyKey")] = None,
) -> SignalOut:
    """Send ``event`` with the body as its payload: it resolves the run's matching wait,
    or is buffered for its next one. The same ``idempotencyKey`` delivers once."""
    app = app_of(request)
    await run_of(app, name, run_id)
    with remote_parent(request.headers.get("traceparent")):  # its span joins the caller's trace
        delivered = await app.signal_async(run_id, event, payload, idempotency_key=idempotency_key)
    return SignalOut(delivered=delivered)


@router.get("/{run_id}/steps", response_model=List[StepOut], responses=ERRORS)
async def get_steps(
    name: str,
    run_id: str,
    request: Request,
    include_superseded: Annotated[bool, Query(alias="includeSuperseded")] = False,
    cursor: Cursor = None,
    limit: Limit = 100,
) -> List[StepOut]:
    """The run's journal, in the order its steps were recorded; with
    ``includeSuperseded=true`` also the rows retries superseded."""
    app = app_of(request)
    await run_of(app, name, run_id)
    steps = await app.get_steps_async(run_id, include_superseded)
    items, following = page_of(steps, cursor, limit)
    return List[StepOut](items=[StepOut.of(s) for s in items], next_cursor=following)


@router.get("/{run_id}/events", response_model=List[EventOut], responses=ERRORS)
async def get_events(
    name: str, run_id: str, request: Request, cursor: Cursor = None, limit: Limit = 100
) -> List[EventOut]:
    """The run's audit trail, oldest first."""
    app = app_of(request)
    await run_of(app, name, run_id)
    items, following = page_of(await app.get_events_async(run_id), cursor, limit)
    return List[EventOut](items=[EventOut.of(e) for e in items], next_cursor=following)


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


@router.get(
    "/{run_id}/stream",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events."},
        **ERRORS,
    },
    response_class=StreamingResponse,
)
async def stream_run(name: str, run_id: str, request: Request) -> StreamingResponse:
    """The run's events as Server-Sent Events: its history, then each event as it
    happens (a value set by the run is an event of type ``value``); the stream ends
    with the run. Each message is ``event: <type>`` and ``data: <the event as JSON>``."""
    app = app_of(request)
    await run_of(app, name, run_id)

    async def messages() -> AsyncIterator[str]:
        async for event in app.watch_async(run_id):
            if await request.is_disconnected():
                return
            body = EventOut.of(event).model_dump_json(by_alias=True)
            yield f"event: {event.type}\ndata: {body}\n\n"

    return StreamingResponse(
        messages(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )
