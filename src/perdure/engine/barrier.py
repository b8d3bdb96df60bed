"""The park barrier: a pass parks once every branch of the body waits.

A body may run steps in parallel (``asyncio.gather``). A call that must wait (sleep,
event, retry backoff, child) registers a `ParkRequest` and blocks; it must not end the
pass while another branch is still executing a step, or that step's result would be
lost. The barrier counts the branches at work (`working`), and once none is and the
loop has settled (nothing changed over a few loop turns), `drive` wakes every blocked
call with `ParkSignal` so the pass ends with one transition that carries all their
rows and waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from ..records import EventWrite, NewRun, StepWrite, WaitWrite
from .suspend import ParkSignal

#: When requests of several kinds park together, the run's park reason is the first.
_REASON_ORDER = ("retry", "sleep", "child", "event")


@dataclass(slots=True)
class ParkRequest:
    """One blocked call: why it waits, until when, and the rows its park writes."""

    reason: str
    wake_at: datetime | None
    future: asyncio.Future[None]
    steps: tuple[StepWrite, ...] = ()
    waits: tuple[WaitWrite, ...] = ()
    children: tuple[NewRun, ...] = ()
    events: tuple[EventWrite, ...] = ()

    def describe(self) -> str:
        """What this call waits for, in words (for the worker's log)."""
        for event in self.events:
            if event.type == "step_retrying" and isinstance(event.data, dict):
                data = event.data
                error = data.get("error") or {}
                return (
                    f"step {data.get('step')!r} attempt {data.get('attempt')} failed "
                    f"({error.get('type')}: {error.get('message')}); retry in {data.get('delay')}s"
                )
        if self.waits:
            names = ", ".join(sorted({w.event for w in self.waits if not w.event.startswith("~")}))
            if names:
                return f"waits for event {names}"
        if self.children:
            return "waits for child run(s) " + ", ".join(c.workflow for c in self.children)
        if self.reason == "child":
            return "waits for a child run"
        return f"sleeps ({self.reason})"


class ParkBarrier:
    """Counts the branches at work and parks the pass when none is."""

    def __init__(self) -> None:
        self.requests: list[ParkRequest] = []
        self._working = 0
        self._version = 0
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._at_work = _Working(self)

    def working(self) -> _Working:
        """``with barrier.working():`` a branch executes a step or commits: the pass
        must not park meanwhile. (A plain object, not a generator: it is on every
        step's path.)"""
        return self._at_work

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Inside `working`: this branch now waits (a retry backoff), so it no longer
        holds the pass open."""
        self._working -= 1
        self._bump()
        try:
            yield
        finally:
            self._working += 1

    def request(self, reason: str, wake_at: datetime | None, **rows: Any) -> ParkRequest:
        """A park request for the calling branch (rows: steps, waits, children, events)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        return ParkRequest(reason=reason, wake_at=wake_at, future=future, **rows)

    async def park(self, request: ParkRequest) -> NoReturn:
        """Block the calling branch until the pass parks."""
        self.requests.append(request)
        self._bump()
        await request.future
        raise ParkSignal()  # the future only ever ends with ParkSignal

    async def hold(self, request: ParkRequest) -> None:
        """Block the calling branch until ``request.future`` is given a result (after
        `release`: it goes on) or the pass parks (`ParkSignal`)."""
        self.requests.append(request)
        self._bump()
        await request.future

    def release(self, request: ParkRequest) -> None:
        """Forget a held request (its branch goes on)."""
        self.requests.remove(request)
        self._bump()

    def reset(self) -> None:
        """Forget the requests of a body that ended (compensation drives a new one)."""
        self.requests = []

    @property
    def reason(self) -> str:
        """The park reason recorded on the run."""
        return min(
            (r.reason for r in self.requests),
            key=lambda r: _REASON_ORDER.index(r) if r in _REASON_ORDER else len(_REASON_ORDER),
        )

    async def drive(self, body: asyncio.Task[Any]) -> None:
        """Wait for the body to end, parking it once it is quiescent."""
        while not body.done():
            # Cleared before the state is read: a change from here on is seen, even
            # one made while the barrier waits for the loop to settle.
            self._changed.clear()
            if self.requests and self._working == 0:
                if await self._settled():
                    await self._park(body)
                    return
                continue  # it changed meanwhile: read it again
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({body, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()

    async def _park(self, body: asyncio.Task[Any]) -> None:
        for request in self.requests:
            if not request.future.done():
                request.future.set_exception(ParkSignal())
        done, _ = await asyncio.wait({body}, timeout=30)
        if not done:  # the body swallowed ParkSignal and went on: stop it
            body.cancel()
            await asyncio.wait({body})

    async def quiesce(self) -> None:
        """Let steps still executing in other branches reach their commit."""
        try:
            await asyncio.wait_for(self._idle.wait(), 30)
        except TimeoutError:
            pass

    async def _settled(self) -> bool:
        mark = self._version
        for _ in range(4):
            await asyncio.sleep(0)
        return mark == self._version and self._working == 0

    def _bump(self) -> None:
        self._version += 1
        if self._working:
            self._idle.clear()
        else:
            self._idle.set()
        if self.requests:
            self._changed.set()


class _Working:
    """The context manager of `ParkBarrier.working`."""

    __slots__ = ("_barrier",)

    def __init__(self, barrier: ParkBarrier) -> None:
        self._barrier = barrier

    def __enter__(self) -> None:
        barrier = self._barrier
        barrier._working += 1
        barrier._bump()

    def __exit__(self, *exc_info: object) -> None:
        barrier = self._barrier
        barrier._working -= 1
        barrier._bump()
