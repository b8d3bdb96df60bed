"""``perdure runs retry|fork|cancel``: recover runs one at a time or in bulk over the
filters of ``runs list``; ``perdure runs watch``: follow one live."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .client import TIME_HELP, client, json_arg, time_arg
from .output import console, emit_json, fail, json_option
from .runs import input_match_of, runs

F = TypeVar("F", bound=Callable[..., Any])


def _filters(fn: F) -> F:
    """The selection options of ``runs list`` (for the bulk forms)."""
    for option in reversed(
        [
            click.option("--workflow", help="Only this workflow."),
            click.option(
                "--since",
                help=f"Created at or after: {TIME_HELP}.",
            ),
            click.option(
                "--until",
                help=f"Created before: {TIME_HELP}.",
            ),
            click.option("--input", "inputs", multiple=True, help="Input field key=value."),
            click.option("--input-match", help="Input contains this JSON."),
        ]
    ):
        fn = option(fn)
    return fn


def _selection(kw: dict[str, Any]) -> dict[str, Any]:
    return {
        "since": time_arg(kw.pop("since"), "--since"),
        "until": time_arg(kw.pop("until"), "--until"),
        "input_match": input_match_of(kw.pop("inputs"), kw.pop("input_match")),
    }


def _report(ids: list[str], verb: str, as_json: bool) -> None:
    if as_json:
        emit_json({verb: ids})
        return
    console.print(f"{verb} {len(ids)} run(s)")
    for run_id in ids:
        console.print(f"  {run_id}")


@runs.command("retry")
@click.argument("run_id", required=False)
@click.option("--from-step", help="Rerun from this step (default: the step that failed).")
@click.option("--status", default="failed", show_default=True, help="Bulk: runs in this status.")
@_filters
@json_option
@click.pass_context
def runs_retry(
    ctx: click.Context,
    /,
    run_id: str | None,
    from_step: str | None,
    status: str,
    workflow: str | None,
    as_json: bool,
    **kw: Any,
) -> None:
    """Resume a failed or cancelled run (RUN_ID), or every run the filters select.

    Steps before the one it resumes from are not run again; what it supersedes stays in
    the run's history. Without RUN_ID, --workflow or another filter is required."""
    app = client(ctx)
    selection = _selection(kw)
    if run_id is not None:
        handle = app.retry(run_id, from_step=from_step)
        _report([handle.id], "retried", as_json)
        return
    if from_step is not None:
        fail("--from-step needs a RUN_ID")
    if workflow is None and not any(selection.values()):
        fail("say which runs: a RUN_ID, or --workflow and other filters")
    _report(app.retry_runs(workflow, status=status, **selection), "retried", as_json)


@runs.command("fork")
@click.argument("run_id")
@click.option("--from-step", help="Copy the journal before this step (default: all of it).")
@click.option("--input", "input_json", help="The new run's input as JSON (default: the same).")
@json_option
@click.pass_context
def runs_fork(
    ctx: click.Context,
    run_id: str,
    from_step: str | None,
    input_json: str | None,
    as_json: bool,
) -> None:
    """Start a new run from a copy of RUN_ID's journal; RUN_ID is left as it is."""
    value = json_arg(input_json, "--input")
    handle = client(ctx).fork(run_id, from_step=from_step, input=value)
    _report([handle.id], "forked", as_json)


@runs.command("cancel")
@click.option("--status", help="Only runs in this status.")
@_filters
@json_option
@click.pass_context
def runs_cancel(
    ctx: click.Context, /, status: str | None, workflow: str | None, as_json: bool, **kw: Any
) -> None:
    """Cancel every live run the filters select (one run: ``perdure cancel RUN_ID``)."""
    selection = _selection(kw)
    if workflow is None and status is None and not any(selection.values()):
        fail("say which runs: --workflow, --status or other filters")
    _report(client(ctx).cancel_runs(workflow, status=status, **selection), "cancelled", as_json)


@runs.command("watch")
@click.argument("run_id")
@json_option
@click.pass_context
def runs_watch(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Follow a run live: its history, then each event as it happens, until it ends."""
    app = client(ctx, read_only=True)
    for seen in app.watch(run_id):
        event = app.redaction.record(seen)
        if as_json:
            emit_json({"type": event.type, "data": event.data, "created_at": event.created_at})
            continue
        when = event.created_at.strftime("%H:%M:%S.%f")[:-3]
        detail = "" if event.data is None else f"  {_brief(event.data)}"
        console.print(f"{when}  {event.type}{detail}")


def _brief(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "..."
