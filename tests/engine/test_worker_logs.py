"""Workers log every retry, failure, park and recovery of a run, one line each with
its reason, run id and workflow (DESIGN §7 Logs)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perdure import App, Context, RetryPolicy, WorkflowFailed
from perdure._logging import JsonFormatter
from perdure.backends import create_backend
from perdure.records import ClaimParams


def test_worker_lines_say_what_happened_to_each_run_and_why(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("gateway timeout")
        return "ok"

    @app.workflow
    async def steps(ctx: Context, _: object) -> str:
        fast = RetryPolicy(max_attempts=3, initial="10ms", jitter=0)
        await ctx.step.run("call", flaky, retry=fast)
        return await ctx.step.wait_for_event("approval")

    @app.workflow(retry=RetryPolicy(max_attempts=2, initial="10ms", jitter=0))
    async def broken(ctx: Context, _: object) -> None:
        raise ValueError("bad data")

    caplog.set_level(logging.INFO, logger="perdure.runs")
    with app.worker():
        waiting = app.start(steps)
        failing = app.start(broken)
        with pytest.raises(WorkflowFailed):
            failing.result(timeout=30)
        assert app.signal(waiting.id, "approval", "yes")
        assert waiting.result(timeout=30) == "yes"
    lines = [r for r in caplog.records if getattr(r, "run_id", None) is not None]
    seen = {(r.run_id, r.outcome, r.levelname) for r in lines}  # type: ignore[attr-defined]
    assert (waiting.id, "step retrying", "INFO") in seen  # it will be tried again
    assert (waiting.id, "parked", "INFO") in seen
    assert (failing.id, "retrying", "INFO") in seen
    assert (failing.id, "failed", "WARNING") in seen
    by = {(r.run_id, r.outcome): r for r in lines}  # type: ignore[attr-defined]
    assert "ConnectionError: gateway timeout" in by[(waiting.id, "step retrying")].getMessage()
    assert "waits for event approval" in by[(waiting.id, "parked")].getMessage()
    assert "ValueError: bad data" in by[(failing.id, "failed")].getMessage()
    record = json.loads(JsonFormatter().format(by[(failing.id, "failed")]))
    assert record["run_id"] == failing.id and record["workflow"] == "broken"
    assert record["level"] == "WARNING" and record["outcome"] == "failed"


def test_a_recovered_run_is_logged_with_its_reason(
    app: App, database, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    @app.workflow
    async def job(ctx: Context, _: object) -> str:
        return await ctx.step.run("work", lambda: "done")

    handle = app.start(job)

    async def claim_and_vanish() -> None:  # a worker that claims the run, then dies
        backend = create_backend(database.url, schema=database.schema)
        await backend.open()
        try:
            claims = await backend.claim_runs(ClaimParams("dead-worker", (("job", 1),), 1, 0.2))
            assert [c.run.id for c in claims] == [handle.id]
        finally:
            await backend.close()

    asyncio.run(claim_and_vanish())
    caplog.set_level(logging.INFO, logger="perdure.runs")
    with app.worker():
        assert handle.result(timeout=30) == "done"
    recovered = [r for r in caplog.records if getattr(r, "outcome", None) == "recovered"]
    assert [r.run_id for r in recovered] == [handle.id]  # type: ignore[attr-defined]
    assert recovered[0].levelname == "WARNING" and "lease expired" in recovered[0].getMessage()


SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from perdure import App, Context, RetryPolicy, WorkflowFailed

    if sys.argv[3] == "configured":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app = App(sys.argv[1], schema=sys.argv[2] or None, sweep_interval=0)
    tries = []

    def flaky():
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("gateway timeout")
        return "ok"

    @app.workflow
    async def steps(ctx: Context, _: object) -> str:
        return await ctx.step.run("call", flaky, retry=RetryPolicy(initial="10ms", jitter=0))

    @app.workflow(retry=RetryPolicy(max_attempts=1))
    async def broken(ctx: Context, _: object) -> None:
        raise ValueError("bad data")

    with app.worker():
        assert app.start(steps).result(timeout=30) == "ok"
        try:
            app.start(broken).result(timeout=30)
        except WorkflowFailed:
            print("failed as expected")
    app.close()
    """
)


def test_a_plain_script_prints_nothing_to_stderr_unless_it_configured_logging(  # type: ignore[no-untyped-def]
    database, tmp_path: Path
) -> None:
    """A library is quiet by default (a NullHandler on the ``perdure`` logger): a
    script with a retried step and a failed run, and no logging set up, prints nothing
    to stderr. Once the script configures logging, the retry shows at INFO and the
    run's failure at WARNING."""
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT)

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), database.url, database.schema or "", mode],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip

    plain = run("plain")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "failed as expected\n"
    assert plain.stderr == ""
    configured = run("configured")
    assert configured.returncode == 0, configured.stderr
    lines = configured.stderr.splitlines()
    assert any(
        line.startswith("INFO perdure.runs:") and "step retrying" in line for line in lines
    ), lines
    assert any(
        line.startswith("WARNING perdure.runs:") and "failed: ValueError: bad data" in line
        for line in lines
    ), lines
