"""The app's database backends, one per event loop where the backend needs it.

A PostgreSQL pool belongs to the event loop that opened it, so each loop that
touches the database (the caller's, the sync portal's, a background worker's) gets a
backend of its own; SQLite's backend serves every loop. Opening is shared: two tasks
asking at once get the same backend, migrated once per app.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from ._codec_backend import CodecBackend
from ._schedule_client import decorator_schedule, store_schedule
from .backends import create_backend
from .backends.base import Backend
from .codec import Codec
from .records import WorkflowRecord
from .settings import Settings
from .workflow import Registry

__all__ = ["Connections"]

_SHARED = "shared"


class Connections:
    """Opens, migrates, hands out and closes the backends of one app. A read-only app's
    backends are checked instead of migrated, and record no workflows."""

    def __init__(
        self, settings: Settings, registry: Registry, *, migrate: bool, codec: Codec | None = None
    ) -> None:
        self._settings = settings
        self._codec = codec
        self._registry = registry
        self._migrate = migrate
        self._migrated = False
        self._lock = threading.Lock()
        # Built now so a bad URL fails at construction; the backend itself says whether
        # one instance may serve every event loop (SQLite) or one per loop is needed.
        self._shared = self._new_backend().shareable_across_loops
        self._opening: dict[object, concurrent.futures.Future[Backend]] = {}
        self._ready: dict[object, Backend] = {}
        self._loops: dict[object, asyncio.AbstractEventLoop] = {}
        self._synced = -1

    def _new_backend(self) -> Backend:
        settings = self._settings
        backend = create_backend(
            settings.database_url, schema=settings.schema, read_only=settings.read_only
        )
        return backend if self._codec is None else CodecBackend(backend, self._codec)

    async def backend(self) -> Backend:
        """The backend of the running loop, opened (and migrated) on first use, with the
        registry's workflows recorded in the database."""
        loop = asyncio.get_running_loop()
        key: object = _SHARED if self._shared else loop
        backend = self._ready.get(key)
        if backend is None:
            backend = await self._open_for(key, loop)
        # Read-only: the workflows stay in this process (recording them would write).
        if self._synced != self._registry.generation and not self._settings.read_only:
            await self._sync_registry(backend)
        return backend

    async def _open_for(self, key: object, loop: asyncio.AbstractEventLoop) -> Backend:
        with self._lock:
            future = self._opening.get(key)
            creator = future is None
            if future is None:
                future = concurrent.futures.Future()
                self._opening[key] = future
        if creator:
            backend = self._new_backend()
            try:
                await backend.open()
                if self._settings.read_only:
                    await backend.check_schema()
                elif self._migrate and not self._migrated:
                    await backend.migrate()
                    self._migrated = True
            except BaseException as exc:
                with self._lock:
                    self._opening.pop(key, None)
                future.set_exception(exc)
                await backend.close()  # a pool opened before migrate failed
                raise
            with self._lock:
                self._ready[key] = backend
                self._loops[key] = loop
            future.set_result(backend)
        return await asyncio.wrap_future(future)

    async def _sync_registry(self, backend: Backend) -> None:
        generation = self._registry.generation
        definitions = self._registry.all()
        if definitions:
            await backend.register_workflows(
                [WorkflowRecord(d.name, d.version, d.options()) for d in definitions]
            )
            for definition in definitions:
                for pattern in definition.on:
                    await backend.subscribe_topic(pattern, definition.name)
                if definition.schedule is not None:
                    await store_schedule(backend, decorator_schedule(definition))
        flows = self._registry.flows()
        if flows:
            await backend.register_flows([flow.shape for flow in flows])
        self._synced = generation

    async def migrate(self) -> int:
        """Apply pending schema migrations now; returns the schema version."""
        # A connection of its own: the app's backends register workflows when they open,
        # which needs the tables this creates.
        backend = self._new_backend()
        await backend.open()
        try:
            version = await backend.migrate()
        finally:
            await backend.close()
        self._migrated = True
        return version

    async def release_loop(self) -> None:
        """Close the backend bound to the current loop (a worker's own loop ending)."""
        if self._shared:
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            backend = self._ready.pop(loop, None)
            self._opening.pop(loop, None)
            self._loops.pop(loop, None)
        if backend is not None:
            await backend.close()

    async def close_async(self) -> None:
        """Close the backends of the running loop and the shared one."""
        loop = asyncio.get_running_loop()
        with self._lock:
            keys = [k for k in self._ready if k is loop or k == _SHARED]
            backends = [self._ready.pop(k) for k in keys]
            for k in keys:
                self._opening.pop(k, None)
                self._loops.pop(k, None)
        for backend in backends:
            await backend.close()

    def close_others(self) -> None:
        """Close every backend left, each on its own loop while that loop still runs."""
        with self._lock:
            leftovers = list(self._ready.items())
            loops = dict(self._loops)
            self._ready.clear()
            self._opening.clear()
            self._loops.clear()
        for key, backend in leftovers:
            loop = loops.get(key)
            if loop is not None and loop.is_running():
                try:
                    asyncio.run_coroutine_threadsafe(backend.close(), loop).result(timeout=10)
                except Exception:
                    pass
