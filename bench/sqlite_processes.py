"""W2 on the embedded SQLite default with the worker in another process.

The README's SQLite setup: ``App()`` on ``perdure.db`` in the working directory, one
``perdure worker`` process, and a client in this process that starts one-step runs one
at a time and waits for each result (``app.run``). Every hop crosses a process: the
start must wake the worker, and the run's end must wake the client. Prints one JSON
document with the latency percentiles in milliseconds.

Usage: ``python bench/sqlite_processes.py [--runs 200]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import percentiles, stop_children_on_sigterm  # noqa: E402

APP_MODULE = """
from perdure import App, Context

app = App()

@app.workflow
async def one(ctx: Context, n: int) -> dict[str, int]:
    return await ctx.step.run("a", lambda: {"i": n})
"""


def main() -> None:
    stop_children_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_sqlite_"))
    (work / "sqlite_app.py").write_text(APP_MODULE)
    os.chdir(work)
    sys.path.insert(0, str(work))
    path = os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH")) if p)
    env = {k: v for k, v in os.environ.items() if k != "PERDURE_DATABASE_URL"}
    env["PYTHONPATH"] = path
    os.environ.pop("PERDURE_DATABASE_URL", None)
    import sqlite_app

    app = sqlite_app.app
    app.list_workflows()  # migrate and register before the worker starts
    worker = subprocess.Popen(
        [sys.executable, "-m", "perdure.cli.main", "worker", "sqlite_app:app"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        app.run("one", -1, timeout=60)  # the worker is up and warm
        latencies = []
        for i in range(args.runs):
            t0 = time.perf_counter()
            app.run("one", i, timeout=60)
            latencies.append(time.perf_counter() - t0)
    finally:
        worker.terminate()
        worker.wait(30)
        app.close()
    out = {
        "setup": "SQLite default file, one perdure worker process + one sync client",
        "w2_ms": percentiles(latencies),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
