"""A private event-loop thread that runs the async core for synchronous callers.

`App.start()` and the other sync methods are one-line calls through the portal to
their ``*_async`` twins, so there is one implementation of each behaviour.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Portal"]


class Portal:
    """Runs coroutines on a dedicated daemon thread's event loop."""

    def __init__(self, name: str = "perdure-portal") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The portal's loop, if started."""
        return self._loop

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                thread = threading.Thread(target=main, name=self._name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the portal loop and return its result."""
        loop = self._ensure()
        if self.in_own_loop():
            raise RuntimeError(
                "a synchronous perdure method was called from inside perdure's own loop; "
                "use its *_async twin"
            )
        future = asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def in_own_loop(self) -> bool:
        """True when called from inside the portal's loop (waiting on it would hang)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return running is self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the portal loop; its future, without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure())

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Iterate an async iterator from a synchronous caller, one item per `call`."""
        try:
            while True:
                try:
                    yield self.call(_next, agen)
                except StopAsyncIteration:
                    return
        finally:
            closer = getattr(agen, "aclose", None)
            if closer is not None and self._loop is not None:
                self.call(closer)

    def close(self) -> None:
        """Stop the loop thread (after running ``cleanup`` coroutines given to `call`)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()


async def _next(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()
