"""The `perdure` command: workers, the demo, and operations on runs."""

from __future__ import annotations

import json
import logging
import os
import signal as signals
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.live import Live
from rich.table import Table

from .._logging import configure as configure_logging
from ..app import App
from ..durations import to_seconds
from ..errors import ConfigurationError, PerdureError, ReadOnlyDatabase
from ..records import WorkerInfo
from ..telemetry.setup import configure_tracing
from . import recovery as _recovery  # noqa: F401  (registers runs retry/fork/cancel)
from .client import (
    app_option,
    client,
    first,
    json_arg,
    project_app,
    read_only_twin,
    require_app,
)
from .config import load_config
from .init import init
from .output import as_dict, console, emit_json, err_console, fail, json_option, table
from .replay import replay_check_command
from .runs import runs
from .schedules import schedules

F = TypeVar("F", bound=Callable[..., Any])


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReadOnlyDatabase as exc:
            if exc.opened_read_only or not exc.target:
                fail(str(exc))
            fail(f"{exc.target} is read-only: this command writes to it; use a writable file")
        except PerdureError as exc:
            fail(str(exc))


@click.group(cls=_Group)
@click.option(
    "--database",
    envvar="PERDURE_DATABASE_URL",
    help="Database URL (sqlite:///file.db or postgresql://...). Env: PERDURE_DATABASE_URL.",
)
@click.option("--schema", envvar="PERDURE_SCHEMA", help="PostgreSQL schema (default perdure).")
@click.option(
    "--app",
    "app_spec",
    envvar="PERDURE_APP",
    help="Your App as module:attribute: its codec and redaction apply to what commands "
    "read and print. Env: PERDURE_APP.",
)
@click.option(
    "--config",
    "config_file",
    envvar="PERDURE_CONFIG",
    type=click.Path(dir_okay=False),
    help="The config file (perdure.toml, or pyproject.toml with [tool.perdure]); "
    "default: the nearest one upward from here. Env: PERDURE_CONFIG.",
)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    envvar="PERDURE_LOG_FORMAT",
    help="Log lines as text, or as one JSON object per line. Env: PERDURE_LOG_FORMAT.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    database: str | None,
    schema: str | None,
    app_spec: str | None,
    config_file: str | None,
    verbose: int,
    log_format: str,
) -> None:
    """perdure: durable workflows journaled in PostgreSQL or SQLite."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    configure_logging(level, log_format)
    # The flag or its variable, then the config file (docs/cli.md#config).
    try:
        project = load_config(config_file, Path.cwd())
    except ConfigurationError as exc:
        fail(str(exc), code=2)
    database = database or project.database_url
    schema = schema or project.schema
    for name, value in project.telemetry.otel_env().items():
        os.environ.setdefault(name, value)
    if project.server.allowed_hosts:
        os.environ.setdefault("PERDURE_ALLOWED_HOSTS", ",".join(project.server.allowed_hosts))
    if database:
        os.environ["PERDURE_DATABASE_URL"] = database  # apps built by APP modules see it too
    if schema:
        os.environ["PERDURE_SCHEMA"] = schema
    ctx.obj = {"database": database, "schema": schema, "app": app_spec, "config": project}


cli.add_command(runs)
cli.add_command(schedules)
cli.add_command(init)
cli.add_command(replay_check_command)


@cli.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@app_option
@click.option("--concurrency", type=click.IntRange(1), help="Runs executed at once.  [default: 10]")
@click.option("--workflows", multiple=True, help="Glob of workflow names to serve (repeatable).")
@click.option("--lease", help="Lease length without heartbeat.  [default: 30s]")
@click.option("--poll-interval", type=float, default=None, help="Fallback polling period (s).")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics.",
)
@click.option(
    "--metrics-host",
    help="Address of the metrics endpoint (0.0.0.0 for a remote scraper).  [default: 127.0.0.1]",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Log lines as text or JSON (as the global option).",
)
@click.pass_context
def worker(
    ctx: click.Context,
    app_spec: str | None,
    app_option: str | None,
    concurrency: int | None,
    workflows: tuple[str, ...],
    lease: str | None,
    poll_interval: float | None,
    metrics_port: int | None,
    metrics_host: str | None,
    log_format: str | None,
) -> None:
    """Run a worker for APP (module:attribute) until SIGTERM/SIGINT.

    Without APP: --app, else the config file's app, else the App that discovery
    finds under its paths; the config's [worker] values are the defaults.

    It logs every retry, failure, park and recovery of a run with its reason, one line
    each (INFO/WARNING), with the run id and workflow. With --metrics-port it serves
    Prometheus metrics; OTEL_* variables send its spans (docs/telemetry.md)."""
    # Until the worker's own handlers are in place nothing is claimed yet, so a stop
    # signal during start-up can simply end the process cleanly.
    signals.signal(signals.SIGTERM, lambda *_: sys.exit(0))
    if log_format is not None:
        configure_logging(logging.getLogger().level, log_format)
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("perdure").setLevel(logging.INFO)
    app = require_app(ctx, app_spec, app_option)
    project = ctx.obj["config"]
    configure_tracing()
    w = app.worker(
        concurrency=concurrency or project.worker.concurrency or 10,
        workflows=list(workflows or project.worker.workflows) or None,
        lease=lease or project.worker.lease or "30s",
        poll_interval=poll_interval or project.worker.poll_interval,
        metrics_port=project.telemetry.metrics_port if metrics_port is None else metrics_port,
        metrics_host=metrics_host or project.telemetry.metrics_host or "127.0.0.1",
    )
    try:
        w.run()
    finally:
        app.close()


@cli.command()
@click.argument("app_spec", metavar="[APP]", required=False)
@app_option
@click.option("--host", help="Address to listen on.  [default: 127.0.0.1]")
@click.option("--port", type=click.IntRange(0, 65535), help="Port.  [default: 8000]")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help="A Host name the server answers to besides loopback names (repeatable; "
    "also PERDURE_ALLOWED_HOSTS, comma-separated; '*' for any, which is unsafe).",
)
@click.option(
    "--session-lifetime",
    default="12h",
    show_default=True,
    help="How long a dashboard sign-in lasts (a duration: 30m, 12h, 7d).",
)
@click.option(
    "--header-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a client has to send a request's headers before it is disconnected.",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Open the database read-only: pages and GET routes only, every change refused "
    "(403), no retention sweep. Works on an SQLite file this process cannot write.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    app_spec: str | None,
    app_option: str | None,
    host: str | None,
    port: int | None,
    allowed_hosts: tuple[str, ...],
    session_lifetime: str,
    header_timeout: float,
    read_only: bool,
) -> None:
    """Serve the REST API (docs/api.md) and the dashboard until SIGTERM/SIGINT.

    With APP or --app (module:attribute), or the config file's app or discovery, the
    server uses that App; without, the database of --database. The config's [server]
    values are the defaults. Set PERDURE_API_TOKENS (comma-separated) to require a
    bearer token; without tokens the server listens on loopback only. It answers only
    to loopback Host names, the --host address and --allowed-host names
    (docs/security.md). With --read-only (or PERDURE_READ_ONLY=1) it changes nothing."""
    try:
        from ..server import serve as run_server
    except ImportError:
        fail("the server needs its extra: pip install 'perdure[server]'")
    try:
        lifetime = to_seconds(session_lifetime, what="--session-lifetime")
    except PerdureError as exc:
        fail(str(exc), 2)
    if lifetime <= 0:
        fail("--session-lifetime must be more than zero", 2)
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("perdure").setLevel(logging.INFO)
    found = project_app(ctx, app_spec, app_option)
    if found is not None:
        app = read_only_twin(found) if read_only and not found.settings.read_only else found
    else:
        app = App(ctx.obj["database"], schema=ctx.obj["schema"], read_only=read_only or None)
    server = ctx.obj["config"].server
    configure_tracing()
    try:
        run_server(
            app,
            host=host or server.host or "127.0.0.1",
            port=first(port, server.port, 8000),
            allowed_hosts=allowed_hosts or server.allowed_hosts,
            session_lifetime=lifetime,
            header_timeout=header_timeout,
        )
    finally:
        app.close()


@cli.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the database schema."""
    app = App(ctx.obj["database"], schema=ctx.obj["schema"], migrate=False)
    try:
        version = app.migrate()
    finally:
        app.close()
    console.print(f"schema is at version {version}")


@cli.command()
@click.argument("workflow")
@click.option("--input", "input_", help="The run's input as JSON.")
@click.option("--idempotency-key", help="Start at most one run per key.")
@click.option("--priority", type=int, help="Lower runs first (default 100).")
@click.option("--delay", help="Start no earlier than this long from now (e.g. 5m).")
@click.option("--wait", is_flag=True, help="Wait for the run to end and print its output.")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds.")
@click.pass_context
def start(
    ctx: click.Context,
    workflow: str,
    input_: str | None,
    idempotency_key: str | None,
    priority: int | None,
    delay: str | None,
    wait: bool,
    timeout: float | None,
) -> None:
    """Start a run of WORKFLOW (known to the database) and print its id."""
    app = client(ctx)
    if wait and timeout is not None:
        to_seconds(timeout, what="--timeout")  # refused before anything is stored
    handle = app.start(
        workflow,
        json_arg(input_, "--input"),
        idempotency_key=idempotency_key,
        priority=priority,
        delay=delay,
    )
    console.print(handle.id)
    if handle.warning is not None:
        err_console.print(f"warning: {handle.warning}")
    if wait:
        output = app.redaction.value(app.result(handle.id, timeout=timeout))
        console.print_json(json.dumps(output))


@cli.command()
@click.argument("run_id")
@click.argument("event")
@click.option("--payload", help="JSON payload.")
@click.pass_context
def signal(ctx: click.Context, run_id: str, event: str, payload: str | None) -> None:
    """Send EVENT to one run."""
    delivered = client(ctx).signal(run_id, event, json_arg(payload, "--payload"))
    console.print("delivered" if delivered else "the run has ended; nothing stored")
    if not delivered:
        sys.exit(1)


@cli.command()
@click.argument("event")
@click.option("--payload", help="JSON payload.")
@click.option("--idempotency-key", help="Publish at most once per key.")
@click.pass_context
def publish(
    ctx: click.Context, event: str, payload: str | None, idempotency_key: str | None
) -> None:
    """Publish EVENT: resume waiting runs and start subscribed workflows."""
    result = client(ctx).publish(
        event, json_arg(payload, "--payload"), idempotency_key=idempotency_key
    )
    console.print(f"started {len(result.started)} run(s), resumed {len(result.resumed)}")


@cli.command()
@click.argument("run_id")
@click.pass_context
@click.option("--rollback", is_flag=True, help="Run the rollbacks of its completed steps first.")
def cancel(ctx: click.Context, run_id: str, rollback: bool) -> None:
    """Cancel a live run (and its live children)."""
    if client(ctx).cancel(run_id, rollback=rollback):
        console.print("cancelling: a worker runs its rollbacks, then cancels it" if rollback
                      else "cancelled")  # fmt: skip
    else:
        console.print("the run had already ended")
        sys.exit(1)


@cli.command()
@click.pass_context
def sweep(ctx: click.Context) -> None:
    """Delete finished runs past their retention."""
    console.print(f"deleted {client(ctx).sweep()} run(s)")


_STATUSES = ("pending", "running", "waiting", "completed", "failed", "cancelled")


@cli.command()
@json_option
@click.pass_context
def workflows(ctx: click.Context, as_json: bool) -> None:
    """List workflows with run counts per status."""
    summaries = client(ctx, read_only=True).list_workflows()
    if as_json:
        emit_json([as_dict(w) for w in summaries])
        return
    grid = table("workflow", *_STATUSES)
    for w in summaries:
        grid.add_row(w.name, *(str(w.counts.get(s, 0)) for s in _STATUSES))
    console.print(grid)


@cli.command()
@click.option("--seen-within", default="1h", show_default=True, help="How far back to look.")
@json_option
@click.pass_context
def workers(ctx: click.Context, seen_within: str, as_json: bool) -> None:
    """List workers: live ones, and those stopped or silent (not seen for a minute)."""
    app = client(ctx, read_only=True)
    found = app.list_workers(seen_within=seen_within)
    now = datetime.now(UTC)

    def state(w: WorkerInfo) -> str:
        if w.stopped_at is not None:
            return f"stopped {w.stopped_at.strftime('%H:%M:%S')}"
        silent = (now - w.last_seen_at).total_seconds()
        return "live" if silent < 60 else f"silent for {silent:.0f}s (probably dead)"

    if as_json:
        emit_json([{**as_dict(w), "state": state(w).split(" ")[0]} for w in found])
        return
    grid = table("id", "state", "host", "pid", "concurrency", "last seen", "workflows")
    for w in found:
        grid.add_row(
            w.id,
            state(w),
            w.host,
            str(w.pid),
            str(w.concurrency),
            w.last_seen_at.strftime("%H:%M:%S"),
            ", ".join(w.workflows),
        )
    console.print(grid)


@cli.command()
@click.option("--runs", "count", default=5, show_default=True, help="How many demo runs.")
@click.option("--cool-off", default="2s", show_default=True, help="The durable sleep in each run.")
@click.pass_context
def demo(ctx: click.Context, count: int, cool_off: str) -> None:
    """Run a real demo on the embedded SQLite default: a worker, a few runs with
    parallel steps and a durable sleep, their progress live, and their results."""
    from ..demo import build_demo_app, demo_orders

    app = build_demo_app(ctx.obj["database"])
    console.print(
        f"perdure demo on {app.settings.database_url}: {count} orders, "
        f"each reserves items in parallel, charges, sleeps {cool_off} durably, ships"
    )
    try:
        with app.worker(concurrency=4):
            handles = [app.start("demo.order", o) for o in demo_orders(count, cool_off)]
            _watch(app, [h.id for h in handles])
        failed = [h for h in handles if app.get_run(h.id).status != "completed"]
        for h in handles:
            run = app.get_run(h.id)
            console.print(
                f"{run.id} {run.status}: {json.dumps(run.output or run.error)}", highlight=False
            )
        console.print(f"inspect one: perdure runs show {handles[0].id}")
        if failed:
            fail(f"{len(failed)} run(s) did not complete")
    finally:
        app.close()


def _watch(app: App, run_ids: list[str], timeout: float = 120.0) -> None:
    def snapshot() -> tuple[Table, bool]:
        grid = table("run", "status", "steps", "latest step")
        done = True
        for run_id in run_ids:
            run = app.get_run(run_id)
            steps = app.get_steps(run_id)
            done = done and run.done
            latest = steps[-1].name if steps else "-"
            grid.add_row(run_id, run.status, str(len(steps)), latest)
        return grid, done

    deadline = time.monotonic() + timeout
    if console.is_terminal:
        with Live(console=console, refresh_per_second=8) as live:
            while time.monotonic() < deadline:
                grid, done = snapshot()
                live.update(grid)
                if done:
                    return
                time.sleep(0.2)
    else:
        last: dict[str, str] = {}
        while time.monotonic() < deadline:
            _, done = snapshot()
            for run_id in run_ids:
                run = app.get_run(run_id)
                line = f"{run.status} ({len(app.get_steps(run_id))} steps)"
                if last.get(run_id) != line:
                    console.print(f"{run_id}: {line}")
                    last[run_id] = line
            if done:
                return
            time.sleep(0.2)
    fail("the demo runs did not finish in time")


def main() -> None:
    """Entry point of the ``perdure`` console script."""
    cli(prog_name="perdure")


if __name__ == "__main__":
    main()
