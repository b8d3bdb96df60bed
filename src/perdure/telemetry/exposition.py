"""The Prometheus text format of a process's metrics and of the database's gauges.

Counters and histograms come from the process's `MetricStore`; the gauges that
describe the database (runs in flight, queue depth, claim lag, per workflow) are
read from it at scrape time, so every process that serves them agrees. Requires
``prometheus-client`` (the ``metrics`` or ``server`` extra), imported here only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..records import QueueGauge
from .metrics import Histogram, MetricStore

__all__ = ["CONTENT_TYPE", "METRIC_NAMES", "render", "require"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Every metric name a perdure process serves (as they appear in the text format).
METRIC_NAMES: tuple[str, ...] = (
    "workflow_runs_started_total",
    "workflow_runs_completed_total",
    "workflow_runs_in_flight",
    "workflow_run_duration_seconds",
    "workflow_step_duration_seconds",
    "workflow_step_retries_total",
    "workflow_signals_total",
    "workflow_replay_divergences_total",
    "workflow_retention_swept_total",
    "workflow_queue_depth",
    "workflow_claim_lag_seconds",
)


def require() -> None:
    """Raise `ConfigurationError` now if ``prometheus-client`` is missing."""
    _client()


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigurationError(
            "serving metrics needs prometheus-client: pip install 'perdure[metrics]'"
        ) from None
    return prometheus_client


def render(
    store: MetricStore | None,
    gauges: Sequence[QueueGauge] | None,
    workflows: Iterable[str] = (),
) -> bytes:
    """The metrics in the Prometheus text format. ``gauges`` None leaves the database
    gauges out (the database could not be read); ``workflows`` get 0-valued gauges
    when they have no live run, so their series do not vanish."""
    client = _client()
    from prometheus_client.core import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(client, store, gauges, tuple(workflows)))
    data: bytes = client.generate_latest(registry)
    return data


class _Collector:
    def __init__(
        self,
        client: Any,
        store: MetricStore | None,
        gauges: Sequence[QueueGauge] | None,
        workflows: tuple[str, ...],
    ) -> None:
        self._core = client.core
        self._store = store
        self._gauges = gauges
        self._workflows = workflows

    def collect(self) -> Iterator[Any]:
        yield from self._counters()
        if self._gauges is not None:
            yield from self._db_gauges(self._gauges)

    def _counters(self) -> Iterator[Any]:
        core = self._core
        started = core.CounterMetricFamily(
            "workflow_runs_started", "Runs started (counted at their first claim).",
            labels=["workflow"],
        )  # fmt: skip
        completed = core.CounterMetricFamily(
            "workflow_runs_completed", "Runs ended, by status (completed, failed, cancelled).",
            labels=["workflow", "status"],
        )  # fmt: skip
        run_duration = core.HistogramMetricFamily(
            "workflow_run_duration_seconds", "Seconds from a run's start to its end.",
            labels=["workflow"],
        )  # fmt: skip
        step_duration = core.HistogramMetricFamily(
            "workflow_step_duration_seconds", "Seconds of each step attempt.",
            labels=["workflow", "step"],
        )  # fmt: skip
        retries = core.CounterMetricFamily(
            "workflow_step_retries", "Failed step attempts that will be retried.",
            labels=["workflow", "step"],
        )  # fmt: skip
        signals = core.CounterMetricFamily(
            "workflow_signals", "Signals sent to runs, by event.", labels=["workflow", "event"]
        )
        divergences = core.CounterMetricFamily(
            "workflow_replay_divergences",
            "Passes whose replay diverged from the run's journal (the code changed).",
            labels=["workflow"],
        )
        swept = core.CounterMetricFamily(
            "workflow_retention_swept", "Finished runs deleted by the retention sweeper."
        )
        store = self._store
        if store is not None:
            swept.add_metric([], store.swept)
            for name, wf in store.items():
                if wf.started:
                    started.add_metric([name], wf.started)
                for status, count in list(wf.completed.items()):
                    completed.add_metric([name, status], count)
                if wf.completed:
                    _histogram(run_duration, [name], wf.run_duration)
                for step, hist in list(wf.steps.items()):
                    _histogram(step_duration, [name, step], hist)
                for step, count in list(wf.retries.items()):
                    retries.add_metric([name, step], count)
                for event, count in list(wf.signals.items()):
                    signals.add_metric([name, event], count)
                if wf.divergences:
                    divergences.add_metric([name], wf.divergences)
        else:
            swept.add_metric([], 0)
        yield from (
            started, completed, run_duration, step_duration, retries, signals, divergences, swept
        )  # fmt: skip

    def _db_gauges(self, gauges: Sequence[QueueGauge]) -> Iterator[Any]:
        core = self._core
        in_flight = core.GaugeMetricFamily(
            "workflow_runs_in_flight",
            "Runs not yet ended, by state: pending, running (executing now), waiting "
            "(read from the database).",
            labels=["workflow", "state"],
        )
        depth = core.GaugeMetricFamily(
            "workflow_queue_depth", "Runs due and waiting for a worker to claim them.",
            labels=["workflow"],
        )  # fmt: skip
        lag = core.GaugeMetricFamily(
            "workflow_claim_lag_seconds",
            "How long the oldest due run has waited for a claim (0: none waits).",
            labels=["workflow"],
        )
        seen = set()
        for gauge in gauges:
            seen.add(gauge.workflow)
            for state, count in _states(gauge):
                in_flight.add_metric([gauge.workflow, state], count)
            depth.add_metric([gauge.workflow], gauge.due)
            lag.add_metric([gauge.workflow], gauge.claim_lag)
        for name in self._workflows:
            if name not in seen:
                seen.add(name)
                for state in ("pending", "running", "waiting"):
                    in_flight.add_metric([name, state], 0)
                depth.add_metric([name], 0)
                lag.add_metric([name], 0)
        yield from (in_flight, depth, lag)


def _states(gauge: QueueGauge) -> tuple[tuple[str, int], ...]:
    return (("pending", gauge.pending), ("running", gauge.running), ("waiting", gauge.waiting))


def _histogram(family: Any, labels: list[str], hist: Histogram) -> None:
    buckets = []
    total = 0
    for bound, count in zip((*hist.bounds, float("inf")), list(hist.counts), strict=True):
        total += count
        buckets.append((_le(bound), total))
    family.add_metric(labels, buckets, hist.sum)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
