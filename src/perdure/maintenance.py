"""Periodic housekeeping of a database, run by every worker and by the server
(`perdure serve`): the retention sweep.

Any number of processes may run it at once: each sweep deletes a bounded batch
under ``SKIP LOCKED``, so they share the work instead of contending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .backends.base import Backend
from .errors import BackendError
from .settings import Settings
from .telemetry.hooks import NOOP, TelemetryHooks

log = logging.getLogger("perdure.worker")

__all__ = ["sweep_forever", "sweep_once"]


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
