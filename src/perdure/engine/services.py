"""The seam between the worker and the engine: what a pass needs from its worker
(`RunServices`) and what it reports back (`PassResult`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..records import Claim, ClaimParams, Transition, TransitionResult
from ..telemetry.hooks import NOOP, TelemetryHooks

#: Runs a transactional step's work in one transaction with its transition
#: (`perdure.backends.base.Backend.transact`).
Transact = Callable[[Callable[[Any], Awaitable[Transition]]], Awaitable[TransitionResult]]

if TYPE_CHECKING:
    from ..workflow import Registry


@dataclass(slots=True)
class RunServices:
    """What a pass needs from its worker."""

    commit: Callable[[Transition], Awaitable[TransitionResult]]
    executor: Executor
    registry: Registry
    stopping: Callable[[], bool]
    on_park: Callable[[datetime | None], None] = lambda _at: None
    max_step_attempts: int = 1000
    max_payload_bytes: int = 1024 * 1024
    max_claims_without_progress: int = 10
    #: Cancels a run once its rollbacks ran (`Backend.cancel_run`).
    cancel: Callable[[str], Awaitable[bool]] | None = None
    #: Metrics and spans (`perdure.telemetry`); the default observes nothing.
    telemetry: TelemetryHooks = NOOP
    #: Runs transactional steps (`Backend.transact`); None: they are not available.
    transact: Transact | None = None
    #: Claim on complete: what a task's completing commit may claim (reserving the
    #: worker's slots for it); None: nothing.
    claim_on_complete: Callable[[], ClaimParams | None] = lambda: None
    #: ... and, once that commit ended, starts the tasks it was handed.
    claimed: Callable[[ClaimParams | None, Sequence[Claim]], None] = lambda _p, _c: None


@dataclass(slots=True)
class PassResult:
    """What a pass ended with (for the worker's bookkeeping and tests)."""

    outcome: str  # completed | failed | parked | retrying | released | abandoned
    wake_at: datetime | None = None
    error: dict[str, Any] | None = field(default=None)
    #: why, in words, for the worker's log line (what a parked run waits for, ...)
    reason: str | None = None
    #: how many tasks the pass's commit handed to the worker (claim on complete)
    handed_over: int = 0


class Execution(Protocol):
    """How the worker drives one claimed run: execute a pass, or stop it."""

    @property
    def token(self) -> int:
        """The lease token the pass holds."""

    async def execute(self) -> PassResult:
        """Run the pass and commit its outcome."""

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the pass without writing anything more."""
