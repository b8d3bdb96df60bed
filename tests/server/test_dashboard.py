"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright):
real pages over a real `perdure serve` and a real worker. Screenshots of the main
pages are saved to build/screenshots/ for a person to look at."""

from __future__ import annotations

import os
import shutil
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pytest

from tests.engine.helpers import wait_for

from .harness import Dashboard, Http, environment, process, server

CHROMIUM = os.environ.get("PERDURE_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"

DASH_APP = textwrap.dedent(
    """
    from perdure import App, Context, RetryPolicy

    app = App()
    tries = {}

    def flaky(key: str) -> str:
        tries[key] = tries.get(key, 0) + 1
        if tries[key] < 2:
            raise RuntimeError("the card network timed out")
        return "charged"

    @app.workflow
    async def order(ctx: Context, data: dict) -> dict:
        reserved = await ctx.step.run(
            "reserve", lambda: {"sku": data["sku"]}, rollback=lambda out: f"released {out}"
        )
        charged = await ctx.step.run(
            "charge", flaky, ctx.run_id, retry=RetryPolicy(max_attempts=3, initial=0.2)
        )
        await ctx.step.sleep("cool-off", 0.2)
        approval = await ctx.step.wait_for_event("approve", timeout="1h")
        return {"reserved": reserved, "charged": charged, "approval": approval}
    """
)


def _browser_or_fail() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("playwright is not installed (make test installs it)")
        pytest.skip("playwright is not installed")
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM} (make test installs Debian's chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    return sync_playwright


@pytest.fixture
def site(sqlite_database, tmp_path: Path) -> Iterator[tuple[Http, list[str]]]:  # type: ignore[no-untyped-def]
    """A server and a worker, with three order runs waiting for approval."""
    env = environment(sqlite_database, tmp_path)
    (tmp_path / "dash_app.py").write_text(DASH_APP)
    with (
        server(env, tmp_path, "dash_app:app") as http,
        process(["worker", "dash_app:app", "--poll-interval", "0.05"], env, tmp_path),
    ):
        ids = [
            http.post("/v1/workflows/order/runs", {"input": {"sku": sku}}).body["runId"]
            for sku in ("apple", "banana", "<script>alert('x')</script>")
        ]

        def parked_for_approval(run_id: str) -> bool:
            path = f"/v1/workflows/order/runs/{run_id}"
            waiting = http.get(path).body["status"] == "waiting"
            return waiting and "approve" in str(http.get(f"{path}/events").body)

        for run_id in ids:
            wait_for(lambda: parked_for_approval(run_id), 20)  # noqa: B023
        yield http, ids


@pytest.fixture
def page(site: tuple[Http, list[str]]) -> Iterator[Any]:
    sync_playwright = _browser_or_fail()
    http, _ = site
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1366, "height": 900})
        tab = context.new_page()
        tab.requests = []  # type: ignore[attr-defined]
        tab.dialogs = []  # type: ignore[attr-defined]
        tab.console_errors = []  # type: ignore[attr-defined]
        tab.on("request", lambda r: tab.requests.append(r.url))  # type: ignore[attr-defined]
        tab.on("dialog", lambda d: (tab.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
        # script errors and failed loads; a page answered 422 (a bad filter) is meant
        tab.on(
            "console",
            lambda m: (
                m.type == "error"
                and "status of 422" not in m.text
                and tab.console_errors.append(m.text)
            ),  # type: ignore[attr-defined]
        )
        tab.base = http.base  # type: ignore[attr-defined]
        yield tab
        # nothing the pages asked for left the server
        assert all(u.startswith(http.base) for u in tab.requests), tab.requests  # type: ignore[attr-defined]
        assert tab.dialogs == []  # type: ignore[attr-defined]
        assert tab.console_errors == []  # type: ignore[attr-defined]
        browser.close()


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_the_overview_shows_workflows_with_counts_and_workers(page: Any) -> None:
    page.goto(page.base + "/")
    assert page.title() == "Workflows · perdure"
    row = page.locator("table.grid tbody tr", has_text="order")
    assert row.locator("a.st-waiting").inner_text() == "3"
    assert "order@1" in page.locator("ul.workers").inner_text()
    _shot(page, "overview")


def test_runs_are_filtered_by_status_and_input_and_link_to_their_page(page: Any) -> None:
    page.goto(page.base + "/runs")
    assert page.locator("table.runs tbody tr").count() == 3
    page.select_option("select[name=status]", "completed")
    page.click("button[type=submit]")
    page.wait_for_url("**/runs?**status=completed**")
    assert page.locator("table.runs").count() == 0 and "No run matches" in page.inner_text("main")
    page.goto(page.base + "/runs")
    page.fill("input[name=input]", '{"sku": "banana"}')
    page.click("button[type=submit]")
    rows = page.locator("table.runs tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1 and "banana" in rows.first.inner_text()
    _shot(page, "runs")
    page.fill("input[name=since]", "yesterday-ish")
    page.click("button[type=submit]")
    assert "since must be an ISO 8601 time" in page.locator("ul.errors").inner_text()
    # every bad filter is listed, not only the first
    page.fill("input[name=until]", "nope")
    page.fill("input[name=input]", "{not json")
    page.click("button[type=submit]")
    errors = page.locator("ul.errors li").all_inner_texts()
    assert len(errors) == 3, errors
    assert "until" in errors[1] and "input is not valid JSON" in errors[2]


def test_a_run_page_shows_its_timeline_and_data_escaped(
    page: Any, site: tuple[Http, list[str]]
) -> None:
    _, ids = site
    page.goto(page.base + f"/runs/{ids[2]}")
    assert page.locator("#run-status").inner_text() == "waiting"
    assert "event approve" in page.locator(".facts").inner_text()
    labels = page.locator(".gantt .label").all_inner_texts()
    assert labels == ["reserve", "charge", "cool-off", "waiting (event)"]
    # one segment per attempt: the charge that failed once has two
    assert page.locator(".gantt rect.bar").count() == 5
    assert page.locator(".gantt g.row[data-step=charge] rect.bar").count() == 2
    assert "2 attempts" in page.locator(".gantt .times").inner_text()
    # the input holds a <script>: shown as text, never run
    assert "<script>alert('x')</script>" in page.locator("pre.json").first.inner_text()
    assert page.locator("main script").count() == 0
    events = page.locator("table.events").inner_text()
    assert "step_retrying" in events and "the card network timed out" in events
    _shot(page, "run-waiting")


def test_a_signal_from_the_page_completes_the_run_and_the_page_updates_by_itself(
    page: Any, site: tuple[Http, list[str]]
) -> None:
    _, ids = site
    page.goto(page.base + f"/runs/{ids[0]}")
    page.fill("input[name=event]", "approve")
    page.fill("input[name=payload]", '{"by": "ada"}')
    page.click("#signal")
    page.wait_for_url(f"**/runs/{ids[0]}?notice=signal-sent")
    # no reload from here on: the live page picks the completion up by itself
    page.locator("#run-status", has_text="completed").wait_for(timeout=20_000)
    assert '"by": "ada"' in page.locator("#output").inner_text()
    _shot(page, "run-completed")


def test_cancel_from_the_page_ends_the_run(page: Any, site: tuple[Http, list[str]]) -> None:
    http, ids = site
    page.goto(page.base + f"/runs/{ids[1]}")
    page.click("#cancel")
    page.wait_for_url(f"**/runs/{ids[1]}?notice=cancelled")
    assert page.locator("#run-status").inner_text() == "cancelled"
    assert http.get(f"/v1/workflows/order/runs/{ids[1]}").body["status"] == "cancelled"


def test_every_run_id_the_rule_allows_has_a_page_and_none_links_to_another_run(
    page: Any, site: tuple[Http, list[str]]
) -> None:
    http, ids = site
    runs = "/v1/workflows/order/runs"
    # The review's id that /runs showed as a link to another run's page is refused.
    sneaky = http.post(runs, {"input": {"sku": "x"}, "runId": f"zz/../{ids[0]}"})
    assert sneaky.status == 422
    odd = ["tenant 42", "order:42@eu-west", "café ✓ 日本", "a..b"]
    for run_id in odd:
        assert http.post(runs, {"input": {"sku": "odd"}, "runId": run_id}).status == 201
    for run_id in odd:
        page.goto(page.base + "/runs")
        page.get_by_role("link", name=run_id, exact=True).click()
        page.locator("#run-status").wait_for()
        assert unquote(urlparse(page.url).path) == f"/runs/{run_id}"
        assert page.locator("h1").inner_text().startswith(run_id)
        page.click("#cancel")
        page.locator("#run-status", has_text="cancelled").wait_for(timeout=20_000)
        path = f"{runs}/{quote(run_id, safe='')}"
        assert http.get(path).body["status"] == "cancelled"
    assert http.get(f"{runs}/{ids[0]}").body["status"] == "waiting"


def test_an_action_posted_from_another_origin_is_refused(site: tuple[Http, list[str]]) -> None:
    http, ids = site
    request = urllib.request.Request(
        f"{http.base}/runs/{ids[0]}/cancel",
        data=b"",
        method="POST",
        headers={"Origin": "http://evil.example"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    assert http.get(f"/v1/workflows/order/runs/{ids[0]}").body["status"] == "waiting"


def test_pages_carry_a_content_security_policy(site: tuple[Http, list[str]]) -> None:
    http, _ = site
    with urllib.request.urlopen(http.base + "/runs", timeout=10) as answer:
        policy = answer.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "default-src 'none'" in policy


def test_with_tokens_the_dashboard_asks_for_one_once(sqlite_database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sync_playwright = _browser_or_fail()
    token = "dashboard-token-0123456789"
    env = environment(sqlite_database, tmp_path, PERDURE_API_TOKENS=token)
    with server(env, tmp_path) as http, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page()
        tab.goto(http.base + "/workers")
        assert tab.url.startswith(http.base + "/login")
        tab.fill("input[name=token]", "not-the-token-000000")
        tab.click("button[type=submit]")
        assert "not one of this server's" in tab.locator("p.error").inner_text()
        tab.fill("input[name=token]", token)
        tab.click("button[type=submit]")
        tab.wait_for_url(http.base + "/workers")
        assert tab.locator("h1").inner_text() == "Workers"
        [cookie] = tab.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        tab.goto(http.base + "/")  # the cookie is enough from now on
        assert tab.locator("h1").first.inner_text() == "Workflows"
        browser.close()


FAILING_APP = textwrap.dedent(
    """
    from pathlib import Path
    from perdure import App, Context, RetryPolicy

    app = App()
    FIXED = Path(__file__).parent / "fixed"

    def ship() -> str:
        if not FIXED.exists():
            raise RuntimeError("the carrier API is down")
        return "shipped"

    @app.workflow
    async def parcel(ctx: Context, _: object) -> list[str]:
        once = RetryPolicy(max_attempts=1)
        packed = await ctx.step.run("pack", lambda: "packed", retry=once)
        return [packed, await ctx.step.run("ship", ship, retry=once)]
    """
)


def test_a_failed_run_is_retried_from_a_chosen_step_and_forked_from_the_page(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    sync_playwright = _browser_or_fail()
    env = environment(sqlite_database, tmp_path)
    (tmp_path / "parcel_app.py").write_text(FAILING_APP)
    with (
        server(env, tmp_path) as http,
        process(["worker", "parcel_app:app", "--poll-interval", "0.05"], env, tmp_path),
        sync_playwright() as pw,
    ):
        run_id = http.post("/v1/workflows/parcel/runs", {}).body["runId"]
        path = f"/v1/workflows/parcel/runs/{run_id}"
        wait_for(lambda: http.get(path).body["status"] == "failed", 20)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1366, "height": 900})
        tab.goto(f"{http.base}/runs/{run_id}")
        assert "the carrier API is down" in tab.locator("pre.error-json").inner_text()
        _shot(tab, "run-failed")
        (tmp_path / "fixed").touch()  # the fix is deployed
        tab.select_option("#from-step", "ship")
        tab.click("#retry")
        tab.wait_for_url(f"**/runs/{run_id}?notice=retried")
        tab.locator("#run-status", has_text="completed").wait_for(timeout=20_000)
        assert http.get(path).body["attempt"] == 2
        steps = http.get(f"{path}/steps?includeSuperseded=true").body["items"]
        assert [s["name"] for s in steps if s["superseded"]] == ["ship"]
        tab.click("#fork")
        tab.wait_for_url("**?notice=forked")
        assert run_id not in tab.url.split("?")[0]
        tab.locator("#run-status", has_text="completed").wait_for(timeout=20_000)
        browser.close()


def test_cancel_with_rollback_from_the_page(page: Any, site: tuple[Http, list[str]]) -> None:
    http, ids = site
    page.goto(page.base + f"/runs/{ids[0]}")
    page.click("#cancel-rollback")
    page.wait_for_url(f"**/runs/{ids[0]}?notice=cancelling")
    page.locator("#run-status", has_text="cancelled").wait_for(timeout=20_000)
    error = http.get(f"/v1/workflows/order/runs/{ids[0]}").body["error"]
    assert error["compensated"] == ["reserve"]
    assert '"compensated"' in page.locator("pre.error-json").inner_text()


def test_the_workers_page_lists_the_schedules(page: Any, sqlite_database: Any) -> None:
    from perdure import App

    app = App(sqlite_database.url)
    try:
        app.schedule("nightly", "order", "30 2 * * *", timezone="Europe/Paris")
        app.schedule("paused-one", "order", "0 * * * *")
        app.pause_schedule("paused-one")
    except Exception:
        app.close()
        raise
    app.close()
    page.goto(page.base + "/workers")
    rows = page.locator("table.schedules tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).inner_text()
    assert "30 2 * * *" in first and "Europe/Paris" in first and "active" in first
    assert "paused" in rows.nth(1).inner_text()
    _shot(page, "workers-schedules")


def test_schedules_are_paused_resumed_and_deleted_from_the_workers_page(
    page: Any, sqlite_database: Any
) -> None:
    from perdure import App

    app = App(sqlite_database.url)
    try:
        app.schedule("nightly", "order", "30 2 * * *")
        app.schedule("hourly", "order", "0 * * * *")

        def paused(name: str) -> bool:
            return next(s.paused for s in app.list_schedules() if s.name == name)

        page.goto(page.base + "/workers")
        row = page.locator("table.schedules tr[data-schedule=nightly]")
        assert row.locator("td.state").inner_text() == "active"
        row.locator("button.pause").click()
        page.wait_for_url("**/workers?notice=schedule-paused")
        assert page.locator("p.notice").inner_text() == "Schedule paused."
        assert row.locator("td.state").inner_text() == "paused"
        assert paused("nightly") and not paused("hourly")
        _shot(page, "workers-schedule-paused")

        row.locator("button.resume").click()
        page.wait_for_url("**/workers?notice=schedule-resumed")
        assert row.locator("td.state").inner_text() == "active"
        assert not paused("nightly")

        row.locator("button.delete").click()
        page.wait_for_url("**/workers?notice=schedule-deleted")
        assert row.count() == 0
        assert page.locator("table.schedules tbody tr").count() == 1
        assert [s.name for s in app.list_schedules()] == ["hourly"]
    finally:
        app.close()


def test_a_schedule_action_on_an_unknown_name_or_from_another_origin(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    from perdure import App

    app = App(sqlite_database.url)
    try:
        app.schedule("nightly", "greet", "30 2 * * *")
    finally:
        app.close()

    with server(environment(sqlite_database, tmp_path), tmp_path) as http:
        dash = Dashboard(http.base)
        assert dash.get("/workers").status == 200 and dash.csrf
        for action in ("pause", "resume", "delete"):
            page = dash.post(f"/schedules/nope/{action}")
            assert page.status == 404 and "no schedule named &#39;nope&#39;" in page.text, page
        page = dash.post("/schedules/bad%20name!/pause")
        assert page.status == 404 and "invalid schedule name" in page.text, page
        for action in ("pause", "delete"):
            refused = dash.post(f"/schedules/nightly/{action}", Origin="http://evil.example")
            assert refused.status == 403
        [kept] = http.get("/v1/schedules").body["items"]
        assert kept["name"] == "nightly" and not kept["paused"]
