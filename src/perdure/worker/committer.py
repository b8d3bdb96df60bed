"""Group commit: transitions of many runs that arrive together share one transaction.

Transitions that arrive while a batch is in flight go together in the next batch
(`perdure._batching`): under load N step commits become one database transaction,
which is how perdure spends less than one commit per step.
A batch that fails with a storage error is retried with backoff until ``give_up``
seconds have passed (a database restart); retrying is safe because every
transition is fenced and journal rows are written once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from .._batching import Batcher
from ..backends.base import Backend
from ..errors import BackendError
from ..records import Transition, TransitionResult

log = logging.getLogger("perdure.worker")

__all__ = ["Committer"]


class Committer:
    """Batches `Backend.apply` calls for one worker (one event loop)."""

    def __init__(self, backend: Backend, *, max_batch: int = 128, give_up: float = 30.0) -> None:
        self._backend = backend
        self._give_up = give_up
        self._batcher: Batcher[Transition, TransitionResult] = Batcher(
            self._apply_with_retry, max_batch=max_batch
        )

    async def submit(self, transition: Transition) -> TransitionResult:
        """Commit ``transition`` (possibly together with others) and return its result."""
        return await self._batcher.submit(transition)

    async def _apply_with_retry(
        self, transitions: list[Transition]
    ) -> list[TransitionResult | Exception]:
        started = time.monotonic()
        delay = 0.05
        while True:
            try:
                return list(await self._backend.apply(transitions))
            except BackendError as exc:
                if time.monotonic() - started > self._give_up:
                    raise
                log.warning(
                    "commit of %d transition(s) failed, retrying: %s", len(transitions), exc
                )
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 2.0)

    async def drain(self) -> None:
        """Wait until everything submitted so far is committed."""
        await self._batcher.drain()
