"""Redaction (DESIGN §12): with ``App(redact=["password", "card.*"])`` the secrets are
masked in the REST API (records and the event stream), the dashboard, the CLI and the
logs of real processes, while the stored values, and the Python API, keep them."""

from __future__ import annotations

import json
import subprocess
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

from perdure import App

from .harness import PERDURE, environment, process, server

APP = textwrap.dedent(
    """
    from perdure import App, Context, RetryPolicy

    app = App(redact=["password", "card.*"])
    attempts = []

    def charge(card: dict) -> dict:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError(f"declined: password=hunter2 card={card['number']}")
        return {"charged": True, "card": {"number": card["number"], "brand": "visa"}}

    @app.workflow
    async def signup(ctx: Context, user: dict) -> dict:
        ctx.log.info("signing up %s", user)
        await ctx.set("password", user["password"])
        charged = await ctx.step.run(
            "charge", lambda: charge(user["card"]), retry=RetryPolicy(initial="10ms", jitter=0)
        )
        return {"user": user["name"], "password": user["password"], "charged": charged}
    """
)

# Secrets no timestamp, id or token can contain (a CVC of "737" matched a timestamp's
# microseconds once in a full run).
SECRETS = ("hunter2", "4111111111111111", "cvc-7x3q")
USER = {
    "name": "ada",
    "password": "hunter2",
    "card": {"number": "4111111111111111", "cvc": "cvc-7x3q"},
}


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text: str = answer.read().decode()
        return text


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_secrets_are_masked_in_rest_dashboard_cli_and_logs(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    (tmp_path / "redact_app.py").write_text(APP)
    client = App(database.url, schema=database.schema)
    try:
        with process(["-v", "worker", "redact_app:app"], env, tmp_path) as worker:
            run_id = client.start("signup", USER).id
            output = client.result(run_id, timeout=60)
            worker.terminate()
            logs, _ = worker.communicate(timeout=30)
        # Stored untouched: the Python API returns the real values.
        assert output["password"] == "hunter2"
        assert client.get_run(run_id).input == USER

        assert "signing up" in logs and "declined" in logs  # the lines are there...
        assert _leaks(logs) == [], logs  # ...masked

        with server(env, tmp_path, "redact_app:app") as http:
            base = f"/v1/workflows/signup/runs/{run_id}"
            run = http.get(base).body
            assert run["input"]["password"] == "***"
            assert run["input"]["card"] == {"number": "***", "cvc": "***"}
            assert run["input"]["name"] == "ada"  # other keys stay
            assert run["output"]["password"] == "***"
            steps = http.get(base + "/steps").body
            events = http.get(base + "/events").body
            listing = http.get("/v1/workflows/signup/runs").body
            stream = _get_text(http.base + base + "/stream")
            page = _get_text(http.base + f"/runs/{run_id}")
            listing_page = _get_text(http.base + "/runs?workflow=signup")
            for shown in (json.dumps([run, steps, events, listing]), stream, page, listing_page):
                assert _leaks(shown) == [], shown[:2000]
            assert "***" in page and "***" in stream
            value_events = [e for e in events["items"] if e["type"] == "value"]
            assert value_events[0]["data"] == {"key": "password", "value": "***"}

        cli = [*PERDURE, "--app", "redact_app:app"]
        for args in (
            ["runs", "show", run_id],
            ["runs", "show", run_id, "--json"],
            ["runs", "list", "--workflow", "signup", "--json"],
            ["runs", "watch", run_id, "--json"],
        ):
            done = subprocess.run(
                [*cli, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr
            assert "***" in done.stdout
            assert _leaks(done.stdout + done.stderr) == [], done.stdout
    finally:
        client.close()


def test_bad_patterns_are_refused() -> None:
    from perdure.errors import ConfigurationError

    for bad in ("", "card..number", ".x"):
        try:
            App("sqlite:///unused.db", redact=[bad])
        except ConfigurationError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


def _shown(value: Any, patterns: list[str]) -> Any:
    from perdure.redaction import Redaction

    return Redaction(patterns, register=False).value(value)


def test_patterns_match_key_paths_at_any_depth() -> None:
    value: dict[str, Any] = {
        "Password": "p",
        "user": {"password": "q", "card": {"number": "n", "cvc": "c"}, "cards": [{"x": 1}]},
        "card": "whole",
        "list": [{"password": "r"}],
        "note": "token=abc password=s3 other=1",
    }
    shown = _shown(value, ["password", "card.*", "user.cards"])
    assert shown == {
        "Password": "***",
        "user": {"password": "***", "card": {"number": "***", "cvc": "***"}, "cards": "***"},
        "card": "whole",  # card.* masks what is inside a card object
        "list": [{"password": "***"}],
        "note": "token=abc password=*** other=1",
    }
    assert value["user"]["password"] == "q"  # a copy: the original is untouched
