"""How the CLI prints: literally (stored values and error text are never parsed as
markup), ids never truncated, and JSON for machines (``--json``)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "as_dict",
    "console",
    "emit_json",
    "err_console",
    "fail",
    "json_option",
    "literal",
    "table",
]

F = TypeVar("F", bound=Callable[..., Any])

# markup=False: "[/]" in a stored value or an error message prints as is. Piped
# output is not squeezed to 80 columns (a script reads whole ids and values).
console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 500)
err_console = Console(stderr=True, markup=False, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr (one line, literally) and exit."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", message))
    sys.exit(code)


def literal(value: Any) -> str:
    """A stored value as compact JSON text (strings quoted), for tables and lines."""
    return json.dumps(value, ensure_ascii=False, default=str)


def as_dict(record: Any) -> dict[str, Any]:
    """A record (frozen dataclass) as a dict, for ``--json``."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def emit_json(value: Any) -> None:
    """Print one JSON document (times as ISO 8601 text)."""
    click.echo(json.dumps(value, ensure_ascii=False, default=_default))


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_dict(value)
    return str(value)


def table(*columns: str) -> Table:
    """A table whose cells wrap instead of being cut; an ``id`` or ``run`` column is
    never narrower than a run id."""
    grid = Table()
    for name in columns:
        grid.add_column(name, overflow="fold", min_width=26 if name in ("id", "run") else None)
    return grid


def json_option(fn: F) -> F:
    """The ``--json`` flag of a read command."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)
