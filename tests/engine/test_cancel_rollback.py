"""Cancel with rollback (DESIGN §4 Cancellation): the rollbacks of the completed steps
run newest first, each durably, then the run ends cancelled — on each backend."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from perdure import App, Context, WorkflowCancelled

from .helpers import wait_for


def test_cancel_with_rollback_undoes_completed_steps_newest_first(app: App) -> None:
    undone: list[str] = []
    lock = threading.Lock()

    def undo(what: str) -> None:
        with lock:
            undone.append(what)

    @app.workflow
    async def trip(ctx: Context, _: None) -> str:
        await ctx.step.run("flight", lambda: "F1", rollback=undo)
        await ctx.step.run("hotel", lambda: "H1", rollback=undo)
        await ctx.step.run("note", lambda: "no rollback")
        await ctx.step.wait_for_event("confirm")
        await ctx.step.run("car", lambda: "C1", rollback=undo)  # never reached
        return "booked"

    with app.worker():
        handle = app.start(trip)
        wait_for(lambda: app.get_run(handle.id).status == "waiting", 20)
        assert handle.cancel(rollback=True)
        with pytest.raises(WorkflowCancelled):
            handle.result(timeout=30)
    assert undone == ["H1", "F1"]
    run = app.get_run(handle.id)
    assert run.status == "cancelled"
    assert run.error is not None and run.error["compensated"] == ["hotel", "flight"]
    types = [e.type for e in app.get_events(handle.id)]
    assert types.index("cancelling") < types.index("compensated") < types.index("cancelled")
    rolled = [s.name for s in app.get_steps(handle.id) if s.kind == "rollback"]
    assert rolled == ["~rollback:hotel", "~rollback:flight"]
    assert not app.cancel(handle.id, rollback=True)  # it has ended


def test_a_run_with_nothing_to_undo_is_cancelled_at_once(app: App) -> None:
    @app.workflow
    async def idle(ctx: Context, _: None) -> None:
        await ctx.step.wait_for_event("never")

    handle = app.start(idle)  # no worker: pending, no completed step
    assert app.cancel(handle.id, rollback=True)
    assert app.get_run(handle.id).status == "cancelled"


KILLABLE = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path
    from perdure import App, Context

    app = App()
    MARKS = Path(__file__).parent / "marks"

    def undo(name: str) -> None:
        MARKS.mkdir(exist_ok=True)
        (MARKS / f"{name}-{time.monotonic_ns()}-{os.getpid()}").touch()
        if name == "b" and not (MARKS / "b-once").exists():
            (MARKS / "b-once").touch()
            time.sleep(60)  # the test kills this worker here

    @app.workflow
    async def chain(ctx: Context, _: None) -> None:
        for name in ("a", "b", "c"):
            await ctx.step.run(name, lambda n=name: n, rollback=undo)
        await ctx.step.wait_for_event("never")
    """
)


def test_rollbacks_survive_a_worker_killed_in_the_middle(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
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

    def undone() -> list[str]:
        found = [p.name.split("-") for p in marks.glob("*-*-*")] if marks.exists() else []
        return [name for name, _, _ in sorted(found, key=lambda f: int(f[1]))]

    first = worker()
    try:
        run_id = app.start("chain").id
        wait_for(lambda: app.get_run(run_id).status == "waiting", 30)
        assert app.cancel(run_id, rollback=True)
        wait_for(lambda: (marks / "b-once").exists(), 30)  # c undone, b in the middle
        first.kill()  # SIGKILL: no release, no goodbye
        first.wait(timeout=10)
        second = worker()
        try:
            wait_for(lambda: app.get_run(run_id).status == "cancelled", 60)
        finally:
            second.terminate()
            second.wait(timeout=20)
        # newest first; c's rollback was durable before the kill and does not run again;
        # b's ran again (at least once: rollbacks are steps), then a's
        assert undone() == ["c", "b", "b", "a"]
        error = app.get_run(run_id).error
        assert error is not None and error["compensated"] == ["c", "b", "a"]
    finally:
        if first.poll() is None:
            first.kill()
        app.close()
