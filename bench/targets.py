"""Issue 18's performance targets, each as a ratio from one invocation.

Every contender runs in this one invocation, at its documented default setup and,
separately, at a scaled setup:

* **default** (the README's): perdure with one ``perdure worker`` process and one
  sync client starting runs one at a time (and, as the README tour runs it, with the
  worker in the client's process: ``with app.worker():``); PgQueuer with one
  ``QueueManager`` process and one enqueueing coroutine (W1); DBOS direct start, in
  process (W2).
* **scaled**: two worker processes of each queue (perdure, PgQueuer) and four
  concurrent starters.

Beside them: the server's commit rate at the connections perdure used (pgbench),
a bare one-row insert commit against a perdure start, and SQLite with the worker in
another process (``sqlite_processes.py``). Write transactions are counted from the
server's transaction ids, so nothing else may write to the server meanwhile.

Usage: ``python bench/targets.py [--runs 2000] [--w2 200] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import QUICK, drop_database, fresh_database, stop_children_on_sigterm  # noqa: E402
from _limit import ROW, run_limit  # noqa: E402
from readme_setup import cpu_split, dbos_w2, perdure_readme, pgqueuer_w1  # noqa: E402

START_APP = """
from perdure import App, Context

app = App()

@app.workflow
async def one(ctx: Context, n: int) -> int:
    return n
"""


def start_cost(n: int) -> dict[str, float]:
    """Mean milliseconds of ``app.start`` (no worker running, so nothing competes)
    against a bare one-row insert commit on its own connection, same server; and the
    same pair with async drivers: ``start_async`` on the caller's event loop against
    an async psycopg insert (no hop from a sync caller's thread to the app's loop)."""
    import psycopg

    url = fresh_database("bench_start_cost")
    work = Path(tempfile.mkdtemp(prefix="bench_start_"))
    (work / "start_app.py").write_text(START_APP)
    os.environ["PERDURE_DATABASE_URL"] = url
    app = runpy.run_path(str(work / "start_app.py"))["app"]
    app.list_workflows()
    for i in range(50):  # warm: connections, prepared statements
        app.start("one", i)
    t0 = time.perf_counter()
    for i in range(n):
        app.start("one", i)
    start_ms = (time.perf_counter() - t0) / n * 1000
    app.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bare (id bigserial PRIMARY KEY, payload text NOT NULL)")
        for _ in range(50):
            conn.execute("INSERT INTO bare (payload) VALUES (%s)", (ROW,))
        t0 = time.perf_counter()
        for _ in range(n):
            conn.execute("INSERT INTO bare (payload) VALUES (%s)", (ROW,))
        insert_ms = (time.perf_counter() - t0) / n * 1000

    async def async_pair() -> tuple[float, float]:
        app = runpy.run_path(str(work / "start_app.py"))["app"]  # on this loop
        for i in range(50):
            await app.start_async("one", i)
        t0 = time.perf_counter()
        for i in range(n):
            await app.start_async("one", i)
        start = (time.perf_counter() - t0) / n * 1000
        await app.close_async()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for _ in range(50):
                await conn.execute("INSERT INTO bare (payload) VALUES (%s)", (ROW,))
            t0 = time.perf_counter()
            for _ in range(n):
                await conn.execute("INSERT INTO bare (payload) VALUES (%s)", (ROW,))
            insert = (time.perf_counter() - t0) / n * 1000
        return start, insert

    start_async_ms, insert_async_ms = asyncio.run(async_pair())
    drop_database("bench_start_cost")
    return {
        "start_ms": start_ms,
        "bare_insert_ms": insert_ms,
        "start_async_ms": start_async_ms,
        "bare_insert_async_ms": insert_async_ms,
    }


def sqlite_w2(runs: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "sqlite_processes.py"), "--runs", str(runs)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def best(reps: list[dict[str, Any]], key: str = "steps_per_s") -> float:
    return max(float(r[key]) for r in reps)


def mean_best(measures: list[dict[str, Any]]) -> float:
    """The mean over measures of each one's best W1 try."""
    return sum(best(m["w1"]) for m in measures) / len(measures)


def main() -> None:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--w2", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    report["perdure_default"] = perdure_readme(args.runs, args.w2)
    report["pgqueuer_default"] = pgqueuer_w1(args.runs)
    report["dbos_default"] = dbos_w2()
    # Issue 15's cost of metrics: without and with, alternating (without, with, with,
    # without) so that the machine's drift between measures cancels out.
    metrics = ("--metrics-port", "0")
    paired = [perdure_readme(args.runs, 0, worker_args=a) for a in ((), metrics, metrics, ())]
    report["metrics_pair"] = {"without": paired[::3], "with": paired[1:3]}
    report["perdure_two_workers"] = perdure_readme(args.runs, 0, workers=2)
    report["perdure_scaled"] = perdure_readme(args.runs, 0, workers=2, starters=4)
    report["pgqueuer_scaled"] = pgqueuer_w1(args.runs, workers=2, enqueuers=4)
    report["start"] = start_cost(500)
    conns = int(report["perdure_default"]["connections"])
    limit_size = QUICK  # 5 s at the one level that matters
    report["limit"] = run_limit(limit_size, (conns,))
    report["sqlite"] = sqlite_w2(args.w2)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))

    one, two = report["perdure_default"], report["perdure_scaled"]
    pair = report["perdure_two_workers"]
    w1 = best(one["w1"])
    limit = report["limit"]["tps"][str(conns)]
    rows = [
        ("W1 default ÷ PgQueuer default", w1 / best(report["pgqueuer_default"]["w1"]), ">= 1.5"),
        (f"W1 default ÷ commit limit at {conns} connections", w1 / limit, ">= 0.5"),
        (
            "start ÷ bare insert commit",
            report["start"]["start_ms"] / report["start"]["bare_insert_ms"],
            "<= 2",
        ),
        (
            "start_async ÷ async bare insert commit",
            report["start"]["start_async_ms"] / report["start"]["bare_insert_async_ms"],
            "(report)",
        ),
        ("W1 2 workers ÷ W1 1 worker (one starter)", best(pair["w1"]) / w1, ">= 1.2"),
        ("write transactions per step, 1 worker", min(r["writes_per_step"] for r in one["w1"]),
         "<= 0.5"),
        ("write transactions per step, 2 workers",
         min(r["writes_per_step"] for r in pair["w1"]), "<= 0.5"),
        ("W1 scaled (2 workers, 4 starters) ÷ W1 default", best(two["w1"]) / w1, "(report)"),
        ("W1 with --metrics-port ÷ W1 without (alternating)",
         mean_best(report["metrics_pair"]["with"]) / mean_best(report["metrics_pair"]["without"]),
         ">= 0.95 (issue 15)"),
        ("W1 scaled ÷ PgQueuer scaled",
         best(two["w1"]) / best(report["pgqueuer_scaled"]["w1"]), "(report)"),
        ("W2 p50 ÷ DBOS direct p50",
         one["w2_ms"]["p50"] / report["dbos_default"]["w2_ms"]["p50"], "<= 0.5"),
        ("W1 in-process worker ÷ PgQueuer default",
         best(one["w1_in_process"]) / best(report["pgqueuer_default"]["w1"]), "(report)"),
        ("W2 p50 in-process worker ÷ DBOS direct p50",
         one["w2_in_process_ms"]["p50"] / report["dbos_default"]["w2_ms"]["p50"], "<= 0.5"),
        ("SQLite W2 p50 (ms), worker in another process", report["sqlite"]["w2_ms"]["p50"],
         "<= 5"),
    ]  # fmt: skip
    print()
    for name, value, target in rows:
        print(f"{name:<52} {value:8.2f}   target {target}")
    print("\nW1 CPU ms per run (where it goes; 2 cores hold 2 ms of CPU per ms of wall):")
    for name, reps in (("perdure, 1 worker", one["w1"]), ("perdure, 2 workers", pair["w1"]),
                       ("perdure, in-process worker", one["w1_in_process"]),
                       ("PgQueuer, 1 process", report["pgqueuer_default"]["w1"])):  # fmt: skip
        print(f"  {name:<28} {cpu_split(reps)}")


if __name__ == "__main__":
    main()
