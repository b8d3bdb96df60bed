"""Reading runs, journals, audit trails, workflows and workers (`perdure.App`'s read
methods, each with its sync twin)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ._client import ClientBase, fetch_run
from ._end_waiters import RunEndWait
from ._run_ends import RunEnd
from .backends.base import Backend
from .context import VALUE_PREFIX
from .describe import is_flow_run
from .durations import Duration, to_seconds
from .errors import PerdureError, ValidationError, WorkflowCancelled, WorkflowFailed
from .flows.definition import FlowShape
from .ids import new_worker_id
from .names import WorkflowRef, validate_workflow_name, workflow_name
from .records import (
    RUN_STATUSES,
    Event,
    ListRunsParams,
    Notice,
    Page,
    Run,
    Step,
    WorkerInfo,
    WorkflowSummary,
)
from .serialization import encode
from .validation import check_int, check_key, check_moment, lookup_id

__all__ = ["Reads"]

#: How long a watcher's mark lasts in the database unless it renews it.
_WATCH_FOR = 60.0

#: The events that end a run.
_ENDINGS = ("completed", "failed", "cancelled")

T = TypeVar("T")


class Reads(ClientBase):
    """The read methods of `perdure.App`."""

    async def get_run_async(self, run_id: str) -> Run:
        """The run's current record. Raises `RunNotFound`."""
        return await fetch_run(await self._backend(), run_id)

    def get_run(self, run_id: str) -> Run:
        """The run's current record; see `get_run_async`."""
        return self._portal.call(self.get_run_async, run_id)

    async def list_runs_async(
        self,
        workflow: WorkflowRef | None = None,
        status: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        input_match: Any = None,
        limit: int = 50,
        cursor: str | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        idempotency_key: str | None = None,
        include_tasks: bool = False,
    ) -> Page[Run]:
        """Runs, newest first, filtered; pass ``page.next_cursor`` back for the next page.

        Newest first by the database's ``created_at``, the id breaking ties; a cursor
        never skips or repeats a run.

        Args:
            workflow: only this workflow (function or name).
            status: only runs in this status.
            since, until: created at or after ``since`` and before ``until``: aware
                datetimes, or text: a duration ago (``"1h"``), a date (``"2026-05-01"``,
                midnight UTC) or a date-time with an offset (``"2026-05-01T14:00Z"``).
            input_match: only runs whose input contains this JSON value (``@>`` semantics).
            limit: page size, 1-1000.
            cursor: from a previous page.
            parent_id: only the children of this run.
            top_level: only runs started by no other run (no children).
            idempotency_key: only the run(s) started with this idempotency key.
            include_tasks: list a DAG flow's tasks too (else only with ``parent_id``).
        """
        if status is not None and status not in RUN_STATUSES:
            raise ValidationError(
                f"status must be one of {', '.join(RUN_STATUSES)}; got {status!r}"
            )
        check_int(limit, "limit", minimum=1)
        if limit > 1000:
            raise ValidationError(f"limit must be at most 1000, got {limit}")
        if cursor is not None and (
            not isinstance(cursor, str) or len(cursor) > 1000 or not cursor.isascii()
        ):
            raise ValidationError(
                f"cursor must be the next_cursor of a previous page, got {cursor!r:.80}"
            )
        if parent_id is not None:
            check_key(parent_id, "parent_id")
        if idempotency_key is not None:
            check_key(idempotency_key, "idempotency_key")
        params = ListRunsParams(
            workflow=None if workflow is None else workflow_name(workflow),
            status=status,
            since=None if since is None else check_moment(since, "since"),
            until=None if until is None else check_moment(until, "until"),
            input_match_json=None
            if input_match is None
            else encode(input_match, what="input_match"),
            parent_id=parent_id,
            limit=limit,
            cursor=cursor,
            top_level=bool(top_level),
            idempotency_key=idempotency_key,
            include_tasks=bool(include_tasks),
        )
        return await (await self._backend()).list_runs(params)

    async def count_children_async(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many child runs (flow tasks included) each of ``run_ids`` has; a run
        with none is left out. At most 1000 ids."""
        ids = list(run_ids)
        if len(ids) > 1000:
            raise ValidationError(f"count_children takes at most 1000 run ids, got {len(ids)}")
        for run_id in ids:
            check_key(run_id, "run_id")
        return await (await self._backend()).count_children(ids)

    def count_children(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many child runs each of ``run_ids`` has; see `count_children_async`."""
        return self._portal.call(self.count_children_async, run_ids)

    def list_runs(
        self,
        workflow: WorkflowRef | None = None,
        status: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        input_match: Any = None,
        limit: int = 50,
        cursor: str | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        idempotency_key: str | None = None,
        include_tasks: bool = False,
    ) -> Page[Run]:
        """Runs, newest first, filtered; see `list_runs_async`."""
        return self._portal.call(
            self.list_runs_async,
            workflow,
            status,
            since,
            until,
            input_match,
            limit,
            cursor,
            parent_id,
            top_level,
            idempotency_key,
            include_tasks,
        )

    async def _rows_of_run(
        self, read: Callable[[Backend, str], Awaitable[list[T]]], run_id: str
    ) -> list[T]:
        """Rows read for one run; none for a run that does not exist is `RunNotFound`."""
        backend = await self._backend()
        rows = await read(backend, lookup_id(run_id))
        if not rows:
            await fetch_run(backend, run_id)
        return rows

    async def get_steps_async(self, run_id: str, include_superseded: bool = False) -> list[Step]:
        """The run's journal: one `Step` per step key, in the order they were recorded;
        with ``include_superseded``, also the rows retries superseded (history, marked
        ``superseded=True``)."""
        return await self._rows_of_run(lambda b, i: b.get_steps(i, include_superseded), run_id)

    def get_steps(self, run_id: str, include_superseded: bool = False) -> list[Step]:
        """The run's journal; see `get_steps_async`."""
        return self._portal.call(self.get_steps_async, run_id, include_superseded)

    async def get_flow_async(self, name: str, version: int | None = None) -> FlowShape | None:
        """A DAG flow's stored shape (that version, else the highest), or None."""
        flow = validate_workflow_name(name)
        if version is not None:
            check_int(version, "version", minimum=1)
        return await (await self._backend()).get_flow(flow, version)

    def get_flow(self, name: str, version: int | None = None) -> FlowShape | None:
        """A DAG flow's stored shape; see `get_flow_async`."""
        return self._portal.call(self.get_flow_async, name, version)

    async def get_events_async(self, run_id: str) -> list[Event]:
        """The run's audit trail (created, claimed, step_completed, ...), oldest first."""
        return await self._rows_of_run(lambda b, i: b.get_events(i), run_id)

    def get_events(self, run_id: str) -> list[Event]:
        """The run's audit trail; see `get_events_async`."""
        return self._portal.call(self.get_events_async, run_id)

    async def get_values_async(self, run_id: str) -> dict[str, Any]:
        """The values the run set with ``await ctx.set(key, value)``: the latest of each
        key. Raises `RunNotFound`."""
        values: dict[str, Any] = {}
        for step in await self.get_steps_async(run_id):
            if step.name.startswith(VALUE_PREFIX) and isinstance(step.output, dict):
                values[step.output["key"]] = step.output["value"]
        return values

    def get_values(self, run_id: str) -> dict[str, Any]:
        """The values the run set; see `get_values_async`."""
        return self._portal.call(self.get_values_async, run_id)

    async def result_async(self, run_id: str, timeout: float | None = None) -> Any:
        """Wait for the run to end and return its output.

        Raises:
            WorkflowFailed: the run failed (``.error`` holds the cause).
            WorkflowCancelled: the run was cancelled.
            TimeoutError: ``timeout`` seconds passed first (the run goes on).
            RunNotFound: no such run.
        """
        limit = None if timeout is None else to_seconds(timeout, what="timeout")
        async with RunEndWait(await self._backend(), run_id) as waiting:
            return ended_as(run_id, await waiting.outcome(limit))

    def result(self, run_id: str, timeout: float | None = None) -> Any:
        """Wait for the run to end and return its output; see `result_async`."""
        return self._portal.call(self.result_async, run_id, timeout)

    async def watch_async(self, run_id: str) -> AsyncIterator[Event]:
        """The run's history so far, then each new event as it happens, ending after
        the event that ends the run (``completed``, ``failed`` or ``cancelled``).

        Steps appear as ``step_completed`` events; a value set with ``ctx.set`` as a
        ``value`` event. A DAG flow's run has no journal: its steps appear as
        ``step_started`` (``{step, tasks}``) and ``step_completed``, ``step_failed`` or
        ``step_cancelled`` (``{step}``) events, read from its steps' states (`get_steps`)
        rather than stored. On PostgreSQL it wakes by notification (every transition of
        the run notifies its watchers, and the end of each of a flow's tasks); on
        SQLite, watchers in the worker's process are woken directly, others within
        milliseconds by the file's change watcher. Raises `RunNotFound`."""
        backend = await self._backend()
        await fetch_run(backend, run_id)
        steps = await backend.get_steps(lookup_id(run_id))
        flow = is_flow_run(steps)
        tasks = lookup_id(run_id) + ":"  # the ids of a flow's tasks begin with it
        changed = asyncio.Event()

        def on_notice(notice: Notice) -> None:
            if notice.run_id in (run_id, None) or (flow and notice.run_id.startswith(tasks)):
                changed.set()

        stop = await backend.listen(on_notice, progress=True)
        # Read-only: telling PostgreSQL who watches would write, so no progress
        # notices come and it polls more often.
        marking = not self.settings.read_only
        poll = 0.1 if backend.dialect == "sqlite" else 5.0 if marking else 1.0
        watcher = new_worker_id()
        loop = asyncio.get_running_loop()
        marked = 0.0  # when this watcher last told the database it watches
        seen: Counter[tuple[str, str, str]] = Counter()
        try:
            while True:
                if marking and loop.time() - marked > _WATCH_FOR / 3:
                    await backend.watch_run(lookup_id(run_id), watcher, _WATCH_FOR)
                    marked = loop.time()
                changed.clear()
                events = await backend.get_events(lookup_id(run_id))
                if not events:
                    await fetch_run(backend, run_id)  # swept meanwhile: RunNotFound
                if flow:
                    steps = await backend.get_steps(lookup_id(run_id))
                    events = _with_flow_steps(events, steps)
                counts: Counter[tuple[str, str, str]] = Counter()
                for event in events:
                    key = (event.type, event.created_at.isoformat(), repr(event.data))
                    counts[key] += 1
                    if counts[key] > seen[key]:
                        seen[key] += 1
                        yield event
                if events and events[-1].type in _ENDINGS:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), poll)
        finally:
            await stop()
            if marking:
                with contextlib.suppress(PerdureError):
                    await backend.watch_run(lookup_id(run_id), watcher, None)

    def watch(self, run_id: str) -> Iterator[Event]:
        """The run's events as they happen, ending with the run; see `watch_async`."""
        return self._portal.iterate(self.watch_async(run_id))

    async def now_async(self) -> datetime:
        """The database's clock: what every due time, lease and deadline is judged by."""
        return await (await self._backend()).now()

    def now(self) -> datetime:
        """The database's clock; see `now_async`."""
        return self._portal.call(self.now_async)

    async def list_workflows_async(self) -> list[WorkflowSummary]:
        """Every known workflow with its number of runs per status."""
        return await (await self._backend()).workflow_summaries()

    def list_workflows(self) -> list[WorkflowSummary]:
        """Every known workflow with run counts; see `list_workflows_async`."""
        return self._portal.call(self.list_workflows_async)

    async def list_workers_async(self, seen_within: Duration = "5m") -> list[WorkerInfo]:
        """Workers seen within ``seen_within`` (default 5 minutes), newest first."""
        seconds = to_seconds(seen_within, what="seen_within")
        return await (await self._backend()).list_workers(seconds)

    def list_workers(self, seen_within: Duration = "5m") -> list[WorkerInfo]:
        """Live and recently seen workers; see `list_workers_async`."""
        return self._portal.call(self.list_workers_async, seen_within)


def ended_as(run_id: str, ended: RunEnd) -> Any:
    """The output of a run that ended as ``ended``; raises `WorkflowFailed` or
    `WorkflowCancelled` for a run that did not complete."""
    status, output, error = ended
    if status == "failed":
        raise WorkflowFailed(run_id, error)
    if status == "cancelled":
        raise WorkflowCancelled(run_id)
    return output


def _with_flow_steps(events: list[Event], steps: list[Step]) -> list[Event]:
    """A DAG flow's run's events with its steps' starts and ends among them, in time
    order (a step before the run's own event of the same moment)."""
    progress = []
    for step in steps:
        if step.started_at is not None:
            data = {"step": step.name, "tasks": len(step.tasks)}
            progress.append(Event("step_started", data, step.started_at))
        if step.completed_at is not None and step.status in _ENDINGS:
            progress.append(Event(f"step_{step.status}", {"step": step.name}, step.completed_at))
    merged = [(e.created_at, 0, i, e) for i, e in enumerate(progress)]
    merged += [(e.created_at, 1, i, e) for i, e in enumerate(events)]
    return [e for *_, e in sorted(merged, key=lambda m: m[:3])]
