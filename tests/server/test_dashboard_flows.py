"""The dashboard's DAG pages in a real headless Chromium: a flow's shape, and a flow
run's steps coloured by their state with their tasks' counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.engine.helpers import wait_for

from .harness import environment, process, server
from .test_dashboard import CHROMIUM, _browser_or_fail, _shot
from .test_flows_rest import FLOWS_APP


def test_a_flow_and_its_run_are_drawn_as_a_dag(sqlite_database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sync_playwright = _browser_or_fail()
    env = environment(sqlite_database, tmp_path)
    (tmp_path / "flows_app.py").write_text(FLOWS_APP)
    with (
        server(env, tmp_path, "flows_app:app") as http,
        process(["worker", "flows_app:app", "--poll-interval", "0.05"], env, tmp_path),
    ):
        run_id = http.post("/v1/workflows/report/runs", {"input": "site"}).body["runId"]
        path = f"/v1/workflows/report/runs/{run_id}"
        wait_for(lambda: http.get(path).body["status"] == "completed", 20)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page: Any = browser.new_page(viewport={"width": 1366, "height": 900})
            errors: list[str] = []

            def on_console(message: Any) -> None:
                if message.type == "error":
                    errors.append(message.text)

            page.on("console", on_console)
            page.goto(http.base + "/flows/report")
            assert page.title() == "Flow report · perdure"
            nodes = page.locator(".dag g.node")
            assert nodes.count() == 3
            assert page.locator(".dag path.edge").count() == 2
            assert page.locator(".dag g.node.map").get_attribute("data-step") == "words"
            assert "map over pages" in page.locator("#flow-steps").inner_text()
            _shot(page, "flow-shape")

            page.goto(http.base + f"/runs/{run_id}")
            assert page.locator("#run-status").inner_text() == "completed"
            assert page.locator(".dag g.node.st-completed").count() == 3
            words = page.locator('.dag g.node[data-step="words"]')
            assert "2/2 tasks" in (words.text_content() or "")
            _shot(page, "flow-run")
            page.click("#flow-shape")
            page.wait_for_url("**/flows/report?version=1")
            # the workflows page links a flow to its shape
            page.goto(http.base + "/")
            page.locator("table.grid tr", has_text="report").locator("a.flow-shape").click()
            page.wait_for_url("**/flows/report")
            assert page.locator(".dag g.node").count() == 3
            # A failed flow run is retried from its page once the fix is deployed.
            failed = http.post("/v1/workflows/report/runs", {"input": "bug"}).body["runId"]
            failed_path = f"/v1/workflows/report/runs/{failed}"
            wait_for(lambda: http.get(failed_path).body["status"] == "failed", 20)
            page.goto(http.base + f"/runs/{failed}")
            assert page.locator("#fork").count() == 1
            assert "did not complete" in page.locator("#from-step").inner_text()
            (tmp_path / "fixed").touch()
            page.click("#retry")
            wait_for(lambda: http.get(failed_path).body["status"] == "completed", 20)
            page.goto(http.base + f"/runs/{failed}")
            assert page.locator(".dag g.node.st-completed").count() == 3
            page.goto(http.base + "/flows/nope")
            assert "no flow 'nope'" in page.inner_text("main")
            assert errors == [] or all("404" in e for e in errors)
            browser.close()
