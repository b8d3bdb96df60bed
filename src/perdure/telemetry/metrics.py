"""The counters and histograms a process counts, kept in plain Python structures.

A step's path observes a histogram with a dictionary lookup, a bisection and two
additions (no lock: every observation happens on the worker's event loop thread),
so counting is cheap; `perdure.telemetry.exposition` turns the store into the
Prometheus text format at scrape time.

Label cardinality is bounded: labels are workflow names (fixed by the code), step
names (without the ``:N`` suffix of repeated uses) and event names, and each
workflow keeps at most `MAX_LABEL_VALUES` step or event names; further ones are
counted under ``~other``. Run ids are never labels.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

__all__ = ["MAX_LABEL_VALUES", "OTHER", "Histogram", "MetricStore", "WorkflowMetrics"]

#: Most distinct step (or event) names one workflow's series may carry.
MAX_LABEL_VALUES = 500
#: The label value that stands for every name beyond `MAX_LABEL_VALUES`.
OTHER = "~other"

STEP_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
)  # fmt: skip
RUN_BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    21600.0, 86400.0, 604800.0,
)  # fmt: skip


class Histogram:
    """Bucket counts (not cumulative; the last bucket is +Inf), a sum and a count."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation (seconds)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class WorkflowMetrics:
    """Every series of one workflow, so a pass looks its workflow up once."""

    __slots__ = (
        "completed", "divergences", "retries", "run_duration", "signals", "started", "steps",
    )  # fmt: skip

    def __init__(self) -> None:
        self.started = 0
        self.completed: dict[str, int] = {}
        self.run_duration = Histogram(RUN_BUCKETS)
        self.steps: dict[str, Histogram] = {}
        self.retries: dict[str, int] = {}
        self.signals: dict[str, int] = {}
        self.divergences = 0

    def step(self, name: str) -> Histogram:
        """The duration histogram of step ``name`` (``~other`` past the bound)."""
        hist = self.steps.get(name)
        if hist is None:
            if len(self.steps) >= MAX_LABEL_VALUES:
                name = OTHER
            hist = self.steps.get(name)
            if hist is None:
                hist = self.steps[name] = Histogram(STEP_BUCKETS)
        return hist

    def count(self, series: dict[str, int], name: str) -> None:
        """Add one to ``series[name]`` (``~other`` past the bound)."""
        if name not in series and len(series) >= MAX_LABEL_VALUES:
            name = OTHER
        series[name] = series.get(name, 0) + 1


class MetricStore:
    """The counters and histograms of one process, by workflow."""

    def __init__(self) -> None:
        self.workflows: dict[str, WorkflowMetrics] = {}
        self.swept = 0

    def workflow(self, name: str) -> WorkflowMetrics:
        """The series of workflow ``name``, created on first use."""
        found = self.workflows.get(name)
        if found is None:
            found = self.workflows[name] = WorkflowMetrics()
        return found

    def items(self) -> Iterator[tuple[str, WorkflowMetrics]]:
        """(workflow, series) pairs, a snapshot safe to iterate while counting goes on."""
        return iter(list(self.workflows.items()))
