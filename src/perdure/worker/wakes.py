"""The wake times of runs a worker parked, so it wakes for them without asking the
database (a bounded heap; the database's ``next_wake_at`` covers what falls out)."""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta

__all__ = ["WakeTimes"]

_LIMIT = 10_000
_PAST = timedelta(milliseconds=100)


class WakeTimes:
    """A min-heap of wake times."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[datetime] = []

    def add(self, when: datetime) -> bool:
        """Remember ``when``; True if it is now the earliest (the caller's sleep is too
        long and must be cut short)."""
        heapq.heappush(self._heap, when)
        if len(self._heap) > _LIMIT:
            self._heap = heapq.nsmallest(_LIMIT // 2, self._heap)
        return self._heap[0] == when

    def earliest(self, now: datetime) -> datetime | None:
        """The earliest wake time still ahead (wakes well past are claimed by now)."""
        while self._heap and self._heap[0] <= now - _PAST:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None
