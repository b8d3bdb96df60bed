"""What every part of a pass shares: the clock, the tasks it owns, and its abandonment.

A pass is abandoned (lease lost, run cancelled, a commit that failed, the worker
stopping hard) by cancelling every task it started; from then on nothing of it is
written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from .suspend import AbandonSignal


class PassControl:
    """The clock, tasks and abandonment of one pass."""

    def __init__(self, claimed_at: datetime, on_abandon: Callable[[], None]) -> None:
        self._claimed_at = claimed_at
        self._mono0 = time.monotonic()
        self._on_abandon = on_abandon
        self.abandoned: str | None = None
        #: The task running the body (or the rollbacks) this pass drives.
        self.body: asyncio.Task[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def now(self) -> datetime:
        """The database clock, estimated from the claim time plus elapsed monotonic time."""
        return self._claimed_at + timedelta(seconds=time.monotonic() - self._mono0)

    def adopt(self) -> None:
        """The current task belongs to the pass (cancelled with it)."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)

    def check(self) -> None:
        """Raise `AbandonSignal` once the pass is abandoned."""
        if self.abandoned is not None:
            raise AbandonSignal(self.abandoned)

    def abandon(self, reason: str) -> None:
        """Stop the pass without writing anything more (the first reason is kept)."""
        if self.abandoned is None:
            self.abandoned = reason
        self._on_abandon()
        self.cancel_tasks()

    def body_alive(self) -> bool:
        """True while the body (or the rollbacks) still runs."""
        return self.body is not None and not self.body.done()

    def cancel_tasks(self) -> None:
        """Cancel every task of the pass but the current one."""
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current and not task.done():
                task.cancel()
        if self.body is not None and self.body is not current and not self.body.done():
            self.body.cancel()
