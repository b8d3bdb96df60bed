"""The dashboard's actions: POST forms from its own pages (`forms.posted`), each going
back to a page with a fixed notice, or showing the page with what went wrong."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...errors import RunStateError, ValidationError
from ..common import app_of
from .forms import notice_to, posted
from .pages import json_value, render, run_view

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Response:
    """Cancel the run (a POST from this origin only)."""
    form = await posted(request)
    if isinstance(form, Response):
        return form
    rollback = form.get("rollback") == "1"
    cancelled = await app_of(request).cancel_async(run_id, rollback=rollback)
    if not cancelled:
        return notice_to(_page(run_id), "already-ended")
    return notice_to(_page(run_id), "cancelling" if rollback else "cancelled")


@router.post("/runs/{run_id}/signal")
async def signal(request: Request, run_id: str) -> Response:
    """Send an event to the run (a POST from this origin only)."""
    form = await posted(request)
    if isinstance(form, Response):
        return form
    event, payload = form.get("event", ""), form.get("payload", "")
    try:
        value = json_value(payload, "payload") if payload.strip() else None
        delivered = await app_of(request).signal_async(run_id, event, value)
    except ValidationError as exc:
        typed = {"event": event, "payload": payload}
        return await run_view(request, run_id, error=f"not sent: {exc}", status=422, typed=typed)
    return notice_to(_page(run_id), "signal-sent" if delivered else "signal-late")


@router.post("/runs/{run_id}/retry")
async def retry(request: Request, run_id: str) -> Response:
    """Resume a failed or cancelled run from a chosen step (a POST from this origin)."""
    form = await posted(request)
    if isinstance(form, Response):
        return form
    step = form.get("from_step") or None
    try:
        await app_of(request).retry_async(run_id, from_step=step, by="the dashboard")
    except (ValidationError, RunStateError) as exc:
        return await run_view(request, run_id, error=f"not retried: {exc}", status=422)
    return notice_to(_page(run_id), "retried")


@router.post("/runs/{run_id}/fork")
async def fork(request: Request, run_id: str) -> Response:
    """Start a new run from a copy of this run's journal (a POST from this origin)."""
    form = await posted(request)
    if isinstance(form, Response):
        return form
    step = form.get("from_step") or None
    try:
        handle = await app_of(request).fork_async(run_id, from_step=step, by="the dashboard")
    except ValidationError as exc:
        return await run_view(request, run_id, error=f"not forked: {exc}", status=422)
    return notice_to(_page(handle.id), "forked")


@router.post("/schedules/{name}/pause")
async def pause_schedule(request: Request, name: str) -> Response:
    """Pause a schedule: its ticks are skipped until it is resumed (a POST from this
    origin only)."""
    return await _on_schedule(request, name, "paused", app_of(request).pause_schedule_async)


@router.post("/schedules/{name}/resume")
async def resume_schedule(request: Request, name: str) -> Response:
    """Resume a paused schedule from its next tick after now (a POST from this origin)."""
    return await _on_schedule(request, name, "resumed", app_of(request).resume_schedule_async)


@router.post("/schedules/{name}/delete")
async def delete_schedule(request: Request, name: str) -> Response:
    """Delete a schedule; its runs stay (a POST from this origin only)."""
    return await _on_schedule(request, name, "deleted", app_of(request).delete_schedule_async)


async def _on_schedule(
    request: Request, name: str, done: str, act: Callable[[str], Awaitable[bool]]
) -> Response:
    """Do ``act`` to the schedule named ``name`` and go back to the workers page; the
    not-found page if there is no such schedule."""
    form = await posted(request)
    if isinstance(form, Response):
        return form
    try:
        found = await act(name)
    except ValidationError as exc:  # a name no schedule can have
        return render(request, "missing.html", status=404, message=str(exc))
    if not found:
        message = f"no schedule named {name!r}"
        return render(request, "missing.html", status=404, message=message)
    return notice_to("/workers", f"schedule-{done}")


def _page(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")
