"""Each run's routes by its id alone (issue 42, point 6): ``/v1/runs/{id}`` with
``/steps``, ``/events``, ``DELETE`` and ``/signals/{event}`` (or ``/signals`` with
the event in the body) answer what the routes
under the workflow answer, with the same errors. A real `perdure serve` and a real
worker on each backend."""

from __future__ import annotations

import textwrap
from pathlib import Path
from urllib.parse import quote

from tests.engine.helpers import wait_for

from .harness import Http, environment, process, server

FAILING = textwrap.dedent(
    """
    from perdure import App, Context, RetryPolicy
    from rest_app import app

    def explode() -> None:
        raise KeyError("no such sku")

    @app.workflow(retry=RetryPolicy(max_attempts=1))
    async def breaks(ctx: Context, order: int) -> None:
        await ctx.step.run("charge", explode, retry=RetryPolicy(max_attempts=1))
    """
)


def _status(http: Http, run_id: str, status: str) -> None:
    wait_for(lambda: http.get(f"/v1/runs/{quote(run_id)}").body["status"] == status, 20)


def test_a_run_is_read_cancelled_and_signalled_by_its_id_alone(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    (tmp_path / "failing_app.py").write_text(FAILING)
    with server(env, tmp_path) as http, process(["worker", "failing_app:app"], env, tmp_path):
        scoped = "/v1/workflows/approval/runs"
        waiting = http.post(scoped, {"input": {"order": 1}, "runId": "order 1"}).body["runId"]
        by_id = f"/v1/runs/{quote(waiting)}"
        _status(http, waiting, "waiting")
        for tail in ("", "/steps", "/events"):
            reply = http.get(by_id + tail)
            assert reply.status == 200, reply
            assert reply.body == http.get(f"{scoped}/{quote(waiting)}{tail}").body
        assert http.get(by_id).body["workflow"] == "approval"
        assert [s["name"] for s in http.get(f"{by_id}/steps").body["items"]] == ["reserve"]
        paged = http.get(f"{by_id}/events?limit=1").body
        assert len(paged["items"]) == 1 and paged["nextCursor"]

        signalled = http.post(f"{by_id}/signals/approve?idempotencyKey=k1", {"ok": True})
        assert (signalled.status, signalled.body) == (200, {"delivered": True})
        _status(http, waiting, "completed")
        assert http.get(by_id).body["output"] == {"ok": True}

        # the same signal with the event in the body
        again = http.post(scoped, {"input": {"order": 3}}).body["runId"]
        _status(http, again, "waiting")
        before = http.get(f"/v1/runs/{again}/events").body["items"]
        for bad in ({}, {"payload": 1}, {"event": 1}, {"event": "approve", "extra": 1},
                    {"event": "approve", "idempotencyKey": "a/b"}):  # fmt: skip
            reply = http.post(f"/v1/runs/{again}/signals", bad)
            assert (reply.status, reply.body["error"]["type"]) == (422, "ValidationError"), bad
        assert http.get(f"/v1/runs/{again}/events").body["items"] == before
        signal = {"event": "approve", "payload": {"ok": 3}, "idempotencyKey": "k3"}
        assert http.post(f"/v1/runs/{again}/signals", signal).body == {"delivered": True}
        _status(http, again, "completed")
        assert http.get(f"/v1/runs/{again}").body["output"] == {"ok": 3}

        # cancel by id; a second cancel says the run had ended
        other = http.post(scoped, {"input": {"order": 2}}).body["runId"]
        _status(http, other, "waiting")
        assert http.delete(f"/v1/runs/{other}").body == {"runId": other, "cancelled": True}
        assert http.get(f"/v1/runs/{other}").body["status"] == "cancelled"
        assert http.delete(f"/v1/runs/{other}").body == {"runId": other, "cancelled": False}

        # a failed run and its step carry the error's traceback
        failed = http.post("/v1/workflows/breaks/runs", {"input": 7}).body["runId"]
        _status(http, failed, "failed")
        error = http.get(f"/v1/runs/{failed}").body["error"]
        assert error["type"] == "StepFailed" and "no such sku" in error["message"]
        assert "Traceback (most recent call last)" in error["traceback"]
        step = http.get(f"/v1/runs/{failed}/steps").body["items"][0]
        assert (step["name"], step["error"]["type"]) == ("charge", "KeyError")
        assert "in explode" in step["error"]["traceback"]

        # the same errors as under the workflow
        events_before = http.get(f"/v1/runs/{other}/events").body["items"]
        for method, path, body, status, kind in [
            ("GET", "/v1/runs/nope", None, 404, "RunNotFound"),
            ("GET", "/v1/runs/nope/steps", None, 404, "RunNotFound"),
            ("GET", "/v1/runs/nope/events", None, 404, "RunNotFound"),
            ("DELETE", "/v1/runs/nope", None, 404, "RunNotFound"),
            ("POST", "/v1/runs/nope/signals/approve", 1, 404, "RunNotFound"),
            ("POST", f"/v1/runs/{other}/signals/bad%20event", 1, 422, "ValidationError"),
            ("GET", f"/v1/runs/{other}/events?cursor=zzz", None, 422, "ValidationError"),
            ("GET", f"/v1/runs/{other}/steps?limit=0", None, 422, "ValidationError"),
            ("PUT", f"/v1/runs/{other}", None, 405, "MethodNotAllowed"),
        ]:
            reply = http.call(method, path, body)
            assert (reply.status, reply.body["error"]["type"]) == (status, kind), (path, reply)
        assert http.get(f"/v1/runs/{other}/events").body["items"] == events_before


def test_the_openapi_document_has_the_routes_by_id_and_the_traceback(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    with server(environment(sqlite_database, tmp_path), tmp_path) as http:
        document = http.get("/openapi.json").body
    paths = document["paths"]
    assert set(paths["/v1/runs/{run_id}"]) == {"get", "delete"}
    for tail in ("/steps", "/events", "/stream"):
        assert set(paths["/v1/runs/{run_id}" + tail]) == {"get"}
    assert set(paths["/v1/runs/{run_id}/signals/{event}"]) == {"post"}
    assert set(paths["/v1/runs/{run_id}/signals"]) == {"post"}
    schemas = document["components"]["schemas"]
    for model in ("RunOut", "StepOut"):
        error = next(
            o
            for o in schemas[model]["properties"]["error"]["anyOf"]
            if "type" not in o or o["type"] != "null"
        )
        assert "traceback" in error["properties"], model
        assert "traceback" in error["description"]
