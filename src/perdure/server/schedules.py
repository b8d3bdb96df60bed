"""The schedule routes: list, create or update, pause, resume, delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from .common import ERRORS, Cursor, Limit, app_of
from .models import List, ScheduleIn, ScheduleOut
from .paging import page_of

__all__ = ["router"]

router = APIRouter()

_MISSING: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such schedule.", **ERRORS[404]}
}


@router.get("/v1/schedules", response_model=List[ScheduleOut], responses=ERRORS, tags=["schedules"])
async def list_schedules(request: Request, cursor: Cursor = None, limit: Limit = 100) -> Any:
    """Every schedule, by name, with its next tick."""
    items, following = page_of(await app_of(request).list_schedules_async(), cursor, limit)
    return List[ScheduleOut](items=[ScheduleOut.of(s) for s in items], next_cursor=following)


@router.post(
    "/v1/schedules",
    status_code=201,
    response_model=ScheduleOut,
    responses=ERRORS,
    tags=["schedules"],
)
async def put_schedule(body: ScheduleIn, request: Request) -> Any:
    """Create or update a schedule (an update keeps its next tick unless its cron,
    time zone or workflow changed)."""
    stored = await app_of(request).schedule_async(
        body.name, body.workflow, body.cron, body.input, body.timezone, body.catch_up
    )
    return ScheduleOut.of(stored)


async def _found(done: bool, name: str, request: Request) -> ScheduleOut:
    if not done:
        raise HTTPException(404, f"no schedule named {name!r}")
    stored = next(s for s in await app_of(request).list_schedules_async() if s.name == name)
    out: ScheduleOut = ScheduleOut.of(stored)
    return out


@router.post(
    "/v1/schedules/{name}/pause",
    response_model=ScheduleOut,
    responses={**ERRORS, **_MISSING},
    tags=["schedules"],
)
async def pause_schedule(name: str, request: Request) -> ScheduleOut:
    """Pause a schedule: its ticks are skipped until it is resumed."""
    return await _found(await app_of(request).pause_schedule_async(name), name, request)


@router.post(
    "/v1/schedules/{name}/resume",
    response_model=ScheduleOut,
    responses={**ERRORS, **_MISSING},
    tags=["schedules"],
)
async def resume_schedule(name: str, request: Request) -> ScheduleOut:
    """Resume a paused schedule from its next tick after now."""
    return await _found(await app_of(request).resume_schedule_async(name), name, request)


@router.delete(
    "/v1/schedules/{name}",
    status_code=204,
    responses={**ERRORS, **_MISSING},
    tags=["schedules"],
)
async def delete_schedule(name: str, request: Request) -> None:
    """Delete a schedule (its runs stay)."""
    if not await app_of(request).delete_schedule_async(name):
        raise HTTPException(404, f"no schedule named {name!r}")
