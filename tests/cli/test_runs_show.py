"""``perdure runs show`` of a failed run: its error with the traceback of the user's
exception (``--no-traceback`` hides it), and ``--attempts`` with every attempt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perdure import App, Context, RetryPolicy, WorkflowFailed

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def _declined(card: str) -> str:
    raise LookupError(f"card {card} was declined")


def test_runs_show_prints_a_failed_runs_traceback_and_each_attempt(  # type: ignore[no-untyped-def]
    database, tmp_path: Path
) -> None:
    env = dict(os.environ, PERDURE_DATABASE_URL=database.url, PERDURE_SCHEMA=database.schema)

    def cli(*args: str) -> str:
        result = subprocess.run(
            [*PERDURE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    app = App(database.url, schema=database.schema)

    @app.workflow
    async def pay(ctx: Context, card: str) -> str:
        retry = RetryPolicy(max_attempts=3, initial="10ms", jitter=0)
        return await ctx.step.run("charge", _declined, card, retry=retry)

    try:
        with app.worker():
            handle = app.start(pay, "4242")
            with pytest.raises(WorkflowFailed):
                handle.result(timeout=30)
    finally:
        app.close()

    shown = cli("runs", "show", handle.id)
    assert "cause:  LookupError: card 4242 was declined" in shown
    assert "Traceback (most recent call last):" in shown
    assert "in _declined" in shown  # the user's own frame
    assert 'raise LookupError(f"card {card} was declined")' in shown
    # the failed attempts are listed by default; `took` is the total, the last beside it
    for number in (1, 2, 3):
        assert f"attempt {number} failed: LookupError: card 4242 was declined" in shown
    assert "(last " in shown

    hidden = cli("runs", "show", handle.id, "--no-traceback")
    assert "LookupError: card 4242 was declined" in hidden
    assert "Traceback" not in hidden

    each = cli("runs", "show", handle.id, "--attempts", "--no-traceback")
    lines = [line for line in each.splitlines() if "attempt " in line and "failed" in line]
    assert len(lines) == 3, each
    assert "(retried after 0.01s)" in lines[0] and "retried after" not in lines[2]
