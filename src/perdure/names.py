"""Validation of workflow, step, event and pattern names (DESIGN §4 "Names")."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any, Protocol

from .errors import ValidationError

__all__ = [
    "WorkflowRef",
    "glob_matches",
    "step_name_of",
    "validate_event_name",
    "validate_pattern",
    "validate_step_name",
    "validate_workflow_name",
    "workflow_name",
]

_WORKFLOW = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_STEP = re.compile(r"[A-Za-z0-9._-]{1,128}")
_PATTERN = re.compile(r"[A-Za-z0-9_.*-]{1,128}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_workflow_name(name: object) -> str:
    """Return ``name`` if it is a valid workflow name, else raise `ValidationError`."""
    if not isinstance(name, str) or not _WORKFLOW.fullmatch(name):
        raise ValidationError(
            f"invalid workflow name {_show(name)}: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def validate_step_name(name: object, *, what: str = "step name") -> str:
    """Return ``name`` if it is a valid step name, else raise `ValidationError`.

    The colon is reserved for the automatic index of repeated names (``name:1``).
    """
    if not isinstance(name, str) or not _STEP.fullmatch(name):
        raise ValidationError(
            f"invalid {what} {_show(name)}: use 1-128 letters, digits, '.', '_' or '-' "
            "(':' is reserved for repeated names)"
        )
    return name


def step_name_of(fn: object) -> str:
    """The name of an unnamed step: ``fn``'s qualified name, its ``<locals>`` parts
    dropped (``outer.<locals>.inner`` is ``outer.inner``). A function without a stable
    name (a lambda, a `functools.partial`, a callable object) is a `ValidationError`:
    its name must be given."""
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or not isinstance(qualname, str):
        raise ValidationError(
            f"step {_show(fn)} has no name: {type(fn).__name__} has no stable qualified name; "
            "call ctx.step.run(name, fn, ...)"
        )
    parts = [part for part in qualname.split(".") if part != "<locals>"]
    if any(part.startswith("<") for part in parts):
        raise ValidationError(
            f"step {_show(fn)} has no name: a {qualname.rpartition('.')[2]} has no stable "
            "name to journal it under; call ctx.step.run(name, fn, ...)"
        )
    name = ".".join(parts)
    if not _STEP.fullmatch(name):
        raise ValidationError(
            f"step {_show(fn)}: its qualified name {name!r} is not a valid step name (1-128 "
            "letters, digits, '.', '_' or '-'); call ctx.step.run(name, fn, ...)"
        )
    return name


def validate_event_name(name: object) -> str:
    """Return ``name`` if it is a valid event name, else raise `ValidationError`."""
    return validate_step_name(name, what="event name")


def validate_pattern(pattern: object, *, what: str = "pattern") -> str:
    """A glob over names: the name characters plus ``*`` (matches anything, dots included)."""
    if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
        raise ValidationError(
            f"invalid {what} {_show(pattern)}: use letters, digits, '_', '.', '-' and '*' wildcards"
        )
    return pattern


def glob_matches(pattern: str, name: str) -> bool:
    """True if ``name`` matches the glob ``pattern`` (``*`` matches any characters)."""
    return fnmatch.fnmatchcase(name, pattern)


class Named(Protocol):
    """Something that carries a perdure name (a DAG flow)."""

    @property
    def __perdure_name__(self) -> str: ...


#: A workflow as callers name it: the decorated function (or flow) or its name.
WorkflowRef = str | Callable[..., Any] | Named


def workflow_name(workflow: object) -> str:
    """The name behind a workflow reference: a decorated function or a name."""
    return validate_workflow_name(getattr(workflow, "__perdure_name__", workflow))
