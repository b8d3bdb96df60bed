"""One attempt of a DAG-flow task: the worker's `Execution` for a claimed task row.

A task is a run of its own kind (workflow ``<flow>:<step>``, parented to the flow
run), claimed through the one claim query with a lease, fenced and heartbeated like
any run. Its attempt calls the step's handler once with the task's input and ends
with one fenced transition: ``Complete`` (the backend's rule for tasks then records
the output, starts the steps that became ready and ends the flow run when nothing
remains, in the same transaction), ``Retry`` after ``base_delay * 2**attempt``
seconds (a handler error or a timeout while attempts remain), or ``Fail`` (the flow
run fails, its other live tasks are cancelled and their late results fenced out).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, SerializationError
from ..flows.dsl import TaskContext
from ..flows.planner import retry_delay
from ..records import Claim, Complete, Fail, Outcome, Retry, Transition
from ..retry import NonRetriableError
from ..serialization import encode, error_from_exception
from .services import PassResult, RunServices

if TYPE_CHECKING:
    from ..flows.dsl import Flow

__all__ = ["TaskExecution"]

log = logging.getLogger("perdure.flow")


class TaskExecution:
    """Executes one claimed task for one attempt (the worker's `Execution`)."""

    def __init__(self, claim: Claim, flow: Flow, step: str, services: RunServices) -> None:
        self.claim = claim
        self.flow = flow
        self.step = flow.shape.step(step)
        self.services = services
        self._token = claim.lease_token
        self._abandoned: str | None = None
        self._body: asyncio.Future[Any] | None = None
        self._mono0 = time.monotonic()
        run = claim.run
        index = int(run.id.rsplit(":", 1)[1]) if run.id.count(":") >= 2 else 0
        self.ctx = TaskContext(
            run_id=run.parent_id or run.id,
            flow=flow.name,
            step=self.step.name,
            task_index=index,
            attempt=run.attempt,
            task_id=run.id,
        )
        self.ctx.log = logging.LoggerAdapter(
            log, {"run_id": self.ctx.run_id, "step": self.step.name, "task_index": index}
        )

    @property
    def token(self) -> int:
        """The lease token the attempt holds."""
        return self._token

    def _now(self) -> datetime:
        return self.claim.now + timedelta(seconds=time.monotonic() - self._mono0)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the attempt without writing anything more."""
        if self._abandoned is None:
            self._abandoned = reason
        self.ctx.cancelled.set()
        if self._body is not None and not self._body.done():
            self._body.cancel()

    async def execute(self) -> PassResult:
        """Call the handler once and commit how the attempt ended."""
        shape = self.flow.shape
        outcome = await self._attempt(shape.timeout_of(self.step))
        if outcome is None:
            return PassResult("abandoned", reason=self._abandoned)
        # Claim on complete: the commit that completes the task may hand this worker
        # tasks it starts (of the same flow run), saving their claim and wake-up.
        # Only a single-task step with dependents asks: a leaf unlocks nothing, and of a
        # map's many tasks only the last does (the claim loop takes what it unlocks).
        unlocks = (
            isinstance(outcome, Complete)
            and not self.step.is_map
            and bool(shape.dependents(self.step.name))
        )
        handoff = self.services.claim_on_complete() if unlocks else None
        transition = Transition(
            self.claim.run.id, self._token, step_attempts=1, outcome=outcome, claim=handoff
        )
        handed: tuple[Claim, ...] = ()
        try:
            result = await self.services.commit(transition)
            handed = result.claimed
        except BackendError as exc:
            log.warning("task %s: could not commit its end (%s)", self.claim.run.id, exc)
            return PassResult("abandoned", reason="commit failed")
        finally:
            self.services.claimed(handoff, handed)
        if not result.ok:
            return PassResult("abandoned", reason="lease lost")
        if isinstance(outcome, Complete):
            return PassResult("completed", handed_over=len(handed))
        if isinstance(outcome, Retry):
            self.services.on_park(outcome.wake_at)
            return PassResult("retrying", wake_at=outcome.wake_at, error=outcome.error)
        assert isinstance(outcome, Fail)
        return PassResult("failed", error=outcome.error)

    async def _attempt(self, timeout: float) -> Outcome | None:
        handler = self.flow.handlers[self.step.name]
        value = self.claim.run.input
        if (
            self.claim.claims_since_progress > self.services.max_claims_without_progress
            and self.claim.recovered
        ):
            return Fail(
                {
                    "type": "PoisonRun",
                    "message": f"task {self.claim.run.id} was claimed "
                    f"{self.claim.claims_since_progress} times without ending (its workers died)",
                }
            )
        if self.claim.recovered:
            # The previous attempt's lease lapsed (its worker died or hung): that attempt
            # counts, as a timeout, and the task is retried at once or fails.
            error = {
                "type": "TimeoutError",
                "message": f"the lease of step {self.step.name!r}'s task lapsed "
                "(its worker died or stopped answering)",
            }
            if self.claim.run.attempt >= self.flow.shape.max_attempts_of(self.step):
                return Fail({**error, "attempt": self.claim.run.attempt})
            return Retry(self._now(), {**error, "attempt": self.claim.run.attempt})
        try:
            self._body = self._start(handler, value)
            output = await asyncio.wait_for(asyncio.shield(self._body), timeout)
        except asyncio.CancelledError:
            if self._abandoned is not None:
                return None
            raise
        except TimeoutError:
            if self._body is not None:
                self._body.cancel()
            if self._abandoned is not None:
                return None
            error = {
                "type": "TimeoutError",
                "message": f"step {self.step.name!r} did not finish within {timeout:g}s",
            }
            return self._failed(error, retriable=True)
        except Exception as exc:
            if self._abandoned is not None:
                return None
            retriable = not isinstance(exc, NonRetriableError)
            return self._failed(error_from_exception(exc), retriable=retriable)
        if self._abandoned is not None:
            return None
        try:
            text = encode(
                output,
                what=f"the output of step {self.step.name!r} of flow {self.flow.name!r}",
                max_bytes=self.services.max_payload_bytes,
            )
        except SerializationError as exc:
            return self._failed(error_from_exception(exc), retriable=False)
        return Complete(text)

    def _start(self, handler: Any, value: Any) -> asyncio.Future[Any]:
        if inspect.iscoroutinefunction(handler):
            future: asyncio.Future[Any] = asyncio.ensure_future(handler(self.ctx, value))
            return future
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, handler, self.ctx, value)
        return loop.run_in_executor(self.services.executor, call)

    def _failed(self, error: dict[str, Any], *, retriable: bool) -> Outcome:
        attempt = self.claim.run.attempt
        if retriable and attempt < self.flow.shape.max_attempts_of(self.step):
            delay = retry_delay(self.flow.shape.base_delay_of(self.step), attempt)
            error = {**error, "attempt": attempt}
            return Retry(self._now() + timedelta(seconds=delay), error)
        return Fail({**error, "attempt": attempt})
