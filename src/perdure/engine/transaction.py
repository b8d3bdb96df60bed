"""The work of a transactional step (``ctx.step.transaction``): call the user's
function with the connection of the transaction that journals the step, then hand the
backend the transition that journals it, so both commit together or not at all.

Exceptions of the user's function (and a value that cannot be stored) leave wrapped in
`FunctionFailed`, which tells them apart from the storage's own failures: the first
are the step's failures (retried by its policy, the transaction rolled back), the
second abandon the pass (a commit whose answer was lost is settled by the next claim's
replay, which finds the row or runs the step again).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..records import StepWrite, Transition
from ..serialization import decode, encode

__all__ = ["FunctionFailed", "StepTransaction"]


class FunctionFailed(Exception):
    """The user's function (or the encoding of its value) raised ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class StepTransaction:
    """One attempt of one transactional step; `work` is what `Backend.transact` runs."""

    run_id: str
    token: int
    key: str
    fn: Callable[[Any], Any]
    attempt: int
    started: datetime
    max_bytes: int
    #: The value the attempt returned, decoded as it is stored (set by `work`).
    value: Any = None

    async def work(self, conn: Any) -> Transition:
        """Call ``fn(conn)`` (awaiting an awaitable result) and build the transition
        that journals its value."""
        try:
            value = self.fn(conn)
            if inspect.isawaitable(value):
                value = await value
            output = encode(
                value, what=f"the output of step {self.key!r}", max_bytes=self.max_bytes
            )
        except Exception as exc:
            raise FunctionFailed(exc) from exc
        self.value = decode(output)
        write = StepWrite(
            self.key, "run", "completed", output, attempts=self.attempt, started_at=self.started
        )
        return Transition(self.run_id, self.token, steps=(write,), step_attempts=1)
