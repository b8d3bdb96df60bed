"""Transactional steps on PostgreSQL: the user's writes and the step's journal row in
one transaction (`Backend.transact`).

The transaction runs on a connection of the application's own pool (its search path,
not perdure's schema), so the user's unqualified table names mean what they mean in
the rest of the application. Once the user's function returned, the search path is
pointed at perdure's schema for the rest of the transaction (``SET LOCAL``) and the
transition is applied with the same fenced statement `apply` uses: a lost lease
matches no row, and everything, the user's writes included, is rolled back.
"""

from __future__ import annotations

from psycopg.pq import TransactionStatus

from ...errors import ValidationError
from ...records import Step, TransitionResult
from ..base import TransactionWork
from ._conn import QUERIES, PgConnections
from ._convert import step_from_row, transition_params
from ._schema import ident

__all__ = ["transact"]


class _Undo(Exception):
    """Leaves the transaction block rolling back, carrying the result to return."""

    def __init__(self, result: TransitionResult) -> None:
        super().__init__("rolled back")
        self.result = result


async def transact(db: PgConnections, schema: str, work: TransactionWork) -> TransitionResult:
    """See `Backend.transact`."""
    written: set[str] = set()
    keys: list[str] = []
    run_id = ""
    try:
        async with db.app_connection() as conn, conn.transaction():
            transition = await work(conn)
            if conn.info.transaction_status != TransactionStatus.INTRANS:
                raise ValidationError(
                    "the transactional step's function ended or broke its transaction "
                    "(commit, rollback or a failed statement): leave that to perdure"
                )
            general, params = transition_params(transition)
            run_id, keys = transition.run_id, list(params["keys"])
            await conn.execute(ident(QUERIES["set_local_search_path"], schema))
            if general:
                cur = await conn.execute(QUERIES["apply_transition_general"], params)
            else:
                cur = await conn.execute(QUERIES["apply_transition"], params | {"ord": 1})
            row = await cur.fetchone()
            if row is None or (general and not row[0]):
                raise _Undo(TransitionResult(ok=False))
            written = set(row[1] or ())
            if any(key not in written for key in keys):
                raise _Undo(TransitionResult(ok=True))
    except _Undo as undo:
        if not undo.result.ok:
            return undo.result
        return TransitionResult(ok=True, existing=tuple(await _stored(db, run_id, keys)))
    return TransitionResult(ok=True)


async def _stored(db: PgConnections, run_id: str, keys: list[str]) -> list[Step]:
    """The final rows already stored under ``keys`` (they never change once final)."""
    rows = await db.all(QUERIES["existing_steps"], {"run_ids": [run_id] * len(keys), "keys": keys})
    return [step_from_row(r[1:]) for r in rows]
