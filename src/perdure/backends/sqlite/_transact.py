"""Transactional steps on SQLite: the user's writes and the step's journal row in one
``BEGIN IMMEDIATE`` transaction (`Backend.transact`).

The work runs on the backend's thread, because the connection belongs to it, under a
private event loop (an ``async def`` function is driven there). The write lock is held
from ``BEGIN IMMEDIATE`` to the commit, so a long function delays every other writer of
the file: keep transactional steps short.
"""

from __future__ import annotations

import asyncio
import contextvars

from ...errors import ValidationError
from ...records import Transition, TransitionResult
from ..base import TransactionWork
from ._session import Session
from ._workers import _apply_one, validate_transitions

__all__ = ["transact"]


class _Undo(Exception):
    """Leaves the transaction rolling back, carrying the result to return."""

    def __init__(self, result: TransitionResult) -> None:
        super().__init__("rolled back")
        self.result = result


def transact(s: Session, work: TransactionWork, context: contextvars.Context) -> TransitionResult:
    """See `Backend.transact` (runs on the backend's thread)."""
    try:
        with s.write():
            transition = context.run(_drive, work, s)
            if not s.conn.in_transaction:
                raise ValidationError(
                    "the transactional step's function ended its transaction (commit or "
                    "rollback): leave that to perdure"
                )
            validate_transitions([transition])
            result = _apply_one(s, transition, s.clock())
            if not result.ok or result.existing:
                raise _Undo(result)
            return result
    except _Undo as undo:
        s.notices = []
        return undo.result


def _drive(work: TransactionWork, s: Session) -> Transition:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work(s.conn))
    finally:
        loop.close()
