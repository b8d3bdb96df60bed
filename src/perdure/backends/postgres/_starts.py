"""Starts (`Backend.create_run`) on PostgreSQL: group commit of concurrent starts,
and starts handed to a worker of the starting process, leased to it at once."""

from __future__ import annotations

from typing import Any

from ..._batching import Batcher
from ...records import ClaimParams, CreateResult, NewRun
from ._conn import QUERIES, PgConnections, pipelined_transaction
from ._convert import create_query, created_from_row, new_run_params

__all__ = ["Starts"]

_START_BATCH = 100  # starts committed together at most


class Starts:
    """The starts of one backend."""

    def __init__(self, db: PgConnections) -> None:
        self._db = db
        self._batcher: Batcher[NewRun, CreateResult] = Batcher(
            self._create_batch, max_batch=_START_BATCH
        )

    async def create(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        """Create a run. Starts that arrive while another start is committing are
        committed together in the next transaction (group commit), so a client
        starting many runs at once pays one commit per batch, not per run; a lone start
        goes out at once. A start leased to a worker (``claim``) goes out alone."""
        if claim is None or new.flow_controlled:  # the claim enforces their limits
            return await self._batcher.submit(new)
        params = new_run_params(new)
        params["worker"] = claim.worker_id
        params["lease"] = claim.lease_seconds
        return created_from_row(await self._row(new, params), leased=True)

    async def drain(self, timeout: float) -> None:
        """Wait for the starts in flight to get their answer."""
        await self._batcher.drain(timeout=timeout)

    async def _create_batch(self, batch: list[NewRun]) -> list[CreateResult | Exception]:
        if len(batch) > 1:
            try:
                return list(await self._create_together(batch))
            except Exception:
                pass  # one bad start (an idempotency conflict, a deadlock) aborted them all
        # Alone, or after a shared transaction failed: each its own, and its own error.
        results: list[CreateResult | Exception] = []
        for new in batch:
            try:
                results.append(await self._create_one(new))
            except Exception as exc:
                results.append(exc)
        return results

    async def _create_together(self, batch: list[NewRun]) -> list[CreateResult | Exception]:
        async with self._db.connection() as conn:
            cursors = []
            async with pipelined_transaction(conn):
                for new in batch:
                    query = QUERIES[create_query(new)]
                    cursors.append(await conn.execute(query, new_run_params(new)))
            rows = [await cur.fetchone() for cur in cursors]
        results: list[CreateResult | Exception] = []
        for new, row in zip(batch, rows, strict=True):
            try:
                found = row if row is not None else await self._taken(new_run_params(new))
                results.append(created_from_row(found))
            except Exception as exc:
                results.append(exc)
        return results

    async def _create_one(self, new: NewRun) -> CreateResult:
        return created_from_row(await self._row(new, new_run_params(new)))

    async def _row(self, new: NewRun, params: dict[str, Any]) -> tuple[Any, ...]:
        """The row of ``new``'s start statement (``create_query``)."""
        row = await self._db.one(QUERIES[create_query(new)], params)
        return row if row is not None else await self._taken(params)

    async def _taken(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """A plain start found its run id or idempotency key taken (no row):
        ``create_run`` returns the run that holds it and records a differing input."""
        row = await self._db.one(QUERIES["create_run"], params)
        assert row is not None
        return row
