"""`perdure.current_step()`: what a step function may ask about the step it runs in."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from .errors import PerdureError

__all__ = ["StepInfo", "current_step", "entered_step"]


@dataclass(frozen=True, slots=True)
class StepInfo:
    """The step a step function runs in.

    ``idempotency_key`` (``"<run id>:<step key>"``) is the same on every attempt and
    every replay: hand it to an external API so a retried call is done once."""

    run_id: str
    key: str
    attempt: int

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.key}"


_current: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar(
    "perdure_current_step", default=None
)


def current_step() -> StepInfo:
    """The `StepInfo` of the step whose function is running (inside ``ctx.step.run``).

    Raises `PerdureError` when called outside a step function."""
    info = _current.get()
    if info is None:
        raise PerdureError("perdure.current_step() is only available inside a step function")
    return info


def entered_step(info: StepInfo) -> contextvars.Token[StepInfo | None]:
    """Mark the current context as running ``info`` (the engine calls this)."""
    return _current.set(info)


def left_step(token: contextvars.Token[StepInfo | None]) -> None:
    """Undo `entered_step`."""
    _current.reset(token)
