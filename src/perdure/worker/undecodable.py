"""Runs whose sealed values this worker cannot open: parked for a worker that can.

A value sealed by a codec (`perdure.codec`) is stored as an envelope. A worker with no
codec sees the envelope itself, and one with a wrong key cannot open it (the codec
wrapper marks the claim ``undecodable``). Either way the workflow body must never run
on it, or it would compute on ciphertext and store what it derived in clear: the run
is parked instead (`Backend.park_undecodable`: ``waiting``, wake reason
``undecodable``, a backoff of 5 s doubling to 5 min), never failed, and resumes when a
worker that can read it claims it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from .._codec_backend import CodecBackend
from ..backends.base import Backend
from ..codec import is_sealed
from ..engine.run_log import log_run
from ..errors import BackendError
from ..records import Claim

log = logging.getLogger("perdure.worker")

__all__ = ["NO_CODEC", "park_undecodable", "unreadable_reason"]

#: The reason a worker without a codec gives.
NO_CODEC = "no codec"


def unreadable_reason(claim: Claim, backend: Backend | None) -> str | None:
    """Why the worker reading through ``backend`` cannot read ``claim``, or None.

    Through the codec wrapper, values arrive opened and one it could not open marks the
    claim `Claim.undecodable`. Without a codec, any envelope in the input or in a
    journal row the body would replay is unreadable (`NO_CODEC`); a run that holds
    none is read exactly as before, with no extra statement."""
    if claim.undecodable is not None or isinstance(backend, CodecBackend):
        return claim.undecodable
    if is_sealed(claim.run.input) or any(is_sealed(step.output) for step in claim.journal):
        return NO_CODEC
    return None


async def park_undecodable(
    claim: Claim,
    reason: str,
    backend: Backend,
    worker_id: str,
    on_park: Callable[[datetime | None], None],
) -> None:
    """Park the claimed run, which this worker cannot read (``reason`` says why)."""
    run = claim.run
    try:
        wake_at = await backend.park_undecodable(run.id, claim.lease_token, worker_id, reason)
    except BackendError as exc:  # its lease expires and the next claim parks it again
        log.warning("could not park undecodable run %s: %s", run.id, exc)
        return
    if wake_at is None:
        return  # cancelled, or taken over meanwhile
    log_run(
        logging.WARNING,
        run,
        "undecodable",
        f"this worker cannot read its sealed values ({reason}); it waits for a worker "
        f"with the codec's key, next try at {wake_at.isoformat()}",
    )
    on_park(wake_at)
