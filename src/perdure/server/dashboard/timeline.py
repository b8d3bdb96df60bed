"""The step timeline of a run, laid out for the dashboard's Gantt chart (pure: no I/O).

Each journal row becomes one bar from when it started to when it ended (or now, for
a step still running or a wait still open), placed on a 0-1000 scale spanning the run
from its creation to its end (or now). Steps that failed and were retried carry their
number of attempts; waits and sleeps show how long the run was parked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...records import Run, Step

__all__ = ["Bar", "Timeline", "duration_text", "layout"]

WIDTH = 1000.0
ROW = 26


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of the chart."""

    name: str
    kind: str
    status: str
    attempts: int
    x: float
    width: float
    y: int
    offset: str
    duration: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """The bars and the chart's size."""

    bars: tuple[Bar, ...]
    height: int
    total: str


def layout(
    run: Run, steps: list[Step], now: datetime, parked: tuple[str, datetime] | None = None
) -> Timeline:
    """Bars for ``steps`` on the span of ``run``; ``parked`` (what the run waits for,
    since when) adds the open wait of a waiting run as a last bar up to now."""
    start = run.created_at
    if parked is not None:
        label, since = parked
        steps = [*steps, Step(label, "wait", "waiting", None, None, 1, since, now)]
    end = run.completed_at or now
    for step in steps:
        if step.completed_at is not None and step.completed_at > end and step.kind != "sleep":
            end = step.completed_at
    span = max((end - start).total_seconds(), 0.001)
    bars = []
    for row, step in enumerate(steps):
        began = step.started_at or step.completed_at or start
        finished = step.completed_at if step.status != "retrying" else now
        if finished is None or finished < began:
            finished = began
        left = max(0.0, (began - start).total_seconds() / span * WIDTH)
        width = max(3.0, (finished - began).total_seconds() / span * WIDTH)
        bars.append(
            Bar(
                name=step.name,
                kind=step.kind,
                status=step.status,
                attempts=step.attempts,
                x=round(min(left, WIDTH - 3.0), 1),
                width=round(min(width, WIDTH - min(left, WIDTH - 3.0)), 1),
                y=row * ROW,
                offset=duration_text((began - start).total_seconds()),
                duration=duration_text((finished - began).total_seconds()),
            )
        )
    return Timeline(tuple(bars), max(ROW, len(bars) * ROW), duration_text(span))


def duration_text(seconds: float) -> str:
    """``0.4 ms``, ``12 ms``, ``1.3 s``, ``4 m 05 s``, ``2 h 03 m``, ``3 d 04 h``."""
    if seconds < 0.001:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} m"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"
