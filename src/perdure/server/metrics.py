"""``GET /metrics``: Prometheus gauges that describe the database, read from it at
scrape time, so any number of servers and workers agree (seed 000's names).

Served now: ``workflow_runs_in_flight{workflow}`` (runs ``running``) and
``workflow_queue_depth{workflow}`` (runs ``pending``). The counters and histograms
that workers count as they execute come with the telemetry work (issue 15)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from .common import app_of

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."},
        401: {"description": "A bearer token is required or wrong."},
        503: {"description": "The database is unavailable."},
    },
)
async def metrics(request: Request) -> Response:
    """Gauges of the database in the Prometheus text format."""
    summaries = await app_of(request).list_workflows_async()
    registry = CollectorRegistry()
    in_flight = Gauge(
        "workflow_runs_in_flight", "Runs running now.", ["workflow"], registry=registry
    )
    depth = Gauge(
        "workflow_queue_depth", "Runs waiting for a worker (pending).", ["workflow"],
        registry=registry,
    )  # fmt: skip
    for summary in summaries:
        in_flight.labels(summary.name).set(summary.counts.get("running", 0))
        depth.labels(summary.name).set(summary.counts.get("pending", 0))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
