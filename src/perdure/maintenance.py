"""Periodic housekeeping of a database, run by every worker (and the sweep also by
the server, `perdure serve`): the retention sweep and the firing of cron schedules.

Any number of processes may run them at once: each sweep deletes a bounded batch
under ``SKIP LOCKED``, so they share the work instead of contending; a schedule's
tick is the idempotency key of its run, so a tick fired twice starts one run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from .backends.base import Backend
from .codec import unreadable
from .errors import BackendError, PerdureError
from .ids import new_run_id
from .limits import flow_control
from .records import NewRun, Schedule
from .schedules import LATE_TOLERANCE, due_ticks, next_tick, tick_input
from .serialization import encode
from .settings import Settings
from .telemetry.hooks import NOOP, TelemetryHooks
from .workflow import Registry

log = logging.getLogger("perdure.worker")

__all__ = [
    "fire_due_schedules",
    "fire_schedules_forever",
    "start_tick",
    "sweep_forever",
    "sweep_once",
    "ticks_to_fire",
]


async def sweep_forever(sweep: Callable[[], Awaitable[int]], interval: float) -> None:
    """Call ``sweep`` (e.g. `sweep_once`) every ``interval`` seconds (never when it is
    0); a failed sweep is logged and tried again later."""
    if interval <= 0:
        return
    await asyncio.sleep(min(interval, 10.0))
    while True:
        try:
            removed = await sweep()
            if removed:
                log.info("retention sweep deleted %d finished run(s)", removed)
        except BackendError as exc:
            log.warning("retention sweep failed: %s", exc)
        await asyncio.sleep(interval)


async def sweep_once(
    backend: Backend, settings: Settings, telemetry: TelemetryHooks = NOOP, batch: int = 1000
) -> int:
    """One sweep: delete finished runs past their retention in batches of ``batch``
    (each its own transaction, ``SKIP LOCKED`` on PostgreSQL; live runs are never
    touched) until a batch comes back short; returns how many were deleted. Each
    batch is counted in ``workflow_retention_swept_total``."""
    total = 0
    while True:
        removed = await backend.sweep(settings.max_retention_days, batch)
        if removed:
            telemetry.swept(removed)
        total += removed
        if removed < batch:
            return total


# --------------------------------------------------------------------------- schedules


def _tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of a tick's run: one run per tick, whoever fires it."""
    return f"schedule:{name}:{tick.astimezone(UTC).isoformat()}"


async def start_tick(
    backend: Backend, registry: Registry, settings: Settings, schedule: Schedule, tick: datetime
) -> str:
    """Start the run of one tick through the ordinary idempotent start (the tick is
    the idempotency key); returns its id, the existing run's if it was fired before."""
    definition = registry.get(schedule.workflow)
    if definition is not None:
        version: int | None = definition.version
        options = definition.options()
    else:
        record = await backend.get_workflow(schedule.workflow)
        version, options = (None, {}) if record is None else (record.version, record.options)
    input_json = encode(
        tick_input(schedule.input, tick),
        what=f"the input of schedule {schedule.name!r}",
        max_bytes=settings.max_payload_bytes,
    )
    new = NewRun(
        id=new_run_id(),
        workflow=schedule.workflow,
        version=version,
        input_json=input_json,
        priority=int(options.get("priority", 100)),
        idempotency_key=_tick_key(schedule.name, tick),
        deadline_in=options.get("deadline_seconds"),
        retention_days=min(int(options.get("retention_days", 30)), settings.max_retention_days),
    )
    new = flow_control(new, None if definition is None else definition.limits, None, None, options)
    result = await backend.create_run(new)
    if result.created:
        log.info(
            "schedule %s fired tick %s: run %s", schedule.name, tick.isoformat(), result.run.id
        )
    return result.run.id


def ticks_to_fire(schedule: Schedule, now: datetime) -> tuple[list[datetime], datetime]:
    """The ticks of a due schedule to fire now, by its catch-up mode, and its next
    ``next_at`` (the first tick after the last one considered)."""
    due = due_ticks(schedule.cron, schedule.timezone, schedule.next_at, now)
    if not due:
        return [], schedule.next_at
    following = next_tick(schedule.cron, schedule.timezone, due[-1])
    if schedule.catch_up == "all":
        return due, following
    latest = due[-1]
    if schedule.catch_up == "none" and (now - latest).total_seconds() > LATE_TOLERANCE:
        return [], following
    return [latest], following


async def fire_due_schedules(backend: Backend, registry: Registry, settings: Settings) -> int:
    """Fire every due schedule once; returns how many runs this call created or found.

    Safe in any number of processes at once: each tick's run is started with the
    tick as idempotency key (one run per tick), and ``next_at`` moves on by
    compare-and-set, so a tick is never fired twice and a crash between the two
    steps only repeats an idempotent start."""
    fired = 0
    now = await backend.now()
    for schedule in await backend.due_schedules():
        if unreadable(schedule.input):  # left due for a process that can read it
            log.warning(
                "schedule %s is not fired here: its input is sealed by a codec this process "
                "lacks or cannot open",
                schedule.name,
            )
            continue
        ticks, following = ticks_to_fire(schedule, now)
        for tick in ticks:
            await start_tick(backend, registry, settings, schedule, tick)
            fired += 1
        await backend.advance_schedule(
            schedule.name, schedule.next_at, following, ticks[-1] if ticks else None
        )
    return fired


async def fire_schedules_forever(
    backend: Backend, registry: Registry, settings: Settings, interval: float
) -> None:
    """Fire due schedules every ``interval`` seconds (at least 0.2); a failure is
    logged and tried again on the next round."""
    interval = max(0.2, interval)
    while True:
        try:
            await fire_due_schedules(backend, registry, settings)
        except PerdureError as exc:
            log.warning("firing schedules failed: %s", exc)
        await asyncio.sleep(interval)
