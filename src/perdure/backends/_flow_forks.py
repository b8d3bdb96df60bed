"""What a fork of a DAG-flow run starts with, the same on every backend (no SQL): the
backends read the source's shape, outputs and task keys, and write what this says."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError
from ..flows.definition import FlowShape
from ..flows.planner import fork_copies
from ..records import NewRun, Run

__all__ = ["ForkStart", "fork_start"]


@dataclass(frozen=True, slots=True)
class ForkStart:
    """A flow run's fork: the new run, the steps completed from its start with their
    outputs, and what its ``created`` event adds (``forked_from``, ``from_step``,
    ``by``)."""

    new: NewRun
    copied: dict[str, Any]
    origin: dict[str, str]


def fork_start(
    source: Run,
    shapes: tuple[FlowShape | None, FlowShape | None],
    outputs: Mapping[str, Any],
    keys: Sequence[tuple[str, str | None, str | None, str | None]],
    asked: tuple[str, str | None, str | None, int | None, str],
) -> ForkStart:
    """The fork of the flow run ``source`` (``shapes``: its shape and the target
    version's, None where not stored; ``outputs``: its completed steps'; ``keys``: its
    limited steps' task keys) that ``asked`` for: (new id, from step, input JSON or
    None for the source's, version or None for the source's, by)."""
    new_id, from_step, input_json, version, by = asked
    shape, target = shapes
    if shape is None or target is None:
        raise ValidationError(f"flow {source.workflow!r} has no version {version}")
    origin = {"forked_from": source.id, "by": by}
    if from_step is not None:
        origin["from_step"] = from_step
    new = NewRun(
        id=new_id,
        workflow=source.workflow,
        version=target.version,
        input_json=json.dumps(source.input) if input_json is None else input_json,
        priority=source.priority,
        retention_days=source.retention_days,
        step_keys=tuple(keys),
    )
    return ForkStart(new, fork_copies(shape, target, outputs, from_step), origin)
