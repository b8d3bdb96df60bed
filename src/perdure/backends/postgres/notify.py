"""The LISTEN side of notices: one dedicated connection per backend.

The listener keeps a non-pool connection (autocommit) LISTENing on the schema's
``<schema>.wake`` channel, and on ``<schema>.ended`` (runs' ends) and
``<schema>.progress`` when a subscriber asks for them, and turns each notification
into a `Notice`. When the connection is lost (server restart, ``pg_terminate_backend``,
half-open TCP caught by the periodic ping) it reconnects with jittered exponential
backoff capped at 5 s, LISTENs again and then delivers ``Notice("wake")`` so
subscribers re-poll for whatever they missed. Notices are hints; polling is the
source of truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ..._tasks import cancel_and_wait
from ...records import Notice
from ..base import NoticeCallback, Unsubscribe, deliver

__all__ = ["Listener", "parse_notice"]

log = logging.getLogger("perdure.backends.postgres")

_KINDS: dict[str, Any] = {"w": "wake", "c": "cancel", "d": "done", "p": "progress"}
_ENDS: dict[str, Any] = {"c": "completed", "f": "failed", "x": "cancelled", "?": None}


def parse_notice(payload: str) -> Notice | None:
    """``w:<id>`` → wake, ``c:<id>`` → cancel, ``p:<id>`` → progress, and a run's end:
    ``e<status><attempt>:<id length>:<id><outcome>`` (see send_end() in
    10_send_notice.sql; ``d:<id>`` from the ``.done`` channel, which this version no
    longer listens to, also parses) → done; None if malformed."""
    if payload.startswith("e"):
        return _parse_end(payload)
    prefix, sep, run_id = payload.partition(":")
    kind = _KINDS.get(prefix)
    if kind is None or not sep:
        return None
    return Notice(kind, run_id or None)


def _parse_end(payload: str) -> Notice | None:
    attempt, _, rest = payload[2:].partition(":")
    length, _, rest = rest.partition(":")
    if payload[1:2] not in _ENDS or not attempt.isdigit() or not length.isdigit():
        return None
    size = int(length)
    if not 0 < size <= len(rest):
        return None
    outcome = rest[size:]
    return Notice(
        "done", rest[:size], _ENDS[payload[1]], int(attempt), outcome if outcome else None
    )


class Listener:
    """Runs the LISTEN loop in a task on the backend's event loop."""

    #: Seconds between liveness pings while no notification arrives.
    ping_interval = 30.0
    #: Cap of the reconnect backoff, in seconds.
    max_backoff = 5.0

    def __init__(
        self,
        conninfo: str,
        connect_kwargs: dict[str, Any],
        statements: Sequence[sql.Composed | sql.SQL],
        ping: sql.Composed | sql.SQL,
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = connect_kwargs
        self._statements = list(statements)
        self._ping = ping
        self._callbacks: list[NoticeCallback] = []
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._ready = asyncio.Event()
        self._renewing = False  # a reconnect asked for by also_listen (not a failure)
        #: Successful (re)connections so far (tests watch it).
        self.connections = 0

    def also_listen(self, statement: sql.Composed | sql.SQL) -> None:
        """LISTEN on one more channel: the connection is renewed with every channel,
        and listeners then hear a ``wake`` to re-read what they may have missed."""
        if statement in self._statements:
            return
        self._statements.append(statement)
        conn = self._conn
        if conn is not None and not conn.closed:
            self._renewing = True
            task = self._task
            if task is not None:
                task.cancel()
                self._task = asyncio.create_task(self._run(), name="perdure-pg-listener")

    def add(self, callback: NoticeCallback) -> Unsubscribe:
        """Call ``callback`` for every notice from now on; returns the way to stop."""
        self._callbacks.append(callback)

        async def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    def _dispatch(self, notice: Notice) -> None:
        deliver(list(self._callbacks), (notice,))

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection, if connected."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def start(self, wait: float = 5.0) -> None:
        """Start the loop and wait (up to ``wait`` s) until it LISTENs."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="perdure-pg-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), wait)

    async def stop(self) -> None:
        """Stop the loop and close its connection. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])
        await self._close()
        self._callbacks.clear()

    async def _close(self, conn: psycopg.AsyncConnection[Any] | None = None) -> None:
        """Close ``conn`` (default: the current connection), forgetting it if current."""
        conn = self._conn if conn is None else conn
        if conn is self._conn:
            self._conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _run(self) -> None:
        failures = 0
        last_log = 0.0
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, **self._kwargs
                )
                self._conn = conn
                for statement in self._statements:
                    await conn.execute(statement)
                resumed = self.connections > 0 or failures > 0
                self.connections += 1
                failures = 0
                self._ready.set()
                if resumed:
                    if not self._renewing:
                        log.info("notice listener reconnected")
                    self._renewing = False
                    self._dispatch(Notice("wake"))
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                now = time.monotonic()
                if now - last_log >= 1.0:  # at most one line per second
                    last_log = now
                    log.warning("notice listener lost its connection (%s); reconnecting", exc)
            finally:
                await self._close(conn)
            delay = min(self.max_backoff, 0.05 * 2 ** min(failures, 10))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            async for item in conn.notifies(timeout=self.ping_interval):
                notice = parse_notice(item.payload)
                if notice is not None:
                    self._dispatch(notice)
            # No notification for a while: make sure the connection is alive.
            await asyncio.wait_for(conn.execute(self._ping), self.max_backoff * 2)
