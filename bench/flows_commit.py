"""The cost of ending a DAG-flow task that starts three more, on the storage contract.

Usage: python bench/flows_commit.py [--dialect pg|sqlite] [--runs 100] [--rounds 3]

One flow run at a time (``a -> b, c, d -> e``), each of its ``a`` tasks ended by one
`Backend.apply` on an idle connection, three ways: the commit alone; the commit and
then a claim query for the three tasks it started (how a worker got them before
claim on complete); and the commit with `Transition.claim`, which hands them over in
the same transaction. Prints microseconds per ``a`` for each round. PostgreSQL uses
the schema ``bench_flows_commit`` (dropped first); SQLite a temporary file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time

import psycopg

from perdure.backends.base import Backend
from perdure.backends.postgres import PostgresBackend
from perdure.backends.sqlite import SQLiteBackend
from perdure.flows.definition import FlowShape, StepShape
from perdure.ids import new_run_id
from perdure.records import ClaimParams, Complete, NewRun, Transition

ADMIN_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "bench_flows_commit"
SHAPE = FlowShape(
    "fan",
    steps=(
        StepShape("a"),
        StepShape("b", ("a",)),
        StepShape("c", ("a",)),
        StepShape("d", ("a",)),
        StepShape("e", ("b", "c", "d")),
    ),
)
PAIRS = tuple((f"fan:{s.name}", 1) for s in SHAPE.steps)
MODES = ("commit", "commit+claim_runs", "claim_on_complete")


def _backend(dialect: str) -> Backend:
    if dialect == "pg":
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        return PostgresBackend(ADMIN_URL, schema=SCHEMA)
    return SQLiteBackend(os.path.join(tempfile.mkdtemp(prefix="bench_fc_"), "bench.db"))


async def _round(backend: Backend, mode: str, runs: int) -> float:
    for _ in range(runs):
        await backend.start_flow(
            NewRun(id=new_run_id(), workflow="fan", version=None, input_json="1")
        )
    tasks = await backend.claim_runs(ClaimParams("bench", PAIRS, runs, 30.0))
    started = time.perf_counter()
    for task in tasks:
        claim = ClaimParams("bench", PAIRS, 3, 30.0) if mode == "claim_on_complete" else None
        transition = Transition(task.run.id, task.lease_token, outcome=Complete("1"), claim=claim)
        (result,) = await backend.apply([transition])
        assert result.ok
        if mode == "commit+claim_runs":
            assert len(await backend.claim_runs(ClaimParams("bench", PAIRS, 3, 30.0))) == 3
    seconds = time.perf_counter() - started
    while more := await backend.claim_runs(ClaimParams("bench", PAIRS, 500, 30.0)):
        await backend.apply(
            [Transition(t.run.id, t.lease_token, outcome=Complete("1")) for t in more]
        )
    return seconds / len(tasks) * 1e6


async def _main(dialect: str, runs: int, rounds: int) -> dict[str, list[float]]:
    backend = _backend(dialect)
    await backend.open()
    await backend.migrate()
    await backend.register_flows([SHAPE])
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for _ in range(rounds):
            for mode in MODES:
                results[mode].append(round(await _round(backend, mode, runs)))
    finally:
        await backend.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dialect", choices=["pg", "sqlite"], default="pg")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = asyncio.run(_main(args.dialect, args.runs, args.rounds))
    print(json.dumps({"dialect": args.dialect, "us_per_task_end": results}, indent=2))


if __name__ == "__main__":
    main()
