"""The schedule routes against a real `perdure serve` process on each backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .harness import environment, server


def test_schedules_over_rest(database: Any, tmp_path: Path) -> None:
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http:
        body = {
            "name": "nightly",
            "workflow": "greet",
            "cron": "30 2 * * *",
            "input": {"who": "ops"},
            "timezone": "Europe/Paris",
            "catchUp": "all",
        }
        created = http.post("/v1/schedules", body)
        assert created.status == 201, created.body
        assert created.body["paused"] is False and created.body["catchUp"] == "all"
        assert created.body["input"] == {"who": "ops"} and created.body["nextAt"]
        listed = http.get("/v1/schedules").body
        assert [s["name"] for s in listed["items"]] == ["nightly"]
        paused = http.post("/v1/schedules/nightly/pause")
        assert paused.status == 200 and paused.body["paused"] is True
        resumed = http.post("/v1/schedules/nightly/resume")
        assert resumed.status == 200 and resumed.body["paused"] is False
        assert http.delete("/v1/schedules/nightly").status == 204
        missing = http.delete("/v1/schedules/nightly")
        assert missing.status == 404 and missing.body["error"]["type"] == "NotFound"
        assert http.post("/v1/schedules/nightly/pause").status == 404

        for bad in (
            {**body, "cron": "every day"},
            {**body, "timezone": "Nowhere/Land"},
            {**body, "catchUp": "sometimes"},
            {**body, "name": "bad name"},
            {**body, "input": [1]},
            {**body, "extra": 1},
            {"name": "x"},
        ):
            reply = http.post("/v1/schedules", bad)
            assert reply.status == 422, (bad, reply.body)
            assert reply.body["error"]["type"] == "ValidationError"
        assert http.post("/v1/schedules/bad%20name/pause").status == 422
        assert http.get("/v1/schedules").body["items"] == []
        paths = http.get("/openapi.json").body["paths"]
        assert {"/v1/schedules", "/v1/schedules/{name}/pause", "/v1/schedules/{name}"} <= set(paths)
