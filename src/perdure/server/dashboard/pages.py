"""The dashboard: server-rendered pages over the same `App` methods as the API.

Every value is escaped by the templates (Jinja2 autoescape); scripts and styles come
from this server only (see `SECURITY_HEADERS`); actions are POST forms that must come
from this origin. Live pages reload their ``<main>`` from the server every two seconds
(``static/dashboard.js``). The actions are in `actions`, signing in and out in
`signin`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ...attempts import attempts_of, frames_of
from ...describe import is_flow_run, waits_for
from ...durations import moment
from ...errors import PerdureError, ValidationError
from ...records import RUN_STATUSES, Event, Run
from ..common import app_of
from .dag import layout_dag
from .forms import NOTICES, SECURITY_HEADERS, keep_session, session_of, sessions_of
from .timeline import duration_text, layout

__all__ = ["STATIC", "json_value", "render", "router", "run_view"]

HERE = Path(__file__).parent
STATIC = HERE / "static"

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
    "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
)
templates.filters["exact"] = lambda value: "" if value is None else value.isoformat()
templates.filters["frames"] = lambda text: frames_of(text) if isinstance(text, str) else []
templates.filters["untraced"] = lambda error: _untraced(error)
templates.filters["took"] = lambda run: (
    ""
    if run.completed_at is None
    else duration_text((run.completed_at - run.created_at).total_seconds())
)
templates.filters["ago"] = lambda value: _ago(value)


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page ``name``; its forms carry the CSRF token of the visitor's session (a new
    one's cookie is sent with it), and a ``?notice=`` code shows its fixed notice."""
    fragment = request.headers.get("x-perdure-fragment") == "main"
    session, fresh = session_of(request)
    html = templates.get_template(name).render(
        request=request,
        fragment=fragment,
        statuses=RUN_STATUSES,
        csrf=sessions_of(request).csrf(session),
        signed_in=session.signed_in,
        notice=NOTICES.get(request.query_params.get("notice", "")),
        read_only=app_of(request).settings.read_only,  # no action buttons
        **context,
    )
    answer = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
    if fresh:
        keep_session(answer, request, session)
    return answer


def _untraced(error: Any) -> Any:
    """A stored error without its tracebacks (they are shown formatted)."""
    if not isinstance(error, dict):
        return error
    return {k: _untraced(v) for k, v in error.items() if k != "traceback"}


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
    flows = {w.name for w in workflows if await app.get_flow_async(w.name) is not None}
    return render(
        request, "overview.html", workflows=workflows, workers=workers, flows=flows, live=True
    )


@router.get("/runs", response_class=HTMLResponse)
async def runs(
    request: Request,
    q: str = "",
    workflow: str = "",
    status: str = "",
    since: str = "",
    until: str = "",
    input: str = "",
    children: str = "",
    cursor: str = "",
) -> HTMLResponse:
    """Runs filtered by workflow, status, time and input, newest first, with paging:
    top-level runs with a count of their children unless ``children`` asks for all;
    ``q`` finds a run by its id, its idempotency key or an input match."""
    app = app_of(request)
    filters = {
        "q": q,
        "workflow": workflow,
        "status": status,
        "since": since,
        "until": until,
        "input": input,
        "children": "1" if children else "",
    }
    found, errors = await _search(app, q.strip()) if q.strip() else (None, [])
    page = None
    if found is None:
        query, errors = _list_filters(filters)
        if not errors:
            try:
                page = await app.list_runs_async(
                    workflow or None, cursor=cursor or None, limit=50, **query
                )
            except ValidationError as exc:
                errors = [str(exc)]
    items = found if found is not None else [] if page is None else page.items
    counts = await app.count_children_async([r.id for r in items]) if items else {}
    names = [w.name for w in await app.list_workflows_async()]
    following = None
    if page is not None and page.next_cursor:
        following = "/runs?" + urlencode({**_kept(filters), "cursor": page.next_cursor})
    now = await app.now_async()
    return render(
        request,
        "runs.html",
        status=422 if errors else 200,
        runs=[app.redaction.record(r) for r in items],
        counts=counts,
        took={
            r.id: duration_text(((r.completed_at or now) - r.created_at).total_seconds())
            for r in items
        },
        filters=filters,
        names=names,
        errors=errors,
        searched=found is not None,
        following=following,
        first=("/runs?" + urlencode(_kept(filters))) if cursor else None,
        live=not cursor,
    )


def _list_filters(filters: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The `list_runs` arguments of the filter form, and every error in it (each field
    checked on its own, so all of them are listed at once)."""
    every = bool(filters["children"])  # children and a flow's tasks too
    query: dict[str, Any] = {"top_level": not every, "include_tasks": every}
    errors: list[str] = []
    if filters["status"] and filters["status"] not in RUN_STATUSES:
        errors.append(f"status must be one of {', '.join(RUN_STATUSES)}")
    else:
        query["status"] = filters["status"] or None
    for name in ("since", "until"):
        try:
            query[name] = _moment(filters[name], name)
        except ValidationError as exc:
            errors.append(str(exc))
    try:
        query["input_match"] = json_value(filters["input"], "input") if filters["input"] else None
    except ValidationError as exc:
        errors.append(str(exc))
    return query, errors


async def _search(app: Any, text: str) -> tuple[list[Run], list[str]]:
    """The runs ``text`` names: the run with that id, the runs started with that
    idempotency key, and, for JSON, the runs whose input contains it."""
    found: dict[str, Run] = {}
    try:
        found[text] = await app.get_run_async(text)
    except PerdureError:
        pass
    try:
        for run in (await app.list_runs_async(idempotency_key=text, limit=50)).items:
            found.setdefault(run.id, run)
    except ValidationError:
        pass  # no idempotency key can be this text
    if text[:1] in '{["':
        try:
            match = json_value(text, "search")
            for run in (await app.list_runs_async(input_match=match, limit=50)).items:
                found.setdefault(run.id, run)
        except ValidationError as exc:
            return list(found.values()), [str(exc)]
    return list(found.values()), []


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: str) -> HTMLResponse:
    """One run: its timeline, data, audit trail, parent and children, and actions."""
    return await run_view(request, run_id)


async def run_view(
    request: Request,
    run_id: str,
    *,
    error: str | None = None,
    status: int = 200,
    typed: dict[str, str] | None = None,
) -> HTMLResponse:
    """The run page of ``run_id``, with ``error`` (an action refused) if given, and the
    fields of the refused form as they were ``typed``."""
    app = app_of(request)
    try:
        run = await app.get_run_async(run_id)
    except PerdureError as exc:
        return render(request, "missing.html", status=404, message=str(exc))
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
    order = {step.name: i for i, step in enumerate(steps)}
    children = sorted(
        (shown.record(c) for c in children),
        key=lambda c: (order.get(c.parent_step or "", len(order)), c.created_at, c.id),
    )
    return render(
        request,
        "run.html",
        dag=dag,
        run=run,
        steps=steps,
        events=events,
        children=children,
        values=values,
        timeline=layout(run, steps, now, _parked(run, events), events),
        attempts={s.name: attempts_of(s, events) for s in steps},
        waiting_for=waits_for(run, events),
        error=error,
        typed=typed or {},
        status=status,
        live=not run.done and error is None,
    )


@router.get("/flows/{name}", response_class=HTMLResponse)
async def flow_page(request: Request, name: str, version: int | None = None) -> HTMLResponse:
    """A DAG flow's shape: its steps as a graph and a table of their options."""
    try:
        shape = await app_of(request).get_flow_async(name, version)
    except PerdureError as exc:
        return render(request, "missing.html", status=404, message=str(exc))
    if shape is None:
        return render(request, "missing.html", status=404, message=f"no flow {name!r} is stored")
    return render(request, "flow.html", shape=shape, dag=layout_dag(shape))


@router.get("/workers", response_class=HTMLResponse)
async def workers(request: Request) -> HTMLResponse:
    """Workers seen within a day: live, stopped, or silent (gone without stopping); and
    the schedules they fire, with their actions."""
    app = app_of(request)
    seen = await app.list_workers_async("1d")
    now = await app.now_async()
    rows = [(w, _worker_state(w.stopped_at, w.last_seen_at, now)) for w in seen]
    schedules = await app.list_schedules_async()
    return render(request, "workers.html", workers=rows, schedules=schedules, live=True)


def _kept(filters: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in filters.items() if v}


def _moment(value: str, what: str) -> datetime | None:
    return moment(value, what=what) if value else None


def json_value(text: str, what: str) -> Any:
    """``text`` read as JSON, or a `ValidationError` naming ``what``."""
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
