"""``perdure replay-check APP`` and ``perdure runs export RUN_ID`` (issue 38)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from perdure import App, Context
from tests.engine.helpers import wait_for

PERDURE = [sys.executable, "-m", "perdure.cli.main"]

NEW_CODE = textwrap.dedent(
    """
    from perdure import App, Context

    app = App()

    @app.workflow(name="deployed")
    async def deployed(ctx: Context, n: int) -> str:
        await ctx.step.run("one", lambda: n)
        await ctx.step.run("two", lambda: n)
        await ctx.step.wait_for_event("go")
        return "done"
    """
)


def test_replay_check_lists_the_runs_that_diverge_and_exits_1(
    database: Any, tmp_path: Path
) -> None:
    (tmp_path / "new_code.py").write_text(NEW_CODE)
    env = dict(os.environ, PERDURE_DATABASE_URL=database.url, PERDURE_SCHEMA=database.schema)
    env["PYTHONPATH"] = str(tmp_path)

    def cli(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*PERDURE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == code, result.stdout + result.stderr
        return result

    old = App(database.url, schema=database.schema)

    @old.workflow(name="deployed")
    async def deployed(ctx: Context, n: int) -> str:
        await ctx.step.run("one", lambda: n)
        await ctx.step.run("two" if n % 2 else "zwei", lambda: n)
        await ctx.step.wait_for_event("go")
        return "done"

    try:
        with old.worker():
            ids = [old.start(deployed, n).id for n in range(4)]
            wait_for(lambda: all(old.get_run(i).wake_reason == "event" for i in ids), 30)
    finally:
        old.close()

    found = json.loads(cli("replay-check", "new_code:app", "--json", code=1).stdout)
    assert sorted(d["run_id"] for d in found) == sorted([ids[0], ids[2]])
    assert found[0]["journaled"] == {"name": "zwei", "kind": "run"}
    assert "zwei" in cli("replay-check", "new_code:app", code=1).stdout

    cli("runs", "export", ids[1], "--output", "ok.json")
    cli("runs", "export", ids[2], "--output", "diverges.json")
    assert json.loads((tmp_path / "ok.json").read_text())["format"] == "perdure-run/1"
    assert "replays cleanly" in cli("replay-check", "new_code:app", "--file", "ok.json").stdout
    files = cli("replay-check", "new_code:app", "--file", "diverges.json", "--json", code=1)
    assert [d["run_id"] for d in json.loads(files.stdout)] == [ids[2]]
