"""The runs one worker is executing: their tasks, their leases, and giving them back.

Each run is driven through the engine's `Execution` seam (execute, cancel), so this
module knows nothing of how a pass runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import Backend
from ..engine.services import Execution
from ..errors import BackendError
from ..records import Release, Transition

log = logging.getLogger("perdure.worker")

__all__ = ["ActiveRuns"]

#: The pass outcomes that end a run (its "done" notice follows), and how many of the
#: latest such ends a worker remembers.
_ENDS = frozenset({"completed", "failed", "cancelled"})
_ENDED_KEPT = 4096


@dataclass(slots=True)
class _Active:
    execution: Execution
    task: asyncio.Task[None]


class ActiveRuns:
    """The runs a worker executes now, by run id."""

    def __init__(self, on_end: Callable[[], None]) -> None:
        self._runs: dict[str, _Active] = {}
        self._on_end = on_end
        self._ended: deque[str] = deque(maxlen=_ENDED_KEPT)  # passes ended here, latest last
        self._ended_ids: set[str] = set()
        #: True while a lease renewal failed and is still owed (after an outage).
        self.renewal_owed = False

    def __len__(self) -> int:
        return len(self._runs)

    def ids(self) -> list[str]:
        """The ids of the runs executing now."""
        return list(self._runs)

    def start(self, run_id: str, execution: Execution) -> None:
        """Execute one pass of a claimed run in a task of its own."""
        task = asyncio.create_task(self._execute(run_id, execution), name=f"perdure-run-{run_id}")
        self._runs[run_id] = _Active(execution, task)

    async def _execute(self, run_id: str, execution: Execution) -> None:
        refilled = False  # its commit handed it tasks that took its slot: no wake-up
        try:
            result = await execution.execute()
            refilled = result.handed_over > 0
            if result.outcome in _ENDS:
                self._note_ended(run_id)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("internal error executing run %s; its lease will expire", run_id)
        finally:
            active = self._runs.get(run_id)
            if active is not None and active.execution is execution:
                del self._runs[run_id]
            if not refilled:
                self._on_end()

    def _note_ended(self, run_id: str) -> None:
        if len(self._ended) == self._ended.maxlen:
            self._ended_ids.discard(self._ended[0])
        self._ended.append(run_id)
        self._ended_ids.add(run_id)

    def ended_here(self, run_id: str | None) -> bool:
        """True if ``run_id`` lately ended (completed, failed, cancelled) in a pass on
        this worker, whose end already woke the claim loop."""
        return run_id in self._ended_ids

    def cancel(self, run_id: str, reason: str) -> None:
        """Stop one run's pass without writing anything more (if this worker runs it)."""
        active = self._runs.get(run_id)
        if active is not None:
            active.execution.cancel(reason)

    def cancel_all(self, reason: str) -> None:
        """Stop every pass without writing anything more."""
        for active in list(self._runs.values()):
            active.execution.cancel(reason)

    async def renew(self, backend: Backend, worker_id: str, lease: float) -> bool:
        """Renew every held lease once; False (and renewal still owed) if that failed.
        A run whose lease another worker holds now is abandoned here."""
        held = [(run_id, a.execution.token) for run_id, a in self._runs.items()]
        try:
            still = await backend.extend_leases(worker_id, held, lease)
        except BackendError as exc:
            self.renewal_owed = True
            log.warning("heartbeat failed, retrying: %s", exc)
            return False
        self.renewal_owed = False
        for run_id, token in held:
            holder = self._runs.get(run_id)
            if run_id not in still and holder is not None and holder.execution.token == token:
                log.info("run %s is no longer held by this worker; abandoning it", run_id)
                holder.execution.cancel("lease lost")
        return True

    async def give_back(self, backend: Backend, *, wait: float | None) -> None:
        """Stop: let passes reach their next commit for up to ``wait`` seconds (None: not
        at all), cancel the rest, and release every run still held so another worker
        claims it at once."""
        if not self._runs:
            return
        tasks = {a.task for a in self._runs.values()}
        pending = tasks
        if wait is not None:
            _done, pending = await asyncio.wait(tasks, timeout=wait)
        leftovers = [(run_id, a.execution.token) for run_id, a in self._runs.items()]
        self.cancel_all("worker stopped")
        if pending:
            await asyncio.wait(pending, timeout=5)
        if leftovers:
            try:
                await backend.apply([Transition(r, t, outcome=Release()) for r, t in leftovers])
            except BackendError as exc:
                log.warning("could not release %d run(s): %s", len(leftovers), exc)
