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

from ..errors import SerializationError, StepFailed, StepTimeout, ValidationError
from ..records import EventWrite, Step, StepWrite, Transition
from ..retry import DEFAULT_STEP_RETRY, NonRetriableError, RetryAfter, RetryPolicy
from ..serialization import brief_error, decode, encode, error_from_exception
from ..step_info import StepInfo, entered_step, left_step
from .compensation import Compensation
from .step_base import ReleaseSignal
from .suspend import FailRunSignal, engine_error
from .transaction import FunctionFailed, StepTransaction
from .waiting_steps import TIMED_OUT, WaitingSteps

__all__ = ["TIMED_OUT", "PassSteps", "ReleaseSignal"]


class PassSteps(WaitingSteps):
    """The step kinds of one pass over one run's journal."""

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
        if not self._cursor.ask(key, kind):  # not the next step the journal holds
            await self._cursor.hold(key, kind)
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
        if not self._cursor.ask(key, "run"):  # not the next step the journal holds
            await self._cursor.hold(key, "run")
        record = self._enter(key, "run")
        if record is not None and record.status != "retrying":
            if record.status == "failed":
                raise StepFailed(key, record.error or {}, record.attempts)
            return record.output
        self._stop_if_replay_only()
        transact = self._services.transact
        if transact is None:
            raise FailRunSignal(engine_error(ValidationError("this worker has no transactions")))
        attempt = (record.attempts if record is not None else 0) + 1
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
