"""The routes of one run: read, cancel, signal, journal, audit trail and the live
stream. They are served twice from this one definition: under the workflow
(``/v1/workflows/{name}/runs/{run_id}``, where a run of another workflow is a 404) and
by the run's id alone (``/v1/runs/{run_id}``)."""

# No `from __future__ import annotations`: FastAPI reads the local `Found` alias
# from the route signatures at definition time.

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import StreamingResponse

from ..errors import RunNotFound
from ..records import Run
from ..telemetry.tracing import remote_parent
from .common import ERRORS, Cursor, Limit, app_of
from .models import CancelOut, EventOut, List, RunOut, SignalIn, SignalOut, StepOut
from .paging import page_of

__all__ = ["any_run", "run_of_workflow", "run_routes"]


async def run_of_workflow(name: str, run_id: str, request: Request) -> Run:
    """The run, if it is one of workflow ``name`` (else `RunNotFound`)."""
    run = await app_of(request).get_run_async(run_id)
    if run.workflow != name:
        raise RunNotFound(run_id)
    return run


async def any_run(run_id: str, request: Request) -> Run:
    """The run, whatever its workflow (else `RunNotFound`)."""
    return await app_of(request).get_run_async(run_id)


def run_routes(prefix: str, find: Callable[..., Awaitable[Run]], tags: list[str]) -> APIRouter:
    """The routes of one run under ``prefix``, the run found by the dependency ``find``."""
    router = APIRouter(prefix=prefix, tags=list(tags))
    Found = Annotated[Run, Depends(find)]

    @router.get("/{run_id}", response_model=RunOut, responses=ERRORS)
    async def get_run(run: Found) -> RunOut:
        """One run. A failed run's ``error`` is ``{type, message, traceback}``:
        ``traceback`` is the Python traceback as text (null when the error came
        from outside Python, e.g. a timeout or a cancel)."""
        return RunOut.of(run)  # type: ignore[no-any-return]

    @router.delete("/{run_id}", response_model=CancelOut, responses=ERRORS)
    async def cancel_run(run: Found, request: Request, rollback: bool = False) -> CancelOut:
        """Cancel a live run and its live children; ``cancelled`` is false when it had
        already ended. With ``rollback=true`` a worker first runs the rollbacks of its
        completed steps, newest first, then cancels it."""
        cancelled = await app_of(request).cancel_async(run.id, rollback=rollback)
        return CancelOut(run_id=run.id, cancelled=cancelled)

    @router.post("/{run_id}/signals/{event}", response_model=SignalOut, responses=ERRORS)
    async def signal_run(
        run: Found,
        event: str,
        request: Request,
        payload: Annotated[Any, Body(description="The payload: any JSON value.")] = None,
        idempotency_key: Annotated[str | None, Query(alias="idempotencyKey")] = None,
    ) -> SignalOut:
        """Send ``event`` with the body as its payload: it resolves the run's matching
        wait, or is buffered for its next one. The same ``idempotencyKey`` delivers
        once."""
        return await _signal(request, run, event, payload, idempotency_key)

    @router.post("/{run_id}/signals", response_model=SignalOut, responses=ERRORS)
    async def signal_run_by_body(run: Found, request: Request, body: SignalIn) -> SignalOut:
        """The same signal with everything in the body: ``{event, payload?,
        idempotencyKey?}``."""
        return await _signal(request, run, body.event, body.payload, body.idempotency_key)

    @router.get("/{run_id}/steps", response_model=List[StepOut], responses=ERRORS)
    async def get_steps(
        run: Found,
        request: Request,
        include_superseded: Annotated[bool, Query(alias="includeSuperseded")] = False,
        cursor: Cursor = None,
        limit: Limit = 100,
    ) -> List[StepOut]:
        """The run's journal, in the order its steps were recorded; with
        ``includeSuperseded=true`` also the rows retries superseded. A failed step's
        ``error`` is ``{type, message, traceback}`` as on the run."""
        steps = await app_of(request).get_steps_async(run.id, include_superseded)
        items, following = page_of(steps, cursor, limit)
        return List[StepOut](items=[StepOut.of(s) for s in items], next_cursor=following)

    @router.get("/{run_id}/events", response_model=List[EventOut], responses=ERRORS)
    async def get_events(
        run: Found, request: Request, cursor: Cursor = None, limit: Limit = 100
    ) -> List[EventOut]:
        """The run's audit trail, oldest first."""
        events = await app_of(request).get_events_async(run.id)
        items, following = page_of(events, cursor, limit)
        return List[EventOut](items=[EventOut.of(e) for e in items], next_cursor=following)

    @router.get(
        "/{run_id}/stream",
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events."},
            **ERRORS,
        },
        response_class=StreamingResponse,
    )
    async def stream_run(run: Found, request: Request) -> StreamingResponse:
        """The run's events as Server-Sent Events: its history, then each event as it
        happens (a value set by the run is an event of type ``value``); the stream ends
        with the run. Each message is ``event: <type>`` and ``data: <the event as
        JSON>``."""
        app = app_of(request)

        async def messages() -> AsyncIterator[str]:
            async for event in app.watch_async(run.id):
                if await request.is_disconnected():
                    return
                body = EventOut.of(event).model_dump_json(by_alias=True)
                yield f"event: {event.type}\ndata: {body}\n\n"

        return StreamingResponse(
            messages(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    return router


async def _signal(
    request: Request, run: Run, event: str, payload: Any, idempotency_key: str | None
) -> SignalOut:
    app = app_of(request)
    with remote_parent(request.headers.get("traceparent")):  # its span joins the caller's trace
        delivered = await app.signal_async(run.id, event, payload, idempotency_key=idempotency_key)
    return SignalOut(delivered=delivered)
