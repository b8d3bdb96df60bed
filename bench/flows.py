"""DAG-flow workloads beside W1: per-task overhead against a workflow step's.

Usage: python bench/flows.py [--dialect pg|sqlite] [--runs 200] [--map-size 1000] [--quick]
                             [--no-claim-on-complete]

Three workloads in one process (a worker in a background thread, the client in the
main thread), on a fresh database (PostgreSQL: the schema ``bench_flows``, dropped
first; SQLite: a temporary file):

* W1 beside it: ``--runs`` runs of a 5-step workflow (the same five trivial steps);
* F1, a 5-step diamond flow (a -> b, c, d -> e), ``--runs`` runs, measured against W1
  in the order W1, F1, F1, W1 after an uncounted W1;
* R1, ``--runs`` runs of a one-step workflow, in the order R1, F1, F1, R1 around the
  second pair: a flow task is a run of its own (claimed, leased, fenced and ended
  like one), so its cost is also given against a whole one-step run's;
* F2, one run of a map over ``--map-size`` elements, then a step that sums them.

It prints steps or tasks per second and the per-task cost against a workflow step's
(the issue's target: within 1.5x), for F1 and for F2's map tasks (one step's many
tasks: a task's own cost, with little of its step's and run's around it). Benchmarks
are not tests: run it on a quiet machine.

Counts, which a loaded machine does not blur, are printed beside the times: for each
workload the worker's claim queries, commit batches (`Backend.apply` calls) and lease
renewals per step or task, counted in this process; and on PostgreSQL the server's
write transactions and WAL bytes per step or task (its xid and WAL position deltas,
which count every writer on the server: run it where nothing else writes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from typing import Any

import psycopg

from perdure import App, Context, TaskContext
from perdure.backends.base import Backend

try:
    from _common import CommitCounter  # run as a script: bench/ is on the path
except ImportError:  # pragma: no cover - imported as bench.flows
    from bench._common import CommitCounter

ADMIN_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "bench_flows"


def _app(dialect: str) -> App:
    if dialect == "pg":
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        return App(ADMIN_URL, schema=SCHEMA, sweep_interval=0)
    path = os.path.join(tempfile.mkdtemp(prefix="bench_flows_"), "bench.db")
    return App(f"sqlite:///{path}", sweep_interval=0)


def _small(i: int) -> dict[str, int]:
    return {"i": i}


def define(app: App) -> None:
    """The workflow and the two flows."""

    @app.workflow
    async def single(ctx: Context, n: int) -> dict[str, int]:
        return await ctx.step.run("a", lambda: _small(n))

    @app.workflow
    async def five(ctx: Context, n: int) -> dict[str, int]:
        for name in ("a", "b", "c", "d", "e"):
            await ctx.step.run(name, lambda: _small(n))
        return _small(n)

    diamond = app.flow("diamond", base_delay=0)

    @diamond.step
    def a(ctx: TaskContext, input: Any) -> dict[str, int]:
        return _small(input["run"])

    for name in ("b", "c", "d"):
        diamond.step(lambda ctx, input: _small(input["a"]["i"]), name=name, depends_on=[a])

    @diamond.step(depends_on=["b", "c", "d"])
    def e(ctx: TaskContext, input: Any) -> dict[str, int]:
        return _small(input["b"]["i"])

    fanout = app.flow("fanout", base_delay=0)

    @fanout.map(over="run")
    def item(ctx: TaskContext, n: int) -> int:
        return n

    @fanout.step(depends_on=[item])
    def total(ctx: TaskContext, input: Any) -> int:
        return sum(input["item"])


class _Calls:
    """Counts the worker's backend calls (claims, commit batches, lease renewals)."""

    names = ("claim_runs", "apply", "extend_leases")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.names, 0)

    def install(self, backend_type: type[Backend]) -> None:
        for name in self.names:
            original = getattr(backend_type, name)

            async def counted(self_: Any, *args: Any, _o: Any = original, _n: str = name) -> Any:
                self.counts[_n] += 1
                return await _o(self_, *args)

            setattr(backend_type, name, counted)

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


def _backend_type(dialect: str) -> type[Backend]:
    if dialect == "pg":
        from perdure.backends.postgres import PostgresBackend

        return PostgresBackend
    from perdure.backends.sqlite import SQLiteBackend

    return SQLiteBackend


async def _measure(
    app: App, name: str, inputs: list[Any], calls: _Calls, xids: CommitCounter | None, units: int
) -> tuple[float, dict[str, float]]:
    """Run the workload; its seconds and its counts per unit (step or task)."""
    before, xid0 = calls.snapshot(), xids.next_xid() if xids else 0
    wal0 = xids.wal_lsn() if xids else 0
    seconds = await _many(app, name, inputs)
    after, xid1 = calls.snapshot(), xids.next_xid() if xids else 0
    counts = {f"{k}_per_unit": round((after[k] - before[k]) / units, 3) for k in calls.names}
    if xids is not None:
        counts["write_xacts_per_unit"] = round((xid1 - xid0) / units, 3)
        counts["wal_bytes_per_unit"] = round((xids.wal_lsn() - wal0) / units)
    return seconds, counts


def _mean(timed: list[tuple[float, dict[str, float]]]) -> tuple[float, dict[str, float]]:
    """The mean seconds and counts of repeated measures of one workload."""
    seconds = sum(t for t, _c in timed) / len(timed)
    keys = timed[0][1]
    return seconds, {k: round(sum(c[k] for _t, c in timed) / len(timed), 3) for k in keys}


async def _many(app: App, name: str, inputs: list[Any]) -> float:
    started = time.perf_counter()
    handles = await asyncio.gather(*(app.start_async(name, i) for i in inputs))
    await asyncio.gather(*(app.result_async(h.id, timeout=600) for h in handles))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dialect", choices=["pg", "sqlite"], default="pg")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--map-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument(
        "--no-claim-on-complete",
        action="store_true",
        help="workers never take tasks from their commits (the behaviour before it)",
    )
    args = parser.parse_args()
    if args.no_claim_on_complete:
        from perdure.worker.handoff import HandOffs

        HandOffs.reserve = lambda self: None  # type: ignore[method-assign]
    runs, size = (10, 50) if args.quick else (args.runs, args.map_size)

    calls = _Calls()
    calls.install(_backend_type(args.dialect))
    xids = CommitCounter("postgres") if args.dialect == "pg" else None
    app = _app(args.dialect)
    define(app)
    results: dict[str, Any] = {
        "dialect": args.dialect,
        "runs": runs,
        "map_size": size,
        "claim_on_complete": not args.no_claim_on_complete,
    }

    async def workloads() -> list[tuple[float, dict[str, float]]]:
        # One event loop for all: the client's connections stay open between them. An
        # uncounted W1 first (the first workload on a fresh schema runs ~1.3x faster
        # than the next ones), then W1 and F1 in the order W1, F1, F1, W1, and R1 and
        # F1 in the order R1, F1, F1, R1, so drift within each pair cancels out.
        inputs = list(range(runs))
        await _many(app, "five", inputs)
        order = ["five", "diamond", "diamond", "five", "single", "diamond", "diamond", "single"]
        timed = [
            await _measure(app, name, inputs, calls, xids, runs * (1 if name == "single" else 5))
            for name in order
        ]
        first, second = timed[:4], timed[4:]
        return [
            _mean([t for name, t in zip(order, timed, strict=True) if name == "five"]),
            _mean([first[1], first[2]]),
            _mean([t for name, t in zip(order, timed, strict=True) if name == "single"]),
            _mean([second[1], second[2]]),
            await _measure(app, "fanout", [list(range(size))], calls, xids, size + 1),
        ]

    with app.worker(concurrency=args.concurrency):
        measured = asyncio.run(workloads())
    (w1, w1_counts), (f1, f1_counts), (r1, _r1), (f1b, _f1b), (f2, f2_counts) = measured
    app.close()
    if xids is not None:
        xids.close()
    step_us = w1 / (runs * 5) * 1e6
    task_us = f1 / (runs * 5) * 1e6
    run_us = r1 / runs * 1e6
    task_by_run_us = f1b / (runs * 5) * 1e6
    map_us = f2 / (size + 1) * 1e6
    results.update(
        w1_steps_per_s=round(runs * 5 / w1, 1),
        f1_tasks_per_s=round(runs * 5 / f1, 1),
        f2_tasks_per_s=round((size + 1) / f2, 1),
        w1_us_per_step=round(step_us, 1),
        f1_us_per_task=round(task_us, 1),
        f2_us_per_task=round(map_us, 1),
        task_over_step=round(task_us / step_us, 2),
        map_task_over_step=round(map_us / step_us, 2),
        r1_us_per_run=round(run_us, 1),
        f1_us_per_task_beside_r1=round(task_by_run_us, 1),
        task_over_one_step_run=round(task_by_run_us / run_us, 2),
        w1_counts_per_step=w1_counts,
        f1_counts_per_task=f1_counts,
        f2_counts_per_task=f2_counts,
    )
    print(json.dumps(results, indent=2))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
