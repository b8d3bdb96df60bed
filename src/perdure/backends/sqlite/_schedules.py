"""The schedules section of the contract on SQLite. Every function runs on the
backend's thread with a `Session`."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from ...records import Schedule
from ...schedules import ScheduleSpec
from ._convert import loads, to_dt, to_dt_opt, to_ts, to_ts_opt
from ._session import QUERIES, Session

__all__ = [
    "advance_schedule",
    "delete_schedule",
    "due_schedules",
    "get_schedule",
    "list_schedules",
    "pause_schedule",
    "put_schedule",
]


def _schedule(row: sqlite3.Row) -> Schedule:
    return Schedule(
        name=row["name"],
        workflow=row["workflow"],
        cron=row["cron"],
        timezone=row["timezone"],
        catch_up=row["catch_up"],
        paused=bool(row["paused"]),
        next_at=to_dt(row["next_at"]),
        input=loads(row["input"]),
        last_fired_at=to_dt_opt(row["last_fired_at"]),
        created_at=to_dt(row["created_at"]),
    )


def put_schedule(s: Session, spec: ScheduleSpec, next_at: datetime) -> Schedule:
    with s.write() as now:
        params = {
            "name": spec.name,
            "workflow": spec.workflow,
            "cron": spec.cron,
            "input": spec.input_json,
            "timezone": spec.timezone,
            "catch_up": spec.catch_up,
            "next_at": to_ts(next_at),
            "now": now,
        }
        row = s.one(QUERIES["put_schedule"], params)
        assert row is not None
        return _schedule(row)


def get_schedule(s: Session, name: str) -> Schedule | None:
    row = s.one(QUERIES["get_schedule"], {"name": name})
    return None if row is None else _schedule(row)


def list_schedules(s: Session) -> list[Schedule]:
    return [_schedule(r) for r in s.all(QUERIES["list_schedules"], {})]


def pause_schedule(s: Session, name: str, paused: bool, next_at: datetime | None) -> bool:
    with s.write() as now:
        params = {"name": name, "paused": int(paused), "next_at": to_ts_opt(next_at), "now": now}
        return s.run(QUERIES["pause_schedule"], params) > 0


def delete_schedule(s: Session, name: str) -> bool:
    with s.write():
        return s.run(QUERIES["delete_schedule"], {"name": name}) > 0


def due_schedules(s: Session, limit: int) -> list[Schedule]:
    rows = s.all(QUERIES["due_schedules"], {"now": s.clock(), "limit": limit})
    return [_schedule(r) for r in rows]


def advance_schedule(
    s: Session, name: str, from_at: datetime, to_at: datetime, fired_at: datetime | None
) -> bool:
    with s.write() as now:
        params = {
            "name": name,
            "from_at": to_ts(from_at),
            "to_at": to_ts(to_at),
            "fired_at": to_ts_opt(fired_at),
            "now": now,
        }
        return s.run(QUERIES["advance_schedule"], params) > 0
