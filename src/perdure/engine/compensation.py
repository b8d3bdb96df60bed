"""Compensation: when a run fails for good, the rollbacks of its completed steps run,
newest first, each as a durable step of its own (``~rollback:<step>``), so a crash in
the middle resumes the rollbacks rather than repeating them."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import StepFailed
from ..records import EventWrite
from ..retry import RetryPolicy

ROLLBACK_PREFIX = "~rollback:"


@dataclass(slots=True)
class Compensation:
    """A completed step's rollback, with the output it is called with."""

    key: str
    fn: Callable[[Any], Any]
    output: Any
    #: the rollback's policy (None: the workflow's default step policy)
    retry: RetryPolicy | None = None


#: How a rollback runs: as a durable step under its own key, under its policy.
RunRollback = Callable[[str, Callable[[], Any], RetryPolicy | None], Awaitable[Any]]


async def run_rollbacks(
    compensations: list[Compensation], run_rollback: RunRollback
) -> tuple[list[str], list[str]]:
    """Run the rollbacks newest first; return the steps compensated and those whose
    rollback failed for good (the others still run)."""
    compensated: list[str] = []
    failed: list[str] = []
    for item in reversed(compensations):
        try:
            await run_rollback(
                ROLLBACK_PREFIX + item.key, functools.partial(item.fn, item.output), item.retry
            )
            compensated.append(item.key)
        except StepFailed:
            failed.append(item.key)
    return compensated, failed


def compensated_error(
    error: dict[str, Any], compensated: list[str], failed: list[str]
) -> tuple[dict[str, Any], EventWrite]:
    """The run's final error and the audit event once the rollbacks have run."""
    error = {**error, "compensated": compensated}
    if failed:
        error["compensation_failed"] = failed
    return error, EventWrite("compensated", {"steps": compensated, "failed": failed})
