"""Finding runs in a real Chromium: top-level runs by default with a count of their
children, a toggle that shows the children with their parent, and a search box that
finds a run by its id or its idempotency key. Screenshots go to build/screenshots/."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.engine.helpers import wait_for

from .harness import environment, process, server
from .test_dashboard import CHROMIUM, _browser_or_fail, _shot

FAN_APP = textwrap.dedent(
    """
    from perdure import App, Context

    app = App()

    @app.workflow
    async def leaf(ctx: Context, n: int) -> int:
        return await ctx.step.run("double", lambda: n * 2)

    @app.workflow
    async def fan(ctx: Context, data: dict) -> list[int]:
        return [await ctx.step.run_workflow(f"leaf-{i}", leaf, i) for i in range(2)]
    """
)


def test_children_are_hidden_and_counted_and_search_finds_by_id_and_key(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    sync_playwright = _browser_or_fail()
    env = environment(sqlite_database, tmp_path)
    (tmp_path / "fan_app.py").write_text(FAN_APP)
    with (
        server(env, tmp_path) as http,
        process(["worker", "fan_app:app", "--poll-interval", "0.05"], env, tmp_path),
        sync_playwright() as pw,
    ):
        runs = "/v1/workflows/fan/runs"
        fan = http.post(runs, {"input": {"order": 42}, "idempotencyKey": "order-42"})
        fan_id = fan.body["runId"]
        other = http.post(runs, {"input": {"order": 7}}).body["runId"]
        for run_id in (fan_id, other):
            path = f"{runs}/{run_id}"
            wait_for(lambda: http.get(path).body["status"] == "completed", 30)  # noqa: B023
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})

        tab.goto(f"{http.base}/runs")
        rows = tab.locator("table.runs tbody tr")
        assert rows.count() == 2  # the two fans; their four leaves are hidden
        fan_row = tab.locator("table.runs tbody tr", has_text=fan_id)
        assert fan_row.locator("td.children").inner_text() == "2"
        assert fan_row.locator("td.took").inner_text().endswith(("ms", "s"))
        _shot(tab, "runs-top-level")

        tab.check("input[name=children]")
        tab.click("button[type=submit]")
        tab.wait_for_url("**children=1**")
        assert rows.count() == 6
        parents = [p.strip() for p in tab.locator("table.runs td.parent").all_inner_texts()]
        assert sorted(p for p in parents if p) == sorted([fan_id] * 2 + [other] * 2)
        leaf_id = (
            tab.locator("table.runs tbody tr", has_text="leaf")
            .first.locator("td a")
            .first.inner_text()
        )
        _shot(tab, "runs-with-children")

        tab.fill("input[name=q]", leaf_id)
        tab.click("button[type=submit]")
        tab.wait_for_url("**q=**")
        assert rows.count() == 1 and leaf_id in rows.first.inner_text()

        tab.fill("input[name=q]", "order-42")
        tab.click("button[type=submit]")
        tab.wait_for_url("**q=order-42**")
        assert rows.count() == 1 and fan_id in rows.first.inner_text()
        _shot(tab, "runs-search-by-key")

        # a fan's page lists its children in step order
        tab.goto(f"{http.base}/runs/{fan_id}")
        steps = tab.locator("#children + table tbody tr td:nth-child(2)").all_inner_texts()
        assert steps == ["leaf-0", "leaf-1"]
        browser.close()
