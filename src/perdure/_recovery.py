"""Recovering runs after the fact: retry a failed or cancelled run from a step, fork a
run into a new one, and both in bulk over the filters of `list_runs`
(`perdure.App`'s methods, each with its sync twin)."""

from __future__ import annotations

import getpass
import os
import socket
from datetime import datetime
from typing import Any, cast

from ._reads import Reads
from .errors import RunStateError
from .handle import RunClient, RunHandle
from .ids import new_run_id
from .names import WorkflowRef, workflow_name
from .serialization import encode
from .validation import check_int, check_key, lookup_id

__all__ = ["Recovery"]


def _caller() -> str:
    """Who acts, for the audit trail: user@host and process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


class Recovery(Reads):
    """The recovery methods of `perdure.App`."""

    async def retry_async(
        self, run_id: str, *, from_step: str | None = None, by: str | None = None
    ) -> RunHandle:
        """Resume a failed or cancelled run under the same id.

        The journal from ``from_step`` on (default: the step that failed, if one did)
        is superseded: kept in the history (``get_steps(run_id, include_superseded=True)``)
        and never replayed, so those steps run again and the ones before do not. The
        run is pending again with ``attempt + 1``; its audit trail records who retried
        it (``by``, default the user, host and process) and from where. A child that
        completed is not run again; a failed or cancelled child is retried with it.

        Raises:
            RunStateError: the run is still live (pending, running or waiting).
            ValidationError: ``from_step`` is not in the run's journal.
            RunNotFound: no such run.
        """
        step = None if from_step is None else check_key(from_step, "from_step")
        who = _caller() if by is None else check_key(by, "by")
        run = await (await self._backend()).retry_run(lookup_id(run_id), step, who)
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
        names it (``forked_from``)."""
        step = None if from_step is None else check_key(from_step, "from_step")
        if version is not None:
            check_int(version, "version", minimum=1)
        input_json = None if input is None else encode(input, what="the fork's input")
        who = _caller() if by is None else check_key(by, "by")
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
        since: datetime | None = None,
        until: datetime | None = None,
        input_match: Any = None,
        by: str | None = None,
    ) -> list[str]:
        """Retry every run the filters of `list_runs` select (default: the failed
        ones), a page at a time, each in its own transaction; returns their ids. A run
        that became live meanwhile is left alone."""
        return await self._each("retry", workflow, status, since, until, input_match, by=by)

    def retry_runs(
        self,
        workflow: WorkflowRef | None = None,
        *,
        status: str = "failed",
        since: datetime | None = None,
        until: datetime | None = None,
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
        since: datetime | None = None,
        until: datetime | None = None,
        input_match: Any = None,
    ) -> list[str]:
        """Cancel every live run the filters of `list_runs` select, a page at a time,
        each in its own transaction; returns the ids of the runs it cancelled."""
        return await self._each("cancel", workflow, status, since, until, input_match)

    def cancel_runs(
        self,
        workflow: WorkflowRef | None = None,
        *,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
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
        action: str,
        workflow: WorkflowRef | None,
        status: str | None,
        since: datetime | None,
        until: datetime | None,
        input_match: Any,
        *,
        by: str | None = None,
    ) -> list[str]:
        name = None if workflow is None else workflow_name(workflow)
        who = _caller() if by is None else check_key(by, "by")
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
            for run in page.items:
                if action == "cancel":
                    if await backend.cancel_run(run.id):
                        done.append(run.id)
                    continue
                try:
                    await backend.retry_run(run.id, None, who)
                except RunStateError:
                    continue  # live again meanwhile
                done.append(run.id)
            cursor = page.next_cursor
            if cursor is None:
                return done
