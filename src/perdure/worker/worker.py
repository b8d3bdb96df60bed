"""The worker: claim due runs, execute them, renew their leases, stop gracefully.

Three ways to run one (DESIGN §4):

* ``app.worker(...).run()``: foreground; SIGTERM/SIGINT stop it gracefully (a second
  signal stops it at once); SIGUSR1 logs what it is waiting on (`dump`).
* ``with app.worker(...):``: in the background, on the app's own event loop (the
  thread that serves its sync API), for tests and scripts: a start and its worker
  share one loop, with no hop between threads.
* ``await app.worker(...).serve()``: inside the caller's event loop.

The claim loop claims as many due runs as it has free slots with one query, then
sleeps until a notice (a start, signal or cancel from any process), a freed slot while
a run may be due, the earliest wake time it knows of, or the poll interval (only a
fallback). Starts made in this process may skip it: see `handoff`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .._logging import quiet_repeats
from .._tasks import cancel_and_wait
from ..backends.base import Backend
from ..durations import Duration
from ..engine.flow_task import TaskExecution
from ..engine.run_log import log_run
from ..engine.runner import Runner
from ..engine.services import RunServices
from ..errors import BackendError, ConfigurationError
from ..ids import new_worker_id
from ..limits import claim_limits
from ..maintenance import fire_schedules_forever, sweep_forever, sweep_once
from ..records import (
    Claim,
    ClaimParams,
    Notice,
    WorkerInfo,
    WorkflowLimits,
)
from ..telemetry.endpoint import serve_metrics
from ..telemetry.live import current as current_telemetry
from .active import ActiveRuns
from .committer import Committer
from .dump import dump_tasks
from .handoff import HandOffs, LocalStarts
from .idle import BUSY_CLAIM_DELAY, defer_unavailable, release_orphans, time_to_next_wake
from .options import check_options
from .poison import fail_poison
from .startup import StoppedAtStart, until_reachable
from .undecodable import park_undecodable, unreadable_reason
from .wakes import WakeTimes

T = TypeVar("T")

if TYPE_CHECKING:
    from .._connections import Connections
    from .._portal import Portal
    from ..settings import Settings
    from ..workflow import Registry

log = logging.getLogger("perdure.worker")

__all__ = ["Worker"]


class Worker:
    """Executes runs of the app's workflows. Create it with `App.worker`.

    Args:
        registry: the workflows it may serve.
        connections: the app's database backends.
        settings: the app's settings.
        concurrency: how many runs it executes at once. Default 10.
        workflows: glob patterns of workflow names to serve (``["billing.*"]``);
            default: every workflow registered on the app.
        lease: how long a claim lasts without a heartbeat. Default ``"30s"``.
            Heartbeats renew leases every third of it while the worker lives.
        poll_interval: the fallback polling period (a duration). Default: 1 s on
            PostgreSQL (wake-ups come by LISTEN/NOTIFY), 0.1 s on SQLite (where a
            change watcher wakes it within milliseconds for other processes' work).
        shutdown_timeout: how long a graceful stop waits for in-flight steps before
            cancelling them and releasing their runs. Default: the lease.
        metrics_port: serve Prometheus metrics at ``http://metrics_host:port/metrics``
            (0: any free port, see `metrics_port`); default: none.
        metrics_host: the address the metrics endpoint listens on. Default ``127.0.0.1``
            (``0.0.0.0`` for a scraper on another host).
        local_starts: the app's workers in this process (`App.worker` passes it): a
            start made in this process while this worker has a free slot is handed to
            it already leased.
    """

    def __init__(
        self,
        registry: Registry,
        connections: Connections,
        settings: Settings,
        *,
        concurrency: int = 10,
        workflows: Iterable[str] | str | None = None,
        lease: Duration = "30s",
        poll_interval: Duration | None = None,
        shutdown_timeout: Duration | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        local_starts: LocalStarts | None = None,
        portal: Portal | None = None,
    ) -> None:
        options = check_options(
            concurrency=concurrency,
            workflows=workflows,
            lease=lease,
            poll_interval=poll_interval,
            shutdown_timeout=shutdown_timeout,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
        )
        self._metrics_at = options.metrics_at
        #: the port the metrics endpoint listens on, once the worker serves
        self.metrics_port: int | None = None
        self._registry = registry
        self._connections = connections
        self._settings = settings
        self.id = new_worker_id()
        self.concurrency = options.concurrency
        self.patterns = options.patterns
        self.lease = options.lease
        self._poll_interval = options.poll_interval
        self.shutdown_timeout = options.shutdown_timeout
        self._local_starts = local_starts
        self._handoffs: HandOffs | None = None
        self._active = ActiveRuns(on_end=self._on_run_end)
        self._maybe_due = True  # a due run may wait unclaimed: a run's end wakes the loop
        self._new_work = False  # a wake notice came since the last claim
        self._own_loop = False  # run() runs in a loop of its own
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self._hard = False
        self._wakes = WakeTimes()  # wake times of runs this worker parked
        self._clock_offset = 0.0  # database clock minus local clock, seconds
        self._limits: tuple[WorkflowLimits, ...] = ()  # of the served workflows
        self._portal = portal  # the app's loop thread, for `with worker:`
        self._serving: concurrent.futures.Future[None] | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.claimed = 0
        #: how long a run of an unknown version may stay due before it is deferred
        self.unavailable_grace = 5.0
        self._deferred_at = -1e9
        self._side: set[asyncio.Task[None]] = set()  # poison runs being failed or parked
        self._backend: Backend | None = None  # once it serves

    # ------------------------------------------------------------------ public lifecycle

    def run(self) -> None:
        """Run in the foreground until SIGTERM/SIGINT (graceful), then return."""
        self._own_loop = True
        asyncio.run(self._serve_with_signals())

    async def serve(self) -> None:
        """Run inside the current event loop until `stop` is called (or the task is cancelled)."""
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        try:
            await self._serve()
        except BaseException as exc:
            self._failure = exc
            raise
        finally:
            self._ready.set()

    def stop(self, *, hard: bool = False) -> None:
        """Ask the worker to stop: take nothing new, let in-flight runs reach their next
        commit and release them. ``hard=True`` cancels in-flight steps at once.
        Safe to call from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stopping = True
            self._hard = self._hard or hard
            return
        try:
            loop.call_soon_threadsafe(self._request_stop, hard)
        except RuntimeError:  # loop closed meanwhile
            self._stopping = True

    def __enter__(self) -> Worker:
        if self._portal is None:
            raise RuntimeError("`with worker:` needs a worker made by app.worker()")
        if self._portal.in_own_loop():
            raise RuntimeError("inside the app's own loop, use `await worker.serve()`")
        self._serving = self._portal.submit(self.serve())
        self._ready.wait()
        if self._failure is not None:  # serve() ended with it
            raise self._failure
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        serving, self._serving = self._serving, None
        if serving is not None:
            try:
                serving.result()
            except BaseException:
                log.exception("worker %s stopped with an error", self.id)

    @property
    def handed_starts(self) -> int:
        """How many runs (a DAG flow's first tasks included) starts made in this
        process handed to this worker already leased (free slots took them without a
        claim)."""
        return 0 if self._handoffs is None else self._handoffs.handed

    @property
    def active_runs(self) -> list[str]:
        """Ids of the runs this worker is executing now."""
        return self._active.ids()

    # ------------------------------------------------------------------ internals

    async def _serve_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        try:
            await self.serve()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                loop.remove_signal_handler(sig)

    def _on_signal(self) -> None:
        if self._stopping:
            log.warning("second stop signal: stopping worker %s now", self.id)
            self._request_stop(True)
        else:
            log.info("stopping worker %s gracefully (signal again to stop at once)", self.id)
            self._request_stop(False)

    def _request_stop(self, hard: bool) -> None:
        self._stopping = True
        if hard and not self._hard:
            self._hard = True
            self._active.cancel_all("worker stopped")
        if self._wakeup is not None:
            self._wakeup.set()

    async def _start_up(self) -> tuple[Backend, tuple[tuple[str, int], ...]]:
        """Open the database and register this worker; the served (name, version) pairs."""
        backend = await self._until_reachable(self._connections.backend)
        self._backend = backend
        definitions = self._registry.select(self.patterns)
        tasks = self._registry.task_pairs(self.patterns)  # DAG-flow steps with a handler
        if not definitions and not tasks:
            wanted = (
                "any workflow"
                if self.patterns is None
                else f"workflows matching {list(self.patterns)}"
            )
            raise ConfigurationError(
                f"this worker has no {wanted} to serve: register workflows with @app.workflow "
                "before starting the worker"
            )
        pairs = (*((d.name, d.version) for d in definitions), *tasks)
        self._limits = claim_limits(
            [*((d.name, d.limits) for d in definitions), *self._registry.task_limits(self.patterns)]
        )
        db_now = await self._until_reachable(backend.now)
        self._clock_offset = (db_now - datetime.now(UTC)).total_seconds()
        info = WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            workflows=tuple(f"{n}@{v}" for n, v in pairs),
            concurrency=self.concurrency,
            started_at=db_now,
            last_seen_at=db_now,
        )
        await self._until_reachable(lambda: backend.register_worker(info))
        return backend, pairs

    async def _until_reachable(self, attempt: Callable[[], Awaitable[T]]) -> T:
        return await until_reachable(attempt, stopping=lambda: self._stopping, sleep=self._sleep)

    def _poll(self, backend: Backend) -> float:
        if self._poll_interval is not None:
            return self._poll_interval
        return 0.1 if backend.dialect == "sqlite" else 1.0

    def _db_now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._clock_offset)

    async def _serve(self) -> None:
        quiet_repeats()
        try:
            backend, pairs = await self._start_up()
        except StoppedAtStart:
            return  # stopped before the database answered
        try:
            endpoint = await serve_metrics(backend, [n for n, _v in pairs], self._metrics_at)
            self.metrics_port = None if endpoint is None else endpoint.port
        except ConfigurationError:
            await self._deregister(backend)
            raise
        ends = bool(self._limits) or not self._own_loop  # on a shared loop, for its waiters too
        unsubscribe = await backend.listen(self._on_notice, ends=ends)
        # A commit is retried through a database outage of up to two minutes (or four
        # leases): the fence makes retrying safe, and the run stays this worker's.
        committer = Committer(backend, give_up=max(120.0, 4 * self.lease))
        executor = ThreadPoolExecutor(
            max_workers=min(64, max(8, 2 * self.concurrency)), thread_name_prefix="perdure-step"
        )
        settings = self._settings
        telemetry = current_telemetry()
        # Claim on complete leases tasks outside the limited claim: never a limited
        # step's (the claim takes those, within their limits).
        limited = {lim.workflow for lim in self._limits}
        handoffs = HandOffs(
            self.id,
            [p for p in self._registry.task_pairs(self.patterns) if p[0] not in limited],
            self.lease,
            self.concurrency,
            running=lambda: len(self._active),
            start=lambda claim: self._start(claim, services),
            wake=self._wake,
            stopping=lambda: self._stopping,
            starts=[p for p in pairs if self._registry.get(*p) and p[0] not in limited],
        )
        services = RunServices(
            commit=committer.submit,
            executor=executor,
            registry=self._registry,
            stopping=lambda: self._stopping,
            on_park=self._note_wake,
            max_step_attempts=settings.max_step_attempts,
            max_payload_bytes=settings.max_payload_bytes,
            max_claims_without_progress=settings.max_claims_without_progress,
            cancel=backend.cancel_run,
            telemetry=telemetry,
            transact=backend.transact,
            claim_on_complete=handoffs.reserve,
            claimed=handoffs.settle,
        )
        side_tasks = [
            asyncio.create_task(self._heartbeat_loop(backend), name="perdure-heartbeat"),
            asyncio.create_task(
                sweep_forever(
                    lambda: sweep_once(backend, settings, telemetry), settings.sweep_interval
                ),
                name="perdure-sweeper",
            ),
            asyncio.create_task(
                fire_schedules_forever(
                    backend, self._registry, self._settings, self._poll(backend)
                ),
                name="perdure-schedules",
            ),
        ]
        log.info(
            "worker %s serving %s with concurrency %d on %s",
            self.id,
            ", ".join(f"{n}@{v}" for n, v in pairs),
            self.concurrency,
            backend.dialect,
        )
        self._handoffs = handoffs
        if self._local_starts is not None:
            self._local_starts.add(handoffs)
        self._ready.set()
        try:
            await self._claim_loop(backend, pairs, services, handoffs)
        finally:
            if self._local_starts is not None:
                self._local_starts.remove(handoffs)
            await self._shutdown(backend, committer, handoffs)
            await cancel_and_wait(side_tasks)
            await unsubscribe()
            if endpoint is not None:
                await endpoint.close()
            await self._deregister(backend)
            executor.shutdown(wait=False, cancel_futures=True)
            if self._own_loop:  # in a caller's loop, the app's backend is the caller's too
                await self._connections.release_loop()
            log.info("worker %s stopped", self.id)

    async def _deregister(self, backend: Backend) -> None:
        try:
            await backend.deregister_worker(self.id)
        except BackendError as exc:
            log.warning("could not deregister worker %s: %s", self.id, exc)

    async def _claim_loop(
        self,
        backend: Backend,
        pairs: tuple[tuple[str, int], ...],
        services: RunServices,
        handoffs: HandOffs,
    ) -> None:
        assert self._wakeup is not None
        poll = self._poll(backend)
        failures = 0
        while not self._stopping:
            self._wakeup.clear()
            free = handoffs.hold_free()  # slots neither running nor held by a hand-off
            timeout = poll
            if free <= 0:
                self._maybe_due = True  # what becomes due meanwhile waits for a slot
            if free > 0:
                try:
                    try:
                        if failures:
                            await release_orphans(backend, self.id, self._active.ids())
                        # After an outage, renew this worker's leases before claiming, or
                        # it would take its own runs back (their leases expired meanwhile).
                        if self._active.renewal_owed and not await self._renew(backend):
                            raise BackendError("the database is still unreachable")
                        claims = await backend.claim_runs(
                            ClaimParams(self.id, pairs, free, self.lease, self._limits)
                        )
                        for claim in claims:  # running before their slots are released
                            self._clock_offset = (claim.now - datetime.now(UTC)).total_seconds()
                            self._start(claim, services)
                    finally:
                        handoffs.release(free)
                    failures = 0
                except Exception as exc:  # a storage error, or a bug: never the worker's end
                    failures += 1
                    delay = min(5.0, 0.1 * 2**failures)
                    if isinstance(exc, BackendError):
                        log.warning("claim failed (%s); retrying in %.1fs", exc, delay)
                    else:
                        log.exception("claim failed unexpectedly; retrying in %.1fs", delay)
                    await self._sleep(delay)
                    continue
                if len(claims) == free:
                    continue  # there may be more; loop and wait for a slot
                self._maybe_due = False  # until a notice, a timer or the poll says otherwise
                if not claims:
                    now = time.monotonic()
                    if now - self._deferred_at >= self.unavailable_grace:  # throttled
                        self._deferred_at = now
                        await defer_unavailable(backend, self.id, pairs, self.unavailable_grace)
                timeout = await time_to_next_wake(
                    backend, pairs, poll, self._db_now(), self._wakes, ask=not claims
                )
                if self._limits:  # a run a limit holds back is due: no busy loop on it
                    timeout = max(timeout, min(poll, 0.25))
            await self._sleep(timeout)

    async def _sleep(self, timeout: float) -> None:
        assert self._wakeup is not None
        if timeout > 0 and not self._wakeup.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
        if self._new_work and len(self._active):  # busy: gather starts (BUSY_CLAIM_DELAY)
            await asyncio.sleep(BUSY_CLAIM_DELAY)
        self._new_work = False

    def _note_wake(self, when: datetime | None) -> None:
        if when is not None and self._wakes.add(when) and self._wakeup is not None:
            self._wakeup.set()  # an earlier wake than the loop is sleeping towards

    def _start(self, claim: Claim, services: RunServices) -> None:
        if claim.poison is not None:
            self._side_task(fail_poison(claim, services))
            return
        unreadable = unreadable_reason(claim, self._backend)
        if unreadable is not None:
            assert self._backend is not None
            parking = park_undecodable(claim, unreadable, self._backend, self.id, self._note_wake)
            self._side_task(parking)
            return
        definition = self._registry.get(claim.run.workflow, claim.run.version)
        run = claim.run
        served = None if definition is not None else self._registry.task(run.workflow, run.version)
        if served is not None:  # a DAG-flow task: one attempt of its step's handler
            flow, step = served
            self._active.start(claim.run.id, TaskExecution(claim, flow, step, services))
            self.claimed += 1
            return
        if definition is None:  # the pairs filter makes this impossible; be safe anyway
            log.error("claimed run %s of unknown workflow %s", claim.run.id, claim.run.workflow)
            return
        if claim.recovered:
            log_run(
                logging.WARNING,
                claim.run,
                "recovered",
                "its previous worker's lease expired (the worker died or lost the database); "
                "replaying its journal",
            )
        self._active.start(claim.run.id, Runner(claim, definition, services))
        self.claimed += 1

    def _side_task(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    def _on_notice(self, notice: Notice) -> None:
        # With limits, another worker's run ending may free a slot (this worker's own
        # ends woke the claim loop already).
        freed = notice.kind == "done" and not self._active.ended_here(notice.run_id)
        if notice.kind == "wake":
            self._maybe_due = self._new_work = True
        if notice.kind == "cancel" and notice.run_id is not None:
            self._active.cancel(notice.run_id, "cancelled")
        elif self._wakeup is not None and (notice.kind == "wake" or (freed and self._limits)):
            self._wakeup.set()

    async def _heartbeat_loop(self, backend: Backend) -> None:
        """Renew the leases of the runs this worker executes, every third of the lease.

        While the database is unreachable the runs are kept, not dropped: a renewal
        takes effect whenever the run still carries this worker's token, expired or
        not, so after a restart the worker carries on with every run nobody else
        claimed meanwhile, and gives up only those (the fence would refuse their
        writes anyway)."""
        interval = max(0.05, self.lease / 3)
        while True:
            await asyncio.sleep(interval)
            await self._renew(backend)

    async def _renew(self, backend: Backend) -> bool:
        return await self._active.renew(backend, self.id, self.lease)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _on_run_end(self) -> None:
        # A freed slot matters when a run may be due, or a limit may hold one back.
        if self._maybe_due or self._limits:
            self._wake()

    async def _shutdown(self, backend: Backend, committer: Committer, handoffs: HandOffs) -> None:
        await self._active.give_back(backend, wait=None if self._hard else self.shutdown_timeout)
        await committer.drain()
        await handoffs.starts_settled(timeout=10)
        if len(self._active):  # runs handed over late (claim on complete, starts)
            await self._active.give_back(backend, wait=None)
