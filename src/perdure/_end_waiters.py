"""The callers of `result()` waiting in one event loop share one notice subscription,
and a run's end notice reaches the waiters of that run only: with a listener per
waiter, every notice went to every waiter, so N concurrent waiters cost N callbacks
per notice of any run."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from .backends.base import Backend, Unsubscribe
from .records import Notice

__all__ = ["waiting_for_end"]

Wake = Callable[[], None]


class _EndWaiters:
    """The waiters of one backend (one event loop), by run id. It holds no reference
    to its backend: the registry's weak key would never die."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[Wake]] = {}
        self._unsubscribe: Unsubscribe | None = None
        self._lock = asyncio.Lock()  # subscribing and unsubscribing

    async def add(self, backend: Backend, run_id: str, wake: Wake) -> Callable[[], Awaitable[None]]:
        """Call ``wake`` when a notice says the run may have ended (its own end notice,
        or a notice that names no run); returns the coroutine function that stops it."""
        async with self._lock:  # a waiter joins under the lock: the last one leaving
            if self._unsubscribe is None:  # unsubscribes only if nobody joined meanwhile
                self._unsubscribe = await backend.listen(self._on_notice)
            self._waiters.setdefault(run_id, set()).add(wake)

        async def remove() -> None:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[run_id]
            if self._waiters:
                return
            async with self._lock:
                if not self._waiters and self._unsubscribe is not None:
                    unsubscribe, self._unsubscribe = self._unsubscribe, None
                    await unsubscribe()

        return remove

    def _on_notice(self, notice: Notice) -> None:
        if notice.run_id is None:
            # The backend cannot say which run (a listener that reconnected may have
            # missed end notices, whatever its kind): everyone looks.
            wakes = [w for waiters in self._waiters.values() for w in waiters]
        elif notice.kind == "done":
            wakes = list(self._waiters.get(notice.run_id, ()))
        else:
            return
        for wake in wakes:
            wake()


_BY_BACKEND: weakref.WeakKeyDictionary[Backend, _EndWaiters] = weakref.WeakKeyDictionary()


async def waiting_for_end(
    backend: Backend, run_id: str, wake: Wake
) -> Callable[[], Awaitable[None]]:
    """Call ``wake`` on the backend's loop when a notice says run ``run_id`` may have
    ended; returns the coroutine function that stops it."""
    waiters = _BY_BACKEND.get(backend)
    if waiters is None:
        waiters = _BY_BACKEND[backend] = _EndWaiters()
    return await waiters.add(backend, run_id, wake)
