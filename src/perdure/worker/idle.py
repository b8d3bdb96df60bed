"""What a worker does between claims: how long it may sleep, how long a busy one
gathers new starts, which runs of versions it lacks should wait instead of being
retried, and which runs a lost claim answer leased to it."""

from __future__ import annotations

import logging
from datetime import datetime

from ..backends.base import Backend
from ..errors import BackendError
from ..records import DeferParams
from .wakes import WakeTimes

__all__ = ["BUSY_CLAIM_DELAY", "defer_unavailable", "release_orphans", "time_to_next_wake"]

log = logging.getLogger("perdure.worker")

#: Seconds a worker that executes runs waits after a wake notice before it claims:
#: starts that arrive meanwhile are claimed by the same query. Without it, a worker
#: claimed each start on its own, and beside a second worker both claimed every
#: start, one of them in vain. An idle worker claims at once (the latency of a lone
#: run is unchanged); a backlog is claimed without pause (a claim that fills every
#: free slot is followed by the next at once).
BUSY_CLAIM_DELAY = 0.003

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


async def release_orphans(backend: Backend, worker_id: str, held: list[str]) -> None:
    """After a failed claim, free the runs it may have leased to this worker after all
    (the database committed, the answer was lost): they are claimable now instead of
    after their lease. ``held``: the runs the worker knows it holds."""
    released = await backend.release_orphans(worker_id, held)
    if released:
        log.warning(
            "released %d run(s) claimed for this worker by a claim whose answer was lost",
            released,
        )
