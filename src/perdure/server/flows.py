"""The route of DAG flows: a flow's stored shape."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..errors import NotFoundError
from .common import ERRORS, app_of
from .models import FlowOut, FlowStepOut

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/flows/{name}", response_model=FlowOut, responses=ERRORS, tags=["flows"])
async def get_flow(
    name: str,
    request: Request,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> FlowOut:
    """A DAG flow's shape (that version, else the highest): its options and steps in
    definition order, each with its dependencies; 404 when no such flow is stored."""
    shape = await app_of(request).get_flow_async(name, version)
    if shape is None:
        suffix = "" if version is None else f" version {version}"
        raise NotFoundError(f"no flow {name!r}{suffix} is stored")
    return FlowOut(
        name=shape.name,
        version=shape.version,
        max_attempts=shape.max_attempts,
        base_delay=shape.base_delay,
        timeout=shape.timeout,
        max_tasks=shape.max_tasks,
        steps=[
            FlowStepOut(
                name=s.name,
                depends_on=list(s.depends_on),
                map_over=s.map_over,
                max_attempts=s.max_attempts,
                base_delay=s.base_delay,
                timeout=s.timeout,
                max_tasks=s.max_tasks,
            )
            for s in shape.steps
        ],
        leaves=shape.leaves(),
    )
