"""The journal cursor: what did this run ask for next?

A run's call order (`Claim.call_order`) lists the steps its body asked for, in the
order it first asked, as ``"kind:key"`` entries. On replay, while entries remain that
the body has not asked for, the next step asked must be the next entry (same key,
same kind): that check is one comparison on every step's path (`ask`).

An ask that is not next is held (`hold`), not judged at once: branches running in
parallel (``asyncio.gather`` of sub-coroutines) replay synchronously and may reach
their steps in another order than when they first ran; a held ask goes on as soon as
the other branches' asks make it the next entry (or, for a step the journal does not
hold, once every entry was asked). If the body settles while an ask is still held, no
branch can ever make it next: the run diverged (`divergence`).

A run journaled before the call order was recorded has none (``active`` is False):
it replays by key, as before, and records nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .barrier import ParkBarrier, ParkRequest

__all__ = ["JournalCursor", "entry"]


def entry(kind: str, key: str) -> str:
    """One call-order entry."""
    return f"{kind}:{key}"


class JournalCursor:
    """The position of one pass in its run's call order."""

    __slots__ = ("_barrier", "_end", "_held", "_keys", "_kinds", "_pos", "active", "asked")

    def __init__(self, order: Sequence[str], has_history: bool, barrier: ParkBarrier) -> None:
        self._barrier = barrier
        #: False for a run journaled before call orders were recorded
        self.active = bool(order) or not has_history
        kinds, keys = [], []
        for item in order:
            kind, _, key = item.partition(":")
            kinds.append(kind)
            keys.append(key)
        self._keys: list[str] = keys
        self._kinds: list[str] = kinds
        self._end = len(keys)
        self._pos = 0
        self._held: list[tuple[str, str, ParkRequest]] = []
        #: Entries first asked in this pass, in call order, not committed yet.
        self.asked: list[str] = []

    def ask(self, key: str, kind: str) -> bool:
        """The body asks for step ``key`` of ``kind``: True if that may go on now (it
        is the next entry, or a new step once every entry was asked); False if the
        ask must be held."""
        pos = self._pos
        if pos < self._end:
            if self._keys[pos] != key or self._kinds[pos] != kind:
                return kind == "rollback"  # rollbacks follow the body: by key, as before
            self._pos = pos + 1
            if self._held:
                self._release()
            return True
        if self.active and kind != "rollback":
            self.asked.append(entry(kind, key))
        return True

    def disable(self) -> None:
        """Check nothing from here on, record nothing (a cancelled run's rollback pass
        replays by key: it undoes the run, it does not continue it)."""
        self.active = False
        self._end = self._pos = 0
        self._held.clear()

    def patched(self, patch_id: str) -> bool | None:
        """A patch point: True if the journal holds its marker next (consumed) or
        holds nothing more (the marker is recorded); False if other entries come
        next (the run passed this point without the patch); None for a run with no
        call order."""
        if not self.active:
            return None
        pos = self._pos
        if pos < self._end:
            if self._kinds[pos] == "patch" and self._keys[pos] == patch_id:
                self._pos = pos + 1
                if self._held:
                    self._release()
                return True
            return False
        self.asked.append(entry("patch", patch_id))
        return True

    def deprecate_patch(self, patch_id: str) -> None:
        """A deprecated patch point: consume its marker if the journal holds it next."""
        pos = self._pos
        if pos < self._end and self._kinds[pos] == "patch" and self._keys[pos] == patch_id:
            self._pos = pos + 1
            if self._held:
                self._release()

    async def hold(self, key: str, kind: str) -> None:
        """Hold an ask that is not next until it may go on; raises `ParkSignal` if the
        pass parks first (it diverged, unless the ask is released by then)."""
        request = self._barrier.request("divergence", None)
        self._held.append((key, kind, request))
        await self._barrier.hold(request)

    def take_asked(self) -> tuple[str, ...]:
        """The entries to commit with the next transition (and forget them)."""
        if not self.asked:
            return ()
        asked = tuple(self.asked)
        self.asked.clear()
        return asked

    def unasked(self) -> bool:
        """True while entries remain that the body has not asked for."""
        return self._pos < self._end

    def divergence(self) -> dict[str, Any]:
        """How the pass diverged, for the run's error: the position, the entry the
        journal holds there, and what the body asked for instead (None: nothing, it
        ended)."""
        pos = self._pos
        journaled = None
        if pos < self._end:
            journaled = {"name": self._keys[pos], "kind": self._kinds[pos]}
        asked = None
        if self._held:
            key, kind, _ = self._held[0]
            asked = {"name": key, "kind": kind}
        return {"position": pos, "journaled": journaled, "asked": asked}

    def _release(self) -> None:
        while self._held:
            pos = self._pos
            if pos >= self._end:  # every entry was asked: the held asks are new steps
                for key, kind, request in self._held:
                    if self.active:
                        self.asked.append(entry(kind, key))
                    self._go_on(request)
                self._held.clear()
                return
            for i, (key, kind, request) in enumerate(self._held):
                if self._keys[pos] == key and self._kinds[pos] == kind:
                    self._pos = pos + 1
                    del self._held[i]
                    self._go_on(request)
                    break
            else:
                return

    def _go_on(self, request: ParkRequest) -> None:
        if not request.future.done():
            self._barrier.release(request)
            request.future.set_result(None)
