"""``since`` and ``until`` take the same three forms everywhere (issue 42, point 6): a
duration ago (``1h``), a date (``2026-05-01``, midnight UTC) or a date-time with an
offset, read by one parser (`perdure.durations.moment`): in REST queries and bodies,
on the CLI, and in `App.list_runs`. A bare number or a time without an offset is
refused everywhere, with nothing stored. Each backend."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from perdure import App, ValidationError

from .harness import PERDURE, environment, server, stored_rows

RUNS = "/v1/workflows/greet/runs"
FOUND = ("1h", "2000-01-01", "2000-01-01T00:00:00Z", "2000-01-01T02:00%2B02:00")
NONE = ("2100-01-01", "2100-01-01T00:00Z")


def test_rest_takes_a_duration_a_date_or_a_timestamp(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path)
    with server(env, tmp_path) as http:
        run_id = http.post(RUNS, {"input": "ann"}).body["runId"]

        def listed(query: str) -> list[str]:
            reply = http.get(f"{RUNS}?{query}")
            assert reply.status == 200, (query, reply)
            return [r["id"] for r in reply.body["items"]]

        for when in FOUND:
            assert listed(f"since={when}") == [run_id], when
            assert listed(f"until={when}") == [], when
        for when in NONE:
            assert listed(f"since={when}") == [], when
            assert listed(f"until={when}") == [run_id], when

        before = stored_rows(database)
        for body in ({"since": "5"}, {"until": "2000-01-01T00:00"}, {"since": 3600}):
            reply = http.post("/v1/workflows/greet/bulk/cancel", body)
            assert reply.status == 422, reply
            assert "a duration ago" in reply.body["error"]["message"]
        assert stored_rows(database) == before
        assert http.post("/v1/workflows/greet/bulk/cancel", {"since": "2000-01-01"}).status == 200
        cancelled = http.post(
            "/v1/workflows/greet/bulk/retry", {"status": "cancelled", "since": "1h"}
        )
        assert cancelled.body["runIds"] == [run_id]


def test_the_cli_takes_the_same_three_forms_and_refuses_the_rest(  # type: ignore[no-untyped-def]
    database, tmp_path: Path
) -> None:
    env = environment(database, tmp_path)
    with App(database.url, schema=database.schema, sweep_interval=0) as app:
        run_id = app.start("greet", "ann").id

    def listed(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*PERDURE, "runs", "list", "--json", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    for when in ("1h", "2000-01-01", "2000-01-01T00:00:00Z", "2000-01-01T02:00+02:00"):
        assert [r["id"] for r in json.loads(listed("--since", when).stdout)["items"]] == [run_id]
        assert json.loads(listed("--until", when).stdout)["items"] == []
    for bad in ("5", "2000-01-01T00:00", "yesterday"):
        refused = listed("--since", bad)
        assert refused.returncode == 2, refused
        assert "--since must be an ISO 8601 time with an offset" in refused.stderr


def test_list_runs_takes_the_same_text(database) -> None:  # type: ignore[no-untyped-def]
    with App(database.url, schema=database.schema, sweep_interval=0) as app:
        run_id = app.start("greet", "ann").id
        for when in ("1h", "2000-01-01", "2000-01-01T00:00:00Z"):
            assert [r.id for r in app.list_runs(since=when).items] == [run_id]
            assert app.list_runs(until=when).items == []
        assert app.cancel_runs(since="1h") == [run_id]
        for bad in ("5", "2000-01-01T00:00", "soon"):
            with pytest.raises(ValidationError, match="since must be"):
                app.list_runs(since=bad)
            with pytest.raises(ValidationError, match="since must be"):
                app.retry_runs(since=bad, status="cancelled")
        assert app.get_run(run_id).status == "cancelled"
