"""What every CLI command shares: the App it talks through, and argument parsing."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from datetime import datetime
from typing import Any

import click

from ..app import App
from ..durations import moment
from ..errors import ValidationError

__all__ = ["client", "json_arg", "load_app", "read_only_twin", "time_arg"]


def client(ctx: click.Context, *, read_only: bool = False) -> App:
    """The App of this command (closed when the command ends): the one ``--app`` names
    (its codec and redaction apply), else one on ``--database``. A read command asks
    for ``read_only``: the database is opened read-only (it may be a file this process
    cannot write) and never migrated."""
    spec = ctx.obj.get("app")
    if spec:
        app = load_app(spec)
        if read_only and not app.settings.read_only:
            app = read_only_twin(app)
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


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory is importable) and return the App."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"APP must look like module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
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


def time_arg(value: str | None, what: str) -> datetime | None:
    """A point in time: ISO 8601 (UTC when no offset is given) or a duration ago
    (``1h`` = one hour ago); a bad one is a usage error."""
    if value is None:
        return None
    try:
        return moment(value, what=what)
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
