"""The dashboard: server-rendered pages over the same `App` methods as the API.

Every value is escaped by the templates (Jinja2 autoescape); scripts and styles come
from this server only (see `SECURITY_HEADERS`); actions are POST forms that must come
from this origin. Live pages reload their ``<main>`` from the server every two seconds
(``static/dashboard.js``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ...describe import is_flow_run, waits_for
from ...durations import moment
from ...errors import PerdureError, RunStateError, ValidationError
from ...records import RUN_STATUSES, Event, Run
from ..common import app_of
from .dag import layout_dag
from .timeline import duration_text, layout

__all__ = ["SECURITY_HEADERS", "STATIC", "router"]

HERE = Path(__file__).parent
STATIC = HERE / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: Where a dashboard visitor without a token is sent when tokens are set.
LOGIN = "/login"

router = APIRouter(include_in_schema=False)
templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
templates.filters["compact"] = lambda value: json.dumps(value, ensure_ascii=False)
templates.filters["when"] = lambda value: (
    "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")
)
templates.filters["ago"] = lambda value: _ago(value)


def _render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    fragment = request.headers.get("x-perdure-fragment") == "main"
    html = templates.get_template(name).render(
        request=request,
        fragment=fragment,
        statuses=RUN_STATUSES,
        read_only=app_of(request).settings.read_only,  # no action buttons
        **context,
    )
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _ago(value: datetime | None) -> str:
    if value is None:
        return ""
    seconds = (datetime.now(UTC) - value).total_seconds()
    return f"{duration_text(abs(seconds))} {'ago' if seconds >= 0 else 'from now'}"


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    """Workflows with their runs per status, and the live workers."""
    app = app_of(request)
    workflows = await app.list_workflows_async()
    workers = await app.list_workers_async("1m")
    return _render(request, "overview.html", workflows=workflows, workers=workers, live=True)


@router.get("/runs", response_class=HTMLResponse)
async def runs(
    request: Request,
    workflow: str = "",
    status: str = "",
    since: str = "",
    until: str = "",
    input: str = "",
    cursor: str = "",
) -> HTMLResponse:
    """Runs filtered by workflow, status, time and input, newest first, with paging."""
    app = app_of(request)
    filters = {
        "workflow": workflow,
        "status": status,
        "since": since,
        "until": until,
        "input": input,
    }
    error = None
    page = None
    try:
        page = await app.list_runs_async(
            workflow or None,
            status=status or None,
            since=_moment(since, "since"),
            until=_moment(until, "until"),
            input_match=_json(input, "input") if input else None,
            cursor=cursor or None,
            limit=50,
        )
    except ValidationError as exc:
        error = str(exc)
    names = [w.name for w in await app.list_workflows_async()]
    following = None
    if page is not None and page.next_cursor:
        following = "/runs?" + urlencode({**_kept(filters), "cursor": page.next_cursor})
    return _render(
        request,
        "runs.html",
        status=422 if error else 200,
        runs=[] if page is None else [app.redaction.record(r) for r in page.items],
        filters=filters,
        names=names,
        error=error,
        following=following,
        first=("/runs?" + urlencode(_kept(filters))) if cursor else None,
        live=not cursor,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: str, done: str = "") -> HTMLResponse:
    """One run: its timeline, data, audit trail, parent and children, and actions."""
    app = app_of(request)
    try:
        run = await app.get_run_async(run_id)
    except PerdureError as exc:
        return _render(request, "missing.html", status=404, message=str(exc))
    steps = await app.get_steps_async(run_id)
    events = await app.get_events_async(run_id)
    children = (await app.list_runs_async(parent_id=run.id, limit=100)).items
    values = await app.get_values_async(run_id)
    now = await app.now_async()
    dag = None
    if is_flow_run(steps):
        shape = await app.get_flow_async(run.workflow, run.version)
        dag = None if shape is None else layout_dag(shape, steps)
    shown = app.redaction  # what people see has the configured keys masked
    run, values = shown.record(run), shown.values(values)
    steps = [shown.record(s) for s in steps]
    events = [shown.record(e) for e in events]
    children = [shown.record(c) for c in children]
    return _render(
        request,
        "run.html",
        dag=dag,
        run=run,
        steps=steps,
        events=events,
        children=children,
        values=values,
        timeline=layout(run, steps, now, _parked(run, events)),
        waiting_for=waits_for(run, events),
        done=done,
        live=not run.done,
    )


@router.get("/flows/{name}", response_class=HTMLResponse)
async def flow_page(request: Request, name: str, version: int | None = None) -> HTMLResponse:
    """A DAG flow's shape: its steps as a graph and a table of their options."""
    try:
        shape = await app_of(request).get_flow_async(name, version)
    except PerdureError as exc:
        return _render(request, "missing.html", status=404, message=str(exc))
    if shape is None:
        return _render(request, "missing.html", status=404, message=f"no flow {name!r} is stored")
    return _render(request, "flow.html", shape=shape, dag=layout_dag(shape))


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Response:
    """Cancel the run (a POST from this origin only)."""
    form = await _posted(request)
    if isinstance(form, Response):
        return form
    rollback = form.get("rollback") == "1"
    cancelled = await app_of(request).cancel_async(run_id, rollback=rollback)
    if not cancelled:
        return _back(run_id, "already ended")
    return _back(run_id, "cancelling after its rollbacks" if rollback else "cancelled")


@router.post("/runs/{run_id}/signal")
async def signal(request: Request, run_id: str) -> Response:
    """Send an event to the run (a POST from this origin only)."""
    form = await _posted(request)
    if isinstance(form, Response):
        return form
    event, payload = form.get("event", ""), form.get("payload", "")
    try:
        value = _json(payload, "payload") if payload.strip() else None
        delivered = await app_of(request).signal_async(run_id, event, value)
    except ValidationError as exc:
        return _back(run_id, f"not sent: {exc}")
    return _back(run_id, f"sent {event}" if delivered else "not sent: the run has ended")


@router.post("/runs/{run_id}/retry")
async def retry(request: Request, run_id: str) -> Response:
    """Resume a failed or cancelled run from a chosen step (a POST from this origin)."""
    form = await _posted(request)
    if isinstance(form, Response):
        return form
    step = form.get("from_step") or None
    try:
        await app_of(request).retry_async(run_id, from_step=step, by="the dashboard")
    except (ValidationError, RunStateError) as exc:
        return _back(run_id, f"not retried: {exc}")
    return _back(run_id, "retried" + ("" if step is None else f" from {step}"))


@router.post("/runs/{run_id}/fork")
async def fork(request: Request, run_id: str) -> Response:
    """Start a new run from a copy of this run's journal (a POST from this origin)."""
    form = await _posted(request)
    if isinstance(form, Response):
        return form
    step = form.get("from_step") or None
    try:
        handle = await app_of(request).fork_async(run_id, from_step=step, by="the dashboard")
    except ValidationError as exc:
        return _back(run_id, f"not forked: {exc}")
    return _back(handle.id, f"forked from {run_id}")


@router.get("/workers", response_class=HTMLResponse)
async def workers(request: Request, done: str = "") -> HTMLResponse:
    """Workers seen within a day: live, stopped, or silent (gone without stopping); and
    the schedules they fire, with their actions."""
    app = app_of(request)
    seen = await app.list_workers_async("1d")
    now = await app.now_async()
    rows = [(w, _worker_state(w.stopped_at, w.last_seen_at, now)) for w in seen]
    schedules = await app.list_schedules_async()
    return _render(request, "workers.html", workers=rows, schedules=schedules, done=done, live=True)


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
    form = await _posted(request)
    if isinstance(form, Response):
        return form
    try:
        found = await act(name)
    except ValidationError as exc:  # a name no schedule can have
        return _render(request, "missing.html", status=404, message=str(exc))
    if not found:
        message = f"no schedule named {name!r}"
        return _render(request, "missing.html", status=404, message=message)
    notice = urlencode({"done": f"{done} schedule {name}"})
    return RedirectResponse(f"/workers?{notice}", status_code=303)


@router.get(LOGIN, response_class=HTMLResponse)
async def login_page(request: Request, next: str = "/", failed: str = "") -> HTMLResponse:
    """Ask for an API token once; it is kept in an HttpOnly, SameSite=Strict cookie."""
    return _render(request, "login.html", next=_local(next), failed=bool(failed))


@router.post(LOGIN)
async def login(request: Request) -> Response:
    """Keep the token in a cookie if the server knows it."""
    form = await _posted(request)
    if isinstance(form, Response):
        return form
    token, next = form.get("token", ""), form.get("next", "/")
    known: Any = getattr(request.app.state, "token_check", None)
    if known is None or not known(token.encode()):
        return RedirectResponse(f"{LOGIN}?{urlencode({'next': next, 'failed': 1})}", 303)
    answer = RedirectResponse(_local(next), 303)
    answer.set_cookie(
        "perdure_token",
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=7 * 86400,
    )
    return answer


async def _posted(request: Request) -> dict[str, str] | Response:
    """The fields of a form posted from a page of this server
    (``application/x-www-form-urlencoded``), or the refusal of a post from elsewhere."""
    refused = _foreign(request)
    if refused is not None:
        return refused
    fields = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=20)
    return {key: values[-1] for key, values in fields.items()}


def _back(run_id: str, done: str) -> RedirectResponse:
    return RedirectResponse(f"/runs/{run_id}?{urlencode({'done': done})}", status_code=303)


def _foreign(request: Request) -> Response | None:
    """A refusal unless the form was posted from a page of this server."""
    origin = request.headers.get("origin") or request.headers.get("referer") or ""
    here = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin == here or origin.startswith(here + "/"):
        return None
    return HTMLResponse(
        "actions must come from the dashboard's own pages", 403, headers=SECURITY_HEADERS
    )


def _local(path: str) -> str:
    """Only a path of this server (never another site) to go back to after login."""
    return path if path.startswith("/") and not path.startswith("//") else "/"


def _kept(filters: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in filters.items() if v}


def _moment(value: str, what: str) -> datetime | None:
    return moment(value, what=what) if value else None


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValidationError(f"{what} is not valid JSON: {text!r:.80}") from None


def _parked(run: Run, events: list[Event]) -> tuple[str, datetime] | None:
    """The open wait of a waiting run: its label and since when (the last park)."""
    if run.status != "waiting":
        return None
    since = next((e.created_at for e in reversed(events) if e.type == "waiting"), None)
    return None if since is None else (f"waiting ({run.wake_reason or 'parked'})", since)


def _worker_state(stopped: datetime | None, seen: datetime, now: datetime) -> str:
    if stopped is not None:
        return "stopped"
    return "live" if (now - seen).total_seconds() < 90 else "silent"
