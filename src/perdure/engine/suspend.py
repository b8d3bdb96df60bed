"""Internal control flow that user code cannot swallow.

These derive from `BaseException`, so a workflow author's ``except Exception``
does not catch them (the DBOS precedent; Absurd's ``SuspendTask(Exception)`` is the
counter-example). They never escape the worker.
"""

from __future__ import annotations

from typing import Any


class Suspend(BaseException):
    """Base of the engine's internal signals."""


class ParkSignal(Suspend):
    """The body is parked (sleep, event, retry backoff, child): stop this pass."""


class AbandonSignal(Suspend):
    """The run must be dropped without writing: lease lost, cancelled, or worker stopping hard."""


class ReplayEnd(Suspend):
    """A rollback pass reached work the journal does not hold: the body stops there."""


class FailRunSignal(Suspend):
    """The run must fail for good at once (step limit, deadline, nondeterminism)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", ""))
        self.error = error


def contains(exc: BaseException, kind: type[BaseException]) -> bool:
    """True if ``exc`` is ``kind`` or an exception group holding only such (or nested groups)."""
    if isinstance(exc, kind):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(contains(e, kind) for e in exc.exceptions)
    return False


def find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first ``kind`` inside ``exc`` (itself or nested in exception groups), or None."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find(inner, kind)
            if found is not None:
                return found
    return None


def engine_error(error: Exception) -> dict[str, Any]:
    """The stored form of an error the engine raises: its class name and message."""
    return {"type": type(error).__name__, "message": str(error)}
