"""Group commit, written once: items submitted while a batch is in flight go together
in the next batch.

A lone item goes out at once (no added latency when idle); under load N submissions
become one database transaction. The worker's committer batches transitions with it,
the PostgreSQL backend batches starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from .errors import BackendError

__all__ = ["Batcher"]

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")

#: Commits a batch: one result, or the error for that item alone, per item in order.
#: Raising fails every item of the batch with that error.
BatchHandler = Callable[[list[I]], Awaitable[list[R | Exception]]]


class Batcher(Generic[I, R]):
    """Batches submissions for one event loop."""

    def __init__(self, handle: BatchHandler[I, R], *, max_batch: int) -> None:
        self._handle = handle
        self._max_batch = max_batch
        self._queue: list[tuple[I, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, item: I) -> R:
        """Commit ``item`` (possibly together with others) and return its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until everything submitted so far has its answer (or ``timeout``)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._flusher is not None and not self._flusher.done():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            await asyncio.wait({self._flusher}, timeout=left)

    async def _flush(self) -> None:
        while self._queue:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            results: list[R | Exception]
            try:
                results = await self._handle([item for item, _ in batch])
            except Exception as exc:
                results = [exc] * len(batch)
            except BaseException:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(BackendError("commit interrupted"))
                raise
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
