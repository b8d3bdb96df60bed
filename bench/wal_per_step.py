"""What the database writes per step: WAL bytes, write transactions and database growth
per step of W1 (runs of 3 steps) and W4 (one run of 1,000 sequential steps), on
PostgreSQL, with an in-process worker as the README sets one up.

Counts, not timings: they do not drift with a loaded machine, so old and new code can be
compared run against run. The WAL and transaction counts are the whole server's, so
nothing else may write to it while this runs.

Usage: ``python bench/wal_per_step.py [--runs 500] [--steps 1000]``, once with each
version of perdure installed (for example two virtual environments, alternating); prints
one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from _common import ADMIN_URL, CommitCounter, drop_database, fresh_database

from perdure import App, Context

DB = "bench_wal_per_step"


def build(url: str) -> tuple[App, Any, Any]:
    app = App(url)

    @app.workflow(name="three")
    async def three(ctx: Context, n: int) -> int:
        total = n
        for i in range(3):
            total = await ctx.step.run(f"s{i}", lambda t=total: t + 1)
        return total

    @app.workflow(name="long")
    async def long(ctx: Context, steps: int) -> int:
        total = 0
        for i in range(steps):
            total = await ctx.step.run(f"s{i}", lambda t=total: t + 1)
        return total

    return app, three, long


def database_size() -> int:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        row = admin.execute("SELECT pg_database_size(%s)", (DB,)).fetchone()
    assert row is not None
    return int(row[0])


def measure(counter: CommitCounter, steps: int, work: Any) -> dict[str, float]:
    wal, xid, size = counter.wal_lsn(), counter.next_xid(), database_size()
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    time.sleep(0.5)
    return {
        "wal_bytes_per_step": (counter.wal_lsn() - wal) / steps,
        "write_xacts_per_step": (counter.next_xid() - xid) / steps,
        "growth_bytes_per_step": (database_size() - size) / steps,
        "ms_per_step": seconds / steps * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    url = fresh_database(DB)
    counter = CommitCounter(DB)
    app, three, long = build(url)
    out: dict[str, Any] = {}
    try:
        with app.worker(concurrency=10):
            app.run(three, 0, timeout=60)  # warm up

            def w1() -> None:
                handles = [app.start(three, i) for i in range(args.runs)]
                for handle in handles:
                    handle.result(timeout=300)

            out["W1"] = measure(counter, args.runs * 3, w1)
            out["W4"] = measure(counter, args.steps, lambda: app.run(long, args.steps, timeout=600))
    finally:
        app.close()
        counter.close()
        drop_database(DB)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
