"""``perdure schedules`` through real subprocesses: add, list, pause, resume, delete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from perdure import App

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def test_schedules_commands(database: Any, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": database.url,
        "PERDURE_SCHEMA": database.schema,
    }

    def cli(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*PERDURE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == code, result.stdout + result.stderr
        return result

    added = cli(
        "schedules", "add", "nightly", "report", "30 2 * * *",
        "--input", '{"kind": "full"}', "--timezone", "Europe/Paris", "--catch-up", "all",
    )  # fmt: skip
    assert "schedule nightly: next tick" in added.stdout
    (listed,) = json.loads(cli("schedules", "--json").stdout)
    assert listed["name"] == "nightly" and listed["input"] == {"kind": "full"}
    assert (listed["timezone"], listed["catch_up"], listed["paused"]) == (
        "Europe/Paris",
        "all",
        False,
    )
    assert "nightly" in cli("schedules", "list").stdout
    assert "paused" in cli("schedules", "pause", "nightly").stdout
    assert json.loads(cli("schedules", "list", "--json").stdout)[0]["paused"] is True
    assert "resumed" in cli("schedules", "resume", "nightly").stdout
    app = App(database.url, schema=database.schema)
    try:
        assert not app.list_schedules()[0].paused
    finally:
        app.close()
    assert "deleted" in cli("schedules", "delete", "nightly").stdout
    assert "no schedule named 'nightly'" in cli("schedules", "delete", "nightly", code=1).stderr
    bad = cli("schedules", "add", "x", "report", "not a cron", code=1)
    assert "five fields" in bad.stderr
    assert json.loads(cli("schedules", "--json").stdout) == []
