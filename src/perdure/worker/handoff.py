"""Claim on complete, the worker's side: slots for the DAG-flow tasks a completing
task's commit may be handed (`Transition.claim`), and starting what it was handed.

A task's completing commit may lease tasks of the same flow run to this worker in
its own transaction (no claim query, no wake-up). The slots it may fill are
reserved while the commit is in flight: the completing task's own slot plus the
free slots nobody else reserved. The claim loop reserves the slots of its claim the
same way, so the two never take more than ``concurrency`` runs between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..records import Claim, ClaimParams

__all__ = ["HandOffs"]


class HandOffs:
    """Slot reservations of one worker, and the start of handed tasks."""

    def __init__(
        self,
        worker_id: str,
        tasks: Sequence[tuple[str, int]],
        lease: float,
        concurrency: int,
        running: Callable[[], int],
        start: Callable[[Claim], None],
        wake: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self._worker_id = worker_id
        self._tasks = tuple(tasks)  # the (flow:step, version) pairs with a handler here
        self._lease = lease
        self._concurrency = concurrency
        self._running = running
        self._start = start
        self._wake = wake
        self._stopping = stopping
        #: slots held by claims and commits in flight
        self.reserved = 0
        #: the claim loop found no free slot while commits held some
        self.starved = False

    def free(self) -> int:
        """Slots neither running nor reserved."""
        return self._concurrency - self._running() - self.reserved

    def reserve(self) -> ClaimParams | None:
        """For a task's completing commit: what it may claim (None: nothing)."""
        if not self._tasks or self._stopping():
            return None
        limit = max(0, self.free()) + 1  # + the slot the completing task gives up
        self.reserved += limit
        return ClaimParams(self._worker_id, self._tasks, limit, self._lease)

    def settle(self, params: ClaimParams | None, claims: Sequence[Claim]) -> None:
        """The commit ended: start the tasks it was handed, free its other slots."""
        if params is None:
            return
        self.reserved -= params.limit
        for claim in claims:
            self._start(claim)
        if len(claims) < params.limit and self.starved:
            self.starved = False
            self._wake()  # slots the claim loop went without are free again
