"""Conversions between SQLite rows (REAL seconds, JSON text) and the typed records."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from ...records import Event, Run, Step, Wait, WorkerInfo
from ...serialization import decode_stored

__all__ = [
    "INFINITY",
    "dumps",
    "loads",
    "micro",
    "to_dt",
    "to_dt_opt",
    "to_event",
    "to_run",
    "to_step",
    "to_ts",
    "to_ts_opt",
    "to_wait",
    "to_worker",
]

#: available_at of a run that only an event can wake ("infinity"); maps to wake_at None.
INFINITY = 1e18
_WAKE_STATUSES = frozenset({"pending", "waiting"})


def micro(seconds: float) -> float:
    """Round Unix seconds to the microsecond: stored times equal their datetimes."""
    return round(seconds, 6)


def to_ts(value: datetime) -> float:
    """Unix seconds of an aware datetime (a naive one is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def to_ts_opt(value: datetime | None) -> float | None:
    return None if value is None else to_ts(value)


def to_dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def to_dt_opt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def loads(text: str | None) -> Any:
    return decode_stored(text)


def dumps(value: Any) -> str | None:
    """Encode engine-made dicts (events, errors, options) compactly; None stays NULL."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def to_run(row: sqlite3.Row) -> Run:
    """A `Run` from a row selected with the run columns of queries.sql."""
    status: str = row["status"]
    available_at: float = row["available_at"]
    wake_at = to_dt(available_at) if status in _WAKE_STATUSES and available_at < INFINITY else None
    return Run(
        id=row["id"],
        workflow=row["workflow"],
        version=row["version"],
        status=status,
        input=loads(row["input"]),
        output=loads(row["output"]),
        error=loads(row["error"]),
        attempt=row["attempt"],
        priority=row["priority"],
        parent_id=row["parent_id"],
        created_at=to_dt(row["created_at"]),
        started_at=to_dt_opt(row["started_at"]),
        completed_at=to_dt_opt(row["completed_at"]),
        wake_at=wake_at,
        deadline_at=to_dt_opt(row["deadline_at"]),
        idempotency_key=row["idempotency_key"],
        wake_reason=row["wake_reason"],
        retention_days=row["retention_days"],
        updated_at=to_dt_opt(row["updated_at"]),
        parent_step=row["parent_step"],
    )


def to_step(row: sqlite3.Row) -> Step:
    """A `Step` from a row with the step columns of queries.sql."""
    return Step(
        name=row["key"],
        kind=row["kind"],
        status=row["status"],
        output=loads(row["output"]),
        error=loads(row["error"]),
        attempts=row["attempts"],
        started_at=to_dt_opt(row["started_at"]),
        completed_at=to_dt_opt(row["completed_at"]),
    )


def to_wait(row: sqlite3.Row) -> Wait:
    return Wait(
        key=row["key"],
        event=row["event"],
        match=loads(row["match"]),
        timeout_at=to_dt_opt(row["timeout_at"]),
    )


def to_event(row: sqlite3.Row) -> Event:
    return Event(type=row["type"], data=loads(row["data"]), created_at=to_dt(row["created_at"]))


def to_worker(row: sqlite3.Row) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        workflows=tuple(json.loads(row["workflows"])),
        concurrency=row["concurrency"],
        started_at=to_dt(row["started_at"]),
        last_seen_at=to_dt(row["last_seen_at"]),
        stopped_at=to_dt_opt(row["stopped_at"]),
    )
