"""What every CLI command shares: the App it talks through, and argument parsing."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from ..app import App
from ..durations import moment
from ..errors import ValidationError

__all__ = ["client", "json_arg", "time_arg"]


def client(ctx: click.Context) -> App:
    """The App of this command (closed when the command ends)."""
    app = App(ctx.obj["database"], schema=ctx.obj["schema"])
    ctx.call_on_close(app.close)
    return app


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
