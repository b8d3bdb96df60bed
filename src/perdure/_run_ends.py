"""In-process hand-off of how runs ended, from a worker to result waiters.

When the worker that ends a run and a caller waiting in `App.result` share a
process, the worker hands the end over directly after its commit, sparing the
waiter the database notice and the read that follows it. Waiters in other processes
(and this one, as a fallback) still learn it from the database.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from .serialization import decode

__all__ = ["RunEnd", "run_ends"]

RunEnd = tuple[str, Any, "dict[str, Any] | None"]  # status, output, error
_Listener = tuple[asyncio.AbstractEventLoop, Callable[[RunEnd], None]]


class _RunEnds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, list[_Listener]] = {}

    def listen(self, run_id: str, callback: Callable[[RunEnd], None]) -> Callable[[], None]:
        """Call ``callback`` on the current loop when a worker of this process ends the run."""
        entry = (asyncio.get_running_loop(), callback)
        with self._lock:
            self._listeners.setdefault(run_id, []).append(entry)

        def stop() -> None:
            with self._lock:
                entries = self._listeners.get(run_id)
                if entries is not None and entry in entries:
                    entries.remove(entry)
                    if not entries:
                        del self._listeners[run_id]

        return stop

    def publish(
        self, run_id: str, status: str, output_json: str | None, error: dict[str, Any] | None
    ) -> None:
        """A worker committed the run's end; tell this process's waiters (if any)."""
        with self._lock:
            entries = self._listeners.pop(run_id, None)
        if not entries:
            return
        ended: RunEnd = (status, decode(output_json), error)
        for loop, callback in entries:
            if not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(callback, ended)
                except RuntimeError:  # the loop closed meanwhile
                    pass


run_ends = _RunEnds()
