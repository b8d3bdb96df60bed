"""A worker SIGKILLed in the middle of a task: its lease lapses, another worker
claims the task and finishes the flow, and every output is recorded once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from perdure import App

from ..engine.helpers import wait_for

KILLABLE = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path
    from perdure import App

    app = App()
    MARKS = Path(__file__).parent / "marks"
    flow = app.flow("crawl", base_delay=0, timeout=120)

    @flow.map(over="run")
    def fetch(ctx, item):
        MARKS.mkdir(exist_ok=True)
        (MARKS / f"{item}-{os.getpid()}-{time.monotonic_ns()}").touch()
        if item == 2 and not (MARKS / "once").exists():
            (MARKS / "once").touch()
            time.sleep(60)  # the test kills this worker here
        return item * 10

    @flow.step(depends_on=[fetch])
    def total(ctx, input):
        return sum(input["fetch"])
    """
)


def test_another_worker_finishes_a_flow_whose_worker_was_killed(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "killable.py").write_text(KILLABLE)
    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": database.url,
        "PERDURE_SCHEMA": database.schema,
        "PYTHONPATH": str(tmp_path),
    }
    app = App(database.url, schema=database.schema)
    marks = tmp_path / "marks"

    def worker() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "perdure.cli.main", "worker", "killable:app", "--lease", "2s"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip

    first = worker()
    try:
        wait_for(lambda: app.get_flow("crawl"), 30)  # the worker stored the shape
        run_id = app.start("crawl", list(range(5))).id
        wait_for(lambda: (marks / "once").exists(), 30)  # element 2 is in the middle
        first.kill()  # SIGKILL: no release, no goodbye
        first.wait(timeout=10)
        second = worker()
        try:
            assert app.result(run_id, timeout=60) == {"total": 100}
        finally:
            second.terminate()
            second.wait(timeout=20)
        steps = {s.name: s for s in app.get_steps(run_id)}
        assert steps["fetch"].output == [0, 10, 20, 30, 40]
        tasks = steps["fetch"].tasks
        assert [t.status for t in tasks] == ["completed"] * 5
        for task in tasks:  # each output recorded once
            events = [e.type for e in app.get_events(task.run_id)]
            assert events.count("completed") == 1
        killed = [e.type for e in app.get_events(tasks[2].run_id)]
        assert "lease_expired" in killed  # taken over, not retried by its dead worker
        assert tasks[2].attempts == 2  # the lapsed attempt counts (as a timeout)
        ran = sorted(p.name.split("-")[0] for p in marks.glob("*-*-*"))
        assert ran.count("2") == 2  # element 2 ran twice (at least once: a task may rerun)
    finally:
        if first.poll() is None:
            first.kill()
        app.close()
