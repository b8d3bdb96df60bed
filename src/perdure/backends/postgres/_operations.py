"""The operations section of the contract on PostgreSQL: retry and fork (each one
call of its plpgsql function; a flow run's fork starts a new flow run,
`_flow_fork`)."""

from __future__ import annotations

from ...records import Run
from ._conn import QUERIES, PgConnections
from ._convert import run_from_row
from ._flow_fork import fork_flow
from ._flows import Q as FLOW_QUERIES

__all__ = ["Operations"]


class Operations:
    """`PostgresBackend`'s retry and fork."""

    _db: PgConnections

    async def retry_run(self, run_id: str, from_step: str | None, by: str) -> Run:
        params = {"run_id": run_id, "from_step": from_step, "by": by}
        row = await self._db.one(QUERIES["retry_run"], params)
        assert row is not None
        return run_from_row(row)

    async def fork_run(
        self,
        source_id: str,
        new_id: str,
        before_step: str | None,
        input_json: str | None,
        version: int | None,
        by: str,
    ) -> Run:
        kind = await self._db.one(FLOW_QUERIES["run_kind"], {"run_id": source_id})
        if kind is not None and kind[0] == "flow":
            source = await self._db.one(QUERIES["get_run"], {"run_id": source_id})
            assert source is not None
            asked = (new_id, before_step, input_json, version, by)
            return await fork_flow(self._db, run_from_row(source), asked)
        params = {
            "source_id": source_id,
            "id": new_id,
            "before_step": before_step,
            "input": input_json,
            "version": version,
            "by": by,
        }
        row = await self._db.one(QUERIES["fork_run"], params)
        assert row is not None
        return run_from_row(row)
