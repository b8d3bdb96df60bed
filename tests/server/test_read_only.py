"""``perdure serve --read-only`` on both backends: every state-changing route of the
OpenAPI document and every dashboard action answers 403 ``ReadOnly`` and stores
nothing; reads and pages work, and the pages offer no actions. (On an SQLite file
its user cannot write: tests/cli/test_read_only.py.)"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from perdure import App, Context

from .harness import environment, server

STATE_CHANGING = ("post", "put", "patch", "delete")
DASHBOARD_ACTIONS = (
    "/runs/{run}/cancel",
    "/runs/{run}/retry",
    "/runs/{run}/fork",
    "/runs/{run}/signal",
    "/schedules/nightly/pause",
    "/schedules/nightly/resume",
    "/schedules/nightly/delete",
)

BUTTONS = ('id="cancel"', 'id="retry"', 'id="fork"', 'id="signal"', 'class="pause"')


def _populate(database) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, sweep_interval=0)

    @app.workflow
    async def greet(ctx: Context, name: str) -> str:
        return await ctx.step.run("hello", lambda: f"hi {name}")

    try:
        done = app.start("greet", "ada")
        with app.worker(concurrency=1):
            assert app.result(done.id, timeout=30) == "hi ada"
        pending = app.start("greet", "bob")
        app.schedule("nightly", "greet", "0 3 * * *", input={"name": "x"})
        app.subscribe("greet.*", "greet")
        return done.id, pending.id
    finally:
        app.close()


def _state(database) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    app = App(database.url, schema=database.schema, read_only=True)
    try:
        runs = {(r.id, r.status, r.attempt) for r in app.list_runs(limit=100).items}
        schedules = [(s.name, s.paused) for s in app.list_schedules()]
        return runs, schedules, app.list_subscriptions()
    finally:
        app.close()


def test_a_read_only_server_refuses_every_change_and_stores_nothing(
    database,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    done, pending = _populate(database)
    before = _state(database)
    with server(environment(database, tmp_path), tmp_path, "--read-only") as http:
        assert {r["id"] for r in http.get("/v1/workflows/greet/runs").body["items"]} == {
            done,
            pending,
        }
        assert http.get(f"/v1/workflows/greet/runs/{done}/steps").status == 200
        assert [s["name"] for s in http.get("/v1/schedules").body["items"]] == ["nightly"]
        values = {"name": "greet", "run_id": pending, "event": "go", "pattern": "go"}
        paths = http.get("/openapi.json").body["paths"]
        refused = 0
        for template, operations in paths.items():
            for method in operations:
                if method not in STATE_CHANGING:
                    continue
                path = (
                    template.format(**{**values, "name": "nightly"})
                    if (template.startswith("/v1/schedules/"))
                    else template.format(**values)
                )
                reply = http.call(method.upper(), path, {})
                assert reply.status == 403, (method, path, reply.body)
                assert reply.body["error"]["type"] == "ReadOnly"
                refused += 1
        assert refused >= 14
        for action in DASHBOARD_ACTIONS:
            reply = http.call(
                "POST",
                action.format(run=pending),
                raw=b"event=go",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert reply.status == 403, (action, reply.body)
            assert reply.body["error"]["type"] == "ReadOnly"
    assert _state(database) == before


def test_read_only_pages_offer_no_actions(
    database,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    done, pending = _populate(database)
    with server(environment(database, tmp_path), tmp_path, "--read-only") as http:
        for path in (f"/runs/{pending}", f"/runs/{done}", "/workers"):
            with urllib.request.urlopen(http.base + path, timeout=30) as answer:
                html = answer.read().decode()
            assert 'id="read-only"' in html
            for button in (
                'id="cancel"',
                'id="retry"',
                'id="fork"',
                'id="signal"',
                'class="pause"',
            ):
                assert button not in html, (path, button)
