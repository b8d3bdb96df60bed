"""The four step kinds a body calls through ``ctx.step``: run, sleep, wait for an
event, and run a child workflow. `PassSteps` implements `perdure.context.StepRuntime`.

Each call allocates its key synchronously (`KeyAllocator`), so parallel steps get the
same keys on every pass. A key found in the journal returns its recorded value without
running anything: replay is one dictionary lookup per step, linear in the journal.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from ..codec import unreadable
from ..errors import (
    ChildTimeout,
    NonDeterminismError,
    SerializationError,
    StepFailed,
    StepLimitExceeded,
    StepTimeout,
    ValidationError,
)
from ..ids import new_run_id
from ..limits import flow_control
from ..records import (
    Claim,
    EventWrite,
    NewRun,
    Received,
    Run,
    Step,
    StepWrite,
    Transition,
    TransitionResult,
    Wait,
    WaitWrite,
)
from ..retry import DEFAULT_STEP_RETRY, NonRetriableError, RetryAfter, RetryPolicy
from ..serialization import brief_error, decode, encode, error_from_exception
from ..step_info import StepInfo, entered_step, left_step
from ..telemetry.hooks import NOOP_PASS, PassHooks
from .barrier import ParkBarrier
from .commits import PassCommits
from .compensation import Compensation
from .control import PassControl
from .keys import KeyAllocator
from .services import RunServices
from .suspend import FailRunSignal, ReplayEnd, Suspend, engine_error
from .transaction import FunctionFailed, StepTransaction

#: The journal output of every sibling of a wait for several events that timed out.
TIMED_OUT = {"~timed_out": True}


class ReleaseSignal(Suspend):
    """The worker is stopping: take no new step, give the run back."""


class PassSteps:
    """The step kinds of one pass over one run's journal."""

    def __init__(
        self,
        claim: Claim,
        services: RunServices,
        control: PassControl,
        barrier: ParkBarrier,
        commits: PassCommits,
        telemetry: PassHooks = NOOP_PASS,
    ) -> None:
        self.run: Run = claim.run
        self._telemetry = telemetry
        self._traceparent = claim.traceparent
        self._token = claim.lease_token
        self._services = services
        self._control = control
        self._barrier = barrier
        self._commits = commits
        self.journal: dict[str, Step] = {s.name: s for s in claim.journal}
        # Journaled steps the body has yet to reach in this pass: while any remain, it
        # replays (ctx.log is silent).
        self._to_replay = {k for k, s in self.journal.items() if s.status != "retrying"}
        #: The key of the step the body reached last (ctx.log tags records with it).
        self.step_key: str | None = None
        self._waits: dict[str, Wait] = {w.key: w for w in claim.waits}
        self._keys = KeyAllocator()
        self._step_attempts = claim.step_attempts
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

    # ------------------------------------------------------------------ run

    def run_step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        rollback: Callable[[Any], Any] | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Run (or replay) one step; see `StepApi.run`. (Returns `_run`'s coroutine
        itself: one frame less on every step.)"""
        return self._run(self._keys.next(name), "run", fn, retry, timeout, rollback)

    def run_rollback(self, key: str, fn: Callable[[], Any]) -> Coroutine[Any, Any, Any]:
        """Run (or replay) one rollback as a durable step of its own."""
        return self._run(key, "rollback", fn, None, None, None)

    async def _run(
        self,
        key: str,
        kind: str,
        fn: Callable[[], Any],
        retry: RetryPolicy | None,
        timeout: float | None,
        rollback: Callable[[Any], Any] | None,
    ) -> Any:
        record = self._enter(key, kind)
        if record is not None and record.status != "retrying":
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            if rollback is not None:
                self.compensations.append(Compensation(key, rollback, record.output))
            return record.output
        attempt = (record.attempts if record is not None else 0) + 1
        self._stop_if_replay_only()
        self._check_may_run()
        with self._barrier.working():
            if self._commits.has_deferred:  # the previous step's row is durable first
                await self._commits.commit(Transition(self.run.id, self._token))
            started = self.now()
            self._step_attempts += 1
            token = entered_step(StepInfo(self.run.id, key, attempt))
            observed = self._telemetry.step_began(key, kind, attempt)
            try:
                value = await self._invoke(fn, timeout, key)
                output = encode(
                    value,
                    what=f"the output of step {key!r}",
                    max_bytes=self._services.max_payload_bytes,
                )
            except asyncio.CancelledError as exc:
                self._telemetry.step_ended(observed, exc)
                raise
            except Exception as exc:
                self._telemetry.step_ended(observed, exc)
                return await self._step_error(key, kind, exc, attempt, started, retry)
            finally:
                left_step(token)
            self._telemetry.step_ended(observed, None)
            # Only this worker writes "run" rows of this run (fenced), so the value is
            # final: hand it to the body now and commit the row with the next transition.
            self._commits.defer(
                StepWrite(key, kind, "completed", output, attempts=attempt, started_at=started)
            )
            value = decode(output)
            self.journal[key] = Step(key, kind, "completed", value, None, attempt, started, None)
            if rollback is not None:
                self.compensations.append(Compensation(key, rollback, value))
            return value

    async def transaction(
        self, name: str, fn: Callable[[Any], Any], *, retry: RetryPolicy | None = None
    ) -> Any:
        """Run (or replay) one transactional step; see `StepApi.transaction`. Journaled
        as a ``run`` step: it replays like one."""
        key = self._keys.next(name)
        record = self._enter(key, "run")
        if record is not None and record.status != "retrying":
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            return record.output
        transact = self._services.transact
        if transact is None:
            raise FailRunSignal(engine_error(ValidationError("this worker has no transactions")))
        attempt = (record.attempts if record is not None else 0) + 1
        self._stop_if_replay_only()
        self._check_may_run()
        with self._barrier.working():
            if self._commits.has_deferred:  # the previous step's row is durable first
                await self._commits.commit(Transition(self.run.id, self._token))
            started = self.now()
            self._step_attempts += 1
            call = StepTransaction(
                self.run.id, self._token, key, fn, attempt, started,
                self._services.max_payload_bytes,
            )  # fmt: skip
            token = entered_step(StepInfo(self.run.id, key, attempt))
            try:
                result = await self._commits.transact(transact, call.work)
            except FunctionFailed as failed:
                return await self._step_error(key, "run", failed.error, attempt, started, retry)
            except ValidationError as exc:  # fn ended the transaction itself: a final failure
                return await self._step_error(key, "run", exc, attempt, started, retry)
            finally:
                left_step(token)
        stored = self._stored(result, key)
        if stored is not None:  # a row was there first: it wins, and nothing was written
            self.journal[key] = stored
            if stored.status == "failed":
                raise StepFailed(key, stored.error or {}, stored.attempts)
            return stored.output
        self.journal[key] = Step(key, "run", "completed", call.value, None, attempt, started, None)
        return call.value

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

    async def _invoke(self, fn: Callable[[], Any], timeout: float | None, key: str) -> Any:
        if _is_async_callable(fn):
            awaitable: Awaitable[Any] = fn()
        else:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, fn)
            awaitable = loop.run_in_executor(self._services.executor, call)
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
                "step_failed", {"step": key, "attempt": attempt, "error": brief_error(error)}
            )
            stored = await self._record(write, event, step_attempts=1)
            if stored.status == "completed":
                return stored.output  # a concurrent writer recorded a result first; it wins
            raise StepFailed(key, error, attempt)
        delay = exc.delay if isinstance(exc, RetryAfter) else policy.delay(attempt)
        write = StepWrite(key, kind, "retrying", None, error, attempts=attempt, started_at=started)
        event = EventWrite(
            "step_retrying",
            {
                "step": key,
                "attempt": attempt,
                "delay": round(delay, 3),
                "error": brief_error(error),
            },
        )
        wake_at = self.now() + timedelta(seconds=delay)
        self._telemetry.step_retried(key)
        # The attempt is counted in the park transition.
        request = self._barrier.request("retry", wake_at, steps=(write,), events=(event,))
        with self._barrier.paused():
            await self._barrier.park(request)

    # ------------------------------------------------------------------ sleep

    async def sleep_until(self, name: str, when: datetime) -> None:
        """Durable timer; see `StepApi.sleep_until`."""
        key = self._keys.next(name)
        record = self._enter(key, "sleep")
        until = when if record is None else datetime.fromisoformat(record.output["until"])
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
        self._stop_if_replay_only()
        await self._barrier.park(self._barrier.request("sleep", until, steps=steps))

    # ------------------------------------------------------------------ wait for an event

    async def wait_for_event(
        self, name: str, event: str, match_json: str | None, timeout: float | None
    ) -> Any:
        """Durable wait for a signal or published event; see `StepApi.wait_for_event`."""
        key = self._keys.next(name)
        record = self._enter(key, "wait")
        if record is not None:
            return record.output
        registered = self._waits.get(key)
        if registered is not None:
            timeout_at = registered.timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                write = StepWrite(key, "wait", "completed", "null", started_at=self.now())
                ev = EventWrite("resumed", {"step": key, "event": event, "timed_out": True})
                return (await self._record(write, ev)).output
        else:
            timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
        wait = WaitWrite(key, event, match_json, timeout_at)
        self._stop_if_replay_only()
        await self._barrier.park(self._barrier.request("event", timeout_at, waits=(wait,)))

    async def wait_for_any(
        self, name: str, events: list[str], match_json: str | None, timeout: float | None
    ) -> Received | None:
        """Durable wait for the first of several events; see `StepApi.wait_for_event`.

        One wait is registered per event, under ``<key>@<event>``; the database drops
        the others when one is resolved, so the signals they would have taken stay
        buffered. A timeout journals every sibling as timed out."""
        key = self._keys.next(name)
        self._enter(key, "wait")
        siblings = [f"{key}@{event}" for event in events]
        self._to_replay.difference_update(siblings)
        for event, sibling in zip(events, siblings, strict=True):
            record = self.journal.get(sibling)
            if record is not None and record.status != "retrying":
                return None if record.output == TIMED_OUT else Received(event, record.output)
        registered = [self._waits[k] for k in siblings if k in self._waits]
        if registered:
            timeout_at = registered[0].timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                return await self._wait_timed_out(key, events, siblings)
        else:
            timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
        waits = tuple(
            WaitWrite(sibling, event, match_json, timeout_at)
            for event, sibling in zip(events, siblings, strict=True)
        )
        self._stop_if_replay_only()
        await self._barrier.park(self._barrier.request("event", timeout_at, waits=waits))

    async def _wait_timed_out(
        self, key: str, events: list[str], siblings: list[str]
    ) -> Received | None:
        marker = encode(TIMED_OUT, what="timeout")
        writes = tuple(
            StepWrite(k, "wait", "completed", marker, started_at=self.now()) for k in siblings
        )
        event = EventWrite("resumed", {"step": key, "events": events, "timed_out": True})
        with self._barrier.working():
            result = await self._commits.commit(
                Transition(self.run.id, self._token, steps=writes, events=(event,))
            )
        # A signal resolved one of them first: it wins.
        for name, sibling in zip(events, siblings, strict=True):
            stored = self._stored(result, sibling)
            if stored is not None and stored.output != TIMED_OUT:
                self.journal[sibling] = stored
                return Received(name, stored.output)
        for sibling in siblings:
            self.journal[sibling] = Step(
                sibling, "wait", "completed", TIMED_OUT, None, 1, None, None
            )
        return None

    # ------------------------------------------------------------------ child runs

    async def run_child(
        self, name: str, workflow: str, input_json: str, timeout: float | None
    ) -> Any:
        """Start a child run once and wait for it; see `StepApi.run_workflow`.

        The child may be a workflow only another process registers: it then waits,
        like any start, for a worker that serves it. With a ``timeout`` the wait is
        registered with that timeout (under the event name ``~child``, which no
        signal can carry); past it the step fails with `ChildTimeout` and the child
        goes on."""
        key = self._keys.next(name)
        record = self._enter(key, "child")
        if record is None:
            registered = self._waits.get(key)
            timeout_at = None if registered is None else registered.timeout_at
            if timeout_at is not None and timeout_at <= self.now():
                record = await self._child_timed_out(key, timeout_at)
        if record is not None:
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            return record.output
        definition = self._services.registry.get(workflow)
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
            # The child's spans join this pass's trace (or the run's stored one).
            traceparent=self._telemetry.traceparent() or self._traceparent,
        )
        if definition is not None and definition.limits.declared:
            child = flow_control(child, definition.limits, None, None)
        timeout_at = None if timeout is None else self.now() + timedelta(seconds=timeout)
        waits = () if timeout_at is None else (WaitWrite(key, "~child", None, timeout_at),)
        self._stop_if_replay_only()
        request = self._barrier.request("child", None, children=(child,), waits=waits)
        await self._barrier.park(request)

    async def _child_timed_out(self, key: str, timeout_at: datetime) -> Step:
        """Record the child step as failed with ChildTimeout (unless the child's own
        result got there first, which then wins) and return the stored row."""
        error = engine_error(
            ChildTimeout(f"child step {key!r} did not end by {timeout_at.isoformat()}")
        )
        write = StepWrite(key, "child", "failed", None, error, started_at=self.now())
        event = EventWrite("step_failed", {"step": key, "attempt": 1, "error": error})
        return await self._record(write, event)

    # ------------------------------------------------------------------ shared

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


def _changed_kind(key: str, recorded: str, called: str) -> dict[str, Any]:
    return engine_error(
        NonDeterminismError(
            f"step {key!r} was recorded as a {recorded!r} step but the workflow now calls "
            f"it as a {called!r} step: the code changed under a running run; give the new "
            "code a new workflow version"
        )
    )


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (
        callable(fn) and inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004
    )


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
