"""Rebuild JSON values as the dataclass or pydantic model a function is annotated with.

Values are stored as JSON; a step whose function returns a dataclass or a pydantic
model hands the body that type again, on the first run and on replay alike, and a
workflow whose input parameter is annotated with one receives its input as that type.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["input_type", "rebuild", "return_type"]


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations (forward refs): no rebuilding
        return {}


def _rebuildable(tp: Any) -> bool:
    return isinstance(tp, type) and (
        dataclasses.is_dataclass(tp) or callable(getattr(tp, "model_validate", None))
    )


def return_type(fn: Callable[..., Any]) -> type | None:
    """The dataclass or pydantic model ``fn`` is annotated to return (awaitables
    unwrapped), else None."""
    annotations = getattr(fn, "__annotations__", None)
    if not isinstance(annotations, dict) or "return" not in annotations:
        return None  # lambdas and unannotated functions: nothing to look up or cache
    try:
        return _return_type(fn)
    except TypeError:  # an unhashable callable object
        return _return_type.__wrapped__(fn)


@functools.lru_cache(maxsize=1024)
def _return_type(fn: Callable[..., Any]) -> type | None:
    tp = _hints(fn).get("return")
    origin = typing.get_origin(tp)
    if origin is not None and getattr(origin, "__name__", "") in ("Coroutine", "Awaitable"):
        tp = typing.get_args(tp)[-1]
    return tp if _rebuildable(tp) else None


@functools.lru_cache(maxsize=256)
def input_type(body: Callable[..., Any]) -> type | None:
    """The dataclass or pydantic model a workflow body's input parameter (its second)
    is annotated with, else None."""
    params = list(inspect.signature(body).parameters)
    if len(params) < 2:
        return None
    tp = _hints(body).get(params[1])
    return tp if _rebuildable(tp) else None


def rebuild(value: Any, tp: type | None) -> Any:
    """``value`` (decoded JSON) as ``tp``; unchanged when ``tp`` is None or the value is
    not an object."""
    if tp is None or not isinstance(value, dict):
        return value
    validate = getattr(tp, "model_validate", None)
    if callable(validate):
        return validate(value)
    hints = _hints(tp)
    fields = {f.name for f in dataclasses.fields(tp)}
    args = {
        name: rebuild(item, hints.get(name) if _rebuildable(hints.get(name)) else None)
        for name, item in value.items()
        if name in fields
    }
    return tp(**args)
