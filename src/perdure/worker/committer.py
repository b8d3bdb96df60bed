"""Group commit: transitions of many runs that arrive together share one transaction.

A transition submitted while no batch is in flight is sent at once (no added
latency when idle); transitions that arrive while a batch is in flight wait for it
and then go together in the next batch. Under load this turns N step commits into
one database transaction, which is how perdure spends less than one commit per step.
A batch that fails with a storage error is retried with backoff until ``give_up``
seconds have passed (a database restart); retrying is safe because every
transition is fenced and journal rows are written once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from ..backends.base import Backend
from ..errors import BackendError
from ..records import Transition, TransitionResult

log = logging.getLogger("perdure.worker")

__all__ = ["Committer"]


class Committer:
    """Batches `Backend.apply` calls for one worker (one event loop)."""

    def __init__(self, backend: Backend, *, max_batch: int = 128, give_up: float = 30.0) -> None:
        self._backend = backend
        self._max_batch = max_batch
        self._give_up = give_up
        self._queue: list[tuple[Transition, asyncio.Future[TransitionResult]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, transition: Transition) -> TransitionResult:
        """Commit ``transition`` (possibly together with others) and return its result."""
        future: asyncio.Future[TransitionResult] = asyncio.get_running_loop().create_future()
        self._queue.append((transition, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._queue:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            try:
                results = await self._apply_with_retry([t for t, _ in batch])
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(
                            exc
                            if isinstance(exc, Exception)
                            else BackendError("commit interrupted")
                        )
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _apply_with_retry(self, transitions: list[Transition]) -> list[TransitionResult]:
        started = time.monotonic()
        delay = 0.05
        while True:
            try:
                return await self._backend.apply(transitions)
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
        while self._flusher is not None and not self._flusher.done():
            await asyncio.wait({self._flusher})
