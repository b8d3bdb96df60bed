"""The SQLite backend: the storage contract over one file, from any event loop.

All sqlite3 work happens on one thread that the backend owns (a single-worker
executor), on one connection opened in that thread in autocommit mode. Every write
transaction begins with ``BEGIN IMMEDIATE``; that, not any lock in this process, is
what keeps several processes on the same file correct. The async methods submit a
plain function to the thread and await it, so one backend serves every event loop
(`shareable_across_loops`).

Notices stay inside the process (SQLite has no LISTEN/NOTIFY): every backend on the
same file shares one hub, and other processes find the work by polling.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from ...errors import BackendError, ConfigurationError, ReadOnlyDatabase
from ...flows.definition import FlowShape
from ...records import (
    Claim,
    ClaimParams,
    CreateResult,
    DeferParams,
    Event,
    ListRunsParams,
    NewRun,
    Page,
    Published,
    QueueGauge,
    Run,
    Schedule,
    SignalOutcome,
    Step,
    Transition,
    TransitionResult,
    WorkerInfo,
    WorkflowRecord,
    WorkflowSummary,
)
from ...schedules import ScheduleSpec
from ...validation import check_int
from .._clock import check_offset
from .._sqlfiles import pending_migrations
from ..base import Backend, NoticeCallback, TransactionWork, Unsubscribe
from . import (
    _claims,
    _flows,
    _operations,
    _producers,
    _reads,
    _registry,
    _schedules,
    _transact,
    _workers,
)
from ._convert import to_dt
from ._files import ReadOnlySession, check_schema, create_private, open_read_only, refused_write
from ._hub import hub_for
from ._json import json_contains
from ._session import MIGRATIONS, QUERIES, Session, is_busy, split_statements

__all__ = ["SQLiteBackend"]

log = logging.getLogger("perdure.backends.sqlite")

P = ParamSpec("P")
T = TypeVar("T")

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_BUSY_ATTEMPTS = 6
_CACHED_STATEMENTS = 512
#: Bytes of WAL file left after SQLite restarts the log: a reader that held its
#: snapshot for long makes the WAL grow meanwhile, and without a limit the file would
#: keep that size after (SQLite reuses it, never shrinks it).
WAL_SIZE_LIMIT = 16 * 1024 * 1024


class SQLiteBackend(Backend):
    """The storage contract on an SQLite file (the embedded default).

    Args:
        path: the database file (created if missing; not ``:memory:``).
        synchronous: ``PRAGMA synchronous``: ``NORMAL`` (default; with WAL an
            application crash loses nothing, an OS crash or power loss may roll back
            the last commits) or ``FULL`` (no acknowledged commit is lost).
        busy_timeout_ms: how long a statement waits for another process's write lock.
        clock: the database clock in Unix seconds; every "now" comes from it.
        read_only: open the file with SQLite's read-only mode (it must exist; it may
            be a file or directory this process cannot write): no migration, and a
            write raises `ReadOnlyDatabase`.
    """

    dialect = "sqlite"
    shareable_across_loops = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 30_000,
        clock: Callable[[], float] = time.time,
        read_only: bool = False,
    ) -> None:
        mode = str(synchronous).upper()
        if mode not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}"
            )
        check_int(busy_timeout_ms, "busy_timeout_ms", minimum=0, error=ConfigurationError)
        # Absolute now: the connection opens later, on another thread.
        self.path = Path(os.path.abspath(os.fspath(path)))
        self._synchronous = mode
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self.read_only = read_only
        self._hub = hub_for(self.path)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._session: Session | None = None  # touched only on the executor thread
        self._subscriptions: set[int] = set()

    def __repr__(self) -> str:
        return f"SQLiteBackend({str(self.path)!r})"

    # ------------------------------------------------------------------ plumbing

    def _executor_for_call(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                if self._closed:
                    raise BackendError(f"the SQLite backend on {self.path} is closed")
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="perdure-sqlite"
                )
            return self._executor

    async def _call(
        self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        executor = self._executor_for_call()
        try:
            future = executor.submit(functools.partial(self._run, fn, *args, **kwargs))
        except RuntimeError as exc:  # shut down between the check and the submit
            raise BackendError(f"the SQLite backend on {self.path} is closed") from exc
        return await asyncio.wrap_future(future)

    def _connect(self) -> Session:
        timeout = self._busy_timeout_ms / 1000
        if self.read_only:
            conn, immutable = open_read_only(
                self.path, timeout=timeout, cached_statements=_CACHED_STATEMENTS
            )
            if immutable:
                self._hub.unchanging()
        else:
            create_private(self.path)
            conn = sqlite3.connect(
                self.path,
                timeout=timeout,
                isolation_level=None,
                cached_statements=_CACHED_STATEMENTS,
            )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            if not self.read_only:
                self._set_up_writes(conn)
            conn.execute("PRAGMA foreign_keys = ON")
            conn.create_function("json_contains", 2, json_contains, deterministic=True)
            conn.create_function("new_lease_token", 0, _claims.new_lease_token)
        except BaseException:
            conn.close()
            raise
        if self.read_only:
            return ReadOnlySession(conn, self._clock, self._hub.commit, self.path)
        return Session(conn, self._clock, self._hub.commit)

    def _set_up_writes(self, conn: sqlite3.Connection) -> None:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning(
                "SQLite file %s is not in WAL mode (journal_mode=%s): is it on a network "
                "filesystem? Concurrent workers will be slow or fail.",
                self.path,
                mode,
            )
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")

    def _run(
        self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn`` on the backend thread: connect if needed, retry busy errors,
        wrap driver errors, and send the notices of a committed operation."""
        delay = 0.02
        for attempt in range(1, _BUSY_ATTEMPTS + 1):
            session = self._session
            try:
                if session is None:
                    session = self._session = self._connect()
                session.notices = []
                result = fn(session, *args, **kwargs)
            except sqlite3.Error as exc:
                if session is not None:
                    self._rollback(session)
                refused = refused_write(exc, self.path, self.read_only)
                if refused is not None:
                    raise refused from exc
                busy = isinstance(exc, sqlite3.OperationalError) and is_busy(exc)
                if busy and attempt < _BUSY_ATTEMPTS:
                    log.debug("SQLite busy (%s); retrying in %.2fs", exc, delay)
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise BackendError(f"SQLite error on {self.path}: {exc}") from exc
            except BaseException:
                if session is not None:
                    self._rollback(session)
                raise
            notices, session.notices = session.notices, []
            self._hub.publish(notices)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _rollback(session: Session) -> None:
        try:
            if session.conn.in_transaction:
                session.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        session.notices = []

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        with self._lock:
            self._closed = False
        await self._call(_noop)

    async def migrate(self) -> int:
        if self.read_only:
            raise ReadOnlyDatabase(
                f"{self.path} is open read-only: migrating writes to it",
                str(self.path),
                opened_read_only=True,
            )
        return await self._call(_migrate)

    async def check_schema(self) -> int:
        return await self._call(check_schema, self.path)

    async def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            self._closed = True
            tokens, self._subscriptions = self._subscriptions, set()
        for token in tokens:
            self._hub.remove(token)
        if executor is None:
            return
        try:
            await asyncio.wrap_future(executor.submit(self._close_session))
        finally:
            executor.shutdown(wait=False)
        # Its thread lets go of the close call (and so of this backend) only after the
        # answer reached us: wait for the thread to end, so nothing keeps a closed
        # backend alive.
        await asyncio.to_thread(executor.shutdown, wait=True)

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except sqlite3.Error as exc:
                log.warning("closing %s failed: %s", self.path, exc)

    async def now(self) -> datetime:
        return to_dt(await self._call(Session.clock))

    async def clock_offset(self) -> float:
        return await self._call(Session.clock_offset)

    async def set_clock_offset(self, seconds: float) -> None:
        check_offset(seconds, 0.0)  # a bad value is refused before the thread is asked
        await self._call(_set_clock_offset, seconds)

    # ------------------------------------------------------------------ registry

    async def register_workflows(self, workflows: Sequence[WorkflowRecord]) -> None:
        if workflows:
            await self._call(_registry.register_workflows, list(workflows))

    async def get_workflow(self, name: str, version: int | None = None) -> WorkflowRecord | None:
        return await self._call(_registry.get_workflow, name, version)

    # ------------------------------------------------------------------ flows

    async def register_flows(self, shapes: Sequence[FlowShape]) -> None:
        if shapes:
            await self._call(_flows.register_flows, list(shapes))

    async def get_flow(self, name: str, version: int | None = None) -> FlowShape | None:
        return await self._call(_flows.get_flow, name, version)

    async def start_flow(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        return await self._call(_flows.start_flow, new, claim)

    # ------------------------------------------------------------------ producers

    async def create_run(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        return await self._call(_producers.create_run, new, claim)

    async def cancel_run(self, run_id: str, rollback: bool = False) -> bool:
        return await self._call(_producers.cancel_run, run_id, rollback)

    async def deliver_signal(
        self, run_id: str, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> SignalOutcome:
        return await self._call(
            _producers.deliver_signal, run_id, event, payload_json, idempotency_key
        )

    async def publish(
        self, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> Published:
        return await self._call(_producers.publish, event, payload_json, idempotency_key)

    async def put_schedule(self, spec: ScheduleSpec, next_at: datetime) -> Schedule:
        return await self._call(_schedules.put_schedule, spec, next_at)

    async def get_schedule(self, name: str) -> Schedule | None:
        return await self._call(_schedules.get_schedule, name)

    async def list_schedules(self) -> list[Schedule]:
        return await self._call(_schedules.list_schedules)

    async def pause_schedule(self, name: str, paused: bool, next_at: datetime | None) -> bool:
        return await self._call(_schedules.pause_schedule, name, paused, next_at)

    async def delete_schedule(self, name: str) -> bool:
        return await self._call(_schedules.delete_schedule, name)

    async def due_schedules(self, limit: int = 100) -> list[Schedule]:
        return await self._call(_schedules.due_schedules, limit)

    async def advance_schedule(
        self, name: str, from_at: datetime, to_at: datetime, fired_at: datetime | None
    ) -> bool:
        return await self._call(_schedules.advance_schedule, name, from_at, to_at, fired_at)

    async def subscribe_topic(self, pattern: str, workflow: str) -> bool:
        return await self._call(_registry.subscribe_topic, pattern, workflow)

    async def unsubscribe_topic(self, pattern: str, workflow: str) -> bool:
        return await self._call(_registry.unsubscribe_topic, pattern, workflow)

    async def list_subscriptions(self) -> list[tuple[str, str]]:
        return await self._call(_registry.list_subscriptions)

    # ------------------------------------------------------------------ reads

    async def get_run(self, run_id: str) -> Run | None:
        return await self._call(_reads.get_run, run_id)

    async def list_runs(self, params: ListRunsParams) -> Page[Run]:
        return await self._call(_reads.list_runs, params)

    async def get_steps(self, run_id: str, include_superseded: bool = False) -> list[Step]:
        if include_superseded:
            return await self._call(_operations.get_steps_with_superseded, run_id)
        return await self._call(_flows.steps_or_journal, run_id)

    async def get_call_order(self, run_id: str) -> tuple[str, ...]:
        return await self._call(_call_order, run_id)

    # ------------------------------------------------------------------ operations

    async def retry_run(self, run_id: str, from_step: str | None, by: str) -> Run:
        return await self._call(_operations.retry_run, run_id, from_step, by)

    async def fork_run(
        self,
        source_id: str,
        new_id: str,
        before_step: str | None,
        input_json: str | None,
        version: int | None,
        by: str,
    ) -> Run:
        args = (source_id, new_id, before_step, input_json, version, by)
        return await self._call(_operations.fork_run, *args)

    async def get_events(self, run_id: str) -> list[Event]:
        return await self._call(_reads.get_events, run_id)

    async def workflow_summaries(self) -> list[WorkflowSummary]:
        return await self._call(_reads.workflow_summaries)

    # ------------------------------------------------------------------ workers

    async def register_worker(self, info: WorkerInfo) -> None:
        await self._call(_workers.register_worker, info)

    async def deregister_worker(self, worker_id: str) -> None:
        await self._call(_workers.deregister_worker, worker_id)

    async def list_workers(self, seen_within: float) -> list[WorkerInfo]:
        return await self._call(_reads.list_workers, seen_within)

    async def claim_runs(self, params: ClaimParams) -> list[Claim]:
        return await self._call(_workers.claim_runs, params)

    async def release_orphans(self, worker_id: str, held: Sequence[str]) -> int:
        return await self._call(_workers.release_orphans, worker_id, list(held))

    async def handed_at_start(self, run_id: str, worker_id: str) -> tuple[Claim, ...]:
        return await self._call(_claims.handed_at_start, run_id, worker_id)

    async def extend_leases(
        self, worker_id: str, held: Sequence[tuple[str, int]], lease_seconds: float
    ) -> set[str]:
        return await self._call(_workers.extend_leases, worker_id, list(held), lease_seconds)

    async def apply(self, transitions: Sequence[Transition]) -> list[TransitionResult]:
        if not transitions:
            return []
        return await self._call(_workers.apply, list(transitions))

    async def transact(self, work: TransactionWork) -> TransitionResult:
        return await self._call(_transact.transact, work, contextvars.copy_context())

    async def defer_unavailable(self, params: DeferParams) -> list[str]:
        return await self._call(_workers.defer_unavailable, params)

    async def park_undecodable(
        self, run_id: str, lease_token: int, worker_id: str, reason: str
    ) -> datetime | None:
        return await self._call(_workers.park_undecodable, run_id, lease_token, worker_id, reason)

    async def next_wake_at(self, workflows: Sequence[tuple[str, int]]) -> datetime | None:
        if not workflows:
            return None
        return await self._call(_workers.next_wake_at, list(workflows))

    # ------------------------------------------------------------------ maintenance

    async def sweep(self, max_retention_days: int, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        return await self._call(_sweep, max_retention_days, limit)

    async def queue_gauges(self) -> list[QueueGauge]:
        return await self._call(_queue_gauges)

    # ------------------------------------------------------------------ notices

    async def watch_run(self, run_id: str, watcher: str, seconds: float | None) -> None:
        return None  # progress notices stay in this process and cost a run nothing

    async def listen(
        self, callback: NoticeCallback, *, ends: bool = True, progress: bool = False
    ) -> Unsubscribe:
        token = self._hub.add(asyncio.get_running_loop(), callback, progress=progress)
        with self._lock:
            self._subscriptions.add(token)

        async def unsubscribe() -> None:
            self._hub.remove(token)
            with self._lock:
                self._subscriptions.discard(token)

        return unsubscribe


# --------------------------------------------------------------------------- thread-side


def _noop(s: Session) -> None:
    return None


def _migrate(s: Session) -> int:
    latest = MIGRATIONS[-1].version if MIGRATIONS else 0
    with s.write() as now:
        s.conn.execute(QUERIES["create_schema_version"])
        s.conn.execute(QUERIES["create_clock"])
        s.conn.execute(QUERIES["init_clock"])
        row = s.one(QUERIES["current_schema_version"], {})
        current = 0 if row is None else int(row["version"])
        for migration in pending_migrations(MIGRATIONS, current):
            for statement in split_statements(migration.sql):
                s.conn.execute(statement)
            s.run(QUERIES["insert_schema_version"], {"version": migration.version, "now": now})
            log.info("applied SQLite migration %s", migration.name)
    return max(current, latest)


def _call_order(s: Session, run_id: str) -> tuple[str, ...]:
    row = s.one(QUERIES["get_call_order"], {"run_id": run_id})
    return () if row is None else tuple(json.loads(row["call_order"]))


def _set_clock_offset(s: Session, seconds: float) -> None:
    with s.write():
        s.run(QUERIES["set_clock_offset"], {"offset": check_offset(seconds, s.clock_offset())})
    s.notify("wake", None)  # due times moved: workers look again


def _queue_gauges(s: Session) -> list[QueueGauge]:
    rows = s.all(QUERIES["queue_gauges"], {"now": s.clock()})
    counts = ("running", "due", "lag", "pending", "waiting")
    return [QueueGauge(r["workflow"], *(max(0, r[c] or 0) for c in counts)) for r in rows]


def _sweep(s: Session, max_retention_days: int, limit: int) -> int:
    with s.write() as now:
        deleted = s.run(
            QUERIES["sweep_runs"], {"now": now, "max_days": max_retention_days, "limit": limit}
        )
        before = now - max(0, max_retention_days) * 86400.0
        s.run(QUERIES["sweep_published"], {"before": before})
        s.run(QUERIES["sweep_workers"], {"before": before})
        return deleted
