"""The fenced commits of one pass, and the journal rows they carry along.

Every transition carries the claim's lease token; a rejected transition means another
worker owns the run now (or it was cancelled), so the pass is abandoned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ..errors import BackendError
from ..records import StepWrite, Transition, TransitionResult
from .barrier import ParkBarrier
from .control import PassControl
from .cursor import JournalCursor
from .services import Transact
from .suspend import AbandonSignal, Suspend

log = logging.getLogger("perdure.engine")

#: A transactional step's work: given the open transaction's connection, the user's
#: writes, then the transition to commit with them.
TransactionWork = Callable[[Any], Awaitable[Transition]]

#: How long a deferred row waits for a transition to ride with before its own commit.
_FLUSH_AFTER = 0.002


class PassCommits:
    """Commits one pass's transitions through the worker's committer."""

    def __init__(
        self,
        run_id: str,
        token: int,
        commit: Callable[[Transition], Awaitable[TransitionResult]],
        control: PassControl,
        barrier: ParkBarrier,
        cursor: JournalCursor,
    ) -> None:
        #: The pass's place in the run's call order; its new asks ride on each commit.
        self.cursor = cursor
        self._run_id = run_id
        self._token = token
        self._commit = commit
        self._control = control
        self._barrier = barrier
        self._pending: list[StepWrite] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    @property
    def has_deferred(self) -> bool:
        """True while completed steps' rows wait for a commit."""
        return bool(self._pending)

    def defer(self, write: StepWrite) -> None:
        """Hold a completed step's journal row until the next transition of this pass.

        The body sees the step's value at once; the row is committed with whatever the
        body does next: the next step's commit happens before that step's function runs,
        and the pass's last transition (complete, park, fail, release) carries it, so a
        run whose last step is followed by its return costs one commit less. If the body
        awaits something else, a timer commits the row within milliseconds. Nothing
        durable ever depends on an uncommitted row, and if the worker dies first the step
        simply runs again (steps are at-least-once).
        """
        self._pending.append(write)
        if self._flush_timer is None:
            loop = asyncio.get_running_loop()
            self._flush_timer = loop.call_later(_FLUSH_AFTER, self._flush_later)

    async def commit(self, transition: Transition) -> TransitionResult:
        """Commit a transition inside the pass; a failed or fenced-out commit abandons
        the pass and raises `AbandonSignal`."""
        self._control.check()
        if self._flushing is not None and self._flushing is not asyncio.current_task():
            await asyncio.wait({self._flushing})
        try:
            result = await self._commit(self._with_deferred(transition))
        except BackendError as exc:
            log.warning("run %s: commit failed, abandoning this pass: %s", self._run_id, exc)
            self._control.abandon("commit failed")
            raise AbandonSignal("commit failed") from None
        if not result.ok:
            self._control.abandon("lease lost")
            raise AbandonSignal("lease lost")
        return result

    async def transact(self, transact: Transact, work: TransactionWork) -> TransitionResult:
        """Run a transactional step's work and commit its transition in one database
        transaction; a failed or fenced-out commit abandons the pass and raises
        `AbandonSignal` (the user's writes were rolled back with it). An exception of
        ``work`` propagates unchanged."""
        self._control.check()
        try:
            result = await transact(work)
        except BackendError as exc:
            # Also a commit whose answer was lost: the next claim's replay finds the row
            # if it committed, and runs the step again if it did not.
            log.warning("run %s: transaction failed, abandoning this pass: %s", self._run_id, exc)
            self._control.abandon("commit failed")
            raise AbandonSignal("commit failed") from None
        if not result.ok:
            self._control.abandon("lease lost")
            raise AbandonSignal("lease lost")
        return result

    async def commit_last(self, transition: Transition, label: str) -> TransitionResult | None:
        """Commit the transition that ends the pass; None if it could not be (the
        pass is then simply dropped: another worker or a later claim takes the run)."""
        if self._flushing is not None:
            await asyncio.wait({self._flushing})
        try:
            result = await self._commit(self._with_deferred(transition))
        except BackendError as exc:
            log.warning("run %s: could not commit its %s outcome: %s", self._run_id, label, exc)
            return None
        if not result.ok:
            log.info("run %s: lease lost before its %s outcome; dropped", self._run_id, label)
            return None
        return result

    def _with_deferred(self, transition: Transition) -> Transition:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        asked = self.cursor.take_asked()
        if not self._pending:
            return replace(transition, asked=asked) if asked else transition
        pending, self._pending = self._pending, []
        return replace(
            transition,
            steps=(*pending, *transition.steps),
            step_attempts=transition.step_attempts + len(pending),
            asked=asked,
        )

    def _flush_later(self) -> None:
        self._flush_timer = None
        if self._pending and self._flushing is None and self._control.body_alive():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        with self._barrier.working():
            try:
                await self.commit(Transition(self._run_id, self._token))
            except Suspend:
                pass  # the pass is abandoned; abandon() already stopped the body
            finally:
                self._flushing = None
