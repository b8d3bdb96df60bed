"""In-process notices for SQLite (which has no LISTEN/NOTIFY).

One hub per database file (keyed by its resolved absolute path) is shared by every
`SQLiteBackend` on that file in this process. Subscribers are (event loop, callback)
pairs; a notice is handed to each loop with ``call_soon_threadsafe``. Other processes
see the same work by polling, which is the source of truth anyway.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence

from ...records import Notice
from ..base import deliver

__all__ = ["NoticeHub", "hub_for"]

log = logging.getLogger("perdure.backends.sqlite")

_Callback = Callable[[Notice], None]


class NoticeHub:
    """Subscribers of one database file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._subscribers: dict[int, tuple[asyncio.AbstractEventLoop, _Callback, bool]] = {}

    def add(
        self, loop: asyncio.AbstractEventLoop, callback: _Callback, *, progress: bool = False
    ) -> int:
        """Subscribe; ``progress`` notices reach only subscribers that ask for them."""
        with self._lock:
            token = next(self._ids)
            self._subscribers[token] = (loop, callback, progress)
            return token

    def remove(self, token: int) -> None:
        with self._lock:
            self._subscribers.pop(token, None)

    def publish(self, notices: Sequence[Notice]) -> None:
        """Hand ``notices`` to every subscriber's loop (from any thread)."""
        if not notices:
            return
        with self._lock:
            subscribers = list(self._subscribers.items())
        batch = tuple(notices)
        plain = tuple(n for n in batch if n.kind != "progress")
        for token, (loop, callback, progress) in subscribers:
            if loop.is_closed():
                self.remove(token)
                continue
            mine = batch if progress else plain
            if not mine:
                continue
            try:
                loop.call_soon_threadsafe(deliver, (callback,), mine)
            except RuntimeError:  # the loop closed meanwhile
                self.remove(token)


_hubs: weakref.WeakValueDictionary[str, NoticeHub] = weakref.WeakValueDictionary()
_hubs_lock = threading.Lock()


def hub_for(path: str | os.PathLike[str]) -> NoticeHub:
    """The hub of a database file (created on first use; kept while backends hold it)."""
    key = os.path.realpath(os.path.abspath(os.fspath(path)))
    with _hubs_lock:
        hub = _hubs.get(key)
        if hub is None:
            hub = NoticeHub()
            _hubs[key] = hub
        return hub
