"""A step's attempts and an error's traceback, read for people: the CLI and the
dashboard show the same (pure: no I/O).

Each failed attempt that was retried left a ``step_retrying`` audit event (its type and
message, when it started and failed, and the backoff); the journal row holds the last
attempt, with the full error and traceback of a failed one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .records import Event, Step

__all__ = ["Attempt", "Frame", "attempts_of", "frames_of"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a step: when it ran, how it ended, and its error if it failed.

    ``started_at`` is None when it was not recorded (older audit trails); ``delay`` is
    the backoff before the next attempt (None for the last one)."""

    number: int
    status: str
    started_at: datetime | None
    ended_at: datetime | None
    error: dict[str, Any] | None
    delay: float | None


def attempts_of(step: Step, events: list[Event]) -> list[Attempt]:
    """Every attempt of ``step``, oldest first: the retried ones from ``events`` (the
    run's audit trail), then the journal row's own last attempt."""
    retried: list[Attempt] = []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type != "step_retrying" or data.get("step") != step.name:
            continue
        number = data.get("attempt")
        if not isinstance(number, int) or (number >= step.attempts and step.status != "retrying"):
            continue
        retried.append(
            Attempt(
                number=number,
                status="failed",
                started_at=_when(data.get("started")),
                ended_at=event.created_at,
                error=data.get("error") if isinstance(data.get("error"), dict) else None,
                delay=data.get("delay") if isinstance(data.get("delay"), int | float) else None,
            )
        )
    if step.status == "retrying":  # between attempts: the last one is a retried one
        return retried
    last = Attempt(
        number=step.attempts,
        status=step.status,
        started_at=step.started_at,
        ended_at=step.completed_at,
        error=step.error,
        delay=None,
    )
    return [*retried, last]


def _when(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Frame:
    """A part of a traceback: ``own`` when it is the user's code (neither perdure's
    nor an installed library's nor Python's)."""

    text: str
    own: bool


_FILE = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')
_PACKAGE = Path(__file__).resolve().parent.as_posix() + "/"
_NOT_OWN = ("site-packages", "dist-packages", "/lib/python", "<frozen ", _PACKAGE)


def frames_of(traceback: str) -> list[Frame]:
    """``traceback`` split into its frames (each ``File`` line with the lines below it)
    and the text between them, each marked as the user's own code or not."""
    parts: list[Frame] = []
    lines: list[str] = []
    own = False

    def close() -> None:
        if lines:
            parts.append(Frame("\n".join(lines), own))

    for line in traceback.rstrip("\n").split("\n"):
        found = _FILE.match(line)
        if found is not None or not line.startswith("  "):
            close()
            lines = [line]
            own = found is not None and not _library(found["path"])
        else:
            lines.append(line)
    close()
    return parts


def _library(path: str) -> bool:
    normalized = path.replace("\\", "/")
    return any(mark in normalized for mark in _NOT_OWN)
