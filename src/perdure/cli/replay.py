"""``perdure replay-check APP``: the gate before a deploy (docs/versioning.md)."""

from __future__ import annotations

import click

from ..replay import replay_check
from .client import TIME_HELP, load_app, time_arg
from .output import console, emit_json, json_option, table

__all__ = ["replay_check_command"]


@click.command("replay-check")
@click.argument("app_spec", metavar="APP")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["pending", "waiting", "running", "completed", "failed", "cancelled"]),
    help="Only runs in this status (repeatable). Default: pending, waiting, running.",
)
@click.option("--since", help=f"Created at or after: {TIME_HELP}.")
@click.option("--limit", default=1000, show_default=True, help="At most this many per status.")
@click.option(
    "--file",
    "files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A run written by `perdure runs export` (repeatable); alone, only files are checked.",
)
@json_option
def replay_check_command(
    app_spec: str,
    workflow: str | None,
    statuses: tuple[str, ...],
    since: str | None,
    limit: int,
    files: tuple[str, ...],
    as_json: bool,
) -> None:
    """Replay stored runs against the code in APP (module:attribute) without running
    any step, and list each run that would diverge; exits 1 if there is any.

    Steps resolve from each run's journal and a replay stops at the first step the
    journal does not hold. Nothing is written to the database."""
    app = load_app(app_spec)
    try:
        found = replay_check(
            app,
            workflow=workflow,
            status=list(statuses) or None,
            since=time_arg(since, "--since"),
            limit=limit,
            files=files,
        )
    finally:
        app.close()
    if as_json:
        emit_json([d.to_dict() for d in found])
    elif not found:
        console.print("every checked run replays cleanly")
    else:
        grid = table("run", "workflow", "v", "position", "journaled", "asked")
        for d in found:
            grid.add_row(
                d.run_id, d.workflow, str(d.version), str(d.position),
                _step(d.journaled), _step(d.asked),
            )  # fmt: skip
        console.print(grid)
    if found:
        raise SystemExit(1)


def _step(step: dict[str, str] | None) -> str:
    return "-" if step is None else f"{step['kind']} {step['name']}"
