"""What every step kind of a pass shares: the run's journal as claimed, entering a
step call (its key and recorded row), and committing one row at once.

`PassSteps` (engine/steps.py) is the whole step runtime; it is split by job over
this base, the waiting kinds (engine/waiting_steps.py) and the executing kinds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..codec import unreadable
from ..errors import NonDeterminismError, StepLimitExceeded
from ..records import Claim, EventWrite, Run, Step, StepWrite, Transition, TransitionResult, Wait
from ..retry import DEFAULT_STEP_RETRY, RetryPolicy
from ..serialization import decode
from ..telemetry.hooks import NOOP_PASS, PassHooks
from .barrier import ParkBarrier
from .commits import PassCommits
from .compensation import Compensation
from .control import PassControl
from .keys import KeyAllocator
from .services import RunServices
from .suspend import FailRunSignal, ReplayEnd, Suspend, engine_error


class ReleaseSignal(Suspend):
    """The worker is stopping: take no new step, give the run back."""


class StepBase:
    """The journal of one pass over one run and what every step call does first."""

    def __init__(
        self,
        claim: Claim,
        services: RunServices,
        control: PassControl,
        barrier: ParkBarrier,
        commits: PassCommits,
        telemetry: PassHooks = NOOP_PASS,
        step_retry: RetryPolicy = DEFAULT_STEP_RETRY,
    ) -> None:
        self.run: Run = claim.run
        #: The policy of a step that gives none (the workflow's or app's step_retry).
        self.step_retry = step_retry
        self._telemetry = telemetry
        self._traceparent = claim.traceparent
        self._token = claim.lease_token
        self._services = services
        self._control = control
        self._barrier = barrier
        self._commits = commits
        self._cursor = commits.cursor
        self.journal: dict[str, Step] = {s.name: s for s in claim.journal}
        # Journaled steps the body has yet to reach in this pass: while any remain, it
        # replays (ctx.log is silent).
        self._to_replay = {k for k, s in self.journal.items() if s.status != "retrying"}
        #: The key of the step the body reached last (ctx.log tags records with it).
        self.step_key: str | None = None
        self._waits: dict[str, Wait] = {w.key: w for w in claim.waits}
        self._keys = KeyAllocator()
        self._step_attempts = claim.step_attempts
        #: The step the run parked at last (a sleep's or wait's span ends at its wake).
        self._last_asked = claim.call_order[-1] if claim.call_order else None
        #: Rollbacks of the completed steps, oldest first.
        self.compensations: list[Compensation] = []
        #: A rollback pass: journaled steps replay, anything new stops the body.
        self.replay_only = False

    def now(self) -> datetime:
        """The database clock."""
        return self._control.now()

    @property
    def replaying(self) -> bool:
        """True while the body re-executes steps already journaled."""
        return bool(self._to_replay)

    def _stop_if_replay_only(self) -> None:
        if self.replay_only:
            raise ReplayEnd()

    def _check_may_run(self) -> None:
        if self._services.stopping():
            raise ReleaseSignal()
        limit = self._services.max_step_attempts
        if self._step_attempts >= limit:
            raise FailRunSignal(
                engine_error(
                    StepLimitExceeded(
                        f"the run made {self._step_attempts} step attempts, the limit is {limit}"
                    )
                )
            )

    # ------------------------------------------------------------------ shared

    def patched(self, patch_id: str) -> bool:
        """See `Context.patched`. A run with no call order (journaled before it was
        recorded) takes the patched branch only once nothing journaled is left."""
        taken = self._cursor.patched(patch_id)
        return not self._to_replay if taken is None else taken

    def deprecate_patch(self, patch_id: str) -> None:
        """See `Context.deprecate_patch`."""
        self._cursor.deprecate_patch(patch_id)

    def _enter(self, key: str, kind: str) -> Step | None:
        """Enter a step call: the body reached ``key``; return its journal row, if any,
        after checking it was recorded as the same kind of step."""
        self.step_key = key
        self._to_replay.discard(key)
        self._control.adopt()
        self._control.check()
        record = self.journal.get(key)
        if record is not None and record.kind != kind and record.status != "retrying":
            raise FailRunSignal(_changed_kind(key, record.kind, kind))
        return record

    async def _record(self, write: StepWrite, event: EventWrite, step_attempts: int = 0) -> Step:
        """Commit one step row now and return what is stored (a concurrent writer's
        result, such as a child's output or a signal, may have got there first)."""
        with self._barrier.working():
            result = await self._commits.commit(
                Transition(
                    self.run.id,
                    self._token,
                    steps=(write,),
                    events=(event,),
                    step_attempts=step_attempts,
                )
            )
        stored = self._stored(result, write.key) or Step(
            write.key,
            write.kind,
            write.status,
            decode(write.output_json or "null"),
            write.error,
            write.attempts,
            write.started_at,
            None,
        )
        self.journal[write.key] = stored
        return stored

    def _stored(self, result: TransitionResult, key: str) -> Step | None:
        """The row stored first under ``key`` (it wins), if any. One whose value this
        worker cannot read (sealed by a codec it lacks, or cannot open) must never reach
        the body: the pass stops with nothing more written, and once its lease expires
        the next claim holds the row and parks the run (worker/undecodable.py)."""
        stored = _stored(result, key)
        if stored is not None and unreadable(stored.output):
            self._control.abandon("a stored value this worker cannot read")
            self._control.check()
        return stored


def _changed_kind(key: str, recorded: str, called: str) -> dict[str, Any]:
    return engine_error(
        NonDeterminismError(
            f"step {key!r} was recorded as a {recorded!r} step but the workflow now calls "
            f"it as a {called!r} step: the code changed under a running run; give the new "
            "code a new workflow version"
        )
    )


def _stored(result: TransitionResult, key: str) -> Step | None:
    for step in result.existing:
        if step.name == key:
            return step
    return None
