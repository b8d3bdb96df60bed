"""The routes beside runs: workflows, published events, topic subscriptions, workers,
and the health check."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response

from ..durations import to_seconds
from .common import ERRORS, Cursor, Limit, app_of
from .models import (
    HealthOut,
    List,
    PublishedOut,
    SubscriptionIn,
    SubscriptionOut,
    TopicSubscriptionIn,
    WorkerOut,
    WorkflowOut,
)
from .paging import page_of

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/workflows", response_model=List[WorkflowOut], responses=ERRORS, tags=["workflows"])
async def list_workflows(request: Request, cursor: Cursor = None, limit: Limit = 100) -> Any:
    """Every known workflow with its number of runs per status."""
    items, following = page_of(await app_of(request).list_workflows_async(), cursor, limit)
    return List[WorkflowOut](items=[WorkflowOut.of(w) for w in items], next_cursor=following)


@router.post("/v1/events/{event}", response_model=PublishedOut, responses=ERRORS, tags=["events"])
async def publish(
    event: str,
    request: Request,
    payload: Annotated[Any, Body(description="The payload: any JSON value.")] = None,
    idempotency_key: Annotated[str | None, Query(alias="idempotencyKey")] = None,
) -> PublishedOut:
    """Publish ``event``: resume every run waiting on it whose match the payload
    satisfies, and start every workflow subscribed to a matching pattern."""
    result = await app_of(request).publish_async(event, payload, idempotency_key=idempotency_key)
    return PublishedOut(started=list(result.started), resumed=list(result.resumed))


@router.get(
    "/v1/subscriptions",
    response_model=List[SubscriptionOut],
    responses=ERRORS,
    tags=["events"],
)
async def list_subscriptions(request: Request, cursor: Cursor = None, limit: Limit = 100) -> Any:
    """Every topic subscription."""
    items, following = page_of(await app_of(request).list_subscriptions_async(), cursor, limit)
    return List[SubscriptionOut](
        items=[SubscriptionOut(pattern=p, workflow=w, changed=False) for p, w in items],
        next_cursor=following,
    )


@router.post(
    "/v1/subscriptions",
    status_code=201,
    response_model=SubscriptionOut,
    responses={200: {"description": "The subscription existed already."}, **ERRORS},
    tags=["events"],
)
async def subscribe(body: SubscriptionIn, request: Request, response: Response) -> SubscriptionOut:
    """Durably start ``workflow`` for every published event matching ``pattern``
    (``*`` matches any characters)."""
    changed = await app_of(request).subscribe_async(body.pattern, body.workflow)
    if not changed:
        response.status_code = 200
    return SubscriptionOut(pattern=body.pattern, workflow=body.workflow, changed=changed)


@router.post(
    "/v1/topics/{pattern}/subscriptions",
    status_code=201,
    response_model=SubscriptionOut,
    responses={200: {"description": "The subscription existed already."}, **ERRORS},
    tags=["events"],
)
async def subscribe_topic(
    pattern: str, body: TopicSubscriptionIn, request: Request, response: Response
) -> SubscriptionOut:
    """Seed 000's route for `POST /v1/subscriptions`: start the workflow of
    ``{"type": "workflow", "workflow": name}`` for every event matching ``pattern``."""
    return await subscribe(SubscriptionIn(pattern=pattern, workflow=body.target), request, response)


@router.delete(
    "/v1/subscriptions", response_model=SubscriptionOut, responses=ERRORS, tags=["events"]
)
async def unsubscribe(request: Request, pattern: str, workflow: str) -> SubscriptionOut:
    """Remove a topic subscription; ``changed`` is false when there was none."""
    changed = await app_of(request).unsubscribe_async(pattern, workflow)
    return SubscriptionOut(pattern=pattern, workflow=workflow, changed=changed)


@router.get("/v1/workers", response_model=List[WorkerOut], responses=ERRORS, tags=["workers"])
async def list_workers(
    request: Request,
    seen_within: Annotated[str, Query(alias="seenWithin", max_length=32)] = "5m",
    cursor: Cursor = None,
    limit: Limit = 100,
) -> Any:
    """Workers seen within ``seenWithin`` (a duration: 5m, 1h, seconds), newest first."""
    seconds = to_seconds(seen_within, what="seenWithin")
    items, following = page_of(await app_of(request).list_workers_async(seconds), cursor, limit)
    return List[WorkerOut](items=[WorkerOut.of(w) for w in items], next_cursor=following)


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses={503: {"description": "The database is unavailable."}},
    tags=["health"],
)
async def healthz(request: Request) -> HealthOut:
    """The server answers and its database too."""
    await app_of(request).now_async()
    return HealthOut(status="ok", database="ok")
