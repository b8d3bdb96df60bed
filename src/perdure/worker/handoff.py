"""Runs handed to a worker without a claim query, and the slots they take.

Two hand-offs skip the claim loop:

* Claim on complete (`Transition.claim`): a DAG-flow task's completing commit may
  lease tasks of the same flow run to this worker in its own transaction.
* Starts in this process (`LocalStarts`): a start of a workflow this worker serves,
  made while it has a free slot, is inserted already leased to it
  (`Backend.create_run` with ``claim``) and handed over: no notice, no wake-up, no
  claim. A DAG flow's start leases it the first tasks it has handlers for, as many as
  it has free slots (`Backend.start_flow` with ``claim``). The start may come from
  any thread.

The slots a hand-off may fill are reserved while its commit is in flight. The claim
loop reserves the slots of its claim the same way, under the same lock, so together
they never take more than ``concurrency`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Sequence

from ..backends.base import Backend
from ..errors import BackendError
from ..records import Claim, ClaimParams, CreateResult, NewRun

__all__ = ["HandOffs", "LocalStarts"]

log = logging.getLogger("perdure")


class HandOffs:
    """Slot reservations of one worker, and the start of handed runs."""

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
        starts: Collection[tuple[str, int]] = (),
    ) -> None:
        self._worker_id = worker_id
        self._tasks = tuple(tasks)  # the (flow:step, version) pairs with a handler here
        self._starts = frozenset(starts)  # the workflows whose starts it may be handed
        self._lease = lease
        self._concurrency = concurrency
        self._running = running
        self._start = start
        self._wake = wake
        self._stopping = stopping
        self._lock = threading.Lock()  # starts reserve from other threads
        self._loop = asyncio.get_running_loop()
        #: slots held by claims and commits in flight
        self.reserved = 0
        #: starts reserved and not yet handed over (or given up)
        self.starting = 0
        #: runs (a flow's first tasks included) handed over by starts so far
        self.handed = 0
        #: the claim loop found no free slot while commits held some
        self.starved = False
        self._settled: asyncio.Event | None = None  # set when the last start settled

    def free(self) -> int:
        """Slots neither running nor reserved."""
        return self._concurrency - self._running() - self.reserved

    # ------------------------------------------------------------------ the claim loop

    def hold_free(self) -> int:
        """Reserve every free slot for a claim; how many (release them after)."""
        with self._lock:
            free = self.free()
            self.starved = free <= 0 < self.reserved
            if free > 0:
                self.reserved += free
            return free

    def release(self, slots: int) -> None:
        """A claim ended: free the slots `hold_free` reserved for it."""
        with self._lock:
            self.reserved -= slots

    # ------------------------------------------------------------------ claim on complete

    def reserve(self) -> ClaimParams | None:
        """For a task's completing commit: what it may claim (None: nothing)."""
        if not self._tasks or self._stopping():
            return None
        with self._lock:
            limit = max(0, self.free()) + 1  # + the slot the completing task gives up
            self.reserved += limit
        return ClaimParams(self._worker_id, self._tasks, limit, self._lease)

    def settle(self, params: ClaimParams | None, claims: Sequence[Claim]) -> None:
        """The commit ended: start the tasks it was handed, free its other slots."""
        if params is None:
            return
        for claim in claims:  # running before their slots are released
            self._start(claim)
        with self._lock:
            self.reserved -= params.limit
        if len(claims) < params.limit and self.starved:
            self.starved = False
            self._wake()  # slots the claim loop went without are free again

    # ------------------------------------------------------------------ starts (any thread)

    def reserve_start(self, workflow: str, version: int, flow: bool) -> ClaimParams | None:
        """Slots for a start of ``workflow`` at ``version`` (a DAG ``flow``: for the
        tasks of its steps with a handler here, as many as are free); None when it
        serves none of it, no slot is free, or it stops. `hand_start` must follow."""
        if self._stopping():
            return None
        if flow:
            prefix = workflow + ":"
            pairs = tuple(p for p in self._tasks if p[1] == version and p[0].startswith(prefix))
        else:
            pairs = ((workflow, version),) if (workflow, version) in self._starts else ()
        if not pairs:
            return None
        with self._lock:
            free = self.free()
            if free <= 0:
                return None
            limit = free if flow else 1
            self.reserved += limit
            self.starting += 1
        return ClaimParams(self._worker_id, pairs, limit, self._lease)

    def hand_start(self, params: ClaimParams, claims: Sequence[Claim]) -> None:
        """The start `reserve_start` reserved ``params`` for committed: start what it
        leased here (nothing: an existing run, or an error) and free the other slots."""
        try:
            self._loop.call_soon_threadsafe(self._settle_start, params, tuple(claims))
        except RuntimeError:  # the worker's loop is gone: the leases run out instead
            with self._lock:
                self.reserved -= params.limit
                self.starting -= 1

    def _settle_start(self, params: ClaimParams, claims: tuple[Claim, ...]) -> None:
        self.handed += len(claims)
        self.settle(params, claims)
        with self._lock:
            self.starting -= 1
        if not self.starting and self._settled is not None:
            self._settled.set()

    async def starts_settled(self, timeout: float) -> None:
        """Wait (up to ``timeout`` seconds) until no start is on its way here."""
        if not self.starting:
            return
        self._settled = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)


class LocalStarts:
    """The workers of one app serving in this process, which its starts may be
    handed to (`App.start_async`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: list[HandOffs] = []

    def add(self, handoffs: HandOffs) -> None:
        """A worker began serving."""
        with self._lock:
            self._workers.append(handoffs)

    def remove(self, handoffs: HandOffs) -> None:
        """A worker is stopping."""
        with self._lock:
            if handoffs in self._workers:
                self._workers.remove(handoffs)

    async def create(
        self, backend: Backend, new: NewRun, flow: bool = False, fresh: bool = False
    ) -> CreateResult:
        """``backend.create_run(new)`` (``flow``: ``start_flow``), leased to a worker of
        this app in this process that serves it and has a free slot, if any (and the
        start has no delay and no flow-control keys), and handed to it. ``fresh``:
        ``new.id`` was made for this start, so a start whose answer was lost is read
        back (`_read_back`)."""
        taken = None
        if new.version is not None and _immediate(new):
            with self._lock:
                workers = tuple(self._workers)
            for handoffs in workers:
                params = handoffs.reserve_start(new.workflow, new.version, flow)
                if params is not None:
                    taken = handoffs, params
                    break
        params = None if taken is None else taken[1]
        start = backend.start_flow if flow else backend.create_run
        claimed: tuple[Claim, ...] = ()
        try:
            try:
                result = await start(new, params)
            except BackendError:
                lost = await _read_back(backend, new.id, params) if fresh else None
                if lost is None:
                    raise
                result = lost
            claimed = result.claimed
            return result
        finally:
            if taken is not None:
                taken[0].hand_start(taken[1], claimed)


async def _read_back(
    backend: Backend, run_id: str, params: ClaimParams | None
) -> CreateResult | None:
    """A start of the new run ``run_id`` failed, perhaps only its answer (the connection
    broke as it committed): the run if the start committed after all, with what it
    leased to the worker ``params`` names; None if it did not, or the database does not
    answer (the caller gets the start's error then)."""
    try:
        run = await backend.get_run(run_id)
        if run is None:
            return None
        claimed = () if params is None else await backend.handed_at_start(run_id, params.worker_id)
    except BackendError:
        return None
    log.warning("the answer to the start of run %s was lost; it had committed", run_id)
    return CreateResult(run, True, claimed=claimed)


def _immediate(new: NewRun) -> bool:
    """A start due at once, outside flow control (whose claim enforces its limits)."""
    return not new.delay and new.run_at is None and not new.flow_controlled
