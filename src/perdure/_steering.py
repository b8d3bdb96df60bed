"""Steering runs: cancel, signal, publish, topic subscriptions, retention sweeps
(`perdure.App`'s write methods besides starting, each with its sync twin)."""

from __future__ import annotations

from typing import Any

from ._client import ClientBase
from .errors import ValidationError
from .maintenance import sweep_once
from .names import WorkflowRef, validate_event_name, validate_pattern, workflow_name
from .records import Published
from .serialization import encode
from .telemetry.exposition import render as render_metrics
from .telemetry.live import count_cancelled, metric_store, signal_span, wants_signals
from .telemetry.live import current as current_telemetry
from .validation import check_id, lookup_id

__all__ = ["Steering"]


class Steering(ClientBase):
    """The steering methods of `perdure.App`."""

    async def cancel_async(self, run_id: str, *, rollback: bool = False) -> bool:
        """Cancel a live run (and its live children). True if it was live; False if it
        had already ended. Raises `RunNotFound`.

        With ``rollback=True`` the ``rollback`` functions of its completed steps run
        first, newest first, each durably (a worker that dies in the middle leaves the
        rest to the next one); then the run ends ``cancelled``, its error listing what
        was rolled back. A worker serving the workflow does it."""
        if not isinstance(rollback, bool):
            raise ValidationError(f"rollback must be True or False, got {rollback!r:.40}")
        backend = await self._backend()
        run_id = lookup_id(run_id)
        # Counted here, by the process that ends the run (a rollback's worker counts its own).
        run = None if rollback or metric_store() is None else await backend.get_run(run_id)
        cancelled = await backend.cancel_run(run_id, rollback)
        if cancelled and run is not None:
            count_cancelled(run.workflow)
        return cancelled

    def cancel(self, run_id: str, *, rollback: bool = False) -> bool:
        """Cancel a live run; see `cancel_async`."""
        return self._portal.call(self.cancel_async, run_id, rollback=rollback)

    async def signal_async(
        self,
        run_id: str,
        event: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        """Send ``event`` with ``payload`` to one run.

        Resolves the run's matching `wait_for_event`, or is buffered for its next one.
        Returns True if delivered or buffered, False if the run has ended (nothing is
        stored). The same ``idempotency_key`` twice delivers once. Raises `RunNotFound`.
        """
        payload_json, key = _event_parts(event, payload, idempotency_key, "signal")
        backend = await self._backend()
        run_id = lookup_id(run_id)
        if not wants_signals():
            outcome = await backend.deliver_signal(run_id, event, payload_json, key)
            return outcome != "ended"
        run = await backend.get_run(run_id)  # the workflow label and span attribute
        workflow = None if run is None else run.workflow
        with signal_span(workflow, run_id, event, count=run is not None and not run.done):
            outcome = await backend.deliver_signal(run_id, event, payload_json, key)
        return outcome != "ended"

    def signal(
        self,
        run_id: str,
        event: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        """Send an event to one run; see `signal_async`."""
        return self._portal.call(
            self.signal_async, run_id, event, payload, idempotency_key=idempotency_key
        )

    async def publish_async(
        self, event: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> Published:
        """Publish ``event``: resume every run waiting on it whose match the payload
        satisfies, and start every workflow subscribed to a matching pattern.
        A repeated ``idempotency_key`` does nothing and returns the first result."""
        payload_json, key = _event_parts(event, payload, idempotency_key, "event")
        return await (await self._backend()).publish(event, payload_json, key)

    def publish(
        self, event: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> Published:
        """Publish an event; see `publish_async`."""
        return self._portal.call(
            self.publish_async, event, payload, idempotency_key=idempotency_key
        )

    async def subscribe_async(self, pattern: str, workflow: WorkflowRef) -> bool:
        """Durably start ``workflow`` for every published event matching ``pattern``
        (``*`` matches any characters). False if the subscription already existed."""
        validate_pattern(pattern, what="topic pattern")
        return await (await self._backend()).subscribe_topic(pattern, workflow_name(workflow))

    def subscribe(self, pattern: str, workflow: WorkflowRef) -> bool:
        """Add a durable topic subscription; see `subscribe_async`."""
        return self._portal.call(self.subscribe_async, pattern, workflow)

    async def unsubscribe_async(self, pattern: str, workflow: WorkflowRef) -> bool:
        """Remove a topic subscription. False if there was none."""
        validate_pattern(pattern, what="topic pattern")
        return await (await self._backend()).unsubscribe_topic(pattern, workflow_name(workflow))

    def unsubscribe(self, pattern: str, workflow: WorkflowRef) -> bool:
        """Remove a topic subscription; see `unsubscribe_async`."""
        return self._portal.call(self.unsubscribe_async, pattern, workflow)

    async def list_subscriptions_async(self) -> list[tuple[str, str]]:
        """Every topic subscription as ``(pattern, workflow)``, sorted."""
        return await (await self._backend()).list_subscriptions()

    def list_subscriptions(self) -> list[tuple[str, str]]:
        """Every topic subscription; see `list_subscriptions_async`."""
        return self._portal.call(self.list_subscriptions_async)

    async def sweep_async(self) -> int:
        """Delete finished runs past their retention now; returns how many."""
        return await sweep_once(await self._backend(), self.settings, current_telemetry())

    async def metrics_async(self) -> bytes:
        """This process's metrics in the Prometheus text format: the counters it
        counted (`perdure.telemetry.enable_metrics`) and the database's gauges, read
        now. Needs ``prometheus-client`` (the ``metrics`` extra)."""
        backend = await self._backend()
        gauges = await backend.queue_gauges()
        names = [s.name for s in await backend.workflow_summaries()]
        return render_metrics(metric_store(), gauges, names)

    def metrics(self) -> bytes:
        """This process's metrics in the Prometheus text format; see `metrics_async`."""
        return self._portal.call(self.metrics_async)

    def sweep(self) -> int:
        """Delete finished runs past their retention; see `sweep_async`."""
        return self._portal.call(self.sweep_async)


def _event_parts(
    event: str, payload: Any, idempotency_key: str | None, what: str
) -> tuple[str, str | None]:
    """A signal's or event's payload as JSON and its key, after checking all three."""
    validate_event_name(event)
    payload_json = encode(payload, what=f"the payload of {what} {event!r}")
    return payload_json, None if idempotency_key is None else check_id(idempotency_key)
