"""The callers of `result()` waiting in one event loop share one notice subscription,
and a run's end notice reaches the waiters of that run only: with a listener per
waiter, every notice went to every waiter, so N concurrent waiters cost N callbacks
per notice of any run."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from ._run_ends import RunEnd
from .backends.base import Backend, Unsubscribe
from .records import Notice
from .serialization import decode_stored

__all__ = ["end_told", "waiting_for_end"]

Wake = Callable[[Notice], None]


class _EndWaiters:
    """The waiters of one backend (one event loop), by run id. It holds no reference
    to its backend: the registry's weak key would never die."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[Wake]] = {}
        self._unsubscribe: Unsubscribe | None = None
        self._lock = asyncio.Lock()  # subscribing and unsubscribing

    async def add(self, backend: Backend, run_id: str, wake: Wake) -> Callable[[], Awaitable[None]]:
        """Call ``wake`` with the notice that says the run may have ended (its own end
        notice, or a notice that names no run); returns the coroutine function that
        stops it."""
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
            wake(notice)


_BY_BACKEND: weakref.WeakKeyDictionary[Backend, _EndWaiters] = weakref.WeakKeyDictionary()


async def waiting_for_end(
    backend: Backend, run_id: str, wake: Wake
) -> Callable[[], Awaitable[None]]:
    """Call ``wake`` on the backend's loop with each notice that says run ``run_id``
    may have ended; returns the coroutine function that stops it."""
    waiters = _BY_BACKEND.get(backend)
    if waiters is None:
        waiters = _BY_BACKEND[backend] = _EndWaiters()
    return await waiters.add(backend, run_id, wake)


def end_told(notices: list[Notice], read_attempt: int | None) -> RunEnd | None:
    """How the run ended, if one of ``notices`` (its end notices) says it in full and
    can be trusted: only after a read saw the run live at ``read_attempt``, and only
    of that attempt or a later one (an end of an earlier attempt predates a retry)."""
    if read_attempt is None:
        return None
    for notice in reversed(notices):
        if notice.status is None or notice.attempt is None or notice.attempt < read_attempt:
            continue
        if notice.status == "cancelled":
            return ("cancelled", None, None)
        if notice.outcome_json is None:
            continue
        told = decode_stored(notice.outcome_json)
        if notice.status == "completed":
            return ("completed", told, None)
        if isinstance(told, dict):
            return ("failed", None, told)
    return None
