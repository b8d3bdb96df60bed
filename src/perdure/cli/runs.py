"""``perdure runs list``, ``show`` and ``export``: finding runs and reading one."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from ..app import App
from ..attempts import attempts_of
from ..describe import is_flow_run, waits_for
from ..records import Event, Run, Step
from ..replay import export_run
from .client import TIME_HELP, client, json_arg, time_arg
from .output import as_dict, console, emit_json, json_option, literal, table

__all__ = ["runs"]


@click.group()
def runs() -> None:
    """List and inspect runs."""


def _version(run: Run) -> str:
    return f"{run.workflow}@{'-' if run.version is None else run.version}"


def _runs_table(items: list[Run]) -> Any:
    grid = table("id", "workflow", "status", "created", "attempt")
    for run in items:
        grid.add_row(
            run.id,
            _version(run),
            run.status,
            run.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            str(run.attempt),
        )
    return grid


def input_match_of(pairs: tuple[str, ...], match: str | None) -> Any:
    """``--input key=value`` pairs (a value that is JSON is read as JSON, else as text)
    and ``--input-match`` JSON, merged into one containment pattern."""
    pattern: dict[str, Any] = {}
    if match is not None:
        given = json_arg(match, "--input-match")
        if not pairs:
            return given
        if not isinstance(given, dict):
            raise click.BadParameter("--input-match must be a JSON object to combine with --input")
        pattern.update(given)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"--input takes key=value, got {pair!r}")
        try:
            pattern[key] = json_arg(raw, "--input")
        except click.BadParameter:
            pattern[key] = raw
    return pattern or None


@runs.command("list")
@click.option("--workflow", help="Only this workflow.")
@click.option("--status", help="Only this status.")
@click.option("--since", help=f"Created at or after: {TIME_HELP}.")
@click.option("--until", help=f"Created before: {TIME_HELP}.")
@click.option("--input", "inputs", multiple=True, help="Input field key=value (repeatable).")
@click.option("--input-match", help="Input contains this JSON (PostgreSQL @> rules).")
@click.option("--parent", help="Only the children of this run.")
@click.option("--limit", default=20, show_default=True)
@click.option("--cursor", help="From a previous page.")
@json_option
@click.pass_context
def runs_list(
    ctx: click.Context,
    workflow: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    inputs: tuple[str, ...],
    input_match: str | None,
    parent: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first."""
    app = client(ctx, read_only=True)
    page = app.list_runs(
        workflow=workflow,
        status=status,
        since=time_arg(since, "--since"),
        until=time_arg(until, "--until"),
        input_match=input_match_of(inputs, input_match),
        parent_id=parent,
        limit=limit,
        cursor=cursor,
    )
    items = [app.redaction.record(r) for r in page.items]
    if as_json:
        emit_json({"items": items, "next_cursor": page.next_cursor})
        return
    console.print(_runs_table(items))
    if page.next_cursor:
        console.print(f"next page: --cursor {page.next_cursor}")


@runs.command("show")
@click.argument("run_id")
@click.option(
    "--traceback/--no-traceback",
    "with_traceback",
    default=True,
    show_default=True,
    help="Print a failed run's traceback under its error.",
)
@click.option("--attempts", "each_attempt", is_flag=True, help="Print every attempt of each step.")
@json_option
@click.pass_context
def runs_show(
    ctx: click.Context, run_id: str, with_traceback: bool, each_attempt: bool, as_json: bool
) -> None:
    """Show one run: its timeline with durations, each failed attempt's error, what it
    waits for, and its parent and children; a failed run's error with its traceback.

    In the timeline, ``at`` is when a step's first attempt started and ``took`` the
    total from there to its end, the last attempt's own time beside it."""
    app = client(ctx, read_only=True)
    shown = app.redaction  # the configured keys masked
    run = shown.record(app.get_run(run_id))
    steps = [shown.record(s) for s in app.get_steps(run_id)]
    events = [shown.record(e) for e in app.get_events(run_id)]
    children = _children(app, run_id)
    if as_json:
        emit_json(
            {
                "run": as_dict(run),
                "steps": [as_dict(s) for s in steps],
                "events": [as_dict(e) for e in events],
                "children": [
                    {"id": c.id, "workflow": c.workflow, "status": c.status} for c in children
                ],
            }
        )
        return
    if is_flow_run(steps):
        _print_header(run, events, [])  # its children are its tasks, shown by step
        _print_flow_steps(run, steps)
        return
    _print_header(run, events, children)
    _print_timeline(run, steps, events, each_attempt)
    if with_traceback:
        _print_traceback(run)


def _children(app: App, run_id: str) -> list[Run]:
    found: list[Run] = []
    cursor = None
    while True:
        page = app.list_runs(parent_id=run_id, limit=1000, cursor=cursor)
        found.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return found


def _took(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    seconds = (end - start).total_seconds()
    return f"{seconds * 1000:.1f}ms" if seconds < 1 else f"{seconds:.2f}s"


def _print_header(run: Run, events: list[Event], children: list[Run]) -> None:
    console.print(Text.assemble((run.id, "bold"), " ", _version(run), " ", (run.status, "bold")))
    console.print(
        f"created {run.created_at.isoformat()}  attempt {run.attempt}  "
        f"took {_took(run.created_at, run.completed_at)}"
    )
    if run.parent_id is not None:
        console.print(f"parent: {run.parent_id} (its step {run.parent_step})")
    for child in children:
        console.print(f"child:  {child.id} {_version(child)} {child.status}")
    waiting = waits_for(run, events)
    if waiting:
        console.print(f"waits for: {waiting}")
    console.print(f"input:  {literal(run.input)}")
    if run.output is not None:
        console.print(f"output: {literal(run.output)}")
    if run.error:
        console.print(f"error:  {run.error.get('type')}: {run.error.get('message')}")
        cause = _cause(run.error)
        if cause is not run.error:
            console.print(f"cause:  {cause.get('type')}: {cause.get('message')}")


def _cause(error: dict[str, Any]) -> dict[str, Any]:
    """What a step failure wraps (the user's exception), else the error itself."""
    cause = error.get("cause")
    return cause if isinstance(cause, dict) else error


def _print_traceback(run: Run) -> None:
    if not isinstance(run.error, dict):
        return
    text = _cause(run.error).get("traceback") or run.error.get("traceback")
    if isinstance(text, str) and text.strip():
        console.print("")
        console.print(text.rstrip("\n"))


def _print_timeline(run: Run, steps: list[Step], events: list[Event], each: bool) -> None:
    grid = table("at", "took", "step", "kind", "status", "attempts")
    for step in steps:
        tries = attempts_of(step, events)
        first = next((a.started_at for a in tries if a.started_at is not None), None)
        first = first or step.started_at
        took = _took(first, step.completed_at)
        if len(tries) > 1:
            took += f" (last {_took(tries[-1].started_at, tries[-1].ended_at)})"
        at = "-" if first is None else f"+{_took(run.created_at, first)}"
        grid.add_row(at, took, step.name, step.kind, step.status, str(step.attempts))
        for attempt in tries:
            if not each and attempt.error is None:
                continue
            error = attempt.error or {}
            line = f"attempt {attempt.number} {attempt.status}"
            if attempt.error is not None:
                line += f": {error.get('type')}: {error.get('message')}"
            if attempt.delay is not None:
                line += f" (retried after {attempt.delay}s)"
            start = attempt.started_at
            grid.add_row(
                "" if start is None else f"+{_took(run.created_at, start)}",
                _took(start, attempt.ended_at) if each else "",
                f"  {line}",
                "",
                "",
                "",
            )
    console.print(grid)


_TASK_ERRORS_SHOWN = 3  # per step: a map of a thousand failing tasks stays readable


def _print_flow_steps(run: Run, steps: list[Step]) -> None:
    """A flow run's steps in definition order: their tasks done out of all, the
    attempts they made, and the last error of each task that has one."""
    tasks = sum(len(step.tasks) for step in steps)
    console.print(f"tasks:  {tasks} in {len(steps)} steps")
    grid = table("at", "took", "step", "status", "tasks", "attempts")
    for step in steps:
        at = "-" if step.started_at is None else f"+{_took(run.created_at, step.started_at)}"
        done = sum(t.status == "completed" for t in step.tasks)
        grid.add_row(
            at,
            _took(step.started_at, step.completed_at),
            step.name,
            step.status,
            f"{done}/{len(step.tasks)}",
            str(step.attempts),
        )
        erred = [t for t in step.tasks if t.error]
        for task in erred[:_TASK_ERRORS_SHOWN]:
            error = task.error or {}
            line = (
                f"  task {task.index} {task.status}, its last error: "
                f"{error.get('type')}: {error.get('message')}"
            )
            grid.add_row("", "", line, "", "", "")
        if len(erred) > _TASK_ERRORS_SHOWN:
            grid.add_row("", "", f"  and {len(erred) - _TASK_ERRORS_SHOWN} more tasks", "", "", "")
    console.print(grid)


@runs.command("export")
@click.argument("run_id")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to this file.")
@click.pass_context
def runs_export(ctx: click.Context, run_id: str, output: str | None) -> None:
    """Write a run with its journal as JSON (to stdout, or --output): a history that
    `perdure replay-check APP --file` checks new code against (docs/versioning.md).
    Values are written as stored, not redacted."""
    doc = export_run(client(ctx), run_id)
    text = json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text, "utf-8")
