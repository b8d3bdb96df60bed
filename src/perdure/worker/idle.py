"""What an idle worker asks the database between claims: how long it may sleep, and
which runs of versions it lacks should wait instead of being retried."""

from __future__ import annotations

import logging
from datetime import datetime

from ..backends.base import Backend
from ..errors import BackendError
from ..records import DeferParams
from .wakes import WakeTimes

__all__ = ["defer_unavailable", "time_to_next_wake"]

log = logging.getLogger("perdure.worker")

Pairs = tuple[tuple[str, int], ...]


async def time_to_next_wake(
    backend: Backend, pairs: Pairs, poll: float, now: datetime, wakes: WakeTimes, *, ask: bool
) -> float:
    """Seconds until the earliest wake time known: the worker's own parks (``wakes``),
    and (when idle, ``ask``) the database's earliest due run, capped by ``poll``."""
    known = None
    if ask:
        try:
            known = await backend.next_wake_at(pairs)
        except BackendError:
            known = None
    candidates = [t for t in (known, wakes.earliest(now)) if t is not None]
    if not candidates:
        return poll
    delay = (min(candidates) - now).total_seconds()
    return max(0.001, min(poll, delay))


async def defer_unavailable(backend: Backend, worker_id: str, pairs: Pairs, grace: float) -> None:
    """Park runs of the served workflow names whose version no live worker has (and
    that none took within ``grace`` seconds): they wait with a backoff and a
    ``version_unavailable`` event, and are never failed for it."""
    try:
        deferred = await backend.defer_unavailable(
            DeferParams(worker_id, pairs, grace_seconds=grace)
        )
    except BackendError as exc:
        log.warning("could not check for runs of unavailable versions: %s", exc)
        return
    if deferred:
        log.warning(
            "%d run(s) of versions no live worker has are waiting: %s",
            len(deferred),
            ", ".join(deferred[:5]),
        )
