"""Test your workflows in seconds: a throwaway database, a worker, and a clock you move.

```python
from perdure.testing import TestEnvironment

def test_trial_expires():
    with TestEnvironment(app) as env:              # a fresh SQLite file, a worker, a clock
        handle = env.start(onboard, {"email": "a@b.c"})
        env.advance("7d")                          # the database clock moves; due timers fire
        assert handle.result(timeout=5) == "nudged"
```

The clock is the database's: every due time, lease, deadline and retry backoff is
judged by it (`Backend.set_clock_offset`), so skipped time is judged exactly as real
time would be, by every process on that database, and the workflow code under test
is the code that runs in production. The pytest plugin (`perdure.pytest_plugin`)
gives the same environment as the fixture ``perdure_env``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import tempfile
from dataclasses import replace
from datetime import datetime, timedelta

from ._connections import Connections
from ._portal import Portal
from .app import App
from .backends.base import Backend
from .durations import Duration, to_seconds
from .errors import BackendError, ConfigurationError, TimeoutError, ValidationError
from .records import WorkflowSummary
from .replay import Divergence, export_run, replay_check
from .worker import Worker

__all__ = ["Divergence", "TestEnvironment", "export_run", "replay_check"]

log = logging.getLogger("perdure.testing")

#: The environment's worker holds its claims this long: time skipped while a step runs
#: never takes a run away from the live worker executing it (heartbeats do as much in
#: production, where time does not jump). 100 years: the furthest the clock can move.
_LEASE = "36500d"
_POLL = 0.01  # seconds between looks at the database while settling
_AUTO_POLL = 0.025  # seconds between looks of the auto-advancer
_STEP = timedelta(milliseconds=1)  # an auto-advance lands this far past the due time


class TestEnvironment(App):
    """An `App` on a throwaway database with your app's workflows, an in-process
    worker, and the database's clock under your control.

    Every client method of `App` works on it (``env.start``, ``env.run``,
    ``env.signal``, ``env.get_run``, ... and their ``*_async`` twins). Use it as a
    context manager, ``with`` in sync code or ``async with`` in async code; leaving it
    stops the worker and deletes the database.

    Args:
        app: your `App`; its workflows and settings are used, never its database.
        database_url: where the environment's database lives. Default: a fresh SQLite
            file in a temporary directory, deleted at the end. A ``postgresql://`` URL
            gets a fresh schema (``perdure_test_<hex>``), dropped at the end, so
            several environments on one server never see each other's runs or clock.
            An ``sqlite:///`` URL uses that file as is, and keeps it (its clock stays
            where the test moved it: the clock never runs backwards).
        auto_advance: jump the clock to the next due time (a timer, a retry backoff,
            an event timeout, a deadline, a delayed start) whenever every run is
            parked, so a workflow of long sleeps finishes by itself.
        worker: start an in-process worker for the app's workflows (default True);
            with False, start your own with ``env.worker(...)``.
    """

    __test__ = False  # a class named Test* is not a test class for pytest

    def __init__(
        self,
        app: App,
        database_url: str | None = None,
        *,
        auto_advance: bool = False,
        worker: bool = True,
    ) -> None:
        if not isinstance(app, App):
            raise ConfigurationError(
                f"TestEnvironment takes your perdure.App, got {type(app).__name__}"
            )
        # Everything the app carries (its registry, and whatever else configures how
        # it stores and shows values), with a database, portal and connections of its own.
        self.__dict__.update(app.__dict__)
        self._temp_dir: str | None = None
        self._own_schema = False
        schema = app.settings.schema
        if database_url is None:
            self._temp_dir = tempfile.mkdtemp(prefix="perdure-test-")
            url = "sqlite:///" + os.path.join(self._temp_dir, "perdure.db")
        else:
            url = database_url
            if not isinstance(url, str) or url.split(":", 1)[0].lower() != "sqlite":
                schema = f"perdure_test_{secrets.token_hex(6)}"
                self._own_schema = True
        try:
            self.settings = replace(app.settings, database_url=url, schema=schema)
            self._connections = Connections(self.settings, self._registry, migrate=True)
        except BaseException:
            if self._temp_dir is not None:
                shutil.rmtree(self._temp_dir, ignore_errors=True)
            raise
        self._portal = Portal(name="perdure-test-portal")
        self.auto_advance = bool(auto_advance)
        self._with_worker = bool(worker)
        self._worker: Worker | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._advancing = 0  # manual advances in progress: the auto-advancer waits

    def __repr__(self) -> str:
        return f"<perdure.testing.TestEnvironment {super().__repr__()[1:-1]}>"

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> TestEnvironment:
        try:
            self._portal.call(self._begin)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._portal.call(self._end)
            self._portal.call(self.close_async)
            self._connections.close_others()
            self._portal.call(self._remove_database)
        finally:
            self._portal.close()

    async def __aenter__(self) -> TestEnvironment:
        try:
            await self._begin()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self._end()
            await self.close_async()
            self._connections.close_others()  # sync calls made meanwhile: the portal's
        finally:
            self._portal.close()
            await self._remove_database()

    async def _begin(self) -> None:
        """Create the database; start the worker and the auto-advancer in this loop."""
        await self._backend()
        if self._with_worker:
            worker = self._worker = self.worker(
                lease=_LEASE, poll_interval="50ms", shutdown_timeout="5s"
            )
            task = asyncio.create_task(worker.serve(), name="perdure-test-worker")
            self._tasks.append(task)
            ready = asyncio.ensure_future(asyncio.to_thread(worker._ready.wait, 60.0))
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # the worker could not start: say why
        if self.auto_advance:
            self._tasks.append(asyncio.create_task(self._auto_advance(), name="perdure-clock"))

    async def _end(self) -> None:
        if self._worker is not None:
            self._worker.stop()
        for task in reversed(self._tasks):
            if task.get_name() == "perdure-clock":
                task.cancel()
        tasks, self._tasks = self._tasks, []
        for task, result in zip(
            tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True
        ):
            if isinstance(result, Exception):
                log.warning("%s ended with %r", task.get_name(), result)

    async def _remove_database(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        if self._own_schema:
            from .backends.postgres._testing import drop_schema

            self._own_schema = False
            await drop_schema(self.settings.database_url, self.settings.schema)

    # ------------------------------------------------------------------ the clock

    async def now_async(self) -> datetime:
        """The database clock: real time plus every `advance` so far."""
        return await (await self._backend()).now()

    def now(self) -> datetime:
        """The database clock; see `now_async`."""
        return self._portal.call(self.now_async)

    async def advance_async(self, duration: Duration, *, timeout: float = 30.0) -> datetime:
        """Move the database clock forward by ``duration`` ("7d", seconds, a timedelta).

        First waits until every run has reached a park or its end (so a timer the
        workflow is about to start counts from before the jump, as it would in real
        time), then moves the clock: every timer, retry backoff, event timeout,
        deadline and delayed start now due fires at once, and the worker is woken.
        Returns once the runs that became due have run to their next park or end
        (with ``worker=False``: at once), with the new time.

        Raises:
            ValidationError: ``duration`` is not a duration of at most 100 years.
            TimeoutError: runs were still running after ``timeout`` real seconds,
                before or after the move (a step that waits on something real).
        """
        seconds = to_seconds(duration, what="duration")
        limit = to_seconds(timeout, what="timeout")
        backend = await self._backend()
        self._advancing += 1
        try:
            await self._settle(backend, limit)
            await self._move(backend, seconds)
            await self._settle(backend, limit)
        finally:
            self._advancing -= 1
        return await backend.now()

    async def _move(self, backend: Backend, seconds: float) -> None:
        for attempt in range(3):
            offset = await backend.clock_offset()
            try:
                await backend.set_clock_offset(offset + seconds)
                return
            except ValidationError:
                if attempt == 2 or await backend.clock_offset() == offset:
                    raise  # not an auto-advance that moved it meanwhile

    def advance(self, duration: Duration, *, timeout: float = 30.0) -> datetime:
        """Move the database clock forward; see `advance_async`."""
        return self._portal.call(self.advance_async, duration, timeout=timeout)

    # ------------------------------------------------------------------ settling

    async def _look(self, backend: Backend) -> _Look:
        """What the runs are doing: read due times first, then statuses, so a run
        claimed between the reads shows as running (never as nothing due)."""
        now = await backend.now()
        pairs = [(d.name, d.version) for d in self._registry.all()]
        due = await backend.next_wake_at(pairs)
        return _Look(now, due, _counts(await backend.workflow_summaries()))

    async def _settle(self, backend: Backend, timeout: float) -> None:
        """Return once every run is parked or ended, seen twice in a row the same."""
        if not self._with_worker:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        previous: _Look | None = None
        while True:
            look = await self._look(backend)
            if look.idle and previous is not None and look.same_as(previous):
                return
            previous = look if look.idle else None
            if loop.time() > give_up:
                raise TimeoutError(
                    f"the runs did not settle within {timeout:g}s "
                    f"({look.running} running, next due at {look.due}): a step may be "
                    "waiting on something real"
                )
            await asyncio.sleep(_POLL)

    async def _auto_advance(self) -> None:
        """Jump to the next due time whenever every run is parked (seen twice)."""
        backend = await self._backend()
        previous: _Look | None = None
        while True:
            await asyncio.sleep(_AUTO_POLL)
            if self._advancing:
                previous = None
                continue
            try:
                look = await self._look(backend)
                parked = look.idle and look.due is not None
                if parked and previous is not None and look.same_as(previous):
                    assert look.due is not None
                    ahead = (look.due - look.now + _STEP).total_seconds()
                    await backend.set_clock_offset(await backend.clock_offset() + ahead)
                    log.debug("auto-advanced the clock by %.3fs to %s", ahead, look.due)
                    previous = None
                    continue
                previous = look if parked else None
            except (BackendError, ValidationError) as exc:  # a manual advance raced it
                log.debug("auto-advance skipped: %s", exc)
                previous = None


class _Look:
    """One look at the database: its now, the earliest due time, runs per status."""

    __slots__ = ("counts", "due", "now")

    def __init__(
        self, now: datetime, due: datetime | None, counts: tuple[tuple[str, int], ...]
    ) -> None:
        self.now, self.due, self.counts = now, due, counts

    @property
    def running(self) -> int:
        return dict(self.counts).get("running", 0)

    @property
    def idle(self) -> bool:
        """Nothing running and nothing due: every run is parked or ended."""
        return self.running == 0 and (self.due is None or self.due > self.now)

    def same_as(self, other: _Look) -> bool:
        return self.due == other.due and self.counts == other.counts


def _counts(summaries: list[WorkflowSummary]) -> tuple[tuple[str, int], ...]:
    totals: dict[str, int] = {}
    for summary in summaries:
        for status, count in summary.counts.items():
            totals[status] = totals.get(status, 0) + count
    return tuple(sorted(totals.items()))
