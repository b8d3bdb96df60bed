"""Cross-site requests in a real Chromium (issue 37): a page served from another port
of this machine posts plain forms to the bulk cancel route and to a dashboard action,
and makes a ``no-cors`` fetch that would start a run, against a server with tokens
(the browser signed in to its dashboard, so it holds the session cookie) and one
without. None of them changes the database."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .harness import Http, environment, free_port, server
from .test_dashboard import CHROMIUM, _browser_or_fail

TOKEN = "browser-token-0123456789"

ATTACK = """<!doctype html>
<html><body>
<form id="cancel" method="post" action="{victim}/v1/workflows/greet/bulk/cancel"></form>
<form id="dashboard" method="post" action="{victim}/runs/{run_id}/cancel">
  <input name="csrf" value="guessed"></form>
<script>
window.started = fetch("{victim}/v1/workflows/greet/runs", {{
  method: "POST", mode: "no-cors", credentials: "include"
}}).then(function () {{ return "answered"; }}, function (e) {{ return "failed: " + e; }});
</script>
</body></html>
"""


@contextmanager
def attacker(victim: str, run_id: str) -> Iterator[int]:
    """A site on another port of this machine serving the attack page at ``/``."""
    page = ATTACK.format(victim=victim, run_id=run_id).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    port = free_port()
    site = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        site.shutdown()
        site.server_close()
        thread.join()


def _attack(tab: Any, page: str, victim: str) -> None:
    """Load the attack page, wait for its fetch's answer, then submit each of its forms
    and wait for the victim's answer to load."""
    for form in ("cancel", "dashboard"):
        tab.goto(page)
        assert tab.evaluate("() => window.started") == "answered"
        with tab.expect_navigation(url=victim + "/**"):
            tab.evaluate(f"() => document.getElementById('{form}').submit()")


@pytest.mark.parametrize("tokens", [True, False], ids=["with-tokens", "without-tokens"])
def test_a_page_on_another_port_changes_nothing(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path, tokens: bool
) -> None:
    sync_playwright = _browser_or_fail()
    extra = {"PERDURE_API_TOKENS": TOKEN} if tokens else {}
    env = environment(sqlite_database, tmp_path, **extra)
    with server(env, tmp_path, token=TOKEN if tokens else None) as http, sync_playwright() as pw:
        api = Http(http.base, TOKEN if tokens else None)
        ids = [api.post("/v1/workflows/greet/runs", {"input": n}).body["runId"] for n in "ab"]
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_page()
            if tokens:  # signed in to the dashboard: the browser holds its cookie
                tab.goto(http.base + "/login")
                tab.fill("input[name=token]", TOKEN)
                tab.click("button[type=submit]")
                tab.wait_for_url(http.base + "/")
                assert [c["name"] for c in tab.context.cookies()] != []
            # the same site on another port (the cookie goes along), or another name
            site = "127.0.0.1" if tokens else "localhost"
            with attacker(http.base, ids[0]) as port:
                _attack(tab, f"http://{site}:{port}/", http.base)
        finally:
            browser.close()
        runs = api.get("/v1/workflows/greet/runs").body["items"]
        assert sorted(r["id"] for r in runs) == sorted(ids)
        assert {r["status"] for r in runs} == {"pending"}
