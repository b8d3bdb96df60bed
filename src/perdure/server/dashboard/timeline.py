"""The step timeline of a run, laid out for the dashboard's Gantt chart (pure: no I/O).

Each journal row becomes one row of the chart, with one segment per attempt (a retried
step shows every attempt, its backoffs between them), placed on a 0-1000 scale from
the run's creation to its end (or now). Time when no step is running (backoffs, sleeps,
waits) is compressed so every attempt stays readable however long the run is; each
compressed gap is labelled with how long it really was.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime

from ...attempts import attempts_of
from ...records import Event, Run, Step

__all__ = ["Bar", "Gap", "Segment", "Timeline", "duration_text", "layout"]

WIDTH = 1000.0
ROW = 26
AXIS = 16  # the top band that labels compressed gaps
MIN_SEGMENT = 6.0  # of 1000: at least 4 px on any chart a 1280 px window shows
PASSIVE = ("sleep", "wait")  # steps that only wait: their time may be compressed


@dataclass(frozen=True, slots=True)
class Segment:
    """One attempt of a step, or the span of a sleep or a wait."""

    x: float
    width: float
    status: str
    title: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of the chart."""

    name: str
    kind: str
    status: str
    attempts: int
    y: int
    offset: str
    duration: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class Gap:
    """A stretch of time shown shorter than it was, with its real length."""

    x: float
    width: float
    text: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """The rows, the compressed gaps, and the chart's size."""

    bars: tuple[Bar, ...]
    gaps: tuple[Gap, ...]
    height: int
    total: str


def layout(
    run: Run,
    steps: list[Step],
    now: datetime,
    parked: tuple[str, datetime] | None = None,
    events: list[Event] | None = None,
) -> Timeline:
    """Rows for ``steps`` on the span of ``run``; ``events`` (the audit trail) gives the
    attempts of retried steps; ``parked`` (what the run waits for, since when) adds the
    open wait of a waiting run as a last row up to now."""
    start = run.created_at
    if parked is not None:
        label, since = parked
        steps = [*steps, Step(label, "wait", "waiting", None, None, 1, since, now)]
    rows = [(step, _spans(step, events or [], start, now)) for step in steps]
    end = max([run.completed_at or now, *(b for _, spans in rows for _, b, _, _ in spans)])
    busy = [
        (a, b)
        for step, spans in rows
        if step.kind not in PASSIVE
        for a, b, status, _ in spans
        if status != "retrying"
    ]
    scale = _Scale(start, end, busy)
    bars = []
    for row, (step, spans) in enumerate(rows):
        segments = []
        for began, finished, status, title in spans:
            left = min(scale.x(began), WIDTH - MIN_SEGMENT)
            width = max(MIN_SEGMENT, scale.x(finished) - left)
            segments.append(
                Segment(round(left, 1), round(min(width, WIDTH - left), 1), status, title)
            )
        first, last = spans[0][0], spans[-1][1]
        bars.append(
            Bar(
                name=step.name,
                kind=step.kind,
                status=step.status,
                attempts=step.attempts,
                y=AXIS + row * ROW,
                offset=duration_text((first - start).total_seconds()),
                duration=duration_text((last - first).total_seconds()),
                segments=tuple(segments),
            )
        )
    total = duration_text(max((end - start).total_seconds(), 0.0))
    return Timeline(tuple(bars), scale.gaps, AXIS + max(ROW, len(bars) * ROW), total)


Span = tuple[datetime, datetime, str, str]


def _spans(step: Step, events: list[Event], start: datetime, now: datetime) -> list[Span]:
    """The segments of one row: each attempt from its start to its end (an attempt
    whose start was not recorded is drawn at its end)."""
    spans: list[Span] = []
    for attempt in attempts_of(step, events):
        began = attempt.started_at or attempt.ended_at or step.completed_at or start
        finished = attempt.ended_at
        if step.kind == "sleep":
            finished = step.completed_at
        if finished is None or step.status == "waiting":
            finished = now
        finished = max(finished, began)
        took = duration_text((finished - began).total_seconds())
        title = f"{step.name}: attempt {attempt.number} {attempt.status}, {took}"
        if step.attempts <= 1 and step.status != "retrying":
            title = f"{step.name}: {step.status}, {took}"
        if attempt.error:
            title += f" ({attempt.error.get('type')}: {attempt.error.get('message')})"
        spans.append((began, finished, attempt.status, title))
    if step.status == "retrying" and spans:  # in its backoff now: drawn up to now
        spans.append((spans[-1][1], max(now, spans[-1][1]), "retrying", f"{step.name}: backoff"))
    if not spans:
        began = step.started_at or step.completed_at or start
        spans.append((began, max(now, began), step.status, f"{step.name}: {step.status}"))
    return spans


class _Scale:
    """Times to x on 0-1000: time when a step runs keeps its length; every stretch
    when none does longer than a quarter of all running time (at least 50 ms) is
    shortened to that, and becomes a `Gap`."""

    def __init__(self, start: datetime, end: datetime, busy: list[tuple[datetime, datetime]]):
        self.start = start
        cuts = sorted({start, end, *(t for span in busy for t in span if start <= t <= end)})
        merged: list[tuple[datetime, datetime]] = []
        for a, b in sorted(busy):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        running = sum((b - a).total_seconds() for a, b in merged)
        cap = max(running / 4, 0.05)
        weights = []
        for a, b in itertools.pairwise(cuts):
            seconds = (b - a).total_seconds()
            inside = any(x <= a and b <= y for x, y in merged)
            weights.append(seconds if inside else min(seconds, cap))
        total = sum(weights) or 1.0
        self.cuts = cuts
        self.xs = [0.0]
        for weight in weights:
            self.xs.append(self.xs[-1] + weight / total * WIDTH)
        gaps = []
        for i, weight in enumerate(weights):
            seconds = (cuts[i + 1] - cuts[i]).total_seconds()
            if seconds > weight * 1.5:
                text = f"⋯ {duration_text(seconds)} ⋯"
                gaps.append(Gap(round(self.xs[i], 1), round(self.xs[i + 1] - self.xs[i], 1), text))
        self.gaps = tuple(gaps)

    def x(self, when: datetime) -> float:
        if len(self.cuts) < 2 or when <= self.cuts[0]:
            return 0.0
        if when >= self.cuts[-1]:
            return self.xs[-1]
        i = bisect_right(self.cuts, when) - 1
        a, b = self.cuts[i], self.cuts[i + 1]
        part = (when - a).total_seconds() / max((b - a).total_seconds(), 1e-9)
        return self.xs[i] + part * (self.xs[i + 1] - self.xs[i])


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
