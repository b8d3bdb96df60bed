"""Step-key allocation: the first use of a name is ``name``, then ``name:1``, ``name:2``...

Keys are allocated synchronously when a step call starts, before its first await,
so parallel steps started with `asyncio.gather` get the same keys on every pass.
"""

from __future__ import annotations


class KeyAllocator:
    """Hands out journal keys for step names within one pass of a body."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def next(self, name: str) -> str:
        """The key for the next use of ``name``."""
        count = self._seen.get(name, 0)
        self._seen[name] = count + 1
        return name if count == 0 else f"{name}:{count}"
