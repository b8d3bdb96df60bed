"""DAG flows over REST: a flow started through the workflow route, its shape at
GET /v1/flows/{name}, its steps with their tasks; 404 and 422 in the one error shape."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.engine.helpers import wait_for

from .harness import environment, process, server

FLOWS_APP = textwrap.dedent(
    """
    from pathlib import Path

    from perdure import App

    app = App()
    report = app.flow("report", max_attempts=2, base_delay=0, timeout=20)

    @report.step
    async def pages(ctx, input):
        return [f"{input['run']}/{p}" for p in ("a", "b")]

    @report.map(over=pages, timeout=5)
    async def words(ctx, page):
        if page == "bug/b" and not Path("fixed").exists():  # until the fix is deployed
            raise ValueError(f"cannot count {page}")
        return len(page)

    @report.step(depends_on=[words])
    async def total(ctx, input):
        return sum(input["words"])

    fan = app.flow("fan", max_tasks=3)

    @fan.map(over="run")
    async def each(ctx, item):
        return item
    """
)


def test_a_flow_over_rest(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    (tmp_path / "flows_app.py").write_text(FLOWS_APP)
    with server(env, tmp_path) as http, process(["worker", "flows_app:app"], env, tmp_path):
        shape = wait_for(lambda: (r := http.get("/v1/flows/report")).status == 200 and r.body, 20)
        assert shape == {
            "name": "report",
            "version": 1,
            "maxAttempts": 2,
            "baseDelay": 0.0,
            "timeout": 20.0,
            "maxTasks": 10000,
            "steps": [
                {"name": "pages", "dependsOn": [], "mapOver": None, "maxAttempts": None,
                 "baseDelay": None, "timeout": None, "maxTasks": None},
                {"name": "words", "dependsOn": ["pages"], "mapOver": "pages",
                 "maxAttempts": None, "baseDelay": None, "timeout": 5.0, "maxTasks": None},
                {"name": "total", "dependsOn": ["words"], "mapOver": None, "maxAttempts": None,
                 "baseDelay": None, "timeout": None, "maxTasks": None},
            ],
            "leaves": ["total"],
        }  # fmt: skip
        started = http.post("/v1/workflows/report/runs", {"input": "site"})
        assert started.status == 201, started.body
        run_id = started.body["runId"]
        run = wait_for(
            lambda: (
                (r := http.get(f"/v1/workflows/report/runs/{run_id}").body)["status"] == "completed"
                and r
            ),
            20,
        )
        assert run["output"] == {"total": 12}
        steps = http.get(f"/v1/workflows/report/runs/{run_id}/steps").body["items"]
        assert [(s["name"], s["status"], len(s["tasks"])) for s in steps] == [
            ("pages", "completed", 1),
            ("words", "completed", 2),
            ("total", "completed", 1),
        ]
        task = steps[1]["tasks"][1]
        assert (task["index"], task["status"], task["attempts"], task["output"]) == (
            1, "completed", 1, 6,
        )  # fmt: skip
        assert task["runId"] == f"{run_id}:words:1"

        # A failed flow run is retried after the fix: what completed is kept.
        failed = http.post("/v1/workflows/report/runs", {"input": "bug"}).body["runId"]
        path = f"/v1/workflows/report/runs/{failed}"
        wait_for(lambda: http.get(path).body["status"] == "failed", 20)
        (tmp_path / "fixed").touch()
        retried = http.post(f"{path}/retry", {})
        assert retried.status == 200 and retried.body == {"runId": failed}, retried.body
        done = wait_for(lambda: (r := http.get(path).body)["status"] == "completed" and r, 20)
        assert (done["output"], done["attempt"]) == ({"total": 10}, 2)
        again = http.post(f"{path}/retry", {})
        assert again.status == 409, again.body  # a completed run is not retried

        # A map over the input is bounded over REST too: the run fails, with no task.
        assert http.get("/v1/flows/fan").body["maxTasks"] == 3
        over = http.post("/v1/workflows/fan/runs", {"input": [1, 2, 3, 4]})
        assert over.status == 201, over.body
        fan_run = http.get(f"/v1/workflows/fan/runs/{over.body['runId']}").body
        assert fan_run["status"] == "failed"
        assert fan_run["error"]["message"].startswith(
            "map step 'each' would create 4 tasks, over its max_tasks of 3"
        )
        fan_steps = http.get(f"/v1/workflows/fan/runs/{over.body['runId']}/steps").body["items"]
        assert [(s["name"], s["status"], s["tasks"]) for s in fan_steps] == [("each", "failed", [])]

        missing = http.get("/v1/flows/nope")
        assert missing.status == 404 and missing.body["error"]["type"] == "NotFoundError"
        assert http.get("/v1/flows/report?version=2").status == 404
        for bad in ("/v1/flows/bad%20name", "/v1/flows/report?version=0"):
            reply = http.get(bad)
            assert reply.status == 422 and reply.body["error"]["type"] == "ValidationError"
