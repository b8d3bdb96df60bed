"""The PostgreSQL backend: the storage contract on psycopg 3 and a connection pool.

Round trips (the hot paths):

* `claim_runs`: one statement (lock with SKIP LOCKED, update, log events, return
  each run with its journal and waits as JSON).
* `apply`: one round trip per batch (`_apply`): one statement for the transitions
  without waits or children, and with others one pipelined transaction.
* producers (`create_run`, `deliver_signal`, `publish`, `cancel_run`): one call of
  the plpgsql function that SQL producers call too.

Every SQL text lives in ``sql/queries.sql`` and ``sql/migrations``; the schema name
is the only dynamic identifier and goes through `_ident`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from psycopg import sql

from ...errors import BackendError, ConfigurationError, ReadOnlyDatabase
from ...flows.definition import FlowShape
from ...records import (
    RUN_STATUSES,
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
    SignalOutcome,
    Step,
    Transition,
    TransitionResult,
    WorkerInfo,
    WorkflowRecord,
    WorkflowSummary,
)
from .._cursor import encode_cursor
from ..base import Backend, NoticeCallback, TransactionWork, Unsubscribe
from . import _flows
from ._apply import apply_transitions
from ._clock import set_offset
from ._conn import QUERIES, PgConnections
from ._convert import (
    claim_from_row,
    dumps,
    limited_claim_params,
    list_runs_params,
    plain_claim_params,
    run_from_row,
    step_from_row,
)
from ._operations import Operations
from ._schedules import ScheduleStore
from ._schema import check_schema, ident, migrate
from ._starts import Starts
from ._transact import transact as transact_in_app
from .notify import Listener

T = TypeVar("T")

__all__ = ["PostgresBackend"]

log = logging.getLogger("perdure.backends.postgres")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _pairs(workflows: Sequence[tuple[str, int]]) -> dict[str, Any]:
    return {"workflows": [w for w, _ in workflows], "versions": [v for _, v in workflows]}


class PostgresBackend(Operations, ScheduleStore, Backend):
    """Storage on PostgreSQL: one schema, a connection pool, LISTEN/NOTIFY notices.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL.
        schema: the schema holding every perdure object (lowercase name).
        min_size, max_size: connection pool bounds.
        read_only: every connection runs with ``default_transaction_read_only`` on:
            no migration, and a write raises `ReadOnlyDatabase`.

    An instance belongs to the event loop that opened it.
    """

    dialect = "postgres"
    shareable_across_loops = False

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "perdure",
        min_size: int = 1,
        max_size: int = 10,
        read_only: bool = False,
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"schema {schema!r} is not a valid name: use lowercase letters, digits and _"
            )
        if min_size < 0 or max_size < 1 or min_size > max_size:
            raise ConfigurationError(f"bad pool size: min_size={min_size}, max_size={max_size}")
        self._schema = schema
        self.read_only = read_only
        self._db = PgConnections(dsn, schema, min_size, max_size, read_only=read_only)
        self._listener: Listener | None = None
        self._starts = Starts(self._db)

    @property
    def schema(self) -> str:
        """The schema this backend uses."""
        return self._schema

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._starts.drain(timeout=10)  # starts in flight get their answer
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        await self._db.close()

    async def migrate(self) -> int:
        if self.read_only:
            raise ReadOnlyDatabase(
                f"schema {self._schema} is open read-only: migrating writes",
                opened_read_only=True,
            )
        return await migrate(self._db, self._schema)

    async def check_schema(self) -> int:
        return await check_schema(self._db, self._schema)

    async def now(self) -> datetime:
        row = await self._db.one(QUERIES["now"])
        assert row is not None
        value: datetime = row[0]
        return value

    async def clock_offset(self) -> float:
        row = await self._db.one(QUERIES["clock_offset"])
        return round(float(row[0]), 6) if row else 0.0

    async def set_clock_offset(self, seconds: float) -> None:
        await set_offset(self._db, self._schema, seconds)

    # ------------------------------------------------------------------ registry

    async def register_workflows(self, workflows: Sequence[WorkflowRecord]) -> None:
        # One row per (name, version), last wins, in key order (a stable lock order
        # when several processes register at once).
        unique = {(w.name, w.version): w for w in workflows}
        ordered = [unique[key] for key in sorted(unique)]
        if not ordered:
            return
        async with self._db.connection() as conn:
            await conn.execute(
                QUERIES["register_workflows"],
                {
                    "names": [w.name for w in ordered],
                    "versions": [w.version for w in ordered],
                    "options": [dumps(w.options or {}) for w in ordered],
                },
            )

    async def get_workflow(self, name: str, version: int | None = None) -> WorkflowRecord | None:
        row = await self._db.one(QUERIES["get_workflow"], {"name": name, "version": version})
        return None if row is None else WorkflowRecord(row[0], row[1], row[2] or {})

    # ------------------------------------------------------------------ producers

    async def register_flows(self, shapes: Sequence[FlowShape]) -> None:
        await _flows.register_flows(self._db, list(shapes))

    async def get_flow(self, name: str, version: int | None = None) -> FlowShape | None:
        return await _flows.get_flow(self._db, name, version)

    async def start_flow(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        if claim is None:
            return await self._starts.start_flow(new)
        return await _flows.start_flow(self._db, new, claim)

    async def create_run(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        return await self._starts.create(new, claim)

    async def cancel_run(self, run_id: str, rollback: bool = False) -> bool:
        query = QUERIES["cancel_with_rollback"] if rollback else QUERIES["cancel_run"]
        row = await self._db.one(query, {"run_id": run_id})
        return bool(row and row[0])

    async def deliver_signal(
        self, run_id: str, event: str, payload_json: str, idempotency_key: str | None = None
    ) -> SignalOutcome:
        row = await self._db.one(
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
        row = await self._db.one(
            QUERIES["publish"],
            {"event": event, "payload": payload_json, "idempotency_key": idempotency_key},
        )
        result: dict[str, Any] = (row[0] if row else None) or {}
        return Published(
            started=tuple(result.get("started", ())), resumed=tuple(result.get("resumed", ()))
        )

    async def subscribe_topic(self, pattern: str, workflow: str) -> bool:
        row = await self._db.one(
            QUERIES["subscribe_topic"], {"pattern": pattern, "workflow": workflow}
        )
        return row is not None

    async def unsubscribe_topic(self, pattern: str, workflow: str) -> bool:
        row = await self._db.one(
            QUERIES["unsubscribe_topic"], {"pattern": pattern, "workflow": workflow}
        )
        return row is not None

    async def list_subscriptions(self) -> list[tuple[str, str]]:
        rows = await self._db.all(QUERIES["list_subscriptions"])
        return sorted((pattern, workflow) for pattern, workflow in rows)

    # ------------------------------------------------------------------ reads

    async def get_run(self, run_id: str) -> Run | None:
        row = await self._db.one(QUERIES["get_run"], {"run_id": run_id})
        return None if row is None else run_from_row(row)

    async def list_runs(self, params: ListRunsParams) -> Page[Run]:
        if params.status is not None and params.status not in RUN_STATUSES:
            return Page(items=[], next_cursor=None)
        limit = max(1, params.limit)
        rows = await self._db.all(
            QUERIES["list_runs"],
            list_runs_params(params, limit),
            custom_plan=True,  # the NULL filters fold away, the given ones' indexes apply
        )
        items = [run_from_row(row) for row in rows[:limit]]
        last = items[-1] if len(rows) > limit and items else None
        cursor = None if last is None else encode_cursor(last.created_at.isoformat(), last.id)
        return Page(items=items, next_cursor=cursor)

    async def get_steps(self, run_id: str, include_superseded: bool = False) -> list[Step]:
        if not include_superseded:
            rows = await self._db.all(QUERIES["get_steps"], {"run_id": run_id})
            if not rows:  # a flow run has no journal: its steps and their tasks
                return await _flows.flow_steps(self._db, run_id) or []
            return [step_from_row(row) for row in rows]
        rows = await self._db.all(QUERIES["get_steps_with_superseded"], {"run_id": run_id})
        return [replace(step_from_row(row[1:9]), superseded=row[9]) for row in rows]

    async def get_call_order(self, run_id: str) -> tuple[str, ...]:
        row = await self._db.one(QUERIES["get_call_order"], {"run_id": run_id})
        return () if row is None else tuple(row[0] or ())

    async def get_events(self, run_id: str) -> list[Event]:
        rows = await self._db.all(QUERIES["get_events"], {"run_id": run_id})
        return [Event(type_, data, created_at) for type_, data, created_at in rows]

    async def workflow_summaries(self) -> list[WorkflowSummary]:
        rows = await self._db.all(QUERIES["workflow_summaries"])
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
        row = await self._db.one(QUERIES["runs_stats_stale"])
        if row is not None and row[0]:
            log.info("refreshing the planner statistics of %s.runs", self._schema)
            async with self._db.connection() as conn:
                await conn.execute(QUERIES["analyze_runs"])

    async def register_worker(self, info: WorkerInfo) -> None:
        await self._analyze_if_stale()
        async with self._db.connection() as conn:
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
        async with self._db.connection() as conn:
            await conn.execute(QUERIES["deregister_worker"], {"id": worker_id})

    async def list_workers(self, seen_within: float) -> list[WorkerInfo]:
        rows = await self._db.all(QUERIES["list_workers"], {"seconds": float(seen_within)})
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
        values = {
            **_pairs(params.workflows),
            "worker": params.worker_id,
            "limit": params.limit,
            "lease": float(params.lease_seconds),
        }
        if not params.limits:
            rows = await self._db.all(QUERIES["claim_runs"], values | plain_claim_params())
        else:
            rows = await self._db.all(
                QUERIES["claim_runs_limited"], values | limited_claim_params(params)
            )
        return [claim_from_row(row) for row in rows]

    async def extend_leases(
        self, worker_id: str, held: Sequence[tuple[str, int]], lease_seconds: float
    ) -> set[str]:
        rows = await self._db.all(
            QUERIES["extend_leases"],
            {
                "worker": worker_id,
                "ids": [run_id for run_id, _ in held],
                "tokens": [token for _, token in held],
                "lease": float(lease_seconds),
            },
        )
        return {row[0] for row in rows}

    async def release_orphans(self, worker_id: str, held: Sequence[str]) -> int:
        rows = await self._db.all(
            QUERIES["release_orphans"], {"worker": worker_id, "ids": list(held)}
        )
        return len(rows)

    async def handed_at_start(self, run_id: str, worker_id: str) -> tuple[Claim, ...]:
        return await _flows.handed_at_start(self._db, run_id, worker_id)

    async def apply(self, transitions: Sequence[Transition]) -> list[TransitionResult]:
        return await apply_transitions(self._db, transitions)

    async def transact(self, work: TransactionWork) -> TransitionResult:
        return await transact_in_app(self._db, self._schema, work)

    async def defer_unavailable(self, params: DeferParams) -> list[str]:
        if params.limit <= 0 or not params.workflows:
            return []
        rows = await self._db.all(
            QUERIES["defer_unavailable"],
            {
                **_pairs(params.workflows),
                "names": sorted({name for name, _ in params.workflows}),
                "worker": params.worker_id,
                "grace": float(params.grace_seconds),
                "limit": int(params.limit),
            },
        )
        return [str(row[0]) for row in rows]

    async def park_undecodable(
        self, run_id: str, lease_token: int, worker_id: str, reason: str
    ) -> datetime | None:
        row = await self._db.one(
            QUERIES["park_undecodable"],
            {"id": run_id, "token": lease_token, "worker": worker_id, "reason": reason},
        )
        return None if row is None else row[0]

    async def next_wake_at(self, workflows: Sequence[tuple[str, int]]) -> datetime | None:
        if not workflows:
            return None
        row = await self._db.one(QUERIES["next_wake_at"], _pairs(workflows))
        return None if row is None else row[0]

    async def queue_gauges(self) -> list[QueueGauge]:
        rows = await self._db.all(QUERIES["queue_gauges"])
        return [QueueGauge(*row) for row in rows]

    # ------------------------------------------------------------------ maintenance

    async def sweep(self, max_retention_days: int, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        row = await self._db.one(
            QUERIES["sweep"], {"max_days": int(max_retention_days), "limit": int(limit)}
        )
        await self._analyze_if_stale()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ notices

    async def watch_run(self, run_id: str, watcher: str, seconds: float | None) -> None:
        params: dict[str, Any] = {"run_id": run_id, "watcher": watcher, "seconds": seconds}
        query = QUERIES["unwatch_run"] if seconds is None else QUERIES["watch_run"]
        async with self._db.connection() as conn:
            await conn.execute(query, params)

    async def listen(
        self, callback: NoticeCallback, *, ends: bool = True, progress: bool = False
    ) -> Unsubscribe:
        if not self._db.is_open:
            raise BackendError("the PostgreSQL backend is not open (call open() first)")
        if self._listener is None:
            kwargs = self._db.connect_kwargs()
            kwargs.pop("autocommit", None)
            kwargs.pop("prepare_threshold", None)
            self._listener = Listener(
                self._db.dsn,
                {**kwargs, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5},
                [ident(QUERIES["listen"], f"{self._schema}.wake")]
                + ([ident(QUERIES["listen"], f"{self._schema}.ended")] if ends else []),
                sql.SQL(QUERIES["ping"]),
            )
            await self._listener.start()
        if ends:
            self._listener.also_listen(ident(QUERIES["listen"], f"{self._schema}.ended"))
        if progress:
            self._listener.also_listen(ident(QUERIES["listen"], f"{self._schema}.progress"))
        return self._listener.add(callback)
