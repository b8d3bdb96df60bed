"""The step kinds that wait: durable sleeps, waits for events, and child runs.

Each parks the pass through the `ParkBarrier` when what it waits for is not there
yet; the next claim's replay finds the journal row the wait ended with.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..errors import ChildTimeout, StepFailed
from ..ids import new_run_id
from ..limits import flow_control
from ..records import EventWrite, NewRun, Received, Step, StepWrite, Transition, WaitWrite
from ..serialization import encode
from .cursor import entry
from .step_base import StepBase
from .suspend import engine_error

#: The journal output of every sibling of a wait for several events that timed out.
TIMED_OUT = {"~timed_out": True}


class WaitingSteps(StepBase):
    """Sleep, wait for an event (or the first of several), run a child workflow."""

    # ------------------------------------------------------------------ sleep

    async def sleep_until(self, name: str, when: datetime) -> None:
        """Durable timer; see `StepApi.sleep_until`."""
        key = self._keys.next(name)
        if not self._cursor.ask(key, "sleep"):  # not the next step the journal holds
            await self._cursor.hold(key, "sleep")
        record = self._enter(key, "sleep")
        until = when if record is None else datetime.fromisoformat(record.output["until"])
        if until <= self.now():
            if record is not None and self._woke_at(key, "sleep"):
                self._telemetry.waited(key, "sleep", record.started_at or until, self.now())
            return
        steps: tuple[StepWrite, ...] = ()
        events: tuple[EventWrite, ...] = ()
        if record is None:
            output = encode({"until": until.isoformat()}, what="sleep")
            steps = (
                StepWrite(
                    key, "sleep", "completed", output, started_at=self.now(), completed_at=until
                ),
            )
            # The row's step_completed shows in the audit trail at `until` (get_events).
            events = (EventWrite("sleep_started", {"step": key, "until": until.isoformat()}),)
        self._stop_if_replay_only()
        await self._barrier.park(self._barrier.request("sleep", until, steps=steps, events=events))

    # ------------------------------------------------------------------ wait for an event

    async def wait_for_event(
        self, name: str, event: str, match_json: str | None, timeout: float | None
    ) -> Any:
        """Durable wait for a signal or published event; see `StepApi.wait_for_event`."""
        key = self._keys.next(name)
        if not self._cursor.ask(key, "wait"):  # not the next step the journal holds
            await self._cursor.hold(key, "wait")
        record = self._enter(key, "wait")
        if record is not None:
            if self._woke_at(key, "wait"):
                self._wait_span(key, record)
            return record.output
        registered = self._waits.get(key)
        events: tuple[EventWrite, ...] = ()
        if registered is not None:
            timeout_at = registered.timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                write = StepWrite(key, "wait", "completed", "null", started_at=self.now())
                ev = EventWrite("resumed", {"step": key, "event": event, "timed_out": True})
                self._timed_out_span(key, timeout_at, timeout)
                return (await self._record(write, ev)).output
        else:
            timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
            events = (_wait_started(key, [event], timeout_at),)
        wait = WaitWrite(key, event, match_json, timeout_at)
        self._stop_if_replay_only()
        request = self._barrier.request("event", timeout_at, waits=(wait,), events=events)
        await self._barrier.park(request)

    async def wait_for_any(
        self, name: str, events: list[str], match_json: str | None, timeout: float | None
    ) -> Received | None:
        """Durable wait for the first of several events; see `StepApi.wait_for_event`.

        One wait is registered per event, under ``<key>@<event>``; the database drops
        the others when one is resolved, so the signals they would have taken stay
        buffered. A timeout journals every sibling as timed out."""
        key = self._keys.next(name)
        if not self._cursor.ask(key, "wait"):  # not the next step the journal holds
            await self._cursor.hold(key, "wait")
        self._enter(key, "wait")
        siblings = [f"{key}@{event}" for event in events]
        self._to_replay.difference_update(siblings)
        for event, sibling in zip(events, siblings, strict=True):
            record = self.journal.get(sibling)
            if record is not None and record.status != "retrying":
                if self._woke_at(key, "wait"):
                    self._wait_span(key, record)
                return None if record.output == TIMED_OUT else Received(event, record.output)
        registered = [self._waits[k] for k in siblings if k in self._waits]
        started: tuple[EventWrite, ...] = ()
        if registered:
            timeout_at = registered[0].timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                self._timed_out_span(key, timeout_at, timeout)
                return await self._wait_timed_out(key, events, siblings)
        else:
            timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
            started = (_wait_started(key, events, timeout_at),)
        waits = tuple(
            WaitWrite(sibling, event, match_json, timeout_at)
            for event, sibling in zip(events, siblings, strict=True)
        )
        self._stop_if_replay_only()
        request = self._barrier.request("event", timeout_at, waits=waits, events=started)
        await self._barrier.park(request)

    async def _wait_timed_out(
        self, key: str, events: list[str], siblings: list[str]
    ) -> Received | None:
        marker = encode(TIMED_OUT, what="timeout")
        writes = tuple(
            StepWrite(k, "wait", "completed", marker, started_at=self.now()) for k in siblings
        )
        event = EventWrite("resumed", {"step": key, "events": events, "timed_out": True})
        with self._barrier.working():
            result = await self._commits.commit(
                Transition(self.run.id, self._token, steps=writes, events=(event,))
            )
        # A signal resolved one of them first: it wins.
        for name, sibling in zip(events, siblings, strict=True):
            stored = self._stored(result, sibling)
            if stored is not None and stored.output != TIMED_OUT:
                self.journal[sibling] = stored
                return Received(name, stored.output)
        for sibling in siblings:
            self.journal[sibling] = Step(
                sibling, "wait", "completed", TIMED_OUT, None, 1, None, None
            )
        return None

    # ------------------------------------------------------------------ spans

    def _woke_at(self, key: str, kind: str) -> bool:
        """True if the run last parked at this step (it is the last entry of the call
        order at claim): this pass is the wake, and the step's span is due. Later
        passes, which asked for more since, replay it without a span."""
        return self._last_asked == entry(kind, key)

    def _wait_span(self, key: str, record: Step) -> None:
        started = record.started_at or self.now()
        self._telemetry.waited(key, "wait", started, record.completed_at or self.now())

    def _timed_out_span(self, key: str, timeout_at: datetime, timeout: float | None) -> None:
        started = timeout_at if timeout is None else timeout_at - timedelta(seconds=timeout)
        self._telemetry.waited(key, "wait", started, self.now())

    # ------------------------------------------------------------------ child runs

    async def run_child(
        self, name: str, workflow: str, input_json: str, timeout: float | None
    ) -> Any:
        """Start a child run once and wait for it; see `StepApi.run_workflow`.

        The child may be a workflow only another process registers: it then waits,
        like any start, for a worker that serves it. With a ``timeout`` the wait is
        registered with that timeout (under the event name ``~child``, which no
        signal can carry); past it the step fails with `ChildTimeout` and the child
        goes on."""
        key = self._keys.next(name)
        if not self._cursor.ask(key, "child"):  # not the next step the journal holds
            await self._cursor.hold(key, "child")
        record = self._enter(key, "child")
        if record is None:
            registered = self._waits.get(key)
            timeout_at = None if registered is None else registered.timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                record = await self._child_timed_out(key, timeout_at)
        if record is not None:
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            return record.output
        definition = self._services.registry.get(workflow)
        child = NewRun(
            id=new_run_id(),
            workflow=workflow,
            version=None if definition is None else definition.version,
            input_json=input_json,
            priority=self.run.priority,
            idempotency_key=f"~child:{self.run.id}:{key}",
            deadline_in=None if definition is None else definition.deadline,
            retention_days=30 if definition is None else definition.retention_days,
            parent_id=self.run.id,
            parent_step=key,
            # The child's spans join this pass's trace (or the run's stored one).
            traceparent=self._telemetry.traceparent() or self._traceparent,
        )
        if definition is not None and definition.limits.declared:
            child = flow_control(child, definition.limits, None, None)
        timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
        waits = () if timeout_at is None else (WaitWrite(key, "~child", None, timeout_at),)
        self._stop_if_replay_only()
        request = self._barrier.request("child", None, children=(child,), waits=waits)
        await self._barrier.park(request)

    async def _child_timed_out(self, key: str, timeout_at: datetime) -> Step:
        """Record the child step as failed with ChildTimeout (unless the child's own
        result got there first, which then wins) and return the stored row."""
        error = engine_error(
            ChildTimeout(f"child step {key!r} did not end by {timeout_at.isoformat()}")
        )
        write = StepWrite(key, "child", "failed", None, error, started_at=self.now())
        event = EventWrite("step_failed", {"step": key, "attempt": 1, "error": error})
        return await self._record(write, event)


def _wait_started(key: str, events: list[str], timeout_at: datetime | None) -> EventWrite:
    """The audit event of a wait registered (its row's step_completed, or a ``resumed``
    event with ``timed_out``, says how it ended)."""
    data: dict[str, Any] = {"step": key, "event": events[0] if len(events) == 1 else events}
    if timeout_at is not None:
        data["timeout_at"] = timeout_at.isoformat()
    return EventWrite("wait_started", data)
