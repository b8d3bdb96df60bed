"""Wakes for what other processes commit to the same SQLite file.

SQLite has no LISTEN/NOTIFY, and a worker or a waiting ``result()`` in another
process would otherwise only see new work at its next poll (100 ms). ``PRAGMA
data_version`` answers, on one connection, "did any other connection commit since I
last asked?" by reading the WAL index in shared memory: no disk, no lock. One thread
per process and file asks it every 2 ms (1 ms while other processes commit) on a
connection of its own.

That connection also sees this process's own commits, which already woke this
process directly. They are told apart exactly: every commit of this process reads
the watch connection's ``data_version`` just before ``COMMIT`` (while it holds the
write lock, so no other process can commit in between: a change seen then came from
elsewhere) and just after it (the change it made itself, absorbed). Another process
may commit between ``COMMIT`` and that read (SQLite checkpoints inside ``COMMIT``,
after the lock is free); the committing connection's own ``data_version``, which
moves only for other connections' commits, tells when. So a wake goes out only for
changes from other processes, and for each of them, at most once per interval.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["ChangeWatcher"]

log = logging.getLogger("perdure.backends.sqlite")

INTERVAL = 0.002  # seconds between two looks; one look costs a few microseconds
BUSY_INTERVAL = 0.001  # between two looks while other processes commit
BUSY_FOR = 0.5  # seconds another process's commit keeps the watcher at that pace
_KEEP_EVERY = 0.5  # seconds between two questions whether the watcher is still wanted


class ChangeWatcher:
    """Calls ``on_change`` (on its own thread) after another process commits.

    It starts watching at once (changes committed after the constructor returns are
    seen), and asks ``wanted(self)`` every half second or so; it stops when told no.
    """

    def __init__(
        self,
        path: Path,
        on_change: Callable[[], None],
        wanted: Callable[[ChangeWatcher], bool],
    ) -> None:
        self._path = path
        self._on_change = on_change
        self._wanted = wanted
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._seen = 0  # the watch connection's data_version when last looked at
        self._foreign = False  # another process committed; not told yet
        self._busy_until = 0.0  # monotonic time until which it looks at the busy pace
        try:
            self._connect()
        except sqlite3.Error as exc:
            log.warning("cannot watch %s for other processes' commits: %s", path, exc)
            return
        threading.Thread(target=self._watch, name="perdure-sqlite-changes", daemon=True).start()

    def commit(self, conn: sqlite3.Connection) -> None:
        """``COMMIT`` on ``conn`` (a connection of this process, holding the write lock),
        noting the change as this process's own."""
        with self._lock:
            watch = self._conn
            if watch is None:
                conn.execute("COMMIT")
                return
            before = self._version(watch)
            if before != self._seen:
                self._foreign = True  # committed elsewhere before this took the lock
            mine = self._version(conn)  # inside the transaction: its snapshot's
            conn.execute("COMMIT")
            self._seen = self._version(watch)
            if self._version(conn) != mine:
                # Another process committed after this COMMIT released the lock (as
                # during a checkpoint SQLite runs inside COMMIT): the read above took
                # its change for this one. A connection's data_version moves only
                # for other connections' commits, so this one's own tells them apart.
                self._foreign = True

    # ------------------------------------------------------------------ the thread

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def _connect(self) -> sqlite3.Connection | None:
        # Never create the file: the backend creates it with private permissions.
        if not os.path.exists(self._path):
            return None
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        with self._lock:
            self._conn = conn
            self._seen = self._version(conn)
        return conn

    def _watch(self) -> None:
        conn = self._conn
        ask_at = time.monotonic() + _KEEP_EVERY
        try:
            while True:
                # Faster while other processes commit (a run's next hop across them is
                # likely near), at the idle pace otherwise: 500 looks a second. This
                # process's own commits do not count: they woke it directly.
                now = time.monotonic()
                time.sleep(BUSY_INTERVAL if now < self._busy_until else INTERVAL)
                if now >= ask_at:
                    if not self._wanted(self):
                        return
                    ask_at = now + _KEEP_EVERY
                if conn is None:
                    conn = self._connect()
                    continue
                with self._lock:
                    version = self._version(conn)
                    changed = self._foreign or version != self._seen
                    self._seen, self._foreign = version, False
                if changed:
                    self._busy_until = time.monotonic() + BUSY_FOR
                    self._on_change()
        except sqlite3.Error as exc:  # the file went away: polling still covers it
            log.warning("watching %s for other processes' commits stopped: %s", self._path, exc)
        finally:
            with self._lock:
                self._conn = None
            if conn is not None:
                conn.close()
