"""Starts on PostgreSQL (`Backend.create_run`, and `Backend.start_flow` without a
claim): group commit of concurrent starts, and starts handed to a worker of the
starting process, leased to it at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from ..._batching import Batcher
from ...records import ClaimParams, CreateResult, NewRun
from ._conn import QUERIES, PgConnections, pipelined_transaction
from ._convert import create_query, created_from_row, flow_start_params, new_run_params

__all__ = ["Starts"]

_START_BATCH = 100  # starts committed together at most

#: A start's statement and its parameters.
Statement = Callable[[NewRun], tuple[str, dict[str, Any]]]


def _run_statement(new: NewRun) -> tuple[str, dict[str, Any]]:
    return QUERIES[create_query(new)], new_run_params(new)


def _flow_statement(new: NewRun) -> tuple[str, dict[str, Any]]:
    return QUERIES["start_flow_run"], flow_start_params(new)


class Starts:
    """The starts of one backend."""

    def __init__(self, db: PgConnections) -> None:
        self._db = db
        self._batcher: Batcher[NewRun, CreateResult] = Batcher(
            partial(self._create_batch, _run_statement), max_batch=_START_BATCH
        )
        self._flows: Batcher[NewRun, CreateResult] = Batcher(
            partial(self._create_batch, _flow_statement), max_batch=_START_BATCH
        )

    async def create(self, new: NewRun, claim: ClaimParams | None = None) -> CreateResult:
        """Create a run. Starts that arrive while another start is committing are
        committed together in the next transaction (group commit), so a client
        starting many runs at once pays one commit per batch, not per run; a lone start
        goes out at once. A start leased to a worker (``claim``) goes out alone."""
        if claim is None or new.flow_controlled:  # the claim enforces their limits
            return await self._batcher.submit(new)
        query, params = _run_statement(new)
        params["worker"] = claim.worker_id
        params["lease"] = claim.lease_seconds
        return created_from_row(await self._row(query, params), leased=True)

    async def start_flow(self, new: NewRun) -> CreateResult:
        """Start a flow run (``start_flow_run``), committed together with the flow
        starts that arrive while another is committing, as `create` does."""
        return await self._flows.submit(new)

    async def drain(self, timeout: float) -> None:
        """Wait for the starts in flight to get their answer."""
        await asyncio.gather(
            self._batcher.drain(timeout=timeout), self._flows.drain(timeout=timeout)
        )

    async def _create_batch(
        self, statement: Statement, batch: list[NewRun]
    ) -> list[CreateResult | Exception]:
        if len(batch) > 1:
            try:
                return list(await self._create_together(statement, batch))
            except Exception:
                pass  # one bad start (an idempotency conflict, a deadlock) aborted them all
        # Alone, or after a shared transaction failed: each its own, and its own error.
        results: list[CreateResult | Exception] = []
        for new in batch:
            try:
                results.append(created_from_row(await self._row(*statement(new))))
            except Exception as exc:
                results.append(exc)
        return results

    async def _create_together(
        self, statement: Statement, batch: list[NewRun]
    ) -> list[CreateResult | Exception]:
        statements = [statement(new) for new in batch]
        async with self._db.connection() as conn:
            cursors = []
            async with pipelined_transaction(conn):
                for query, params in statements:
                    cursors.append(await conn.execute(query, params))
            rows = [await cur.fetchone() for cur in cursors]
        results: list[CreateResult | Exception] = []
        for (_query, params), row in zip(statements, rows, strict=True):
            try:
                found = row if row is not None else await self._taken(params)
                results.append(created_from_row(found))
            except Exception as exc:
                results.append(exc)
        return results

    async def _row(self, query: str, params: dict[str, Any]) -> tuple[Any, ...]:
        """The row of a start's statement (a flow's always has one)."""
        row = await self._db.one(query, params)
        return row if row is not None else await self._taken(params)

    async def _taken(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """A plain start found its run id or idempotency key taken (no row):
        ``create_run`` returns the run that holds it and records a differing input."""
        row = await self._db.one(QUERIES["create_run"], params)
        assert row is not None
        return row
