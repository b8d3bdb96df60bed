"""The Node example worker (examples/node_task_worker) serves one step of a flow
whose other steps a Python worker serves (PostgreSQL; needs node and `npm install`
in that folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from perdure import App, TaskContext

pytestmark = pytest.mark.postgres

FOLDER = Path(__file__).resolve().parents[2] / "examples" / "node_task_worker"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_node_worker_serves_one_step(postgres_database) -> None:  # type: ignore[no-untyped-def]
    if not (FOLDER / "node_modules" / "pg").exists():
        message = "run `npm install` in examples/node_task_worker (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    app = App(postgres_database.url, schema=postgres_database.schema, sweep_interval=0)
    flow = app.flow("analyze_website", base_delay=0)

    @flow.step
    async def website(ctx: TaskContext, input: Any) -> dict[str, str]:
        return {"content": f"welcome to {input['run']['url']}"}

    flow.external_step("sentiment", depends_on=[website])

    @flow.step(depends_on=["sentiment"])
    async def save(ctx: TaskContext, input: Any) -> dict[str, Any]:
        return input["sentiment"]

    env = {
        **os.environ,
        "PERDURE_DATABASE_URL": postgres_database.url,
        "PERDURE_SCHEMA": postgres_database.schema,
        "STOP_AFTER": "1",
    }
    try:
        with app.worker():
            handle = app.start(flow, {"url": "https://example.com"})
            node = subprocess.run(
                ["node", "worker.js", "analyze_website", "sentiment"],
                cwd=FOLDER, env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert node.returncode == 0, node.stderr
            assert handle.result(timeout=30) == {"save": {"score": 0.8, "by": "node"}}
    finally:
        app.close()
