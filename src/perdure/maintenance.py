"""Periodic housekeeping of a database, run by every worker: the retention sweep.

Any number of processes may run it at once: each sweep deletes a bounded batch
under ``SKIP LOCKED``, so they share the work instead of contending.
"""

from __future__ import annotations

import asyncio
import logging

from .backends.base import Backend
from .errors import BackendError
from .settings import Settings

log = logging.getLogger("perdure.worker")

__all__ = ["sweep_forever"]


async def sweep_forever(backend: Backend, settings: Settings) -> None:
    """Delete finished runs past their retention every ``settings.sweep_interval``
    seconds (never when it is 0); a failed sweep is logged and tried again later."""
    interval = settings.sweep_interval
    if interval <= 0:
        return
    await asyncio.sleep(min(interval, 10.0))
    while True:
        try:
            removed = await backend.sweep(settings.max_retention_days)
            if removed:
                log.info("retention sweep deleted %d finished run(s)", removed)
        except BackendError as exc:
            log.warning("retention sweep failed: %s", exc)
        await asyncio.sleep(interval)
