"""Where W2's start-to-completion latency goes, from the run's own audit trail.

Usage: python bench/latency_breakdown.py [--runs 100] [--sqlite] [--switch-ms 5]

Runs N sequential 1-step runs (client loop in the main thread, one worker thread,
as in bench/run.py) and splits each latency with the event timestamps the engine
records (database clock; on PostgreSQL ``now()`` is the transaction's start):
client call → created, created → claimed, claimed → step_completed,
step_completed → completed, completed → the client saw it. Prints medians in ms.
``--switch-ms`` sets ``sys.setswitchinterval`` (the GIL hand-off interval).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fresh_database
from _perdure_bench import one

from perdure import App


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--switch-ms", type=float, default=None)
    args = parser.parse_args()
    if args.switch_ms is not None:
        sys.setswitchinterval(args.switch_ms / 1000)
    if args.sqlite:
        url = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "lat.db")
    else:
        url = fresh_database("bench_latency")
    app = App(url)
    app.workflow(one)
    phases: dict[str, list[float]] = {}
    with app.worker(concurrency=10):
        await app.run_async(one, -1, timeout=30)
        for i in range(args.runs):
            t0 = time.time()
            handle = await app.start_async(one, i)
            await app.result_async(handle.id, timeout=30)
            t1 = time.time()
            events = {
                e.type: e.created_at.timestamp() for e in await app.get_events_async(handle.id)
            }
            marks = [
                ("call→created", t0, events.get("created")),
                ("created→claimed", events.get("created"), events.get("claimed")),
                ("claimed→step", events.get("claimed"), events.get("step_completed")),
                ("step→completed", events.get("step_completed"), events.get("completed")),
                ("completed→seen", events.get("completed"), t1),
                ("total", t0, t1),
            ]
            for name, a, b in marks:
                if a is not None and b is not None:
                    phases.setdefault(name, []).append((b - a) * 1000)
            if i == 0:
                print("event types:", sorted(events))
    await app.close_async()
    for name, values in phases.items():
        print(
            f"{name:18s} median {statistics.median(values):7.2f} ms   p90 "
            f"{sorted(values)[int(0.9 * (len(values) - 1))]:7.2f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
