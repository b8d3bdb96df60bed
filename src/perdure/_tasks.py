"""Stopping background tasks for good."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], *, every: float = 1.0) -> None:
    """Cancel ``tasks`` and wait until each has ended, cancelling again every ``every``
    seconds. A cancellation can be lost below the task (on Python 3.11,
    ``asyncio.wait_for`` drops one that arrives as what it awaits completes): a loop
    that lost it would go on, and keep a stopping worker alive for good. Exceptions
    the tasks ended with are retrieved and dropped."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=every)
    for task in tasks:
        if not task.cancelled():
            task.exception()
