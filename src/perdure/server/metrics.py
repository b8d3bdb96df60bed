"""``GET /metrics``: seed 000's Prometheus metrics (docs/telemetry.md).

The gauges that describe the database (runs in flight, queue depth, claim lag, per
workflow) are read from it at scrape time, so any number of servers and workers
agree; the counters are what this server process counted (signals it delivered,
runs its retention sweeper deleted). Workers serve their own counters with
``perdure worker --metrics-port``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..telemetry.exposition import CONTENT_TYPE
from .common import app_of

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."},
        401: {"description": "A bearer token is required or wrong."},
        503: {"description": "The database is unavailable."},
    },
)
async def metrics(request: Request) -> Response:
    """The metrics in the Prometheus text format."""
    return Response(await app_of(request).metrics_async(), media_type=CONTENT_TYPE)
