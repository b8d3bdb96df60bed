"""The hooks that count and trace, installed process-wide.

`current()` is what a worker, the server and the client use: the no-op hooks when
this process neither collects metrics (`enable_metrics`) nor has the OpenTelemetry
API, else `LiveTelemetry`. A pass of a run gets a `_Pass` only when something
observes it (metrics on, or a tracer provider configured).

Spans (seed 000's names and attributes):

* ``workflow.run``: one per execution pass, from the claim to its park or end, with
  ``workflow.name``, ``workflow.version``, ``run_id`` and ``status`` (the run's
  status after the pass). Its parent is the trace context stored with the run at
  ``start``, so every pass of a run joins the starter's trace, and a run waiting for
  days shows as a gap between passes, never as an open span.
* ``workflow.step``: one per step attempt, child of its pass's span and the current
  span while the step's function runs (its own spans nest under it), with
  ``workflow.name``, ``run_id``, ``step.name``, ``step.kind``, ``step.attempt``.
  A sleep or a wait (``step.kind`` ``sleep`` / ``wait``) is one span from the park
  to the wake (database times), made by the pass that wakes.
* ``workflow.signal``: one per signal sent, in the sender's trace, with
  ``workflow.name``, ``run_id``, ``event``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

from . import tracing
from .hooks import NOOP, NOOP_PASS, PassHooks, TelemetryHooks
from .metrics import Histogram, MetricStore, WorkflowMetrics

if TYPE_CHECKING:
    from ..records import Claim

__all__ = ["LiveTelemetry", "current", "enable_metrics", "metric_store", "signal_span"]

#: A pass's outcome as the run's status the ``status`` attribute reports.
_STATUS = {"parked": "waiting", "retrying": "waiting", "released": "pending"}
_ENDED = frozenset({"completed", "failed", "cancelled"})

_store: MetricStore | None = None


def enable_metrics() -> MetricStore:
    """Start counting this process's metrics (idempotent); returns the store."""
    global _store
    if _store is None:
        _store = MetricStore()
    return _store


def metric_store() -> MetricStore | None:
    """The store of this process's metrics, if `enable_metrics` was called."""
    return _store


def current() -> TelemetryHooks:
    """The hooks of this process: no-op unless metrics or OpenTelemetry are there."""
    if _store is None and not tracing.available():
        return NOOP
    return _LIVE


class LiveTelemetry:
    """Counts into the process's `MetricStore` (when enabled) and traces through the
    global tracer provider (when configured)."""

    def pass_began(self, claim: Claim) -> PassHooks:
        """Hooks for one pass; the first claim of a run counts it as started."""
        tracer = tracing.tracer()
        if tracer is None and _store is None:
            return NOOP_PASS
        return _Pass(claim, _store, tracer)

    def swept(self, removed: int) -> None:
        """Count runs the retention sweeper deleted."""
        if _store is not None:
            _store.swept += removed


_LIVE = LiveTelemetry()


class _Pass:
    """Telemetry of one pass: the run span and the per-step handles."""

    __slots__ = ("_age", "_run", "_span", "_span_ctx", "_started", "_tracer", "_wf")

    def __init__(self, claim: Claim, store: MetricStore | None, tracer: Any) -> None:
        run = claim.run
        self._run = run
        self._started = perf_counter()
        self._wf: WorkflowMetrics | None = None
        if store is not None:
            self._wf = wf = store.workflow(run.workflow)
            self._age = (claim.now - run.created_at).total_seconds()
            if run.started_at == claim.now:  # this claim set started_at: the first
                wf.started += 1
        self._tracer = tracer
        self._span: Any = None
        if tracer is not None:
            from opentelemetry import trace

            self._span = tracer.start_span(
                "workflow.run",
                context=tracing.parent_context(claim.traceparent),
                attributes={
                    "workflow.name": run.workflow,
                    "workflow.version": run.version or 0,
                    "run_id": run.id,
                },
            )
            self._span_ctx = trace.set_span_in_context(self._span)

    def step_began(self, key: str, kind: str, attempt: int) -> object:
        wf = self._wf
        hist = None
        if wf is not None:
            hist = wf.step(key if ":" not in key else key.partition(":")[0])
        if self._tracer is None:
            return (hist, perf_counter(), None, None)
        from opentelemetry import context, trace

        span = self._tracer.start_span(
            "workflow.step",
            context=self._span_ctx,
            attributes={
                "workflow.name": self._run.workflow,
                "run_id": self._run.id,
                "step.name": key,
                "step.kind": kind,
                "step.attempt": attempt,
            },
        )
        token = context.attach(trace.set_span_in_context(span))
        return (hist, perf_counter(), span, token)

    def step_ended(self, handle: object, error: BaseException | None) -> None:
        parts: tuple[Histogram | None, float, Any, Any] = handle  # type: ignore[assignment]
        hist, started, span, token = parts
        if hist is not None:
            hist.observe(perf_counter() - started)
        if span is not None:
            from opentelemetry import context

            context.detach(token)
            if error is not None:
                _record_error(span, error)
            span.end()

    def step_retried(self, key: str) -> None:
        wf = self._wf
        if wf is not None:
            wf.count(wf.retries, key if ":" not in key else key.partition(":")[0])

    def waited(self, key: str, kind: str, started: datetime, ended: datetime) -> None:
        if self._tracer is None:
            return
        span = self._tracer.start_span(
            "workflow.step",
            context=self._span_ctx,
            start_time=_nanos(started),
            attributes={
                "workflow.name": self._run.workflow,
                "run_id": self._run.id,
                "step.name": key,
                "step.kind": kind,
                "step.attempt": 1,
            },
        )
        span.end(end_time=max(_nanos(ended), _nanos(started)))

    def diverged(self) -> None:
        wf = self._wf
        if wf is not None:
            wf.divergences += 1

    def pass_ended(self, outcome: str, committed_ns: int | None = None) -> None:
        wf = self._wf
        if wf is not None and outcome in _ENDED:
            wf.count(wf.completed, outcome)
            wf.run_duration.observe(self._age + perf_counter() - self._started)
        span = self._span
        if span is not None:
            span.set_attribute("status", _STATUS.get(outcome, outcome))
            if outcome == "failed":
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR))
            # The run may be claimed again as soon as the last commit returns: the span
            # ends there, so the next pass's span never starts inside this one.
            span.end(end_time=committed_ns)

    def traceparent(self) -> str | None:
        span = self._span
        if span is None:
            return None
        return tracing.traceparent_of(span.get_span_context())


def _nanos(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000) * 1000


def _record_error(span: Any, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))


@contextmanager
def signal_span(
    workflow: str | None, run_id: str, event: str, *, count: bool = True
) -> Iterator[None]:
    """Count a signal sent to ``run_id`` (unless ``count`` is False: the run has
    ended) and trace its delivery (``workflow.signal``, in the sender's trace)."""
    if count and workflow is not None and _store is not None:
        wf = _store.workflow(workflow)
        wf.count(wf.signals, event)
    tracer = tracing.tracer()
    if tracer is None:
        yield
        return
    attributes = {"run_id": run_id, "event": event}
    if workflow is not None:
        attributes["workflow.name"] = workflow
    with tracer.start_as_current_span("workflow.signal", attributes=attributes):
        yield


def wants_signals() -> bool:
    """True when a sent signal is counted or traced (it then needs the run's workflow)."""
    return _store is not None or tracing.tracer() is not None


def count_cancelled(workflow: str) -> None:
    """Count a run this process cancelled (``workflow_runs_completed_total``)."""
    if _store is not None:
        wf = _store.workflow(workflow)
        wf.count(wf.completed, "cancelled")
