"""One pass of a workflow body over its journal, and the transition it ends with.

How a pass works (the state machine lives in docs/storage.md):

1. The worker claims the run and hands the `Claim` (run row, journal, open waits,
   database clock) to a `Runner`.
2. The body runs from the top. Each step call allocates its key synchronously
   (`KeyAllocator`), so parallel steps get the same keys on every pass. A key found
   in the journal returns its recorded value without running anything: replay is
   one dictionary lookup per step, linear in the journal.
3. A new step runs its function (sync functions in the worker's thread pool, never
   on the event loop) and commits one `Transition` (journal row + fence check) before
   the body sees its value. Commits go through the worker's committer, which groups
   concurrent transitions of many runs into one database transaction.
4. Calls that must wait (sleep, wait_for_event, a retry backoff, a child run)
   register a park request and block. When no step is executing any more and the
   loop has settled, every blocked call is woken with `ParkSignal` (a BaseException
   the body cannot swallow with ``except Exception``), and the run is parked with one
   transition that carries all their journal rows, waits and children, waking at
   the earliest of their times.
5. The body's end decides the rest: a return value completes the run; an uncaught
   error retries the body (workflow retry policy) or compensates (rollbacks of the
   completed steps, newest first, each durable) and fails the run.

Fencing: every transition carries the claim's lease token; a rejected transition
means another worker owns the run now (or it was cancelled), so the pass is
abandoned without writing anything more.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from .._local import outcomes
from ..errors import (
    BackendError,
    ChildTimeout,
    DeadlineExceeded,
    NonDeterminismError,
    PoisonRun,
    SerializationError,
    StepFailed,
    StepLimitExceeded,
    StepTimeout,
    ValidationError,
)
from ..ids import new_run_id
from ..records import (
    Claim,
    Complete,
    EventWrite,
    Fail,
    NewRun,
    Outcome,
    Park,
    Release,
    Retry,
    Step,
    StepWrite,
    Transition,
    TransitionResult,
    Wait,
    WaitWrite,
)
from ..retry import DEFAULT_STEP_RETRY, NonRetriableError, RetryAfter, RetryPolicy
from ..serialization import decode, encode, error_from_exception
from ..step_info import StepInfo, entered_step, left_step
from .keys import KeyAllocator
from .run_log import log_outcome
from .suspend import AbandonSignal, FailRunSignal, ParkSignal, Suspend, contains, find

if TYPE_CHECKING:
    from ..context import Context
    from ..workflow import Registry, WorkflowDefinition

log = logging.getLogger("perdure.engine")

ROLLBACK_PREFIX = "~rollback:"
_PARK_REASON_ORDER = ("retry", "sleep", "child", "event")


class ReleaseSignal(Suspend):
    """The worker is stopping: take no new step, give the run back."""


@dataclass(slots=True)
class RunServices:
    """What a runner needs from its worker."""

    commit: Callable[[Transition], Awaitable[TransitionResult]]
    executor: Executor
    registry: Registry
    stopping: Callable[[], bool]
    on_park: Callable[[datetime | None], None] = lambda _at: None
    max_step_attempts: int = 1000
    max_payload_bytes: int = 1024 * 1024
    max_claims_without_progress: int = 10


@dataclass(slots=True)
class _ParkRequest:
    reason: str
    wake_at: datetime | None
    future: asyncio.Future[None]
    steps: tuple[StepWrite, ...] = ()
    waits: tuple[WaitWrite, ...] = ()
    children: tuple[NewRun, ...] = ()
    events: tuple[EventWrite, ...] = ()


@dataclass(slots=True)
class _Compensation:
    key: str
    fn: Callable[[Any], Any]
    output: Any


@dataclass(slots=True)
class PassResult:
    """What a pass ended with (for the worker's bookkeeping and tests)."""

    outcome: str  # completed | failed | parked | retrying | released | abandoned
    wake_at: datetime | None = None
    error: dict[str, Any] | None = field(default=None)
    #: why, in words, for the worker's log line (what a parked run waits for, ...)
    reason: str | None = None


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (
        callable(fn) and inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004
    )


class Runner:
    """Executes one claimed run for one pass."""

    def __init__(self, claim: Claim, definition: WorkflowDefinition, services: RunServices) -> None:
        from ..context import Context

        self.claim = claim
        self.run = claim.run
        self.definition = definition
        self.services = services
        self.token = claim.lease_token
        self.journal: dict[str, Step] = {s.name: s for s in claim.journal}
        # Journaled steps the body has yet to reach in this pass: while any remain, it
        # replays (ctx.log is silent).
        self._to_replay = {k for k, s in self.journal.items() if s.status != "retrying"}
        #: The key of the step the body reached last (ctx.log tags records with it).
        self.step_key: str | None = None
        self.waits: dict[str, Wait] = {w.key: w for w in claim.waits}
        self.keys = KeyAllocator()
        self.step_attempts = claim.step_attempts
        self.ctx: Context = Context(self)
        self._mono0 = time.monotonic()
        self._parks: list[_ParkRequest] = []
        self._in_flight = 0
        self._version = 0
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._compensations: list[_Compensation] = []
        self._abandoned: str | None = None
        self._deadline_error: dict[str, Any] | None = None
        self._body: asyncio.Task[Any] | None = None
        # Journal rows of completed steps not committed yet: they ride along with the
        # next transition (the next step's, or the park/complete/fail that ends the
        # pass), or a short timer commits them; see `_defer`.
        self._pending: list[StepWrite] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ clock

    def now(self) -> datetime:
        """The database clock, estimated from the claim time plus elapsed monotonic time."""
        return self.claim.now + timedelta(seconds=time.monotonic() - self._mono0)

    # ------------------------------------------------------------------ control from the worker

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the pass without writing anything more (run cancelled or lease lost)."""
        if self._abandoned is None:
            self._abandoned = reason
        self.ctx.cancelled.set()
        self._cancel_tasks()

    def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current and not task.done():
                task.cancel()
        if self._body is not None and self._body is not current and not self._body.done():
            self._body.cancel()

    # ------------------------------------------------------------------ the pass

    async def execute(self) -> PassResult:
        """Run the pass and commit its outcome. Only raises CancelledError."""
        early = self._precheck()
        if early is not None:
            return await self._finish(Fail(early), "failed")
        timer = self._arm_deadline()
        try:
            body = asyncio.create_task(self._call_body(), name=f"perdure:{self.run.id}")
            self._body = body
            await self._drive(body)
            return await self._conclude(body)
        finally:
            if timer is not None:
                timer.cancel()
            self._cancel_tasks()

    def _precheck(self) -> dict[str, Any] | None:
        run = self.run
        if run.deadline_at is not None and self.claim.now >= run.deadline_at:
            return _engine_error(
                DeadlineExceeded(f"the run's deadline {run.deadline_at.isoformat()} passed")
            )
        limit = self.services.max_claims_without_progress
        if limit and self.claim.claims_since_progress > limit:
            return _engine_error(
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
            self._deadline_error = _engine_error(
                DeadlineExceeded(f"the run's deadline {deadline.isoformat()} passed")
            )
            self._cancel_tasks()

        return asyncio.get_running_loop().call_later(max(0.0, delay), hit)

    async def _call_body(self) -> Any:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        return await self.definition.call(self.ctx, self.run.input)

    async def _drive(self, body: asyncio.Task[Any]) -> None:
        """Wait for the body to end, parking it once it is quiescent."""
        while not body.done():
            self._changed.clear()
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({body, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if body.done():
                return
            if self._parks and self._in_flight == 0 and await self._settled():
                for request in self._parks:
                    if not request.future.done():
                        request.future.set_exception(ParkSignal())
                done, _ = await asyncio.wait({body}, timeout=30)
                if not done:  # the body swallowed ParkSignal and went on: stop it
                    body.cancel()
                    await asyncio.wait({body})
                return

    async def _settled(self) -> bool:
        mark = self._version
        for _ in range(4):
            await asyncio.sleep(0)
        return mark == self._version and self._in_flight == 0

    def _bump(self) -> None:
        self._version += 1
        if self._in_flight:
            self._idle.clear()
        else:
            self._idle.set()
        if self._parks:
            self._changed.set()

    async def _conclude(self, body: asyncio.Task[Any]) -> PassResult:
        if self._deadline_error is not None:
            return await self._finish(Fail(self._deadline_error), "failed")
        if self._abandoned is not None:
            return PassResult("abandoned")
        if body.cancelled():
            self._abandoned = self._abandoned or "cancelled"
            return PassResult("abandoned")
        exc = body.exception()
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
        if find(exc, AbandonSignal) is not None:
            return PassResult("abandoned")
        fail = find(exc, FailRunSignal)
        if isinstance(fail, FailRunSignal):
            return await self._finish(Fail(fail.error), "failed")
        if contains(exc, ParkSignal) and self._parks:
            return await self._park()
        if contains(exc, Suspend):  # only park/release signals: the worker is stopping
            await self._quiesce()
            return await self._finish(Release(), "released")
        return await self._body_failed(_first_real(exc))

    async def _quiesce(self) -> None:
        """Let steps still executing in other branches reach their commit."""
        try:
            await asyncio.wait_for(self._idle.wait(), 30)
        except TimeoutError:
            pass

    async def _park(self) -> PassResult:
        requests = self._parks
        # A step attempt that failed and will be retried is counted here (the cap
        # counts retries: a step with unlimited retries still meets it).
        retried = sum(1 for r in requests for s in r.steps if s.status == "retrying")
        times = [r.wake_at for r in requests if r.wake_at is not None]
        wake_at = min(times) if times else None
        reason = min(
            (r.reason for r in requests),
            key=lambda r: _PARK_REASON_ORDER.index(r) if r in _PARK_REASON_ORDER else 99,
        )
        transition = Transition(
            run_id=self.run.id,
            lease_token=self.token,
            steps=tuple(s for r in requests for s in r.steps),
            waits=tuple(w for r in requests for w in r.waits),
            children=tuple(c for r in requests for c in r.children),
            events=tuple(e for r in requests for e in r.events),
            step_attempts=retried,
            outcome=Park(reason=reason, wake_at=wake_at),
        )
        reason = "; ".join(_park_reason(r) for r in requests)
        result = await self._finish(transition, "parked", wake_at=wake_at, reason=reason)
        if result.outcome == "parked":
            self.services.on_park(wake_at)
        return result

    async def _body_failed(self, exc: BaseException) -> PassResult:
        policy = self.definition.retry
        attempt = self.run.attempt
        if not _non_retriable(exc) and not policy.exhausted(attempt):
            delay = exc.delay if isinstance(exc, RetryAfter) else policy.delay(attempt)
            error = error_from_exception(exc, attempt=attempt)
            wake_at = self.now() + timedelta(seconds=delay)
            # The step whose failure ended this attempt runs again in the next one.
            failed = self.journal.get(exc.step) if isinstance(exc, StepFailed) else None
            reopen = (failed.name,) if failed is not None and failed.kind == "run" else ()
            retry = Retry(wake_at=wake_at, error=error, reopen=reopen)
            result = await self._finish(retry, "retrying", wake_at=wake_at)
            if result.outcome == "retrying":
                self.services.on_park(wake_at)
            return result
        return await self._fail_for_good(exc)

    async def _fail_for_good(self, exc: BaseException) -> PassResult:
        error = error_from_exception(
            exc,
            attempt=self.run.attempt,
            step=exc.step if isinstance(exc, StepFailed) else None,
            cause=exc.error if isinstance(exc, StepFailed) else None,
        )
        if self._compensations:
            return await self._compensate(error)
        return await self._finish(Fail(error), "failed")

    async def _compensate(self, error: dict[str, Any]) -> PassResult:
        """Run the rollbacks of completed steps, newest first, each as a durable step."""
        self._parks = []
        task = asyncio.create_task(self._run_rollbacks())
        self._body = task
        await self._drive(task)
        if self._abandoned is not None or task.cancelled():
            return PassResult("abandoned")
        exc = task.exception()
        if exc is not None:
            if find(exc, AbandonSignal) is not None:
                return PassResult("abandoned")
            if contains(exc, ParkSignal) and self._parks:
                return await self._park()
            if contains(exc, Suspend):
                await self._quiesce()
                return await self._finish(Release(), "released")
            error = {**error, "compensation_error": error_from_exception(_first_real(exc))}
            return await self._finish(Fail(error), "failed")
        compensated, failed = task.result()
        error = {**error, "compensated": compensated}
        if failed:
            error["compensation_failed"] = failed
        events = (EventWrite("compensated", {"steps": compensated, "failed": failed}),)
        transition = Transition(self.run.id, self.token, events=events, outcome=Fail(error))
        return await self._finish(transition, "failed")

    async def _run_rollbacks(self) -> tuple[list[str], list[str]]:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        compensated: list[str] = []
        failed: list[str] = []
        for item in reversed(self._compensations):
            fn = functools.partial(item.fn, item.output)
            try:
                await self.run_step(
                    ROLLBACK_PREFIX + item.key, fn, kind="rollback", key=ROLLBACK_PREFIX + item.key
                )
                compensated.append(item.key)
            except StepFailed:
                failed.append(item.key)
        return compensated, failed

    async def _finish(
        self,
        outcome: Outcome | Transition,
        label: str,
        *,
        wake_at: datetime | None = None,
        reason: str | None = None,
    ) -> PassResult:
        transition = (
            outcome
            if isinstance(outcome, Transition)
            else Transition(self.run.id, self.token, outcome=outcome)
        )
        if self._flushing is not None:
            await asyncio.wait({self._flushing})
        transition = self._with_pending(transition)
        try:
            result = await self.services.commit(transition)
        except BackendError as exc:
            log.warning("run %s: could not commit its %s outcome: %s", self.run.id, label, exc)
            return PassResult("abandoned")
        if not result.ok:
            log.info("run %s: lease lost before its %s outcome; dropped", self.run.id, label)
            return PassResult("abandoned")
        error = None
        if isinstance(transition.outcome, Fail | Retry):
            error = transition.outcome.error
        # Logged before waiters hear of the outcome, so the line is there when they do.
        log_outcome(self.run, label, error=error, wake_at=wake_at, reason=reason)
        if isinstance(transition.outcome, Fail):
            outcomes.publish(self.run.id, "failed", None, error)
        elif isinstance(transition.outcome, Complete):
            outcomes.publish(self.run.id, "completed", transition.outcome.output_json, None)
        return PassResult(label, wake_at=wake_at, error=error, reason=reason)

    # ------------------------------------------------------------------ commit helpers

    def _defer(self, write: StepWrite) -> None:
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
            self._flush_timer = asyncio.get_running_loop().call_later(0.002, self._flush_later)

    def _with_pending(self, transition: Transition) -> Transition:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if not self._pending:
            return transition
        pending, self._pending = self._pending, []
        return replace(
            transition,
            steps=(*pending, *transition.steps),
            step_attempts=transition.step_attempts + len(pending),
        )

    def _flush_later(self) -> None:
        self._flush_timer = None
        body = self._body
        if self._pending and self._flushing is None and body is not None and not body.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        self._in_flight += 1
        self._bump()
        try:
            await self._commit(Transition(self.run.id, self.token))
        except Suspend:
            pass  # the pass is abandoned; cancel() already stopped the body
        finally:
            self._flushing = None
            self._in_flight -= 1
            self._bump()

    async def _commit(self, transition: Transition) -> TransitionResult:
        if self._abandoned is not None:
            raise AbandonSignal(self._abandoned)
        if self._flushing is not None and self._flushing is not asyncio.current_task():
            await asyncio.wait({self._flushing})
        transition = self._with_pending(transition)
        try:
            result = await self.services.commit(transition)
        except BackendError as exc:
            log.warning("run %s: commit failed, abandoning this pass: %s", self.run.id, exc)
            self.cancel("commit failed")
            raise AbandonSignal("commit failed") from None
        if not result.ok:
            self.cancel("lease lost")
            raise AbandonSignal("lease lost")
        return result

    async def _wait_parked(self, request: _ParkRequest) -> NoReturn:
        self._parks.append(request)
        self._bump()
        await request.future
        raise ParkSignal()  # the future only ever ends with ParkSignal

    def _new_park(self, reason: str, wake_at: datetime | None, **parts: Any) -> _ParkRequest:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        return _ParkRequest(reason=reason, wake_at=wake_at, future=future, **parts)

    @property
    def replaying(self) -> bool:
        """True while the body re-executes steps already journaled."""
        return bool(self._to_replay)

    def _enter_step_api(self, key: str) -> None:
        self.step_key = key
        self._to_replay.discard(key)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        if self._abandoned is not None:
            raise AbandonSignal(self._abandoned)

    def _check_kind(self, key: str, record: Step, kind: str) -> None:
        if record.kind != kind:
            raise FailRunSignal(
                _engine_error(
                    NonDeterminismError(
                        f"step {key!r} was recorded as a {record.kind!r} step but the workflow "
                        f"now calls it as a {kind!r} step: the code changed under a running "
                        "run; give the new code a new workflow version"
                    )
                )
            )

    # ------------------------------------------------------------------ step kinds

    async def run_step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        rollback: Callable[[Any], Any] | None = None,
        kind: str = "run",
        key: str | None = None,
    ) -> Any:
        """Run (or replay) one step; see `StepApi.run`."""
        key = key or self.keys.next(name)
        self._enter_step_api(key)
        record = self.journal.get(key)
        if record is not None and record.status != "retrying":
            self._check_kind(key, record, kind)
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            if rollback is not None:
                self._compensations.append(_Compensation(key, rollback, record.output))
            return record.output
        previous = record.attempts if record is not None else 0
        if self.services.stopping():
            raise ReleaseSignal()
        if self.step_attempts >= self.services.max_step_attempts:
            raise FailRunSignal(
                _engine_error(
                    StepLimitExceeded(
                        f"the run made {self.step_attempts} step attempts, the limit is "
                        f"{self.services.max_step_attempts}"
                    )
                )
            )
        attempt = previous + 1
        self._in_flight += 1
        self._bump()
        try:
            if self._pending:  # the previous step's row is durable before this one runs
                await self._commit(Transition(self.run.id, self.token))
            started = self.now()
            self.step_attempts += 1
            token = entered_step(StepInfo(self.run.id, key, attempt))
            try:
                value = await self._invoke(fn, timeout, key)
                output = encode(
                    value,
                    what=f"the output of step {key!r}",
                    max_bytes=self.services.max_payload_bytes,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return await self._step_error(key, kind, exc, attempt, started, retry)
            finally:
                left_step(token)
            # Only this worker writes "run" rows of this run (fenced), so the value is
            # final: hand it to the body now and commit the row with the next transition.
            self._defer(
                StepWrite(key, kind, "completed", output, attempts=attempt, started_at=started)
            )
            value = decode(output)
            self.journal[key] = Step(key, kind, "completed", value, None, attempt, started, None)
            if rollback is not None:
                self._compensations.append(_Compensation(key, rollback, value))
            return value
        finally:
            self._in_flight -= 1
            self._bump()

    async def _invoke(self, fn: Callable[[], Any], timeout: float | None, key: str) -> Any:
        if _is_async_callable(fn):
            awaitable: Awaitable[Any] = fn()
        else:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, fn)
            awaitable = loop.run_in_executor(self.services.executor, call)
        result = await _within(awaitable, timeout, key)
        if inspect.isawaitable(result):  # a sync function that returned an awaitable
            result = await _within(result, timeout, key)
        return result

    async def _step_error(
        self,
        key: str,
        kind: str,
        exc: Exception,
        attempt: int,
        started: datetime,
        retry: RetryPolicy | None,
    ) -> Any:
        policy = retry or DEFAULT_STEP_RETRY
        error = error_from_exception(exc, step=key, attempt=attempt)
        final = (
            isinstance(exc, NonRetriableError | SerializationError | ValidationError)
            and not isinstance(exc, RetryAfter)
        ) or policy.exhausted(attempt)
        if final:
            write = StepWrite(
                key, kind, "failed", None, error, attempts=attempt, started_at=started
            )
            event = EventWrite(
                "step_failed", {"step": key, "attempt": attempt, "error": _brief(error)}
            )
            result = await self._commit(
                Transition(
                    self.run.id, self.token, steps=(write,), events=(event,), step_attempts=1
                )
            )
            stored = _stored(result, key)
            if stored is not None and stored.status == "completed":
                # A concurrent writer recorded a result first; it wins.
                return stored.output
            self.journal[key] = Step(key, kind, "failed", None, error, attempt, started, None)
            raise StepFailed(key, error, attempt)
        delay = exc.delay if isinstance(exc, RetryAfter) else policy.delay(attempt)
        wake_at = self.now() + timedelta(seconds=delay)
        write = StepWrite(key, kind, "retrying", None, error, attempts=attempt, started_at=started)
        event = EventWrite(
            "step_retrying",
            {"step": key, "attempt": attempt, "delay": round(delay, 3), "error": _brief(error)},
        )
        request = self._new_park("retry", wake_at, steps=(write,), events=(event,))
        # The attempt is counted in the park transition.
        self._in_flight -= 1
        self._bump()
        try:
            await self._wait_parked(request)
        finally:
            self._in_flight += 1

    async def sleep_until(self, name: str, when: datetime) -> None:
        """Durable timer; see `StepApi.sleep_until`."""
        key = self.keys.next(name)
        self._enter_step_api(key)
        record = self.journal.get(key)
        if record is not None:
            self._check_kind(key, record, "sleep")
            until = datetime.fromisoformat(record.output["until"])
        else:
            until = when
        if until <= self.now():
            return
        steps: tuple[StepWrite, ...] = ()
        if record is None:
            output = encode({"until": until.isoformat()}, what="sleep")
            steps = (
                StepWrite(
                    key, "sleep", "completed", output, started_at=self.now(), completed_at=until
                ),
            )
        await self._wait_parked(self._new_park("sleep", until, steps=steps))

    async def wait_for_event(
        self, name: str, event: str, match_json: str | None, timeout: float | None
    ) -> Any:
        """Durable wait for a signal or published event; see `StepApi.wait_for_event`."""
        key = self.keys.next(name)
        self._enter_step_api(key)
        record = self.journal.get(key)
        if record is not None:
            self._check_kind(key, record, "wait")
            return record.output
        registered = self.waits.get(key)
        if registered is not None:
            timeout_at = registered.timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                write = StepWrite(key, "wait", "completed", "null", started_at=self.now())
                ev = EventWrite("resumed", {"step": key, "event": event, "timed_out": True})
                self._in_flight += 1
                self._bump()
                try:
                    result = await self._commit(
                        Transition(self.run.id, self.token, steps=(write,), events=(ev,))
                    )
                finally:
                    self._in_flight -= 1
                    self._bump()
                stored = _stored(result, key)
                value = stored.output if stored is not None else None
                self.journal[key] = Step(key, "wait", "completed", value, None, 1, None, None)
                return value
        else:
            timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
        wait = WaitWrite(key, event, match_json, timeout_at)
        await self._wait_parked(self._new_park("event", timeout_at, waits=(wait,)))

    async def run_child(
        self, name: str, workflow: str, input_json: str, timeout: float | None
    ) -> Any:
        """Start a child run once and wait for it; see `StepApi.run_workflow`.

        The child may be a workflow only another process registers: it then waits,
        like any start, for a worker that serves it. With a ``timeout`` the wait is
        registered with that timeout (under the event name ``~child``, which no
        signal can carry); past it the step fails with `ChildTimeout` and the child
        goes on."""
        key = self.keys.next(name)
        self._enter_step_api(key)
        record = self.journal.get(key)
        if record is None:
            registered = self.waits.get(key)
            timeout_at = None if registered is None else registered.timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                record = await self._child_timed_out(key, timeout_at)
        if record is not None:
            self._check_kind(key, record, "child")
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            return record.output
        definition = self.services.registry.get(workflow)
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
        )
        timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
        waits = () if timeout_at is None else (WaitWrite(key, "~child", None, timeout_at),)
        await self._wait_parked(self._new_park("child", None, children=(child,), waits=waits))

    async def _child_timed_out(self, key: str, timeout_at: datetime) -> Step:
        """Record the child step as failed with ChildTimeout (unless the child's own
        result got there first, which then wins) and return the stored row."""
        error = _engine_error(
            ChildTimeout(f"child step {key!r} did not end by {timeout_at.isoformat()}")
        )
        write = StepWrite(key, "child", "failed", None, error, started_at=self.now())
        event = EventWrite("step_failed", {"step": key, "attempt": 1, "error": error})
        self._in_flight += 1
        self._bump()
        try:
            result = await self._commit(
                Transition(self.run.id, self.token, steps=(write,), events=(event,))
            )
        finally:
            self._in_flight -= 1
            self._bump()
        stored = _stored(result, key) or Step(key, "child", "failed", None, error, 1, None, None)
        self.journal[key] = stored
        return stored


async def _within(awaitable: Awaitable[Any], timeout: float | None, key: str) -> Any:
    if timeout is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except TimeoutError:
        raise StepTimeout(f"step {key!r} timed out after {timeout:g}s") from None


def _stored(result: TransitionResult, key: str) -> Step | None:
    for step in result.existing:
        if step.name == key:
            return step
    return None


def _first_real(exc: BaseException) -> BaseException:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if not contains(inner, Suspend):
                return _first_real(inner)
    return exc


def _brief(error: dict[str, Any]) -> dict[str, Any]:
    return {"type": error.get("type"), "message": error.get("message")}


def _park_reason(request: _ParkRequest) -> str:
    """What one park request waits for, in words (for the worker's log)."""
    for event in request.events:
        if event.type == "step_retrying" and isinstance(event.data, dict):
            data = event.data
            error = data.get("error") or {}
            return (
                f"step {data.get('step')!r} attempt {data.get('attempt')} failed "
                f"({error.get('type')}: {error.get('message')}); retry in {data.get('delay')}s"
            )
    if request.waits:
        names = ", ".join(sorted({w.event for w in request.waits if not w.event.startswith("~")}))
        if names:
            return f"waits for event {names}"
    if request.children:
        return "waits for child run(s) " + ", ".join(c.workflow for c in request.children)
    if request.reason == "child":
        return "waits for a child run"
    return f"sleeps ({request.reason})"


def _non_retriable(exc: BaseException) -> bool:
    """NonRetriableError, raised by the body or by a step (seen as StepFailed), ends the
    run with no workflow retry."""
    if isinstance(exc, NonRetriableError):
        return True
    return isinstance(exc, StepFailed) and exc.error.get("type") == NonRetriableError.__name__


def _engine_error(error: Exception) -> dict[str, Any]:
    """The stored form of an error the engine raises: its class name and message."""
    return {"type": type(error).__name__, "message": str(error)}
