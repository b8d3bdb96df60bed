"""In-process notices for SQLite (which has no LISTEN/NOTIFY).

One hub per database file (keyed by its resolved absolute path) is shared by every
`SQLiteBackend` on that file in this process. Subscribers are (event loop, callback)
pairs; a notice is handed to each loop with ``call_soon_threadsafe``. While a hub has
subscribers (and for a few seconds after), a `ChangeWatcher` wakes them for what
other processes commit to the file too (``wake``, ``done`` and ``progress`` notices
without a run id: look again). Polling stays the fallback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from ...records import Notice
from ..base import deliver
from ._changes import ChangeWatcher

__all__ = ["NoticeHub", "hub_for"]

log = logging.getLogger("perdure.backends.sqlite")

_Callback = Callable[[Notice], None]
_ELSEWHERE = (Notice("wake"), Notice("done"), Notice("progress"))
_LINGER = 5.0  # seconds a change watcher outlives its last subscriber


class NoticeHub:
    """Subscribers of one database file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._subscribers: dict[int, tuple[asyncio.AbstractEventLoop, _Callback, bool]] = {}
        self._watcher: ChangeWatcher | None = None
        self._empty_since = 0.0  # monotonic time the last subscriber left
        self._unchanging = False

    def add(
        self, loop: asyncio.AbstractEventLoop, callback: _Callback, *, progress: bool = False
    ) -> int:
        """Subscribe; ``progress`` notices reach only subscribers that ask for them."""
        with self._lock:
            token = next(self._ids)
            self._subscribers[token] = (loop, callback, progress)
            if self._watcher is None and not self._unchanging:
                self._watcher = ChangeWatcher(self._path, self._elsewhere, self._wanted)
            return token

    def unchanging(self) -> None:
        """The file is read as immutable (no index to watch): start no change watcher."""
        with self._lock:
            self._unchanging = True

    def remove(self, token: int) -> None:
        with self._lock:
            if self._subscribers.pop(token, None) is not None and not self._subscribers:
                self._empty_since = time.monotonic()

    def commit(self, conn: sqlite3.Connection) -> None:
        """``COMMIT`` a write transaction of this process on ``conn`` (so the change
        watcher knows the change as this process's own, not another's)."""
        watcher = self._watcher
        if watcher is None:
            conn.execute("COMMIT")
        else:
            watcher.commit(conn)

    def _elsewhere(self) -> None:
        self.publish(_ELSEWHERE)

    def _wanted(self, watcher: ChangeWatcher) -> bool:
        # Kept for a while after the last subscriber left: a caller that waits for
        # results one after the other subscribes and leaves each time.
        with self._lock:
            if self._subscribers or time.monotonic() - self._empty_since < _LINGER:
                return True
            if self._watcher is watcher:
                self._watcher = None
            return False

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
            hub = NoticeHub(Path(key))
            _hubs[key] = hub
        return hub
