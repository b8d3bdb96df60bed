"""Recovering runs after the fact: retry a failed or cancelled run from a step, fork a
run into a new one, and both in bulk over the filters of `list_runs`
(`perdure.App`'s methods, each with its sync twin)."""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, cast

from ._reads import Reads
from .backends.base import Backend
from .errors import RunStateError, ValidationError
from .handle import RunClient, RunHandle
from .ids import new_run_id
from .names import WorkflowRef, workflow_name
from .serialization import encode
from .validation import check_int, check_key, check_moment, lookup_id

__all__ = ["CANCELLABLE", "RETRYABLE", "Recovery"]

#: The statuses a bulk retry can select: runs that ended without completing.
RETRYABLE: tuple[str, ...] = ("failed", "cancelled")
#: The statuses a bulk cancel can select: live runs.
CANCELLABLE: tuple[str, ...] = ("pending", "running", "waiting")


def _check_status(status: object, allowed: tuple[str, ...], what: str) -> None:
    if status not in allowed:
        raise ValidationError(
            f"status must be one of {', '.join(allowed)} (the runs {what}); got {status!r:.80}"
        )


def _caller() -> str:
    """Who acts, for the audit trail: user@host and process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


async def _not_a_task(backend: Backend, run_id: str, what: str) -> None:
    """A DAG flow's task is retried with its flow run, never on its own."""
    run = await backend.get_run(run_id)
    if run is not None and ":" in run.workflow:  # a task: its flow run decides its fate
        raise ValidationError(
            f"run {run_id} is a task of a DAG flow: it cannot be {what} on its own; "
            f"its flow run is {run.parent_id}"
        )


class Recovery(Reads):
    """The recovery methods of `perdure.App`."""

    async def retry_async(
        self, run_id: str, *, from_step: str | None = None, by: str | None = None
    ) -> RunHandle:
        """Resume a failed or cancelled run under the same id (or one parked because its
        replay diverged: the current code reruns it from ``from_step``).

        The journal from ``from_step`` on (default: the step that failed, if one did)
        is superseded: kept in the history (``get_steps(run_id, include_superseded=True)``)
        and never replayed, so those steps run again and the ones before do not. The
        run is pending again with ``attempt + 1``; its audit trail records who retried
        it (``by``, default the user, host and process) and from where. A child that
        completed is not run again; a failed or cancelled child is retried with it.

        A DAG flow's run is running again at once: its completed steps keep their
        outputs, and the others run again, with ``from_step`` and every step that
        depends on it. A step whose input is unchanged runs its unfinished tasks again
        under their ids (a map keeps its completed elements); the others get new tasks
        when their dependencies complete (docs/operations.md).

        Raises:
            RunStateError: the run is still live (pending, running or waiting, unless
                its replay diverged).
            ValidationError: ``from_step`` is not in the run's journal (a flow: not one
                of its steps), or the run is a flow's task.
            RunNotFound: no such run.
        """
        step = None if from_step is None else check_key(from_step, "from_step")
        who = _caller() if by is None else check_key(by, "by")
        backend = await self._backend()
        await _not_a_task(backend, lookup_id(run_id), "retried")
        run = await backend.retry_run(lookup_id(run_id), step, who)
        return RunHandle(cast(RunClient, self), run.id, run.workflow, created=False)

    def retry(
        self, run_id: str, *, from_step: str | None = None, by: str | None = None
    ) -> RunHandle:
        """Resume a failed or cancelled run; see `retry_async`."""
        return self._portal.call(self.retry_async, run_id, from_step=from_step, by=by)

    async def fork_async(
        self,
        run_id: str,
        *,
        from_step: str | None = None,
        input: Any = None,
        version: int | None = None,
        by: str | None = None,
    ) -> RunHandle:
        """A new run of the same workflow whose journal is a copy of this run's before
        ``from_step`` (so ``from_step`` and what follows run again; default: the whole
        journal), with the same input unless ``input`` is given, and the same version
        unless ``version``. The source is untouched; the new run's ``created`` event
        names it (``forked_from``).

        A DAG flow's run forks into a new flow run that starts with the source's
        completed steps, except ``from_step`` and every step that depends on it (with
        ``version``: only steps with the same dependencies there); the other steps
        run. Its limited steps keep the source's task keys."""
        step = None if from_step is None else check_key(from_step, "from_step")
        if version is not None:
            check_int(version, "version", minimum=1)
        input_json = None if input is None else encode(input, what="the fork's input")
        who = _caller() if by is None else check_key(by, "by")
        await _not_a_task(await self._backend(), lookup_id(run_id), "forked")
        run = await (await self._backend()).fork_run(
            lookup_id(run_id), new_run_id(), step, input_json, version, who
        )
        return RunHandle(cast(RunClient, self), run.id, run.workflow)

    def fork(
        self,
        run_id: str,
        *,
        from_step: str | None = None,
        input: Any = None,
        version: int | None = None,
        by: str | None = None,
    ) -> RunHandle:
        """A new run from a copy of this run's journal; see `fork_async`."""
        return self._portal.call(
            self.fork_async, run_id, from_step=from_step, input=input, version=version, by=by
        )

    async def retry_runs_async(
        self,
        workflow: WorkflowRef | None = None,
        *,
        status: str = "failed",
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        input_match: Any = None,
        by: str | None = None,
    ) -> list[str]:
        """Retry every run the filters of `list_runs` select (default: the failed
        ones), a page at a time, each in its own transaction; returns their ids. A run
        that became live meanwhile is left alone.

        Raises:
            ValidationError: ``status`` is not failed or cancelled (no other run can
                be retried).
        """
        _check_status(status, RETRYABLE, "a retry can take")
        who = _caller() if by is None else check_key(by, "by")

        async def retry(backend: Backend, run_id: str) -> bool:
            try:
                await backend.retry_run(run_id, None, who)
            except RunStateError:
                return False  # live again meanwhile
            return True

        return await self._each(retry, workflow, status, since, until, input_match)

    def retry_runs(
        self,
        workflow: WorkflowRef | None = None,
        *,
        status: str = "failed",
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        input_match: Any = None,
        by: str | None = None,
    ) -> list[str]:
        """Retry the runs the filters select; see `retry_runs_async`."""
        return self._portal.call(
            self.retry_runs_async,
            workflow,
            status=status,
            since=since,
            until=until,
            input_match=input_match,
            by=by,
        )

    async def cancel_runs_async(
        self,
        workflow: WorkflowRef | None = None,
        *,
        status: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        input_match: Any = None,
    ) -> list[str]:
        """Cancel every live run the filters of `list_runs` select, a page at a time,
        each in its own transaction; returns the ids of the runs it cancelled.

        Raises:
            ValidationError: no filter, or ``status`` is not pending, running or
                waiting (no other run can be cancelled).
        """
        if status is not None:
            _check_status(status, CANCELLABLE, "a cancel can take")
        selected = (workflow, status, since, until, input_match)
        if all(value is None for value in selected):
            raise ValidationError(
                "cancel_runs needs a filter (workflow, status, since, until or input_match); "
                "without one it would cancel every live run"
            )

        async def cancel(backend: Backend, run_id: str) -> bool:
            return await backend.cancel_run(run_id)

        return await self._each(cancel, workflow, status, since, until, input_match)

    def cancel_runs(
        self,
        workflow: WorkflowRef | None = None,
        *,
        status: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        input_match: Any = None,
    ) -> list[str]:
        """Cancel the live runs the filters select; see `cancel_runs_async`."""
        return self._portal.call(
            self.cancel_runs_async,
            workflow,
            status=status,
            since=since,
            until=until,
            input_match=input_match,
        )

    async def _each(
        self,
        act: Callable[[Backend, str], Awaitable[bool]],
        workflow: WorkflowRef | None,
        status: str | None,
        since: datetime | str | None,
        until: datetime | str | None,
        input_match: Any,
    ) -> list[str]:
        """``act`` on every run the filters select, a page at a time, each in its own
        transaction; the ids of the runs it changed."""
        # a duration ago is read once, so every page has the same bounds
        since = None if since is None else check_moment(since, "since")
        until = None if until is None else check_moment(until, "until")
        name = None if workflow is None else workflow_name(workflow)
        backend = await self._backend()
        done: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.list_runs_async(
                name,
                status=status,
                since=since,
                until=until,
                input_match=input_match,
                limit=100,
                cursor=cursor,
            )
            done.extend([run.id for run in page.items if await act(backend, run.id)])
            cursor = page.next_cursor
            if cursor is None:
                return done
