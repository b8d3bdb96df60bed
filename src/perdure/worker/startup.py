"""A worker's start-up against a database that may not answer yet (a deploy that
starts workers first, a restart): retry while it is unreachable, stop when asked."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import BackendError, ReadOnlyDatabase, SchemaVersionError

__all__ = ["StoppedAtStart", "until_reachable"]

T = TypeVar("T")

log = logging.getLogger("perdure.worker")


class StoppedAtStart(Exception):
    """The worker was stopped before the database answered."""


async def until_reachable(
    attempt: Callable[[], Awaitable[T]],
    *,
    stopping: Callable[[], bool],
    sleep: Callable[[float], Awaitable[None]],
) -> T:
    """``attempt()``, retried (0.2 s doubling to 5 s, one warning each) while the
    database is unreachable. A schema newer than this code is not retried, nor is a
    read-only database; a stop meanwhile raises `StoppedAtStart`."""
    failures = 0
    while True:
        try:
            return await attempt()
        except (SchemaVersionError, ReadOnlyDatabase):
            raise
        except BackendError as exc:
            failures += 1
            delay = min(5.0, 0.1 * 2**failures)
            if not stopping():
                log.warning("database unreachable at start (%s); retrying in %.1fs", exc, delay)
                await sleep(delay)
            if stopping():
                raise StoppedAtStart from exc
