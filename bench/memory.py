"""Issue 18's memory figures: a worker's resident memory over many runs, per parked
run, and at the peak of a flow map.

Setup (the README's): one ``perdure worker`` process started with the CLI at its
default concurrency (10), serving an app module written to a temporary directory.
This process feeds it work straight into the database, so the client costs the
worker nothing: on PostgreSQL one statement per chunk of 5,000 runs calling the
schema's own ``create_run()`` (the W5 backlog's way), on SQLite the backend's
``insert_run`` in one transaction per chunk. At most two chunks are outstanding, so
the backlog stays small. PostgreSQL uses the schema ``bench_memory`` (dropped
first); SQLite a temporary file.

Measured, from ``/proc/<worker pid>/status``:

1. RSS (VmRSS) after ``--warmup`` completed runs of W1's three-step workflow, after
   ``--checkpoint`` and after ``--runs`` (the worker idle, its backlog done), and
   the ratio RSS(runs) / RSS(checkpoint) (the issue's target: at most 1.1).
2. Per 1,000 parked runs (``--parked`` runs sleeping for an hour, and as many waiting
   for an event that never comes): the worker's RSS delta and the database's size
   delta (PostgreSQL: ``pg_total_relation_size`` of the schema's tables, indexes and
   TOAST included, dead row versions too, as autovacuum left them; SQLite: the
   file's pages).
3. One run of a flow that maps over ``--map-size`` elements (then sums them): the
   worker's peak RSS during it (VmHWM, reset first through ``/proc/<pid>/clear_refs``)
   against its RSS before.

Usage: ``python bench/memory.py [--dialect pg|sqlite] [--runs 100000]
[--checkpoint 10000] [--warmup 1000] [--parked 10000] [--map-size 1000] [--quick]
[--json out.json]``. Prints a table and a JSON document. Run it on a quiet machine:
throughput drifts with load, memory much less.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from perdure import App
from perdure.ids import new_run_id
from perdure.records import NewRun

try:
    from _common import stop_children_on_sigterm  # run as a script: bench/ is on the path
except ImportError:  # pragma: no cover - imported as bench.memory
    from bench._common import stop_children_on_sigterm

ADMIN_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "bench_memory"
CHUNK = 5000

APP_MODULE = """
from perdure import App, Context, TaskContext

app = App(sweep_interval=0)

def small(i: int) -> dict[str, int]:
    return {"i": i}

@app.workflow
async def three(ctx: Context, n: int) -> dict[str, int]:
    await ctx.step.run("a", lambda: small(n))
    await ctx.step.run("b", lambda: small(n))
    return await ctx.step.run("c", lambda: small(n))

@app.workflow
async def nap(ctx: Context, n: int) -> int:
    await ctx.step.sleep("nap", "1h")
    return n

@app.workflow
async def waiter(ctx: Context, n: int) -> int:
    await ctx.step.wait_for_event("never", event="never-sent")
    return n

fanout = app.flow("fanout", base_delay=0)

@fanout.map(over="run")
def item(ctx: TaskContext, n: int) -> int:
    return n

@fanout.step(depends_on=[item])
def total(ctx: TaskContext, input) -> int:
    return sum(input["item"])
"""


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux 4.0+); False if refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Bench:
    """The database side: feeding runs, counting them, measuring the schema."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.work = Path(tempfile.mkdtemp(prefix="bench_memory_"))
        (self.work / "memory_app.py").write_text(APP_MODULE)
        if dialect == "pg":
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
            self.url = ADMIN_URL
            self.env = {"PERDURE_DATABASE_URL": ADMIN_URL, "PERDURE_SCHEMA": SCHEMA}
        else:
            self.path = self.work / "memory.db"
            self.url = f"sqlite:///{self.path}"
            self.env = {"PERDURE_DATABASE_URL": self.url}
        os.environ.update(self.env)
        self.app: App = runpy.run_path(str(self.work / "memory_app.py"))["app"]
        self.app.list_workflows()  # migrate and register before the worker starts
        self.conn: Any = (
            psycopg.connect(self.url, autocommit=True)
            if dialect == "pg"
            else sqlite3.connect(self.path, isolation_level=None)
        )
        self.next_input = 0

    def start_worker(self) -> subprocess.Popen[bytes]:
        path = os.pathsep.join(p for p in (str(self.work), os.environ.get("PYTHONPATH")) if p)
        return subprocess.Popen(
            [sys.executable, "-m", "perdure.cli.main", "worker", "memory_app:app"],
            cwd=self.work,
            env={**os.environ, **self.env, "PYTHONPATH": path},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def live(self, workflow: str, statuses: tuple[str, ...]) -> int:
        """Runs of ``workflow`` in ``statuses`` (a subset of the live ones, so the count
        reads the claim index and stays cheap however many runs have completed)."""
        marks = ", ".join(["%s" if self.dialect == "pg" else "?"] * len(statuses))
        table = f"{SCHEMA}.runs" if self.dialect == "pg" else "runs"
        param = "%s" if self.dialect == "pg" else "?"
        sql = f"SELECT count(*) FROM {table} WHERE status IN ({marks}) AND workflow = {param}"
        return int(self.conn.execute(sql, (*statuses, workflow)).fetchone()[0])

    def failed(self) -> int:
        table = f"{SCHEMA}.runs" if self.dialect == "pg" else "runs"
        return int(
            self.conn.execute(f"SELECT count(*) FROM {table} WHERE status = 'failed'").fetchone()[0]
        )

    def schema_bytes(self) -> int:
        if self.dialect != "pg":
            row = self.conn.execute(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
            ).fetchone()
            return int(row[0])
        row = self.conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchone()
        return int(row[0])

    def insert(self, workflow: str, count: int) -> None:
        """Start ``count`` runs of ``workflow`` at once (inputs numbered on)."""
        first, self.next_input = self.next_input, self.next_input + count
        ids = [new_run_id() for _ in range(count)]
        if self.dialect == "pg":
            self.conn.execute(
                f"SELECT count(*) FROM unnest(%s::text[]) WITH ORDINALITY AS t(id, n), "
                f"LATERAL {SCHEMA}.create_run(t.id, %s, 1, to_jsonb(t.n + %s))",
                (ids, workflow, first),
            )
            return
        from perdure.backends.sqlite._rows import insert_run

        news = [
            NewRun(id=i, workflow=workflow, version=1, input_json=str(first + k))
            for k, i in enumerate(ids)
        ]

        def bulk(s: Any) -> None:
            with s.write() as now:
                for new in news:
                    insert_run(s, new, now, parent_id=None)

        async def call() -> None:
            backend = await self.app._backend()
            await backend._call(bulk)  # type: ignore[attr-defined]

        self.app._portal.call(call)

    def wait_for(self, workflow: str, status: str, left: int, timeout: float = 1800) -> None:
        """Wait until at most ``left`` started runs of ``workflow`` have yet to reach
        ``status`` (``completed``, or ``waiting``: parked)."""
        before = (
            ("pending", "running") if status == "waiting" else ("pending", "waiting", "running")
        )
        deadline = time.monotonic() + timeout
        while self.live(workflow, before) > left:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: runs of {workflow} did not reach {status}")
            time.sleep(0.1)

    def feed(self, workflow: str, status: str, count: int) -> float:
        """Start ``count`` runs of ``workflow`` in chunks, at most two chunks
        outstanding, and wait until all of them reached ``status``; its seconds."""
        t0 = time.perf_counter()
        started = 0
        while started < count:
            chunk = min(CHUNK, count - started)
            self.insert(workflow, chunk)
            started += chunk
            self.wait_for(workflow, status, CHUNK)
        self.wait_for(workflow, status, 0)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()
        self.app.close()
        if self.dialect == "pg":
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def settle_rss(pid: int, seconds: float = 1.0) -> int:
    """The worker's RSS (kB) once it has been idle ``seconds``."""
    time.sleep(seconds)
    return proc_status(pid)["VmRSS"]


def flow_map(bench: Bench, pid: int, size: int) -> dict[str, Any]:
    """One run of the ``size``-element map: the worker's RSS before it (idle) and its
    peak during it."""
    before = settle_rss(pid)
    peak_reset = reset_peak(pid)
    handle = bench.app.start("fanout", list(range(size)))
    samples = [before]
    deadline = time.monotonic() + 600
    while bench.app.get_run(handle.id).status != "completed":
        samples.append(proc_status(pid)["VmRSS"])
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the flow map")
        time.sleep(0.01)
    result = bench.app.result(handle.id, timeout=60)
    assert result == {"total": sum(range(size))}, result
    peak = proc_status(pid)["VmHWM"] if peak_reset else max(samples)
    return {
        "elements": size,
        "rss_kb_before": before,
        "peak_rss_kb": peak,
        "peak_from": "VmHWM after clear_refs" if peak_reset else "VmRSS sampled every 10 ms",
        "peak_over_before_kb": peak - before,
        "rss_kb_after": settle_rss(pid),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(args.dialect)
    worker = bench.start_worker()
    pid = worker.pid
    out: dict[str, Any] = {
        "dialect": args.dialect,
        "worker": "perdure worker (CLI), concurrency 10",
    }
    try:
        bench.app.run("three", -1, timeout=60)  # the worker is up
        bench.app.run("fanout", list(range(10)), timeout=60)  # and has run a flow
        out["flow_map_fresh"] = flow_map(bench, pid, args.map_size)
        rss: dict[str, int] = {"before": settle_rss(pid)}
        seconds: dict[str, float] = {}
        done = 0
        for mark in (args.warmup, args.checkpoint, args.runs):
            seconds[str(mark)] = bench.feed("three", "completed", mark - done)
            done = mark
            rss[str(mark)] = settle_rss(pid)
            print(f"{mark} runs: RSS {rss[str(mark)]} kB", file=sys.stderr)
        out["runs"] = {
            "rss_kb": rss,
            "seconds": seconds,
            "runs_per_s": (args.runs - args.checkpoint) / seconds[str(args.runs)],
            "ratio": rss[str(args.runs)] / rss[str(args.checkpoint)],
            "ratio_to_warmup": rss[str(args.runs)] / rss[str(args.warmup)],
        }
        if bench.failed():
            raise SystemExit(f"{bench.failed()} runs failed: the figures would not hold")

        parked: dict[str, Any] = {}
        for workflow in ("nap", "waiter"):
            before_rss, before_db = settle_rss(pid), bench.schema_bytes()
            took = bench.feed(workflow, "waiting", args.parked)
            after_rss, after_db = settle_rss(pid), bench.schema_bytes()
            per = 1000 / args.parked
            parked[workflow] = {
                "runs": args.parked,
                "seconds": took,
                "rss_kb_before": before_rss,
                "rss_kb_after": after_rss,
                "rss_kb_per_1000": (after_rss - before_rss) * per,
                "db_bytes_per_1000": (after_db - before_db) * per,
            }
            print(f"{args.parked} parked {workflow}: {parked[workflow]}", file=sys.stderr)
        out["parked"] = parked

        out["flow_map_after_runs"] = flow_map(bench, pid, args.map_size)
    finally:
        worker.terminate()
        worker.wait(30)
        bench.close()
    return out


def table(report: dict[str, Any]) -> str:
    runs, parked = report["runs"], report["parked"]
    rss = runs["rss_kb"]
    marks = [k for k in rss if k != "before"]
    lines = [f"perdure worker memory ({report['dialect']}, {report['worker']})", ""]
    lines += [f"  RSS before the runs                {rss['before'] / 1024:8.1f} MiB"]
    lines += [f"  RSS after {int(m):>7,} runs            {rss[m] / 1024:8.1f} MiB" for m in marks]
    lines.append(
        f"  RSS({int(marks[-1]):,}) / RSS({int(marks[-2]):,})          {runs['ratio']:8.3f}"
        "   (target <= 1.1)"
    )
    for name, what in (("nap", "sleeping 1 h"), ("waiter", "waiting for an event")):
        p = parked[name]
        lines.append(
            f"  per 1,000 parked runs ({what}): worker RSS {p['rss_kb_per_1000'] / 1024:+.2f} MiB"
            f", database {p['db_bytes_per_1000'] / 1024 / 1024:.2f} MiB"
        )
    for key, when in (
        ("flow_map_fresh", "fresh worker"),
        ("flow_map_after_runs", "after the runs"),
    ):
        flow = report[key]
        lines.append(
            f"  flow map of {flow['elements']:,} ({when}): RSS before "
            f"{flow['rss_kb_before'] / 1024:.1f} MiB, peak {flow['peak_rss_kb'] / 1024:.1f} MiB "
            f"({flow['peak_over_before_kb'] / 1024:+.1f})"
        )
    return "\n".join(lines)


def main() -> None:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dialect", choices=["pg", "sqlite"], default="pg")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--checkpoint", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--map-size", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.checkpoint, args.runs, args.parked, args.map_size = 50, 100, 300, 100, 50
    if not args.warmup < args.checkpoint < args.runs:
        parser.error("need --warmup < --checkpoint < --runs")
    report = measure(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print()
    print(table(report))


if __name__ == "__main__":
    main()
