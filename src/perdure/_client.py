"""What the client halves of `perdure.App` share: the settings, the portal for the sync
twins, and the backend of the running event loop."""

from __future__ import annotations

from ._portal import Portal
from .backends.base import Backend
from .errors import RunNotFound
from .records import Run
from .settings import Settings
from .validation import lookup_id

__all__ = ["ClientBase", "fetch_run"]


class ClientBase:
    """The base of `perdure.App`'s client mixins."""

    settings: Settings
    _portal: Portal

    async def _backend(self) -> Backend:
        raise NotImplementedError


async def fetch_run(backend: Backend, run_id: str) -> Run:
    """The run's record, or `RunNotFound` (also for an id no run could have)."""
    run = await backend.get_run(lookup_id(run_id))
    if run is None:
        raise RunNotFound(run_id)
    return run
