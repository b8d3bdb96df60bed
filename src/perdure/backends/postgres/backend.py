"""The PostgreSQL backend: the storage contract on psycopg 3 and a connection pool.

Round trips (the hot paths):

* `claim_runs`: one statement (lock with SKIP LOCKED, update, log events, return
  each run with its journal and waits as JSON).
* `apply`: one pipelined transaction for the whole batch (BEGIN, one statement per
  transition, COMMIT, then one sync: one round trip). Transitions without waits or children are one
  data-modifying statement each; the others call the plpgsql ``apply_transition``.
  Only when a journal key already held a final row does a second, read-only query
  fetch those rows (after commit: final rows never change).
* producers (`create_run`, `deliver_signal`, `publish`, `cancel_run`): one call of
  the plpgsql function that SQL producers call too.

Every SQL text lives in ``sql/queries.sql`` and ``sql/migrations``; the schema name
is the only dynamic identifier and goes through `_ident`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..._version import __version__
from ...errors import BackendError, ConfigurationError, SchemaVersionError, ValidationError
from ...records import (
    RUN_STATUSES,
    Claim,
    ClaimParams,
    CreateResult,
    DeferParams,
    Event,
    ListRunsParams,
    NewRun,
    Notice,
    Page,
    Published,
    Run,
    SignalOutcome,
    Step,
    Transition,
    TransitionResult,
    WorkerInfo,
    WorkflowRecord,
    WorkflowSummary,
)
from ...serialization import decode_stored
from .._cursor import decode_cursor, encode_cursor
from .._sqlfiles import function_set, load_migrations, load_queries
from ..base import Backend, NoticeCallback, Unsubscribe
from ._convert import (
    claim_from_row,
    dumps,
    run_from_row,
    step_from_row,
    transition_params,
    translate_error,
)
from .notify import Listener

T = TypeVar("T")

__all__ = ["PostgresBackend"]

log = logging.getLogger("perdure.backends.postgres")

QUERIES = load_queries(__package__)
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RETRYABLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_RETRY_ATTEMPTS = 8
_START_BATCH = 100  # starts committed together at most


def _ident(query: LiteralString, name: str) -> sql.Composed:
    """``query`` with ``{ident}`` replaced by the quoted identifier ``name`` (the only
    dynamic SQL: the schema name or a notice channel derived from it)."""
    return sql.SQL(query).format(ident=sql.Identifier(name))


def _pairs(workflows: Sequence[tuple[str, int]]) -> dict[str, Any]:
    return {"workflows": [w for w, _ in workflows], "versions": [v for _, v in workflows]}


class PostgresBackend(Backend):
    """Storage on PostgreSQL: one schema, a connection pool, LISTEN/NOTIFY notices.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL.
        schema: the schema holding every perdure object (lowercase name).
        min_size, max_size: connection pool bounds.

    An instance belongs to the event loop that opened it.
    """

    dialect = "postgres"
    shareable_across_loops = False

    def __init__(
        self, dsn: str, *, schema: str = "perdure", min_size: int = 1, max_size: int = 10
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"schema {schema!r} is not a valid name: use lowercase letters, digits and _"
            )
        if min_size < 0 or max_size < 1 or min_size > max_size:
            raise ConfigurationError(f"bad pool size: min_size={min_size}, max_size={max_size}")
        self._dsn = dsn
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._pool: AsyncConnectionPool | None = None
        self._listener: Listener | None = None
        self._callbacks: list[NoticeCallback] = []
        self._starts: list[tuple[NewRun, asyncio.Future[CreateResult]]] = []
        self._start_flusher: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None

    @property
    def schema(self) -> str:
        """The schema this backend uses."""
        return self._schema

    def _connect_kwargs(self) -> dict[str, Any]:
        options = f"-c search_path={self._schema} -c TimeZone=UTC"
        try:
            given = conninfo_to_dict(self._dsn).get("options")
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(f"invalid PostgreSQL connection string: {exc}") from None
        if given:
            options = f"{given} {options}"
        return {"autocommit": True, "options": options, "prepare_threshold": 5}

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self._pool is not None:
            return
        # One direct attempt first: an unreachable server or a bad password is one
        # clear error at once, not the pool's seconds of retries and warnings.
        try:
            probe = await psycopg.AsyncConnection.connect(
                self._dsn, connect_timeout=5, **self._connect_kwargs()
            )
        except psycopg.Error as exc:
            raise BackendError(f"cannot connect to PostgreSQL: {_one_line(exc)}") from exc
        await probe.close()
        pool = AsyncConnectionPool(
            self._dsn,
            kwargs=self._connect_kwargs(),
            min_size=self._min_size,
            max_size=self._max_size,
            open=False,
            name=f"perdure-{self._schema}",
            configure=_configure,
            # Fail a checkout after 10 s and retry a lost connection for at most 5 s
            # at a time, so callers' own backoff (capped at 5 s) drives recovery after
            # a database restart instead of the pool's doubling delays.
            timeout=10.0,
            reconnect_timeout=5.0,
        )
        try:
            await pool.open(wait=True, timeout=15.0)
        except PoolTimeout:
            await pool.close()
            raise BackendError("cannot connect to PostgreSQL: the pool did not start") from None
        self._pool = pool

    async def close(self) -> None:
        flusher = self._start_flusher
        if flusher is not None and not flusher.done():
            await asyncio.wait({flusher}, timeout=10)  # starts in flight get their answer
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        checker, self._checker = self._checker, None
        if checker is not None and not checker.done():
            checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checker
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        self._callbacks.clear()

    async def migrate(self) -> int:
        migrations = load_migrations(__package__)
        latest = migrations[-1].version if migrations else 0
        async with self._connection() as conn, conn.transaction():
            await conn.execute(QUERIES["migrate_lock"], {"schema": self._schema})
            cur = await conn.execute(QUERIES["schema_exists"], {"schema": self._schema})
            if not (await cur.fetchone() or (False,))[0]:
                await conn.execute(_ident(QUERIES["create_schema"], self._schema))
            await conn.execute(_ident(QUERIES["set_local_search_path"], self._schema))
            await conn.execute(QUERIES["create_schema_version"])
            cur = await conn.execute(QUERIES["schema_version"])
            row = await cur.fetchone()
            current = int(row[0]) if row else 0
            if current > latest:
                raise SchemaVersionError(
                    f"database schema version {current} is newer than this perdure "
                    f"(knows up to {latest}): upgrade perdure"
                )
            for migration in migrations:
                if migration.version > current:
                    log.info("applying migration %s to schema %s", migration.name, self._schema)
                    await conn.execute(migration.sql)
                    await conn.execute(QUERIES["record_migration"], {"version": migration.version})
            await self._apply_functions(conn)
        return max(current, latest)

    async def _apply_functions(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Apply the function files when their text differs from what the schema last
        applied, unless a newer perdure applied it (a rolling deploy's old process)."""
        functions = function_set(__package__)
        cur = await conn.execute(QUERIES["functions_applied"])
        row = await cur.fetchone()
        if row is not None and (
            row[0] == functions.digest or _version_key(row[1]) > _version_key(__version__)
        ):
            return
        log.info("applying the functions of schema %s", self._schema)
        for _name, text in functions.files:
            await conn.execute(text)
        await conn.execute(
            QUERIES["record_functions"], {"digest": functions.digest, "version": __version__}
        )

    async def now(self) -> datetime:
        row = await self._one(QUERIES["now"])
        assert row is not None
        value: datetime = row[0]
        return value

    # ------------------------------------------------------------------ plumbing

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pool connection; driver errors leave as perdure errors (cause chained)."""
        pool = self._pool
        if pool is None:
            raise BackendError("the PostgreSQL backend is not open (call open() first)")
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            self._after_failure(exc)
            raise translate_error(exc) from exc

    def _after_failure(self, exc: psycopg.Error) -> None:
        """After a connection failure, let the pool weed out its dead connections."""
        pool = self._pool
        if not isinstance(exc, psycopg.OperationalError) or isinstance(exc, PoolTimeout):
            return
        if pool is None or (self._checker is not None and not self._checker.done()):
            return
        with contextlib.suppress(RuntimeError):
            self._checker = asyncio.get_running_loop().create_task(self._check_pool(pool))

    @staticmethod
    async def _check_pool(pool: AsyncConnectionPool) -> None:
        with contextlib.suppress(Exception):
            await pool.check()

    async def _one(
        self, query: LiteralString, params: dict[str, Any] | None = None
    ) -> tuple[Any, ...] | None:
        rows = await self._all(query, params)
        return rows[0] if rows else None

    async def _all(
        self,
        query: LiteralString,
        params: dict[str, Any] | None = None,
        *,
        prepare: bool = True,
        unsynced: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Run one autocommit statement and fetch its rows. A deadlock or serialization
        failure rolled the statement back entirely, so it is retried.

        ``unsynced`` commits without waiting for the WAL flush (``synchronous_commit =
        off``), still in one round trip. Only for writes whose loss in a database crash
        is harmless: claims and lease renewals. A lost claim leaves the run claimable
        again, and any later durable write of that worker either flushes the claim
        first (the WAL is sequential) or is rejected by the fence.
        """

        async def once() -> list[tuple[Any, ...]]:
            async with self._connection() as conn:
                if unsynced:
                    return await self._unsynced(conn, query, params)
                cur = await conn.execute(query, params, prepare=None if prepare else False)
                rows: list[tuple[Any, ...]] = await cur.fetchall()
                return rows

        return await self._retrying(once, "statement")

    @staticmethod
    async def _unsynced(
        conn: psycopg.AsyncConnection[Any], query: LiteralString, params: dict[str, Any] | None
    ) -> list[tuple[Any, ...]]:
        async with _pipelined_transaction(conn):
            await conn.execute(QUERIES["commit_unsynced"])
            cur = await conn.execute(query, params)
        rows: list[tuple[Any, ...]] = await cur.fetchall()
        return rows

    @staticmethod
    async def _retrying(attempt_once: Callable[[], Awaitable[T]], what: str) -> T:
        """Run ``attempt_once`` again after a deadlock or serialization failure: those
        rolled the whole transaction back, so a retry is safe."""
        delay = 0.005
        for attempt in range(1, _RETRY_ATTEMPTS + 1):
            try:
                return await attempt_once()
            except BackendError as exc:
                if not isinstance(exc.__cause__, _RETRYABLE) or attempt == _RETRY_ATTEMPTS:
                    raise
                log.debug("%s hit %s; retrying", what, type(exc.__cause__).__name__)
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ registry

    async def register_workflows(self, workflows: Sequence[WorkflowRecord]) -> None:
        # One row per (name, version), last wins, in key order (a stable lock order
        # when several processes register at once).
        unique = {(w.name, w.version): w for w in workflows}
        ordered = [unique[key] for key in sorted(unique)]
        if not ordered:
            return
        async with self._connection() as conn:
            await conn.execute(
                QUERIES["register_workflows"],
                {
                    "names": [w.name for w in ordered],
                    "versions": [w.version for w in ordered],
                    "options": [dumps(w.options or {}) for w in ordered],
                },
            )

    async def get_workflow(self, name: str, version: int | None = None) -> WorkflowRecord | None:
        row = await self._one(QUERIES["get_workflow"], {"name": name, "version": version})
        return None if row is None else WorkflowRecord(row[0], row[1], row[2] or {})

    # ------------------------------------------------------------------ producers

    async def create_run(self, new: NewRun) -> CreateResult:
        """Create a run. Starts that arrive while another start is committing are
        committed together in the next transaction (group commit), so a client
        starting many runs at once pays one commit per batch, not per run; a lone start
        goes out at once."""
        future: asyncio.Future[CreateResult] = asyncio.get_running_loop().create_future()
        self._starts.append((new, future))
        if self._start_flusher is None or self._start_flusher.done():
            self._start_flusher = asyncio.get_running_loop().create_task(self._flush_starts())
        return await future

    async def _flush_starts(self) -> None:
        while self._starts:
            batch = self._starts[:_START_BATCH]
            del self._starts[:_START_BATCH]
            results: list[CreateResult | BaseException]
            try:
                if len(batch) == 1:
                    results = [await self._create_one(batch[0][0])]
                else:
                    results = list(await self._create_together([new for new, _ in batch]))
            except Exception:
                # One bad start (an idempotency conflict, a deadlock between batches)
                # aborted the shared transaction: give each its own, and its own error.
                results = []
                for new, _ in batch:
                    try:
                        results.append(await self._create_one(new))
                    except Exception as exc:
                        results.append(exc)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    async def _create_together(self, batch: list[NewRun]) -> list[CreateResult]:
        async with self._connection() as conn:
            cursors = []
            async with _pipelined_transaction(conn):
                for new in batch:
                    cursors.append(await conn.execute(QUERIES["create_run"], _new_run(new)))  # noqa: PERF401
            results = []
            for cur in cursors:
                row = await cur.fetchone()
                assert row is not None
                results.append(_created(row))
            return results

    async def _create_one(self, new: NewRun) -> CreateResult:
        row = await self._one(QUERIES["create_run"], _new_run(new))
        assert row is not None
        return _created(row)

    async def cancel_run(self, run_id: str) -> bool:
        row = await self._one(QUERIES["cancel_run"], {"run_id": run_id})
        return bool(row and row[0])

    async def deliver_signal(
        self, run_id: str, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> SignalOutcome:
        row = await self._one(
            QUERIES["deliver_signal"],
            {
                "run_id": run_id,
                "event": event,
                "payload": payload_json,
                "idempotency_key": idempotency_key,
            },
        )
        assert row is not None
        outcome: SignalOutcome = row[0]
        return outcome

    async def publish(
        self, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> Published:
        row = await self._one(
            QUERIES["publish"],
            {"event": event, "payload": payload_json, "idempotency_key": idempotency_key},
        )
        result: dict[str, Any] = (row[0] if row else None) or {}
        return Published(
            started=tuple(result.get("started", ())), resumed=tuple(result.get("resumed", ()))
        )

    async def subscribe_topic(self, pattern: str, workflow: str) -> bool:
        row = await self._one(
            QUERIES["subscribe_topic"], {"pattern": pattern, "workflow": workflow}
        )
        return row is not None

    async def unsubscribe_topic(self, pattern: str, workflow: str) -> bool:
        row = await self._one(
            QUERIES["unsubscribe_topic"], {"pattern": pattern, "workflow": workflow}
        )
        return row is not None

    async def list_subscriptions(self) -> list[tuple[str, str]]:
        rows = await self._all(QUERIES["list_subscriptions"])
        return sorted((pattern, workflow) for pattern, workflow in rows)

    # ------------------------------------------------------------------ reads

    async def get_run(self, run_id: str) -> Run | None:
        row = await self._one(QUERIES["get_run"], {"run_id": run_id})
        return None if row is None else run_from_row(row)

    async def list_runs(self, params: ListRunsParams) -> Page[Run]:
        if params.status is not None and params.status not in RUN_STATUSES:
            return Page(items=[], next_cursor=None)
        limit = max(1, params.limit)
        after_at: datetime | None = None
        after_id: str | None = None
        if params.cursor is not None:
            created, after_id = decode_cursor(params.cursor)
            try:
                after_at = datetime.fromisoformat(created)
            except ValueError:
                raise ValidationError(f"invalid cursor {params.cursor[:80]!r}") from None
        rows = await self._all(
            QUERIES["list_runs"],
            {
                "workflow": params.workflow,
                "status": params.status,
                "since": params.since,
                "until": params.until,
                "input_match": params.input_match_json,
                "parent_id": params.parent_id,
                "after_at": after_at,
                "after_id": after_id,
                "limit": limit,
            },
            prepare=False,  # custom plans: the NULL filters fold away, indexes apply
        )
        items = [run_from_row(row) for row in rows[:limit]]
        last = items[-1] if len(rows) > limit and items else None
        cursor = None if last is None else encode_cursor(last.created_at.isoformat(), last.id)
        return Page(items=items, next_cursor=cursor)

    async def get_steps(self, run_id: str) -> list[Step]:
        rows = await self._all(QUERIES["get_steps"], {"run_id": run_id})
        return [step_from_row(row) for row in rows]

    async def get_events(self, run_id: str) -> list[Event]:
        rows = await self._all(QUERIES["get_events"], {"run_id": run_id})
        return [Event(type_, data, created_at) for type_, data, created_at in rows]

    async def workflow_summaries(self) -> list[WorkflowSummary]:
        rows = await self._all(QUERIES["workflow_summaries"])
        counts: dict[str, dict[str, int]] = {}
        for name, status, count in rows:
            entry = counts.setdefault(name, dict.fromkeys(RUN_STATUSES, 0))
            if status is not None:
                entry[status] = entry.get(status, 0) + int(count)
        return [WorkflowSummary(name, counts[name]) for name in sorted(counts)]

    # ------------------------------------------------------------------ workers

    async def _analyze_if_stale(self) -> None:
        """ANALYZE runs when its statistics are stale (e.g. a bulk-loaded backlog).

        With stale statistics the planner believes the table small and sorts every due
        run instead of walking the claim index: claims then cost O(backlog) until
        autovacuum catches up (a minute or more). Checked when a worker starts and at
        each retention sweep.
        """
        row = await self._one(QUERIES["runs_stats_stale"])
        if row is not None and row[0]:
            log.info("refreshing the planner statistics of %s.runs", self._schema)
            async with self._connection() as conn:
                await conn.execute(QUERIES["analyze_runs"])

    async def register_worker(self, info: WorkerInfo) -> None:
        await self._analyze_if_stale()
        async with self._connection() as conn:
            await conn.execute(
                QUERIES["register_worker"],
                {
                    "id": info.id,
                    "host": info.host,
                    "pid": info.pid,
                    "workflows": dumps(list(info.workflows)),
                    "concurrency": info.concurrency,
                    "started_at": info.started_at,
                    "stopped_at": info.stopped_at,
                },
            )

    async def deregister_worker(self, worker_id: str) -> None:
        async with self._connection() as conn:
            await conn.execute(QUERIES["deregister_worker"], {"id": worker_id})

    async def list_workers(self, seen_within: float) -> list[WorkerInfo]:
        rows = await self._all(QUERIES["list_workers"], {"seconds": float(seen_within)})
        return [
            WorkerInfo(
                id=r[0],
                host=r[1],
                pid=r[2],
                workflows=tuple(r[3] or ()),
                concurrency=r[4],
                started_at=r[5],
                last_seen_at=r[6],
                stopped_at=r[7],
            )
            for r in rows
        ]

    async def claim_runs(self, params: ClaimParams) -> list[Claim]:
        if params.limit <= 0 or not params.workflows:
            return []
        rows = await self._all(
            QUERIES["claim_runs"],
            {
                **_pairs(params.workflows),
                "worker": params.worker_id,
                "limit": params.limit,
                "lease": float(params.lease_seconds),
            },
            unsynced=True,
        )
        return [claim_from_row(row) for row in rows]

    async def extend_leases(
        self, worker_id: str, held: Sequence[tuple[str, int]], lease_seconds: float
    ) -> set[str]:
        rows = await self._all(
            QUERIES["extend_leases"],
            {
                "worker": worker_id,
                "ids": [run_id for run_id, _ in held],
                "tokens": [token for _, token in held],
                "lease": float(lease_seconds),
            },
            unsynced=True,
        )
        return {row[0] for row in rows}

    async def release_orphans(self, worker_id: str, held: Sequence[str]) -> int:
        rows = await self._all(QUERIES["release_orphans"], {"worker": worker_id, "ids": list(held)})
        return len(rows)

    async def apply(self, transitions: Sequence[Transition]) -> list[TransitionResult]:
        if not transitions:
            return []
        # Stable lock order: by run id (the sort keeps a run's transitions in order).
        order = sorted(range(len(transitions)), key=lambda i: transitions[i].run_id)
        planned = [(i, *transition_params(transitions[i])) for i in order]
        return await self._retrying(
            functools.partial(self._apply_once, transitions, planned), "apply batch"
        )

    async def _apply_once(
        self,
        transitions: Sequence[Transition],
        planned: list[tuple[int, bool, dict[str, Any]]],
    ) -> list[TransitionResult]:
        results: list[TransitionResult | None] = [None] * len(transitions)
        missing: list[tuple[int, str]] = []
        async with self._connection() as conn:
            cursors = []
            async with _pipelined_transaction(conn):
                for _, general, params in planned:
                    query = (
                        QUERIES["apply_transition_general"]
                        if general
                        else QUERIES["apply_transition"]
                    )
                    cursors.append(await conn.execute(query, params))
            for (index, general, params), cur in zip(planned, cursors, strict=True):
                row = await cur.fetchone()
                ok = row is not None and (bool(row[0]) if general else True)
                if not ok or row is None:
                    results[index] = TransitionResult(ok=False)
                    continue
                written = set((row[1] if general else row[0]) or ())
                missing.extend((index, key) for key in params["keys"] if key not in written)
                results[index] = TransitionResult(ok=True)
            if missing:
                # Keys that already held a final row: the stored row wins. Final rows
                # never change, so reading them after the commit is exact.
                cur = await conn.execute(
                    QUERIES["existing_steps"],
                    {
                        "run_ids": [transitions[i].run_id for i, _ in missing],
                        "keys": [key for _, key in missing],
                    },
                )
                stored = {(r[0], r[1]): step_from_row(r[1:]) for r in await cur.fetchall()}
                by_index: dict[int, list[Step]] = {}
                for index, key in missing:
                    step = stored.get((transitions[index].run_id, key))
                    if step is not None:
                        by_index.setdefault(index, []).append(step)
                for index, steps in by_index.items():
                    results[index] = TransitionResult(ok=True, existing=tuple(steps))
        return [r if r is not None else TransitionResult(ok=False) for r in results]

    async def defer_unavailable(self, params: DeferParams) -> list[str]:
        if params.limit <= 0 or not params.workflows:
            return []
        rows = await self._all(
            QUERIES["defer_unavailable"],
            {
                **_pairs(params.workflows),
                "names": sorted({name for name, _ in params.workflows}),
                "worker": params.worker_id,
                "grace": float(params.grace_seconds),
                "limit": int(params.limit),
            },
            unsynced=True,
        )
        return [str(row[0]) for row in rows]

    async def next_wake_at(self, workflows: Sequence[tuple[str, int]]) -> datetime | None:
        if not workflows:
            return None
        row = await self._one(QUERIES["next_wake_at"], _pairs(workflows))
        return None if row is None else row[0]

    # ------------------------------------------------------------------ maintenance

    async def sweep(self, max_retention_days: int, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        row = await self._one(
            QUERIES["sweep"], {"max_days": int(max_retention_days), "limit": int(limit)}
        )
        await self._analyze_if_stale()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ notices

    def _dispatch(self, notice: Notice) -> None:
        for callback in list(self._callbacks):
            try:
                callback(notice)
            except Exception:
                log.exception("notice callback %r failed", callback)

    async def subscribe(self, callback: NoticeCallback) -> Unsubscribe:
        if self._pool is None:
            raise BackendError("the PostgreSQL backend is not open (call open() first)")
        self._callbacks.append(callback)
        if self._listener is None:
            kwargs = self._connect_kwargs()
            kwargs.pop("autocommit", None)
            kwargs.pop("prepare_threshold", None)
            self._listener = Listener(
                self._dsn,
                {**kwargs, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5},
                [
                    _ident(QUERIES["listen"], f"{self._schema}.wake"),
                    _ident(QUERIES["listen"], f"{self._schema}.done"),
                ],
                sql.SQL(QUERIES["ping"]),
                self._dispatch,
            )
            await self._listener.start()

        async def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return unsubscribe


def _new_run(new: NewRun) -> dict[str, Any]:
    return {
        "id": new.id,
        "workflow": new.workflow,
        "version": new.version,
        "input": new.input_json,
        "priority": new.priority,
        "idempotency_key": new.idempotency_key,
        "delay": new.delay,
        "run_at": new.run_at,
        "deadline_in": new.deadline_in,
        "deadline_at": new.deadline_at,
        "retention_days": new.retention_days,
        "parent_id": new.parent_id,
        "parent_step": new.parent_step,
    }


@asynccontextmanager
async def _pipelined_transaction(
    conn: psycopg.AsyncConnection[Any],
) -> AsyncIterator[None]:
    """BEGIN, the statements the block sends, and COMMIT go out together and come back
    after one sync: one round trip (``conn.transaction()`` would add syncs around the
    block). An error aborts the transaction, COMMIT is then skipped and the connection
    rolled back before it goes back to the pool."""
    try:
        async with conn.pipeline():
            await conn.execute(QUERIES["begin"])
            yield
            await conn.execute(QUERIES["commit"])
    except BaseException:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
        raise


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every pool connection decodes JSON with the guarded decoder: a value too deep or
    broken to decode becomes an `Undecodable` marker instead of failing the whole read
    (a claim of many runs, a page of a listing)."""
    set_json_loads(decode_stored, conn)


def _created(row: tuple[Any, ...]) -> CreateResult:
    """A `create_run` query row: created, the run's columns, input_differs."""
    return CreateResult(run=run_from_row(row[1:-1]), created=bool(row[0]), input_differs=row[-1])


def _one_line(exc: BaseException) -> str:
    """A driver message on one line (libpq's carry a line break and a tab)."""
    return " ".join(str(exc).split())


def _version_key(version: str) -> tuple[int, ...]:
    """``"1.10.2"`` as ``(1, 10, 2)`` (a non-numeric part counts as 0)."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))
