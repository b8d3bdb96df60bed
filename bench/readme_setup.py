"""W1 and W2 with perdure set up as the README tells a user, beside the best peer of each.

perdure (PostgreSQL), two setups the README shows, each with the default concurrency
(10) and a client starting runs one at a time from one thread with the sync API:

* "CLI worker": one worker process started with the CLI (``perdure worker``);
* "in-process worker": the README tour's ``with app.worker():`` in the client's own
  process, where a start finds the worker's free slot and is handed to it leased.

Beside them, in the same invocation:

* W1 (2,000 runs of 3 steps, twice): PgQueuer 1.6 with its defaults (one
  ``QueueManager.run()`` process, batch size 10), three chained jobs per run (each
  job enqueues the next: a queue keeps no journal), its client enqueueing one run at
  a time from one coroutine;
* W2 (200 sequential one-step runs): DBOS Transact 3.4 direct start
  (``start_workflow(...).get_result()``, its recommended in-process setup).

Usage: ``python bench/readme_setup.py [--runs 2000] [--w2 200]``; prints one JSON
document and the ratios. Each contender runs twice, in the order perdure, PgQueuer,
DBOS, DBOS, PgQueuer, perdure, and the ratios are of the means: absolute figures
drift on shared machines, by a third within minutes on the 2-core ones.
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import (  # noqa: E402
    CommitCounter,
    CpuMeter,
    fresh_database,
    percentiles,
    stop_children_on_sigterm,
)

APP_MODULE = """
from perdure import App, Context

app = App()

def small(i: int) -> dict[str, int]:
    return {"i": i}

@app.workflow
async def three(ctx: Context, n: int) -> dict[str, int]:
    await ctx.step.run("a", lambda: small(n))
    await ctx.step.run("b", lambda: small(n))
    return await ctx.step.run("c", lambda: small(n))

@app.workflow
async def one(ctx: Context, n: int) -> dict[str, int]:
    return await ctx.step.run("a", lambda: small(n))
"""

PGQ_WORKER = """
import asyncio, os, sys, time
import psycopg
from pgqueuer import PgQueuer
from pgqueuer.db import PsycopgDriver

N = int(sys.argv[2]); DONE = sys.argv[3]

async def main() -> None:
    conn = await psycopg.AsyncConnection.connect(sys.argv[1], autocommit=True)
    pgq = PgQueuer(PsycopgDriver(conn))
    count = 0

    @pgq.entrypoint("step1")
    async def step1(job) -> None:
        await pgq.qm.queries.enqueue("step2", job.payload)

    @pgq.entrypoint("step2")
    async def step2(job) -> None:
        await pgq.qm.queries.enqueue("step3", job.payload)

    @pgq.entrypoint("step3")
    async def step3(job) -> None:
        nonlocal count
        count += 1
        if count % N == 0:
            with open(DONE, "a") as out:
                out.write(f"{time.time()}\\n")

    await pgq.run()

asyncio.run(main())
"""


def _wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


# ---------------------------------------------------------------------- perdure


def _done_count(conn: Any) -> tuple[int, float]:
    """W1's completed runs so far, and the epoch time of the last completion."""
    row = conn.execute(
        "SELECT count(*), coalesce(extract(epoch FROM max(completed_at)), 0)::float8 "
        "FROM perdure.runs WHERE workflow = 'three' AND status = 'completed'"
    ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def perdure_readme(
    runs: int,
    w2_runs: int,
    *,
    workers: int = 1,
    starters: int = 1,
    worker_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """W1 and W2 on perdure: ``workers`` worker processes (the CLI, default settings)
    and ``starters`` client threads starting W1's runs (1 and 1: the README setup).
    Also counts the server's write transactions per W1 step (its xid delta: run it on
    a quiet server) and the connections the database saw."""
    from concurrent.futures import ThreadPoolExecutor

    import psycopg

    assert runs % starters == 0, "runs must divide among the starters"
    url = fresh_database("bench_readme_perdure")
    counter = CommitCounter("bench_readme_perdure")
    work = Path(tempfile.mkdtemp(prefix="bench_readme_"))
    (work / "readme_app.py").write_text(APP_MODULE)
    path = os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PERDURE_DATABASE_URL": url, "PYTHONPATH": path}
    os.environ["PERDURE_DATABASE_URL"] = url
    app = runpy.run_path(str(work / "readme_app.py"))["app"]  # a fresh App each call
    app.list_workflows()  # migrate and register before the clock starts
    perdure = [sys.executable, "-m", "perdure.cli.main"]
    procs = [
        subprocess.Popen(
            [*perdure, "worker", "readme_app:app", *worker_args],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    out: dict[str, Any] = {
        "setup": f"{workers} perdure worker process(es) (concurrency 10"
        f"{', ' + ' '.join(worker_args) if worker_args else ''}) + "
        f"{starters} sync client thread(s)"
    }
    pool = ThreadPoolExecutor(starters)
    try:
        with psycopg.connect(url, autocommit=True) as conn:

            def done_count() -> tuple[int, float]:
                return _done_count(conn)

            app.run("one", 0, timeout=60)  # the worker is up and warm
            reps = []
            peak_connections = 0
            cpu = CpuMeter(p.pid for p in procs)
            for rep in range(2):
                before = done_count()[0]
                xid0 = counter.next_xid()
                cpu.start()
                t0 = time.time()
                share = runs // starters
                first = rep * runs
                list(
                    pool.map(
                        lambda k, f=first, n=share: [
                            app.start("three", f + k * n + i) for i in range(n)
                        ],
                        range(starters),
                    )
                )
                starts = time.time() - t0
                peak_connections = max(peak_connections, counter.connections()[1])
                _, last = _wait_for(
                    lambda b=before: (lambda c: c if c[0] >= b + runs else None)(done_count()),
                    600,
                    "perdure W1",
                )
                elapsed = last - t0
                xids = counter.next_xid() - xid0
                reps.append(
                    {"steps_per_s": 3 * share * starters / elapsed,
                     "runs_per_s": share * starters / elapsed, "starts_s": starts,
                     "elapsed_s": elapsed, "writes_per_step": xids / (3 * share * starters),
                     "cpu_ms_per_run": cpu.per_run(runs)}
                )  # fmt: skip
            out["w1"] = reps
            out["connections"] = peak_connections
            latencies = []
            for i in range(w2_runs):
                t0 = time.perf_counter()
                app.run("one", i, timeout=60)
                latencies.append(time.perf_counter() - t0)
            out["w2_ms"] = percentiles(latencies)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        pool.shutdown()
    try:
        if workers == 1 and starters == 1:
            out.update(_in_process(app, url, runs, w2_runs, counter))
    finally:
        app.close()
        counter.close()
    return out


def _in_process(app: Any, url: str, runs: int, w2_runs: int, counter: Any) -> dict[str, Any]:
    """W1 and W2 with the README tour's worker, ``with app.worker():``, in the client's
    process (the CLI workers are gone by now)."""
    import psycopg

    reps = []
    with app.worker(), psycopg.connect(url, autocommit=True) as conn:

        def done_count() -> tuple[int, float]:
            return _done_count(conn)

        app.run("one", 0, timeout=60)
        cpu = CpuMeter(())  # the worker is in this process
        for rep in range(2):
            before = done_count()[0]
            xid0 = counter.next_xid()
            cpu.start()
            t0 = time.time()
            for i in range(runs):
                app.start("three", (2 + rep) * runs + i)
            starts = time.time() - t0
            _, last = _wait_for(
                lambda b=before: (lambda c: c if c[0] >= b + runs else None)(done_count()),
                600,
                "perdure W1 in process",
            )
            elapsed = last - t0
            reps.append(
                {"steps_per_s": 3 * runs / elapsed, "runs_per_s": runs / elapsed,
                 "starts_s": starts, "elapsed_s": elapsed,
                 "writes_per_step": (counter.next_xid() - xid0) / (3 * runs),
                 "cpu_ms_per_run": cpu.per_run(runs)}
            )  # fmt: skip
        latencies = []
        for i in range(w2_runs):
            t0 = time.perf_counter()
            app.run("one", i, timeout=60)
            latencies.append(time.perf_counter() - t0)
    return {"w1_in_process": reps, "w2_in_process_ms": percentiles(latencies)}


# ---------------------------------------------------------------------- PgQueuer


async def _pgq_enqueue(url: str, runs: int, enqueuers: int = 1) -> None:
    import psycopg
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    async def one(k: int) -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        queries = Queries(PsycopgDriver(conn))
        for i in range(k, runs, enqueuers):
            await queries.enqueue("step1", str(i).encode())
        await conn.close()

    await asyncio.gather(*(one(k) for k in range(enqueuers)))


async def _pgq_install(url: str) -> None:
    import psycopg
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await Queries(PsycopgDriver(conn)).install()
    await conn.close()


def pgqueuer_w1(runs: int, *, workers: int = 1, enqueuers: int = 1) -> dict[str, Any]:
    """PgQueuer's W1: ``workers`` QueueManager processes, ``enqueuers`` client
    coroutines (1 and 1: its documented default)."""
    url = fresh_database("bench_readme_pgqueuer")
    asyncio.run(_pgq_install(url))
    work = Path(tempfile.mkdtemp(prefix="bench_pgq_"))
    (work / "pgq_worker.py").write_text(PGQ_WORKER)
    done = work / "done.txt"
    # One process writes a line per W1 repetition; several write one per run.
    every = runs if workers == 1 else 1
    per_rep = runs // every
    procs = [
        subprocess.Popen(
            [sys.executable, str(work / "pgq_worker.py"), url, str(every), str(done)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    reps = []
    try:
        time.sleep(2)  # let it start listening (its queue is empty until we enqueue)
        cpu = CpuMeter(p.pid for p in procs)
        for rep in range(2):
            cpu.start()
            t0 = time.time()
            asyncio.run(_pgq_enqueue(url, runs, enqueuers))
            starts = time.time() - t0
            lines = _wait_for(
                lambda r=rep: (lambda t: t if len(t) >= (r + 1) * per_rep else None)(
                    done.read_text().split() if done.exists() else []
                ),
                600,
                "PgQueuer W1",
            )
            elapsed = sorted(float(x) for x in lines)[(rep + 1) * per_rep - 1] - t0
            reps.append(
                {"steps_per_s": 3 * runs / elapsed, "runs_per_s": runs / elapsed,
                 "starts_s": starts, "elapsed_s": elapsed, "cpu_ms_per_run": cpu.per_run(runs)}
            )  # fmt: skip
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
    return {
        "setup": f"PgQueuer defaults, {workers} QueueManager process(es) + "
        f"{enqueuers} enqueueing coroutine(s)",
        "w1": reps,
    }


# ---------------------------------------------------------------------- DBOS


def dbos_w2() -> dict[str, Any]:
    """DBOS's W2 through the suite's own DBOS contender (200 runs, its full size)."""
    out_path = Path(tempfile.mkdtemp(prefix="bench_dbos_")) / "dbos.json"
    subprocess.run(
        [sys.executable, str(HERE / "run.py"), "--child", "dbos-pg", "--child-out",
         str(out_path), "--workloads", "W2"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out_path.read_text())
    return {"setup": "DBOS direct start, in process", "w2_ms": result["w2"]}


def main() -> None:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--w2", type=int, default=200)
    args = parser.parse_args()
    # The order P, Q, D, D, Q, P: this machine's speed drifts by a third within
    # minutes, so each pair is measured in mirrored order and compared by its means.
    perdure = [perdure_readme(args.runs, args.w2)]
    pgq = [pgqueuer_w1(args.runs)]
    dbos = [dbos_w2(), dbos_w2()]
    pgq.append(pgqueuer_w1(args.runs))
    perdure.append(perdure_readme(args.runs, args.w2))
    report = {"perdure": perdure, "pgqueuer": pgq, "dbos": dbos}
    print(json.dumps(report, indent=2))
    peer = _mean(r["steps_per_s"] for q in pgq for r in q["w1"])
    for setup, w1, w2 in (("CLI worker", "w1", "w2_ms"),
                          ("in-process worker", "w1_in_process", "w2_in_process_ms")):  # fmt: skip
        mine = _mean(r["steps_per_s"] for p in perdure for r in p[w1])
        print(f"W1 steps/s (mean of 4 tries), {setup}: perdure {mine:.0f}, "
              f"PgQueuer {peer:.0f}, ratio {mine / peer:.2f}")  # fmt: skip
        for pct in ("p50", "p99"):
            ours = _mean(p[w2][pct] for p in perdure)
            theirs = _mean(d["w2_ms"][pct] for d in dbos)
            print(f"W2 {pct} ms (mean of 2), {setup}: perdure {ours:.2f}, "
                  f"DBOS direct {theirs:.2f}, ratio {ours / theirs:.2f}")  # fmt: skip
    print("W1 CPU ms per run:")
    for name, reps in (("perdure, CLI worker", [r for p in perdure for r in p["w1"]]),
                       ("perdure, in-process worker",
                        [r for p in perdure for r in p["w1_in_process"]]),
                       ("PgQueuer", [r for q in pgq for r in q["w1"]])):  # fmt: skip
        print(f"  {name}: {cpu_split(reps)}")


def cpu_split(reps: list[dict[str, Any]]) -> str:
    """The mean CPU milliseconds per run of W1 repetitions, by process."""
    keys = ("client", "workers", "postgres")
    means = {k: _mean(r["cpu_ms_per_run"][k] for r in reps) for k in keys}
    total = sum(means.values())
    return ", ".join(f"{k} {v:.2f}" for k, v in means.items()) + f", total {total:.2f}"


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return sum(listed) / len(listed)


if __name__ == "__main__":
    main()
