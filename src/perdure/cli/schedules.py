"""``perdure schedules``: list, add, pause, resume and delete cron schedules."""

from __future__ import annotations

import click
from rich.text import Text

from ..records import Schedule
from .client import client, json_arg
from .output import as_dict, console, emit_json, fail, json_option, table

__all__ = ["schedules"]


def _state(s: Schedule) -> str:
    return "paused" if s.paused else "active"


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def schedules(ctx: click.Context, as_json: bool) -> None:
    """Cron schedules stored in the database (without a subcommand: list them)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_schedules, as_json=as_json)


@schedules.command("list")
@json_option
@click.pass_context
def list_schedules(ctx: click.Context, as_json: bool) -> None:
    """List schedules with their next tick."""
    found = client(ctx, read_only=True).list_schedules()
    if as_json:
        emit_json([as_dict(s) for s in found])
        return
    grid = table("name", "workflow", "cron", "timezone", "catch up", "state", "next tick (UTC)")
    for s in found:
        grid.add_row(
            s.name,
            s.workflow,
            s.cron,
            s.timezone,
            s.catch_up,
            _state(s),
            s.next_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(grid)


@schedules.command("add")
@click.argument("name")
@click.argument("workflow")
@click.argument("cron")
@click.option("--input", "input_json", help="The runs' input, a JSON object.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone.")
@click.option(
    "--catch-up",
    type=click.Choice(["latest", "all", "none"]),
    default="latest",
    show_default=True,
    help="Ticks missed while no worker ran: fire the latest, all, or none.",
)
@json_option
@click.pass_context
def add(
    ctx: click.Context,
    name: str,
    workflow: str,
    cron: str,
    input_json: str | None,
    timezone: str,
    catch_up: str,
    as_json: bool,
) -> None:
    """Create or update schedule NAME: start WORKFLOW at each tick of CRON."""
    stored = client(ctx).schedule(
        name, workflow, cron, json_arg(input_json, "--input"), timezone, catch_up
    )
    if as_json:
        emit_json(as_dict(stored))
        return
    console.print(Text(f"schedule {stored.name}: next tick {stored.next_at.isoformat()}"))


def _toggle(ctx: click.Context, name: str, action: str) -> None:
    app = client(ctx)
    done = {
        "pause": app.pause_schedule,
        "resume": app.resume_schedule,
        "delete": app.delete_schedule,
    }[action](name)
    if not done:
        fail(f"no schedule named {name!r}")
    past = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
    console.print(Text(f"schedule {name}: {past}"))


@schedules.command()
@click.argument("name")
@click.pass_context
def pause(ctx: click.Context, name: str) -> None:
    """Pause schedule NAME (its ticks are skipped until it is resumed)."""
    _toggle(ctx, name, "pause")


@schedules.command()
@click.argument("name")
@click.pass_context
def resume(ctx: click.Context, name: str) -> None:
    """Resume schedule NAME from its next tick."""
    _toggle(ctx, name, "resume")


@schedules.command()
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete schedule NAME (its runs stay)."""
    _toggle(ctx, name, "delete")
