"""Waiting for a run's end (`result()`, `run()`).

The callers waiting in one event loop share one notice subscription, and a run's end
notice reaches the waiters of that run only: with a listener per waiter, every notice
went to every waiter, so N concurrent waiters cost N callbacks per notice of any run.
"""

from __future__ import annotations

import asyncio
import builtins
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import ClassVar

from ._client import fetch_run
from ._run_ends import RunEnd, run_ends
from .backends.base import Backend, Unsubscribe
from .errors import TimeoutError as ResultTimeout
from .records import Notice
from .serialization import decode_stored

__all__ = ["RunEndWait", "end_told", "waiting_for_end"]

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


class RunEndWait:
    """Waiting for run ``run_id`` to end: from the moment it is entered, it hears this
    process's workers hand the end over and the end notices of any process. Entered
    before the run is created (`App.run`), it cannot miss the end, so it needs no
    first read of the run."""

    #: The safety-net read's first interval and cap, in seconds, by dialect. The end
    #: notice (or this process's worker) wakes the waiter; the read is there in case a
    #: notice was lost. It backs off, so that many waiters do not each read the
    #: database every interval (on PostgreSQL a listener that reconnects wakes them
    #: all; on SQLite, where another process's commits wake through the change
    #: watcher, the read covers a watcher that could not start).
    polls: ClassVar[dict[str, tuple[float, float]]] = {
        "postgres": (1.0, 30.0),
        "sqlite": (0.1, 2.0),
    }

    def __init__(self, backend: Backend, run_id: str) -> None:
        self._backend = backend
        self._run_id = run_id
        self._ended = asyncio.Event()
        self._handed: list[RunEnd] = []
        self._notices: list[Notice] = []
        self._stop_handed: Callable[[], None] | None = None
        self._unsubscribe: Callable[[], Awaitable[None]] | None = None

    def _on_handed(self, outcome: RunEnd) -> None:
        self._handed.append(outcome)
        self._ended.set()

    def _on_notice(self, notice: Notice) -> None:
        self._notices.append(notice)
        self._ended.set()

    async def __aenter__(self) -> RunEndWait:
        self._stop_handed = run_ends.listen(self._run_id, self._on_handed)  # this process
        try:
            self._unsubscribe = await waiting_for_end(self._backend, self._run_id, self._on_notice)
        except BaseException:
            self._stop_handed()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._unsubscribe is not None:
            await self._unsubscribe()
        if self._stop_handed is not None:
            self._stop_handed()

    async def outcome(self, limit: float | None, *, fresh: bool = False) -> RunEnd:
        """How the run ended: (status, output, error). ``fresh``: the run was created
        after this wait was entered, so no end notice can predate it and nothing needs
        reading until a notice or the poll says so. Raises perdure's `TimeoutError`
        after ``limit`` seconds, `RunNotFound` for no such run."""
        backend, loop = self._backend, asyncio.get_running_loop()
        poll, max_poll = self.polls.get(backend.dialect, self.polls["postgres"])
        give_up = None if limit is None else loop.time() + limit
        read_attempt = 0 if fresh else None  # the attempt the last read saw live
        unread = fresh
        while True:
            told = self._handed[0] if self._handed else end_told(self._notices, read_attempt)
            self._notices.clear()
            if told is not None:  # handed over, or the end notice said it all: no read
                return told
            if not unread:
                run = await fetch_run(backend, self._run_id)
                if run.status in ("completed", "failed", "cancelled"):
                    return (run.status, run.output, run.error)
                read_attempt = run.attempt
            unread = False
            wait, poll = poll, min(poll * 2, max_poll)
            if give_up is not None:
                remaining = give_up - loop.time()
                if remaining <= 0:
                    raise ResultTimeout(f"run {self._run_id} did not end within {limit:g}s")
                wait = min(wait, remaining)
            try:
                await asyncio.wait_for(self._ended.wait(), wait)
            except builtins.TimeoutError:
                pass
            self._ended.clear()
