"""Strict types at the REST edge (issue 37, defects 10 and 11): a boolean or a string
is never taken as a number, a number never as a time, and a bulk action refuses a
status it cannot take; each refusal is a 422 with nothing stored. The OpenAPI
document says the same. A real `perdure serve` on each backend, JSON bodies, the
token in the Authorization header."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from pydantic import ValidationError as Invalid

from perdure.server.strict import Time

from .harness import Http, environment, server, stored_rows

TOKEN = "strict-token-0123456789abcdef"
RUNS = "/v1/workflows/greet/runs"


def _refused(http: Http, method: str, path: str, body: Any = None) -> str:
    reply = http.call(method, path, body)
    assert reply.status == 422, (method, path, body, reply)
    assert reply.body["error"]["type"] == "ValidationError", reply.body
    message: str = reply.body["error"]["message"]
    return message


def test_a_boolean_or_a_string_is_never_taken_as_a_number(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    with server(env, tmp_path, token=TOKEN) as http:
        source = http.post(RUNS, {"input": "ann"}).body["runId"]
        before = stored_rows(database)
        for body in (
            {"priority": True},
            {"delaySeconds": False},
            {"version": True},
            {"retentionDays": False},
            {"priority": "1"},
            {"delaySeconds": "5"},
            {"retentionDays": "7"},
        ):
            message = _refused(http, "POST", RUNS, {"input": "bob", **body})
            assert next(iter(body)) in message, message
        # the Python name of a field is not its name on the wire
        assert "delay_seconds" in _refused(http, "POST", RUNS, {"delay_seconds": 5})
        _refused(http, "POST", f"{RUNS}/{source}/fork", {"version": True})
        _refused(http, "POST", f"{RUNS}/{source}/fork", {"version": "1"})
        assert stored_rows(database) == before

        # the same fields with numbers are taken (an integer is a number of seconds too)
        for good in ({"priority": 5, "delaySeconds": 1.5}, {"delaySeconds": 2}):
            assert http.post(RUNS, {"input": "cy", **good}).status == 201


def test_a_number_is_never_taken_as_a_time(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    with server(env, tmp_path, token=TOKEN) as http:
        run_id = http.post(RUNS, {"input": "ann"}).body["runId"]
        before = stored_rows(database)
        for query in ("until=0.5", "since=1700000000", "until=2026-11-28T10:00", "since=true"):
            message = _refused(http, "GET", f"{RUNS}?{query}")
            assert "a duration ago" in message and query.split("=")[0] in message, message
        for body in ({"until": 4102444800}, {"until": 0.5}, {"since": True}, {"since": 0}):
            _refused(http, "POST", "/v1/workflows/greet/bulk/cancel", body)
            _refused(http, "POST", "/v1/workflows/greet/bulk/retry", body)
        assert stored_rows(database) == before
        assert http.get(f"{RUNS}/{run_id}").body["status"] == "pending"

        # RFC 3339 times are taken, in the query and in bodies (nanoseconds too)
        page = http.get(
            f"{RUNS}?until=2100-01-01T00:00:00Z&since=2000-01-01T00:00:00.123456789%2B02:00"
        )
        assert [r["id"] for r in page.body["items"]] == [run_id]
        cancelled = http.post(
            "/v1/workflows/greet/bulk/cancel", {"until": "2100-01-01T00:00:00+00:00"}
        )
        assert cancelled.status == 200 and cancelled.body["runIds"] == [run_id]


def test_a_time_is_a_duration_ago_a_date_or_a_date_time_with_an_offset() -> None:
    time = TypeAdapter(Time)
    exact = datetime(2026, 11, 28, 15, 0, 0, 123456, tzinfo=UTC)
    assert time.validate_python("2026-11-28t15:00:00.123456789z") == exact
    assert time.validate_python("2026-11-28T15:00:00.1-05:30").utcoffset() == -timedelta(
        hours=5, minutes=30
    )
    assert time.validate_python("2026-11-28T15:00Z") == datetime(2026, 11, 28, 15, tzinfo=UTC)
    assert time.validate_python("2026-05-01") == datetime(2026, 5, 1, tzinfo=UTC)
    before = datetime.now(UTC)
    ago = time.validate_python("1h30m")
    assert before - timedelta(minutes=90) <= ago <= datetime.now(UTC) - timedelta(minutes=90)
    for bad in (
        0.5,
        1700000000,
        True,
        None,
        "1700000000",
        "0.5",
        "2026-11-28T15:00:00",
        "2026-11-28 15:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-02-30",
        "2026-11-28T15:00:00+0200",
        "yesterday",
        "1h ",
        "-1h",
        "1000000000d",
        "\uff12\uff10\uff12\uff16-11-28T15:00:00Z",  # full-width digits
    ):
        with pytest.raises(Invalid):
            time.validate_python(bad)


def test_bulk_actions_refuse_a_status_they_cannot_take(database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = environment(database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    with server(env, tmp_path, token=TOKEN) as http:
        ids = [http.post(RUNS, {"input": name}).body["runId"] for name in ("ann", "bob")]
        before = stored_rows(database)
        for status in ("running", "pending", "waiting", "completed", "done"):
            message = _refused(http, "POST", "/v1/workflows/greet/bulk/retry", {"status": status})
            assert "'failed'" in message and "'cancelled'" in message, message
        for status in ("completed", "failed", "cancelled", "done"):
            message = _refused(http, "POST", "/v1/workflows/greet/bulk/cancel", {"status": status})
            assert all(f"'{s}'" in message for s in ("pending", "running", "waiting")), message
        assert stored_rows(database) == before

        # the statuses each action can take are taken
        cancel = http.post("/v1/workflows/greet/bulk/cancel", {"status": "pending"})
        assert sorted(cancel.body["runIds"]) == sorted(ids)
        retry = http.post("/v1/workflows/greet/bulk/retry", {"status": "cancelled"})
        assert sorted(retry.body["runIds"]) == sorted(ids)
        assert http.post("/v1/workflows/greet/bulk/retry", {}).body["runIds"] == []


def _schema(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its $ref followed, and a nullable ``anyOf`` reduced to its type."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        node = document["components"]["schemas"][name]
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        return _schema(document, options[0])
    return node


def test_the_openapi_document_describes_what_the_server_takes(  # type: ignore[no-untyped-def]
    sqlite_database, tmp_path: Path
) -> None:
    env = environment(sqlite_database, tmp_path, PERDURE_API_TOKENS=TOKEN)
    with server(env, tmp_path, token=TOKEN) as http:
        document = http.get("/openapi.json").body
    paths = document["paths"]

    def body(path: str) -> dict[str, Any]:
        content = paths[path]["post"]["requestBody"]["content"]["application/json"]
        properties: dict[str, Any] = _schema(document, content["schema"])["properties"]
        return {name: _schema(document, p) for name, p in properties.items()}

    start = body("/v1/workflows/{name}/runs")
    assert start["priority"]["type"] == "integer"
    assert (start["priority"]["minimum"], start["priority"]["maximum"]) == (-(2**31), 2**31 - 1)
    assert start["delaySeconds"]["type"] == "number" and start["delaySeconds"]["minimum"] == 0
    assert body("/v1/workflows/{name}/bulk/retry")["status"]["enum"] == ["failed", "cancelled"]
    cancel = body("/v1/workflows/{name}/bulk/cancel")
    assert cancel["status"]["enum"] == ["pending", "running", "waiting"]
    assert cancel["until"]["type"] == "string" and "format" not in cancel["until"]
    assert "duration ago" in cancel["until"]["description"]
    listing = {
        p["name"]: _schema(document, p["schema"])
        for p in paths["/v1/workflows/{name}/runs"]["get"]["parameters"]
    }
    pattern = re.compile(listing["since"]["pattern"])
    assert listing["until"]["pattern"] == cancel["since"]["pattern"] == pattern.pattern
    for good in ("1h", "1h30m", "2026-05-01", "2026-05-01T14:00:00Z", "2026-05-01T14:00+02:00"):
        assert pattern.search(good), good
    for bad in ("5", "2026-05-01T14:00", "yesterday", "1h\n"):
        assert not pattern.fullmatch(bad), bad
    assert listing["status"]["enum"] == [
        "pending", "running", "waiting", "completed", "failed", "cancelled"
    ]  # fmt: skip
