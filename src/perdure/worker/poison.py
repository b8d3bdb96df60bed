"""Runs whose stored data cannot be decoded: they fail as `PoisonRun`, the worker lives."""

from __future__ import annotations

import logging

from ..engine.services import RunServices
from ..engine.suspend import engine_error
from ..errors import BackendError, PoisonRun
from ..records import Claim, Fail, Transition

log = logging.getLogger("perdure.worker")

__all__ = ["fail_poison"]


async def fail_poison(claim: Claim, services: RunServices) -> None:
    """Fail the claimed run as PoisonRun (``claim.poison`` says why)."""
    run = claim.run
    message = f"the run's stored data cannot be decoded: {claim.poison}"
    log.warning("run %s (%s) fails as PoisonRun: %s", run.id, run.workflow, message)
    error = engine_error(PoisonRun(message))
    try:
        await services.commit(Transition(run.id, claim.lease_token, outcome=Fail(error)))
    except BackendError as exc:
        log.warning("could not fail poison run %s: %s", run.id, exc)
