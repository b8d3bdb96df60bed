"""What every CLI command shares: the App it talks through, and argument parsing."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from ..app import App
from ..durations import moment
from ..errors import ValidationError
from .config import ProjectConfig
from .discover import discover

__all__ = [
    "TIME_HELP",
    "app_option",
    "client",
    "first",
    "json_arg",
    "load_app",
    "project_app",
    "read_only_twin",
    "require_app",
    "time_arg",
]

#: ``--app`` of a command that takes an APP argument (``worker``, ``serve``).
app_option = click.option(
    "--app",
    "app_option",
    metavar="MODULE:ATTR",
    help="The App, as the APP argument (default: the config's app, or discovery).",
)


def client(ctx: click.Context, *, read_only: bool = False) -> App:
    """The App of this command (closed when the command ends): the project's
    (``--app``, else the config's app or discovery; its codec and redaction apply),
    else one on ``--database``. A read command asks for ``read_only``: the database is
    opened read-only (it may be a file this process cannot write) and never migrated."""
    found = project_app(ctx)
    if found is not None:
        app = read_only_twin(found) if read_only and not found.settings.read_only else found
    else:
        app = App(ctx.obj["database"], schema=ctx.obj["schema"], read_only=read_only or None)
    ctx.call_on_close(app.close)
    return app


def read_only_twin(app: App) -> App:
    """An App on ``app``'s database, settings, codec and redaction, opened read-only."""
    settings = {f.name: getattr(app.settings, f.name) for f in dataclasses.fields(app.settings)}
    settings["read_only"] = True
    twin = App(codec=app.codec, **settings)
    twin.redaction = app.redaction
    return twin


def project_app(ctx: click.Context, *specs: str | None) -> App | None:
    """The App a command names: the first of ``specs`` given (a command's APP argument
    and ``--app`` option; two different ones are a usage error), else the global
    ``--app``/``PERDURE_APP``, else the config's ``app``, else the one discovery finds
    under the config's ``paths``; None when nothing names one."""
    given = {s for s in specs if s}
    if len(given) > 1:
        raise click.UsageError(f"APP and --app name different apps: {', '.join(sorted(given))}")
    spec = next(iter(given), None) or ctx.obj.get("app")
    if spec:
        return load_app(spec)
    project: ProjectConfig = ctx.obj.get("config") or ProjectConfig()
    if project.app and project.root is not None:
        return load_app(project.app, root=project.root)
    if project.paths and project.root is not None:
        return discover(project.root, project.paths, project.ignore).app
    return None


def require_app(ctx: click.Context, *specs: str | None) -> App:
    """`project_app`, or a usage error saying how to name one."""
    app = project_app(ctx, *specs)
    if app is None:
        raise click.UsageError(
            "no APP: pass APP (module:attribute) or --app, or set app or paths in the "
            "config file (perdure init makes one)"
        )
    return app


def first(*values: int | None) -> int:
    """The first value given (a flag, then the config, then the default)."""
    return next(v for v in values if v is not None)


def load_app(spec: str, *, root: Path | None = None) -> App:
    """Import ``module:attribute`` (the current directory, and ``root`` when given, are
    importable) and return the App."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"APP must look like module:attribute, got {spec!r}")
    for directory in (os.getcwd(), None if root is None else str(root)):
        if directory is not None and directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise click.BadParameter(f"{module_name!r} has no attribute {attr!r}")
    if not isinstance(obj, App):
        raise click.BadParameter(f"{spec} is a {type(obj).__name__}, not a perdure.App")
    return obj


def json_arg(value: str | None, what: str) -> Any:
    """A JSON option's value; bad JSON is a usage error (exit 2), never a traceback."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except RecursionError:
        raise click.BadParameter(f"{what} is nested too deeply to read") from None
    except ValueError as exc:  # not JSON, or an integer past Python's digit limit
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from None


#: How a --since/--until is written, for the options' help.
TIME_HELP = "1h (ago), 2026-05-01 (midnight UTC) or 2026-05-01T14:00Z"


def time_arg(value: str | None, what: str) -> datetime | None:
    """A point in time as `perdure.durations.moment` reads it (a duration ago, a date
    or a date-time with an offset); a bad one is a usage error."""
    if value is None:
        return None
    try:
        return moment(value, what=what)
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
