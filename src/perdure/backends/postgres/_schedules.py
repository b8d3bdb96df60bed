"""The schedules section of the contract on PostgreSQL (one statement each)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...records import Schedule
from ...schedules import ScheduleSpec
from ._conn import QUERIES, PgConnections

__all__ = ["ScheduleStore"]


def schedule_from_row(row: tuple[Any, ...]) -> Schedule:
    """A row of the ``_schedule_columns`` part."""
    return Schedule(
        name=row[0],
        workflow=row[1],
        cron=row[2],
        timezone=row[3],
        catch_up=row[4],
        paused=bool(row[5]),
        next_at=row[6],
        input=row[7],
        last_fired_at=row[8],
        created_at=row[9],
    )


class ScheduleStore:
    """`PostgresBackend`'s schedules."""

    _db: PgConnections

    async def put_schedule(self, spec: ScheduleSpec, next_at: datetime) -> Schedule:
        params = {
            "name": spec.name,
            "workflow": spec.workflow,
            "cron": spec.cron,
            "input": spec.input_json,
            "timezone": spec.timezone,
            "catch_up": spec.catch_up,
            "next_at": next_at,
        }
        row = await self._db.one(QUERIES["put_schedule"], params)
        assert row is not None
        return schedule_from_row(row)

    async def get_schedule(self, name: str) -> Schedule | None:
        row = await self._db.one(QUERIES["get_schedule"], {"name": name})
        return None if row is None else schedule_from_row(row)

    async def list_schedules(self) -> list[Schedule]:
        return [schedule_from_row(r) for r in await self._db.all(QUERIES["list_schedules"])]

    async def pause_schedule(self, name: str, paused: bool, next_at: datetime | None) -> bool:
        params = {"name": name, "paused": paused, "next_at": next_at}
        return await self._db.one(QUERIES["pause_schedule"], params) is not None

    async def delete_schedule(self, name: str) -> bool:
        return await self._db.one(QUERIES["delete_schedule"], {"name": name}) is not None

    async def due_schedules(self, limit: int = 100) -> list[Schedule]:
        rows = await self._db.all(QUERIES["due_schedules"], {"limit": limit})
        return [schedule_from_row(r) for r in rows]

    async def advance_schedule(
        self, name: str, from_at: datetime, to_at: datetime, fired_at: datetime | None
    ) -> bool:
        params = {"name": name, "from_at": from_at, "to_at": to_at, "fired_at": fired_at}
        return await self._db.one(QUERIES["advance_schedule"], params) is not None
