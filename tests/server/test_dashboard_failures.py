"""Failures anyone can read, in a real Chromium: a failed run's error first, with a
wrapped traceback and each attempt's own error; error notices look like errors and the
form keeps what was typed. Screenshots go to build/screenshots/."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine.helpers import wait_for

from .harness import Http, environment, process, server
from .test_dashboard import CHROMIUM, _browser_or_fail, _shot, page, site

__all__ = ["page", "site"]  # the fixtures of test_dashboard, used here too

DECLINING_APP = textwrap.dedent(
    """
    from perdure import App, Context, RetryPolicy

    app = App()

    def charge_the_card(card: str) -> str:
        raise LookupError(f"the card {card} was declined by the issuer " + "x" * 300)

    @app.workflow
    async def pay(ctx: Context, data: dict) -> str:
        await ctx.step.run("reserve", lambda: "reserved")
        retry = RetryPolicy(max_attempts=3, initial=0.05, jitter=0)
        return await ctx.step.run("charge", charge_the_card, data["card"], retry=retry)
    """
)


@pytest.fixture
def failed(sqlite_database, tmp_path: Path) -> Iterator[tuple[Any, str]]:  # type: ignore[no-untyped-def]
    """A Chromium tab 1280 px wide, and a run that failed after three attempts."""
    sync_playwright = _browser_or_fail()
    env = environment(sqlite_database, tmp_path)
    (tmp_path / "pay_app.py").write_text(DECLINING_APP)
    with (
        server(env, tmp_path) as http,
        process(["worker", "pay_app:app", "--poll-interval", "0.05"], env, tmp_path),
        sync_playwright() as pw,
    ):
        run_id = http.post("/v1/workflows/pay/runs", {"input": {"card": "4242"}}).body["runId"]
        wait_for(lambda: _status(http, run_id) == "failed", 30)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto(f"{http.base}/runs/{run_id}")
        yield tab, run_id
        browser.close()


def _status(http: Http, run_id: str) -> str:
    status: str = http.get(f"/v1/workflows/pay/runs/{run_id}").body["status"]
    return status


def _overflows(tab: Any, selector: str) -> bool:
    return bool(tab.eval_on_selector(selector, "e => e.scrollWidth > e.clientWidth + 1"))


def test_a_failed_run_shows_its_error_first_with_a_readable_traceback(
    failed: tuple[Any, str],
) -> None:
    tab, _ = failed
    title = tab.locator("#failure .error-title")
    assert title.locator(".error-type").inner_text() == "LookupError"
    assert (
        title.locator(".error-message")
        .inner_text()
        .startswith("the card 4242 was declined by the issuer")
    )
    assert "in step charge, attempt 3" in tab.locator("#failure").inner_text()
    traceback = tab.locator("#failure pre.tb")
    assert traceback.is_visible()
    assert "Traceback (most recent call last):" in traceback.inner_text()
    # the user's own frame set apart from perdure's and Python's
    own = tab.locator("#failure pre.tb .frame.own").all_inner_texts()
    assert len(own) == 1 and "pay_app.py" in own[0] and "in charge_the_card" in own[0]
    others = tab.locator("#failure pre.tb .frame:not(.own)").all_inner_texts()
    assert any("perdure" in text for text in others)
    # wrapped: nothing scrolls sideways at 1280 px, neither the page nor the traceback
    assert not _overflows(tab, "html")
    assert not _overflows(tab, "#failure pre.tb")
    _shot(tab, "run-failed-error-first")
    tab.locator("#failure details.traceback > summary").click()  # collapsible
    assert not traceback.is_visible()


def test_each_failed_attempt_of_a_step_expands_with_its_own_error(
    failed: tuple[Any, str],
) -> None:
    tab, _ = failed
    row = tab.locator("table.steps tr[data-step=charge]")
    attempts = row.locator("details.attempts li.attempt")
    assert not attempts.first.is_visible()
    row.locator("details.attempts > summary").click()
    assert attempts.count() == 3
    for number in range(3):
        text = attempts.nth(number).inner_text()
        assert f"attempt {number + 1} failed" in text and "LookupError" in text, text
    assert "retried after 0.05 s" in attempts.nth(0).inner_text()
    # the step's last error, with its traceback, expands on its row
    row.locator("details.step-error > summary").click()
    assert "in charge_the_card" in row.locator("details.step-error pre.tb").inner_text()
    # every attempt is its own segment of the timeline, each wide enough to see
    segments = tab.locator(".gantt g.row[data-step=charge] rect.bar")
    assert segments.count() == 3
    for number in range(3):
        assert segments.nth(number).bounding_box()["width"] >= 4
    # an audit-trail entry expands to all of its details, not clipped
    retried = tab.locator("table.events tr", has_text="step_retrying").first
    retried.locator("details.event-data > summary").click()
    assert "x" * 300 in retried.locator("details.event-data pre").inner_text()
    assert not _overflows(tab, "html")
    _shot(tab, "run-failed-attempts")


def test_a_bad_json_signal_is_an_error_notice_and_the_form_keeps_what_was_typed(
    page: Any, site: tuple[Http, list[str]]
) -> None:
    _, ids = site
    page.goto(page.base + f"/runs/{ids[0]}")
    page.fill("input[name=event]", "approve")
    page.fill("input[name=payload]", '{"by": ada}')
    page.click("#signal")
    page.locator("p.error").wait_for()
    assert "not valid JSON" in page.locator("p.error").inner_text()
    assert page.locator("p.notice:not(.error)").count() == 0
    assert page.input_value("input[name=event]") == "approve"
    assert page.input_value("input[name=payload]") == '{"by": ada}'
    _shot(page, "run-signal-bad-json")
    # a notice that says something did not happen is shown as an error too
    page.goto(page.base + f"/runs/{ids[0]}?notice=signal-late")
    late = page.locator("p.notice")
    assert late.inner_text() == "Not sent: the run has ended."
    assert "error" in (late.get_attribute("class") or "")
    color = late.evaluate("e => getComputedStyle(e).backgroundColor")
    assert color == "rgb(253, 236, 234)", color  # the error box, not the green one


def test_a_30_second_backoff_leaves_every_attempt_visible_on_the_timeline(
    tmp_path: Path,
) -> None:
    """The test clock moves past the backoff (no real waiting); the page is served by a
    real `perdure serve` on the same SQLite file, so it reads the same moved clock."""
    from types import SimpleNamespace

    from perdure import App, Context, RetryPolicy
    from perdure.testing import TestEnvironment

    sync_playwright = _browser_or_fail()
    app = App()
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("the gateway timed out")
        return "ok"

    @app.workflow
    async def slow_retry(ctx: Context, _: object) -> str:
        await ctx.step.run("first", lambda: "one")
        retry = RetryPolicy(max_attempts=2, initial=30, jitter=0)
        return await ctx.step.run("flaky", flaky, retry=retry)

    url = f"sqlite:///{tmp_path / 'clock.db'}"
    with TestEnvironment(app, database_url=url) as env:
        handle = env.start(slow_retry)
        wait_for(lambda: env.get_run(handle.id).status == "waiting", 20)
        env.advance("31s")
        assert handle.result(timeout=20) == "ok"
        database = SimpleNamespace(url=url, schema="perdure")
        with server(environment(database, tmp_path), tmp_path) as http, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto(f"{http.base}/runs/{handle.id}")
            segments = tab.locator(".gantt g.row[data-step=flaky] rect.bar")
            assert segments.count() == 2
            boxes = [segments.nth(i).bounding_box() for i in range(2)]
            assert all(box["width"] >= 4 for box in boxes), boxes
            assert boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"]  # apart, in order
            first = tab.locator(".gantt g.row[data-step=first] rect.bar").bounding_box()
            assert first["width"] >= 4
            # the backoff is compressed and labelled with its real length
            labels = " ".join(tab.locator(".gantt .gap-label").all_text_contents())
            assert re.search(r"3\d\.\d s", labels), labels  # 30 s, and the advance's extra
            _shot(tab, "run-30s-backoff")
            browser.close()
