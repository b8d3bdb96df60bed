"""One pass of a workflow body over its journal, and the transition it ends with.

How a pass works (the state machine lives in docs/storage.md):

1. The worker claims the run and hands the `Claim` (run row, journal, open waits,
   database clock) to a `Runner`.
2. The body runs from the top; its step calls go to `PassSteps` (engine/steps.py):
   a journaled key replays, a new step runs its function (sync functions in the
   worker's thread pool, never on the event loop) and its row is committed through
   `PassCommits` (engine/commits.py), grouped with other runs' by the worker's
   committer.
3. Calls that must wait (sleep, wait_for_event, a retry backoff, a child run) block
   on the `ParkBarrier` (engine/barrier.py); once no branch is at work, the run parks
   with one transition that carries all their rows, waits and children, waking at
   the earliest of their times.
4. The body's end decides the rest: a return value completes the run; an uncaught
   error retries the body (workflow retry policy) or compensates (engine/
   compensation.py) and fails the run.

Fencing: every transition carries the claim's lease token; a rejected transition
means another worker owns the run now (or it was cancelled), so the pass is
abandoned without writing anything more (engine/control.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._run_ends import run_ends
from ..context import Context
from ..errors import BackendError, DeadlineExceeded, PoisonRun, SerializationError, StepFailed
from ..records import Claim, Complete, Fail, Outcome, Park, Release, Retry, Run, Transition
from ..retry import NonRetriableError, RetryAfter
from ..serialization import encode, error_from_exception
from .barrier import ParkBarrier
from .commits import PassCommits
from .compensation import compensated_error, run_rollbacks
from .control import PassControl
from .cursor import JournalCursor
from .divergence import diverged_outcome
from .run_log import log_outcome, log_run
from .services import PassResult, RunServices
from .steps import PassSteps
from .suspend import AbandonSignal, FailRunSignal, ParkSignal, Suspend, contains, engine_error, find

if TYPE_CHECKING:
    from ..workflow import WorkflowDefinition

__all__ = ["Runner"]

log = logging.getLogger("perdure.engine")


class Runner:
    """Executes one claimed run for one pass (the worker's `Execution`)."""

    def __init__(self, claim: Claim, definition: WorkflowDefinition, services: RunServices) -> None:
        self.claim = claim
        self.run = claim.run
        self.definition = definition
        self.services = services
        self.token = claim.lease_token
        self._control = PassControl(claim.now, on_abandon=self._on_abandon)
        self._barrier = ParkBarrier()
        history = bool(claim.journal or claim.waits)
        self._commits = PassCommits(
            self.run.id,
            self.token,
            services.commit,
            self._control,
            self._barrier,
            JournalCursor(claim.call_order, history, self._barrier),
        )
        self._telemetry = services.telemetry.pass_began(claim)
        self.steps = PassSteps(
            claim,
            services,
            self._control,
            self._barrier,
            self._commits,
            self._telemetry,
            definition.step_retry,
        )
        self.ctx = Context(self.steps)
        self._deadline_error: dict[str, Any] | None = None
        #: A replay check (`check`): nothing is committed, published or logged.
        self._checking = False
        self._checked: Outcome | Transition | None = None
        self._committed_ns: int | None = None  # when the pass's last commit returned

    async def check(self) -> dict[str, Any] | None:
        """Replay the body over the claimed journal without executing any step
        function, stopping at the first step the journal does not hold; return how the
        replay diverged (the run's would-be `NonDeterminismError`), or None. Commits,
        publishes and logs nothing (`perdure.testing.replay_check`)."""
        self._checking = True
        self.steps.replay_only = True
        await self.execute()
        ending = self._checked
        if isinstance(ending, Transition):
            for event in ending.events:
                if event.type == "replay_diverged":
                    return event.data
        return None

    def now(self) -> datetime:
        """The database clock, estimated from the claim time plus elapsed monotonic time."""
        return self._control.now()

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the pass without writing anything more (run cancelled or lease lost)."""
        self._control.abandon(reason)

    def _on_abandon(self) -> None:
        self.ctx.cancelled.set()

    # ------------------------------------------------------------------ the pass

    async def execute(self) -> PassResult:
        """Run the pass and commit its outcome. Only raises CancelledError."""
        outcome = "abandoned"
        try:
            result = await self._execute()
            outcome = result.outcome
            return result
        finally:
            self._telemetry.pass_ended(outcome, self._committed_ns)

    async def _execute(self) -> PassResult:
        if _rolling_back(self.run):
            return await self._roll_back()
        early = self._precheck()
        if early is not None:
            return await self._finish(Fail(early), "failed")
        timer = self._arm_deadline()
        try:
            body = asyncio.create_task(self._call_body(), name=f"perdure:{self.run.id}")
            self._control.body = body
            await self._barrier.drive(body)
            return await self._conclude(body)
        finally:
            if timer is not None:
                timer.cancel()
            self._control.cancel_tasks()

    def _precheck(self) -> dict[str, Any] | None:
        run = self.run
        if run.deadline_at is not None and self.claim.now >= run.deadline_at:
            return engine_error(
                DeadlineExceeded(f"the run's deadline {run.deadline_at.isoformat()} passed")
            )
        limit = self.services.max_claims_without_progress
        if limit and self.claim.claims_since_progress > limit:
            return engine_error(
                PoisonRun(
                    f"the run was claimed {self.claim.claims_since_progress} times without "
                    "committing any progress (its worker probably crashed each time); giving up"
                )
            )
        return None

    def _arm_deadline(self) -> asyncio.TimerHandle | None:
        deadline = self.run.deadline_at
        if deadline is None:
            return None
        delay = (deadline - self.now()).total_seconds()

        def hit() -> None:
            self._deadline_error = engine_error(
                DeadlineExceeded(f"the run's deadline {deadline.isoformat()} passed")
            )
            self._control.cancel_tasks()

        return asyncio.get_running_loop().call_later(max(0.0, delay), hit)

    async def _call_body(self) -> Any:
        self._control.adopt()
        return await self.definition.call(self.ctx, self.run.input)

    async def _conclude(self, body: asyncio.Task[Any]) -> PassResult:
        if self._deadline_error is not None:
            return await self._finish(Fail(self._deadline_error), "failed")
        if self._control.abandoned is not None:
            if body.done() and not body.cancelled():
                body.exception()  # how an abandoned body ended is not reported
            return PassResult("abandoned")
        if body.cancelled():
            self._control.abandoned = "cancelled"
            return PassResult("abandoned")
        exc = body.exception()
        if (exc is None or not contains(exc, Suspend)) and self._commits.cursor.unasked():
            body.exception()  # the body ended before the steps its journal holds
            return await self._diverged()
        if exc is None:
            try:
                output = encode(
                    body.result(),
                    what=f"the output of workflow {self.run.workflow!r}",
                    max_bytes=self.services.max_payload_bytes,
                )
            except SerializationError as err:
                return await self._fail_for_good(err)
            return await self._finish(Complete(output), "completed")
        fail = find(exc, FailRunSignal)
        if find(exc, AbandonSignal) is None and isinstance(fail, FailRunSignal):
            return await self._finish(Fail(fail.error), "failed")
        suspended = await self._suspended(exc)
        if suspended is not None:
            return suspended
        return await self._body_failed(_first_real(exc))

    async def _suspended(self, exc: BaseException) -> PassResult | None:
        """The pass's end when the body (or the rollbacks) stopped on an engine signal:
        abandoned, parked, or released because the worker stops; None otherwise."""
        if find(exc, AbandonSignal) is not None:
            return PassResult("abandoned")
        if contains(exc, ParkSignal) and self._barrier.requests:
            return await self._park()
        if contains(exc, Suspend):  # only park/release signals: the worker is stopping
            await self._barrier.quiesce()
            return await self._finish(Release(), "released")
        return None

    async def _park(self) -> PassResult:
        requests = self._barrier.requests
        if any(r.reason == "divergence" for r in requests):
            return await self._diverged()
        # A step attempt that failed and will be retried is counted here (the cap
        # counts retries: a step with unlimited retries still meets it).
        retried = sum(1 for r in requests for s in r.steps if s.status == "retrying")
        times = [r.wake_at for r in requests if r.wake_at is not None]
        wake_at = min(times) if times else None
        transition = Transition(
            run_id=self.run.id,
            lease_token=self.token,
            steps=tuple(s for r in requests for s in r.steps),
            waits=tuple(w for r in requests for w in r.waits),
            children=tuple(c for r in requests for c in r.children),
            events=tuple(e for r in requests for e in r.events),
            step_attempts=retried,
            outcome=Park(reason=self._barrier.reason, wake_at=wake_at),
        )
        reason = "; ".join(r.describe() for r in requests)
        return await self._finish(transition, "parked", wake_at=wake_at, reason=reason)

    async def _diverged(self) -> PassResult:
        """The replay no longer matches the journal: park the run (or fail it, with
        ``on_divergence="fail"``), committing nothing else of this pass's body."""
        detail = self._commits.cursor.divergence()
        fail = self.definition.on_divergence == "fail"
        transition, wake_at, message = diverged_outcome(
            self.run, self.token, detail, self.now(), fail=fail
        )
        if self._checking:
            return await self._finish(transition, "diverged")
        self._telemetry.diverged()
        log_run(logging.WARNING, self.run, "diverged", message)  # one line per run
        if fail:
            return await self._finish(transition, "failed")
        return await self._finish(transition, "diverged", wake_at=wake_at, reason=message)

    async def _body_failed(self, exc: BaseException) -> PassResult:
        policy = self.definition.retry
        attempt = self.run.attempt
        if not _non_retriable(exc) and not policy.exhausted(attempt):
            delay = exc.delay if isinstance(exc, RetryAfter) else policy.delay(attempt)
            error = error_from_exception(exc, attempt=attempt)
            wake_at = self.now() + timedelta(seconds=delay)
            # The step whose failure ended this attempt runs again in the next one.
            failed = self.steps.journal.get(exc.step) if isinstance(exc, StepFailed) else None
            reopen = (failed.name,) if failed is not None and failed.kind == "run" else ()
            retry = Retry(wake_at=wake_at, error=error, reopen=reopen)
            return await self._finish(retry, "retrying", wake_at=wake_at)
        return await self._fail_for_good(exc)

    async def _fail_for_good(self, exc: BaseException) -> PassResult:
        error = error_from_exception(
            exc,
            attempt=self.run.attempt,
            step=exc.step if isinstance(exc, StepFailed) else None,
            cause=exc.error if isinstance(exc, StepFailed) else None,
        )
        if self.steps.compensations:
            return await self._compensate(error)
        return await self._finish(Fail(error), "failed")

    async def _compensate(self, error: dict[str, Any]) -> PassResult:
        """Run the rollbacks of completed steps, newest first, each as a durable step."""
        rolled = await self._rollbacks()
        if isinstance(rolled, PassResult):
            return rolled
        if isinstance(rolled, BaseException):
            error = {**error, "compensation_error": error_from_exception(rolled)}
            return await self._finish(Fail(error), "failed")
        error, event = compensated_error(error, *rolled)
        transition = Transition(self.run.id, self.token, events=(event,), outcome=Fail(error))
        return await self._finish(transition, "failed")

    async def _rollbacks(self) -> tuple[list[str], list[str]] | PassResult | BaseException:
        """Run the registered rollbacks newest first: the steps compensated and those
        whose rollback failed; or how the pass ended meanwhile (abandoned, parked for a
        rollback's retry, released); or the error that stopped them."""
        self._barrier.reset()
        task = asyncio.create_task(self._run_rollbacks())
        self._control.body = task
        await self._barrier.drive(task)
        if self._control.abandoned is not None or task.cancelled():
            return PassResult("abandoned")
        exc = task.exception()
        if exc is None:
            return task.result()
        suspended = await self._suspended(exc)
        return suspended if suspended is not None else _first_real(exc)

    async def _roll_back(self) -> PassResult:
        """A run cancelled with rollback: replay the body up to the first step the
        journal does not hold (registering the rollbacks of completed steps), run the
        rollbacks newest first, each durably, then cancel the run."""
        self.steps.replay_only = True
        self._commits.cursor.disable()
        body = asyncio.create_task(self._call_body(), name=f"perdure:{self.run.id}")
        self._control.body = body
        await self._barrier.drive(body)
        if self._control.abandoned is not None:
            return PassResult("abandoned")
        if not body.cancelled():
            body.exception()  # how the replay ended does not matter: it stops here
        self.steps.replay_only = False
        rolled = await self._rollbacks()
        if isinstance(rolled, PassResult):
            return rolled  # e.g. a rollback waits for its retry: the next pass goes on
        if isinstance(rolled, BaseException):
            log.error("run %s: rollbacks stopped: %r", self.run.id, rolled)
            compensated: list[str] = []
            failed = [c.key for c in self.steps.compensations]
        else:
            compensated, failed = rolled
        error, event = compensated_error(
            {k: v for k, v in (self.run.error or {}).items() if k != "rollback"},
            compensated,
            failed,
        )
        transition = Transition(self.run.id, self.token, events=(event,))
        if await self._commits.commit_last(transition, "cancelled") is None:
            return PassResult("abandoned")
        cancel = self.services.cancel
        assert cancel is not None, "a worker gives its runs a way to cancel"
        try:
            await cancel(self.run.id)
        except BackendError as exc:
            log.warning("run %s: could not cancel after its rollbacks: %s", self.run.id, exc)
            return PassResult("abandoned")  # the next claim replays the rollbacks and retries
        log_outcome(self.run, "cancelled", error=error)
        run_ends.publish(self.run.id, "cancelled", None, error)
        return PassResult("cancelled", error=error)

    async def _run_rollbacks(self) -> tuple[list[str], list[str]]:
        self._control.adopt()
        return await run_rollbacks(self.steps.compensations, self.steps.run_rollback)

    async def _finish(
        self,
        ending: Outcome | Transition,
        label: str,
        *,
        wake_at: datetime | None = None,
        reason: str | None = None,
    ) -> PassResult:
        if self._checking:
            self._checked = ending
            return PassResult(label)
        transition = (
            ending
            if isinstance(ending, Transition)
            else Transition(self.run.id, self.token, outcome=ending)
        )
        committed = await self._commits.commit_last(transition, label)
        self._committed_ns = time.time_ns()
        if committed is None:
            return PassResult("abandoned")
        outcome = transition.outcome
        if committed.failed is not None:  # stored as a failure instead (see TransitionResult)
            outcome, label = Fail(committed.failed), "failed"
        error = outcome.error if isinstance(outcome, Fail | Retry) else None
        # Logged before waiters hear of the outcome, so the line is there when they do.
        log_outcome(self.run, label, error=error, wake_at=wake_at, reason=reason)
        if isinstance(outcome, Fail):
            run_ends.publish(self.run.id, "failed", None, error)
        elif isinstance(outcome, Complete):
            run_ends.publish(self.run.id, "completed", outcome.output_json, None)
        elif isinstance(outcome, Park | Retry):
            self.services.on_park(wake_at)
        return PassResult(label, wake_at=wake_at, error=error, reason=reason)


def _rolling_back(run: Run) -> bool:
    """True for a run cancelled with rollback (`Backend.cancel_run`)."""
    error = run.error
    return (
        isinstance(error, dict)
        and error.get("rollback") is True
        and (error.get("type") == "WorkflowCancelled")
    )


def _first_real(exc: BaseException) -> BaseException:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if not contains(inner, Suspend):
                return _first_real(inner)
    return exc


def _non_retriable(exc: BaseException) -> bool:
    """NonRetriableError, raised by the body or by a step (seen as StepFailed), ends the
    run with no workflow retry."""
    if isinstance(exc, NonRetriableError):
        return True
    return isinstance(exc, StepFailed) and exc.error.get("type") == NonRetriableError.__name__
